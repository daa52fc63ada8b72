"""A namespace's host tree (what `lbtune --netns NS capture` records): host-global sysctls.

The tree models a namespace on a host whose `fs.file-max` (2,466,174) is above the `web`
profile's minimum (1,048,576): `fs.file-max` is the host's own value, `net.core.rmem_max`
and `wmem_max` are shown read-only (0444) and `net.core.netdev_max_backlog` is not shown at
all, as the kernel does inside a namespace. Plan and verify call all four host-global; the
plan's hint for the host never names a value below the host's (the profile's mode is
"raise"), and a value it cannot read is given as a bound, not as a command to paste.
"""

from __future__ import annotations

import json
import pathlib
import re

import pytest

OWN = {  # the namespace's own (writable) values
    "net.core.somaxconn": "4096",
    "net.ipv4.tcp_max_syn_backlog": "2048",
    "net.ipv4.tcp_syncookies": "1",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
    "net.ipv4.tcp_wmem": "4096\t16384\t4194304",
    "net.ipv4.tcp_slow_start_after_idle": "1",
    "net.ipv4.ip_local_port_range": "32768\t60999",
    "net.ipv4.tcp_fin_timeout": "60",
    "fs.file-max": "2466174",  # the host's own: fs.* is global, readable everywhere
}
READ_ONLY = {"net.core.rmem_max": "212992", "net.core.wmem_max": "212992"}


@pytest.fixture
def ns_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "ns-root"
    for values, mode in ((OWN, 0o644), (READ_ONLY, 0o444)):
        for key, value in values.items():
            p = root / ("proc/sys/" + key.replace(".", "/"))
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(value + "\n")
            p.chmod(mode)
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/hostname").write_text("web1\n")
    (root / "proc/sys/kernel/osrelease").write_text("6.1.0-26-amd64\n")
    (root / "lbtune-capture.json").write_text(json.dumps({"netns": "web1", "hostname": "web1"}))
    return root


def test_plan_hint_keeps_a_higher_host_value(cli, ns_tree: pathlib.Path) -> None:
    r = cli("--root", str(ns_tree), "plan", "web", "--json")
    assert r.exit_code == 0, r.stderr
    rows = {c["object"]: c for c in r.json["changes"]}
    skipped = {k for k, c in rows.items() if c["action"] == "skipped"}
    assert skipped == {"fs.file-max", "net.core.rmem_max", "net.core.wmem_max",
                       "net.core.netdev_max_backlog"}  # fmt: skip
    assert rows["fs.file-max"]["current"] == "2466174"
    assert rows["fs.file-max"]["desired"] == "2466174"  # raise mode keeps the higher value
    assert rows["net.core.rmem_max"]["desired"] == "16777216"
    assert rows["net.core.netdev_max_backlog"]["current"] is None  # not in the capture

    text = cli("--root", str(ns_tree), "plan", "web")
    assert text.exit_code == 0, text.stderr
    pasted = dict(re.findall(r"sysctl -w ([\w.\-]+)=(\S+?)\)", text.stdout))
    assert pasted == {"net.core.rmem_max": "16777216", "net.core.wmem_max": "16777216"}, \
        text.stdout
    assert "fs.file-max=1048576" not in text.stdout
    assert re.search(r"fs\.file-max \(in place on the host: 2466174", text.stdout), text.stdout
    assert re.search(r"net\.core\.netdev_max_backlog \(on the host: at least 8192", text.stdout), \
        text.stdout


def test_verify_of_a_namespace_tree_judges_host_global_on_the_host(cli, ns_tree) -> None:
    r = cli("--root", str(ns_tree), "verify", "web", "--json")
    assert r.exit_code == 1, r.stdout + r.stderr  # drift in the namespace's own values only
    status = {k["object"]: k["status"] for k in r.json["knobs"]}
    assert {k for k, s in status.items() if s == "skipped"} == {
        "fs.file-max", "net.core.rmem_max", "net.core.wmem_max", "net.core.netdev_max_backlog"}
    assert "missing" not in status.values()
    assert {k for k, s in status.items() if s == "drift"} == {
        "net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.ip_local_port_range"}


def test_a_typo_is_still_an_error_outside_a_namespace(cli, ns_tree: pathlib.Path) -> None:
    """Without the manifest's namespace the same tree is a host's: an absent key whose
    directory exists is this kernel's "no such sysctl" (exit 2), as before."""
    (ns_tree / "lbtune-capture.json").unlink()
    r = cli("--root", str(ns_tree), "verify", "web")
    assert r.exit_code == 2 and "no such sysctl" in r.stderr, r.stdout + r.stderr
