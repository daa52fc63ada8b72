"""Host-global sysctls seen from a namespace have one meaning everywhere: host-global.

Inside a network namespace `net.core.netdev_max_backlog` is not shown at all (the kernel
registers it for the host's namespace only), `net.core.rmem_max` is shown read-only and
`fs.file-max` is the host's own. None of them is the namespace's: plan, verify, the exporter
and compare (of the namespace's capture) all call them "skipped: host-global, judged on the
host", never missing and never drift, so `lbtune_profile_in_sync{profile="web"}` is 1 on a
namespace with `web` applied. The hint a namespace plan prints for the host is bounded by
the profile's mode: it never names a value below what the host already has.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

from tests.fleet.conftest import parse

HOST_GLOBAL = ("net.core.netdev_max_backlog", "net.core.rmem_max", "net.core.wmem_max",
               "fs.file-max")  # fmt: skip


def host_value(key: str) -> str:
    """The host's own value (this test process is in the host's namespace)."""
    return " ".join(pathlib.Path("/proc/sys/" + key.replace(".", "/")).read_text().split())


def hidden_in(ns: str, key: str) -> bool:
    path = "/proc/sys/" + key.replace(".", "/")
    return subprocess.run(["ip", "netns", "exec", ns, "test", "-e", path]).returncode != 0


def test_web_applied_in_a_namespace_is_in_sync_everywhere(cli, netns, tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    assert hidden_in(netns, "net.core.netdev_max_backlog")  # the case this test is about

    plan = cli("--netns", netns, "plan", "web", "--json")
    assert plan.exit_code == 0, plan.stderr
    rows = {r["object"]: r for r in plan.json["changes"]}
    for key in HOST_GLOBAL:
        assert rows[key]["action"] == "skipped", rows[key]
        # read, from the host's view when the namespace does not show it
        assert rows[key]["current"] == host_value(key), rows[key]
    assert not [r for r in plan.json["changes"] if r["action"] == "missing"]

    assert cli("--netns", netns, "apply", "web", "--json").exit_code == 0

    v = cli("--netns", netns, "verify", "web", "--json")
    assert v.exit_code == 0, v.stdout + v.stderr
    status = {k["object"]: k["status"] for k in v.json["knobs"]}
    assert {status[k] for k in HOST_GLOBAL} == {"skipped"}, status
    assert set(status.values()) == {"ok", "skipped"}, status
    text = cli("--netns", netns, "verify", "web")
    assert text.exit_code == 0
    assert " 0 missing" in text.stdout, text.stdout
    assert f"{len(HOST_GLOBAL)} host-global (judged on the host)" in text.stdout, text.stdout

    exp = cli("--netns", netns, "exporter", "--once", "--interval", "0.2", "--profile", "web")
    assert exp.exit_code == 0, exp.stderr
    series = parse(exp.stdout)
    assert series["lbtune_profile_in_sync"] == {frozenset({("profile", "web")}): 1.0}
    assert series["lbtune_profile_drifted_knobs"] == {frozenset({("profile", "web")}): 0.0}

    # The namespace's capture, read offline: the same knobs are host-global, the same verdict.
    cap = tmp_path / "ns.tar.gz"
    assert cli("--netns", netns, "capture", "-o", str(cap)).exit_code == 0
    off = cli("--root", str(cap), "verify", "web", "--json")
    assert off.exit_code == 0, off.stdout + off.stderr  # was 2: "no such sysctl on this host"
    off_status = {k["object"]: k["status"] for k in off.json["knobs"]}
    assert off_status == status
    cmp = cli("compare", str(cap), "--against", "web", "--json")
    assert cmp.exit_code == 0, cmp.stdout + cmp.stderr
    assert cmp.json["in_sync"] is True
    assert cmp.json["hosts"][0]["compared"] == sum(1 for s in status.values() if s != "skipped")


def test_namespace_hint_never_lowers_a_host_value(cli, netns, tmp_path):
    """A profile whose minimum for fs.file-max is below the host's value and whose minimum for
    net.core.rmem_max is above it: the hint names only rmem_max, at the profile's value."""
    file_max = int(host_value("fs.file-max"))
    rmem = int(host_value("net.core.rmem_max"))
    backlog = int(host_value("net.core.netdev_max_backlog"))
    prof = tmp_path / "hint.toml"
    prof.write_text(f"""\
[profile]
name = "hint"
description = "host-global values around the host's own"

[sysctl]
"fs.file-max" = {{ value = {file_max - 1}, mode = "raise", reason = "below the host" }}
"net.core.rmem_max" = {{ value = {rmem + 1}, mode = "raise", reason = "above the host" }}
"net.core.netdev_max_backlog" = {{ value = {backlog}, mode = "raise", reason = "equal" }}
"net.core.somaxconn" = {{ value = 4096, mode = "raise", reason = "the namespace's own" }}
""")
    r = cli("--netns", netns, "plan", str(prof))
    assert r.exit_code == 0, r.stderr
    hints = dict(re.findall(r"sysctl -w ([\w.\-]+)=(\S+?)\)", r.stdout))
    assert hints == {"net.core.rmem_max": str(rmem + 1)}, r.stdout
    assert "fs.file-max" in r.stdout and "in place" in r.stdout, r.stdout
