"""`make deb` and `make wheel` (scripts/deb.py): the package is built from this checkout
offline, holds what docs/install.md says, depends on the distro only for what the distro's
version serves, passes lintian with the overrides it ships, and its bundled tree runs under
Debian's own /usr/bin/python3; the wheel installs into a fresh venv and `lbtune --version`
runs. The build (about 15 s, once per session: tests/conftest.py's `deb_build`) and lintian
(about 15 s) run into a temporary directory: nothing is installed on this machine
(tests/vm/test_vm_units.py installs the package in the VM guest and runs its units under
systemd; tests/fleet/test_ansible_deploy_nspawn.py deploys it into an nspawn container).

Needs the wheelhouse `make setup` fills (scripts/wheelhouse.sh) and Debian's dpkg-deb and
lintian (set-up installs lintian).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import deb  # noqa: E402  (scripts/deb.py)

VERSION = deb.version()


@pytest.fixture(scope="module")
def built(deb_build: Path) -> Path:
    return deb_build  # tests/conftest.py: `make deb` once per session


@pytest.fixture(scope="module")
def package(built: Path) -> Path:
    path = built / f"lbtune_{VERSION}_all.deb"
    assert path.is_file()
    return path


def _contents(package: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "-c", str(package)], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return {line.split(None, 5)[5].split(" -> ")[0].lstrip(".") for line in out.splitlines()}


def test_the_package_holds_the_command_units_options_data_pages_and_completion(
        package: Path) -> None:  # fmt: skip
    files = _contents(package)
    expected = {
        "/usr/bin/lbtune",
        "/usr/lib/lbtune/lbtune/cli/entry.py",
        "/usr/lib/lbtune/lbtune/_data/profiles/lb-dr.toml",
        "/usr/lib/lbtune/lbtune/_data/probes/drops.bpf.c",
        "/lib/systemd/system/lbtune-exporter.service",
        "/lib/systemd/system/lbtune-agent.service",
        "/lib/systemd/system/lbtune-adapt@.service",
        "/lib/systemd/system/lbtune-ipvs-serve.service",
        "/etc/default/lbtune-exporter",
        "/etc/default/lbtune-agent",
        "/etc/default/lbtune-adapt",
        "/etc/default/lbtune-ipvs-serve",
        "/etc/lbtune/ipvs/",
        "/usr/share/man/man8/lbtune.8.gz",
        "/usr/share/man/man8/lbtune-apply.8.gz",
        "/usr/share/man/man8/lbtune-ipvs.8.gz",
        "/usr/share/bash-completion/completions/lbtune",
        "/usr/share/zsh/vendor-completions/_lbtune",
        "/usr/share/fish/vendor_completions.d/lbtune.fish",
        "/usr/share/lbtune/alerts/lbtune.rules.yml",
        "/usr/share/doc/lbtune/copyright",
        "/usr/share/doc/lbtune/changelog.Debian.gz",
        "/usr/share/doc/lbtune/install.md.gz",
        "/usr/share/doc/lbtune/examples/exporter-ipvs.conf",
        "/usr/share/lintian/overrides/lbtune",
    }
    assert expected - files == set()
    for lib in ("pyroute2", "textual", "rich", "click", "prometheus_client"):
        assert f"/usr/lib/lbtune/{lib}/__init__.py" in files, lib
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert not [f for f in files if f.startswith("/usr/lib/lbtune/bin/")]
    assert not [f for f in files if "psutil" in f]  # Debian's (compiled): a dependency


def test_control_depends_on_the_distro_only_where_it_serves(package: Path) -> None:
    info = subprocess.run(["dpkg-deb", "-f", str(package)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    fields = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line
                  and not line.startswith(" "))  # fmt: skip
    assert fields["Architecture"] == "all" and fields["Version"] == VERSION
    assert fields["Depends"] == "python3 (>= 3.9), python3-psutil (>= 5.9)"
    assert "python3-bpfcc" in fields["Recommends"]
    relations = " ".join(fields.get(k, "") for k in ("Depends", "Recommends", "Suggests"))
    assert "pyroute2" not in relations and "textual" not in relations  # bundled
    conffiles = subprocess.run(["dpkg-deb", "-I", str(package), "conffiles"],
                               capture_output=True, text=True, check=True).stdout.split()
    assert conffiles == ["/etc/default/lbtune-adapt", "/etc/default/lbtune-agent",
                         "/etc/default/lbtune-exporter", "/etc/default/lbtune-ipvs-serve"]


def test_lintian_passes_with_the_shipped_overrides_each_with_its_reason(package: Path) -> None:
    r = subprocess.run(["lintian", "--fail-on", "error,warning", "--info", str(package)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    tags = [ln for ln in r.stdout.splitlines() if ln[:2] in ("E:", "W:")]
    assert r.returncode == 0 and tags == [], r.stdout + r.stderr
    overrides = (REPO / "packaging" / "lintian-overrides").read_text().splitlines()
    for n, line in enumerate(overrides):
        if line.strip() and not line.startswith("#"):
            assert overrides[n - 1].startswith("#"), f"override without a reason: {line}"


def test_the_bundled_tree_runs_under_debians_python(package: Path, tmp_path: Path) -> None:
    """The package's /usr/lib/lbtune and launcher, unpacked, under /usr/bin/python3 -I: the
    bundled libraries plus Debian's psutil are all lbtune imports (no venv, no checkout)."""
    subprocess.run(["dpkg-deb", "-x", str(package), str(tmp_path)], check=True)
    launcher = (tmp_path / "usr/bin/lbtune").read_text()
    assert launcher.startswith("#!/usr/bin/python3 -I\n")
    private = tmp_path / "usr/lib/lbtune"
    code = launcher.replace('"/usr/lib/lbtune"', repr(str(private)))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    for args in (["--version"], ["profile", "list", "--json"], ["ipvs", "agent", "--help"]):
        r = subprocess.run(["/usr/bin/python3", "-I", "-c", code, *args], capture_output=True,
                           text=True, env=env, cwd=tmp_path, check=False)  # fmt: skip
        assert r.returncode == 0, (args, r.stderr)
        assert "Traceback" not in r.stderr
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import pyroute2, textual, rich, "
             "prometheus_client, psutil, lbtune, lbtune.tui.app; "
             "print(pyroute2.__file__, textual.__file__, psutil.__file__, lbtune.__file__)")
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", probe, str(private)],
                       capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    assert all(p.startswith(str(private)) for p in paths[:2] + paths[3:]), paths
    assert paths[2].startswith("/usr/lib/python3/dist-packages/psutil"), paths


def test_the_wheel_installs_offline_into_a_fresh_venv(built: Path, tmp_path: Path) -> None:
    wheels = sorted((built / "dist").glob(f"lbtune-{VERSION}-py3-none-any.whl"))
    assert len(wheels) == 1
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, with_pip=True)
    py = env_dir / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                        str(deb.default_wheelhouse()), str(wheels[0])], capture_output=True,
                       text=True, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(env_dir / "bin" / "lbtune"), "--version"], capture_output=True,
                       text=True, cwd=tmp_path, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert VERSION in r.stdout
