"""Shared test helpers: the one in-process CLI runner, fixture-host paths, privilege checks.

Also the tiers rule (tests/tiers.py): under CI=true or LBTUNE_REQUIRE_TIERS=1 every skip fails,
except a skip for a named missing kernel capability (`pytest.skip("capability: ...")`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Optional

import pytest

from tests.sigterm import pytest_configure  # noqa: F401 (hook: SIGTERM tears fixtures down)
from tests.tiers import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401 (hooks)

# The fixture host trees (tests/data/hosts/<name>/README.md says what real host each models).
HOSTS = pathlib.Path(__file__).resolve().parent / "data" / "hosts"
DELL = "dell-r750-mlx5-ixgbe"  # 2-socket 48-CPU host, mlx5 + ixgbe
KVM = "kvm-virtio-4vcpu"  # 4-vCPU virtio VM
AWS = "aws-ena-c5n"  # cloud host with ENA
TINY = "tiny-veth-bond"  # 1 online CPU, veth + bond
X710 = "supermicro-x710-i40e"  # 16-CPU director, dual-port X710 (i40e)


def copy_host(
    tmp_path: pathlib.Path, name: str, files: Optional[dict[str, str]] = None, dest: str = ""
) -> pathlib.Path:
    """A writable copy of fixture tree `name` below `tmp_path` (sysfs links kept as links),
    with `files` (kernel path -> text) written over it; a symlink in the way is replaced."""
    import shutil

    root = tmp_path / (dest or name)
    shutil.copytree(HOSTS / name, root, symlinks=True)  # sysfs trees have link cycles
    for kpath, text in (files or {}).items():
        target = root / kpath.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        target.write_text(text)
    return root


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def _run_here(args: list[str]) -> CliResult:
    from lbtune.cli.main import invoke

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = invoke(args)
    return CliResult(code, out.getvalue(), err.getvalue())


def fork_call(fn: Any, *args: Any) -> Any:
    """Run fn(*args) in a forked child and return its (pickled) result; re-raise its failure.

    For anything that changes the process for good (joining a network namespace).
    """
    import pickle
    import traceback

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never fall back into the test runner
        os.close(r)
        try:
            payload = pickle.dumps(("ok", fn(*args)))
        except BaseException:
            payload = pickle.dumps(("error", traceback.format_exc()))
        with os.fdopen(w, "wb") as f:
            f.write(payload)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)  # noqa: S301 (our own forked child wrote it)
    if status != "ok":
        raise AssertionError(f"child failed:\n{value}")
    return value


def _run_forked(args: list[str]) -> CliResult:
    """Run in a forked child: --netns moves the process into other namespaces for good."""
    return fork_call(_run_here, args)


def run_cli(*args: str, isolate: Optional[bool] = None) -> CliResult:
    """Run `lbtune ARGS` in-process; returns exit code, stdout, stderr (and .json)."""
    argv = list(args)
    if isolate is None:
        isolate = "--netns" in argv
    return _run_forked(argv) if isolate else _run_here(argv)


@pytest.fixture
def cli() -> Any:
    return run_cli


@pytest.fixture
def hosts() -> pathlib.Path:
    return HOSTS


@pytest.fixture(scope="session")
def deb_build(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """`make deb` of this checkout into a temporary BUILD directory, once per session: the
    package (lbtune_VERSION_all.deb) and the wheel (dist/). tests/unit/test_deb.py checks
    them; tests/fleet/test_ansible_deploy_nspawn.py deploys the package."""
    build = tmp_path_factory.mktemp("build")
    repo = pathlib.Path(__file__).resolve().parents[1]
    r = subprocess.run(["make", "-C", str(repo), "deb", f"BUILD={build}",
                        f"PYTHON={sys.executable}"], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return build


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


# A marker, not a module-level importorskip: under CI (tests/tiers.py) each test then fails
# with the reason instead of the whole collection stopping.
needs_bcc = pytest.mark.skipif(
    not _importable("bcc"), reason="the probes need bcc (python3-bpfcc; `make setup`)"
)
