"""`lbtune diagnose --write-profile FILE.toml [--role ROLE]`: one profile of the fixes.

On fixture trees (the 48-CPU director and the virtio VM): the file loads as any profile,
lints clean (`lbtune profile lint FILE`), `lbtune plan FILE` takes it, each value is the one
its finding proposed, several findings' limits merge to the highest, the role profile is
included and what it already sets is not repeated, fixes no knob makes are notes. The file
obeys -o's rules: never replaced without --force, never written through a non-regular file,
and every mistake in the options is one line, exit 2, before the window.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

from lbtune.tune.profile import load_profile
from tests.conftest import AWS, DELL, HOSTS, KVM, run_cli

R750 = str(HOSTS / DELL)


def write(tmp_path: pathlib.Path, *args: str, root: str = R750, name: str = "fix.toml") -> Any:
    out = tmp_path / name
    r = run_cli("--root", root, "diagnose", "--json", "--write-profile", str(out), *args)
    return r, out


def test_written_profile_loads_lints_clean_and_plans(tmp_path: pathlib.Path) -> None:
    r, out = write(tmp_path)
    assert r.exit_code == 1, r.stderr  # findings
    assert f"lbtune: wrote {out} (" in r.stderr and f"next: lbtune plan {out}" in r.stderr
    prof = load_profile(str(out))
    assert prof.name == "fix" and prof.include == ()
    settings = dict(prof.settings())
    # every profile value a finding proposed is in the file, with its mode and reason
    proposed = {
        line.split(" = ", 1)[0]: fix
        for f in r.json["findings"]
        for fix in f["fixes"]
        for line in fix["profile"]
    }
    keys = {fix["key"] for fix in proposed.values()}
    assert keys <= set(settings), keys - set(settings)
    ct = settings["sysctl.net.netfilter.nf_conntrack_max"]
    assert (ct.value, ct.mode.value) == ("524288", "raise") and "Conntrack table full" in ct.reason
    assert settings["sysctl.net.ipv4.ip_local_port_range"].mode.value == "set"
    assert settings["nic.ens1f0np0.rings"].value == "max"
    lint = run_cli("--root", R750, "profile", "lint", str(out))  # lints on the host it is for
    assert lint.exit_code == 0 and "0 finding(s)" in lint.stdout, lint.stdout
    plan = run_cli("--root", R750, "plan", str(out), "--json")
    assert plan.exit_code == 0, plan.stderr
    rows = {(c["kind"], c["object"]): c for c in plan.json["changes"]}
    assert rows[("sysctl", "net.netfilter.nf_conntrack_max")]["desired"] == "524288"
    assert rows[("ring", "ens1f0np0:rx")]["desired"] == "8192"


def test_limits_wanted_by_several_findings_merge_to_the_highest(tmp_path: pathlib.Path) -> None:
    r, out = write(tmp_path, "--rule", "time-squeeze")
    cpus = [f for f in r.json["findings"] if f["rule"] == "time-squeeze"]
    assert len(cpus) == 2  # CPUs 41 and 20: one value, both findings named above it
    text = out.read_text()
    assert text.count('"net.core.netdev_budget" =') == 1
    assert "# finding 1, 2\n" in text


def test_application_fixes_are_notes(tmp_path: pathlib.Path) -> None:
    r, out = write(tmp_path, "--rule", "accept-queue-overflow", "--rule", "cpu-backlog-drop")
    assert r.exit_code == 1, r.stderr
    notes = load_profile(str(out)).notes
    assert any("application listen() backlog on port 80: 128 -> 1024" in n for n in notes), notes
    assert all(len(n) <= 300 and n.isprintable() for n in notes)


def test_role_profile_is_included_and_not_repeated(tmp_path: pathlib.Path) -> None:
    r, out = write(tmp_path, "--role", "lb-dr", "--iface", "ens1f0np0")
    assert r.exit_code == 1, r.stderr
    prof = load_profile(str(out))
    assert prof.include == ("lb-dr",) and prof.chain[-2:] == ("lb-dr", "fix")
    text = out.read_text()
    # lb-dr raises netdev_max_backlog to 32768 already, above the fix's 16384: not repeated
    assert '"net.core.netdev_max_backlog"' not in text
    assert "sysctl.net.core.netdev_max_backlog = 32768 (raise) in the lb-dr profile" in text
    # the data interface's values go to lb-dr's [nic."data"] section (a device named twice
    # would not resolve), rings "max" is lb-dr's already
    assert '[nic."data"]' in text and '[nic."ens1f0np0"]' not in text
    assert "nic.data.rings = max in the lb-dr profile" in text
    assert run_cli("profile", "lint", str(out)).exit_code == 0
    plan = run_cli("--root", R750, "plan", str(out), "--iface", "ens1f0np0", "--json")
    assert plan.exit_code == 0, plan.stderr
    rows = {(c["kind"], c["object"]): c for c in plan.json["changes"]}
    assert rows[("channels", "ens1f0np0:combined")]["desired"] == "48"  # the fix over lb-dr
    assert rows[("sysctl", "vm.swappiness")]["desired"] == "10"  # lb-dr's own value


def test_nothing_to_write_when_no_fix_is_a_profile_value(tmp_path: pathlib.Path) -> None:
    r, out = write(tmp_path, root=str(HOSTS / AWS))  # only the cloud allowance: a platform fix
    assert r.exit_code == 1 and not out.exists()
    assert "no fix here is a profile value" in r.stderr and "not written" in r.stderr


def test_not_replaced_without_force(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "fix.toml"
    out.write_text("keep me\n")
    r, _ = write(tmp_path)
    assert r.exit_code == 2 and "--write-profile" in r.stderr and "--force" in r.stderr
    assert out.read_text() == "keep me\n"
    r, _ = write(tmp_path, "--force")
    assert r.exit_code == 1, r.stderr
    assert load_profile(str(out)).name == "fix"
    assert [p.name for p in tmp_path.iterdir()] == ["fix.toml"]  # no temporary file left


def test_never_written_through_a_symlink(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "elsewhere.toml"
    target.write_text("keep me\n")
    (tmp_path / "fix.toml").symlink_to(target)
    r, _ = write(tmp_path, "--force")
    assert r.exit_code == 2 and "symlink" in r.stderr, r.stderr
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--role", "web"], "--role needs --write-profile"),
        (["--write-profile", "{d}/fix.txt"], "name it FILE.toml"),
        (["--write-profile", "{d}/x.toml", "--role", "dns"], "unknown role"),
        (["--write-profile", "{d}/web.toml", "--role", "web"], "would include itself"),
        (["--write-profile", "{d}/r.toml", "-o", "{d}/r.toml"], "name the same file"),
        (["--write-profile", "{d}/none/x.toml"], "does not exist"),
    ],
)
def test_option_mistakes_are_one_line_before_the_window(
    tmp_path: pathlib.Path, args: list[str], message: str
) -> None:
    argv = [a.replace("{d}", str(tmp_path)) for a in args]
    r = run_cli("--root", str(HOSTS / KVM), "diagnose", *argv)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and os.listdir(tmp_path) == []


def test_a_profile_that_would_not_load_is_not_written(tmp_path: pathlib.Path) -> None:
    """The role profile found first for the include is the one beside the file (as when it
    is loaded later): a broken one there makes the written profile fail to load, so nothing
    is written and the error names the file asked for, not a scratch copy."""
    (tmp_path / "web.toml").write_text('[profile]\nname = "web"\n[sysctl]\n"x.y" = 1\n')
    r, out = write(tmp_path, "--role", "web", root=str(HOSTS / KVM))
    assert r.exit_code == 2 and not out.exists(), r.stderr
    assert r.stderr.count("\n") == 1 and "lbtune-profile-" not in r.stderr, r.stderr
