"""`lbtune ipvs realserver` in throwaway namespaces: real ARP requests, per-namespace settings.

Namespace `rs` is the real server (eth0 10.9.0.2/24), `peer` another host on the segment
(10.9.0.1/24); ARP requests for the VIP go from `peer` over the veth between them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Iterator

import pytest

from tests.conftest import run_cli
from tests.netns.conftest import ip

VIP = "10.9.0.100"


@pytest.fixture
def segment(netns: str) -> Iterator[tuple[str, str]]:
    rs, peer = netns, f"{netns}-peer"
    ip("netns", "add", peer)
    try:
        ip("-n", peer, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", rs)
        for ns, addr in ((rs, "10.9.0.2"), (peer, "10.9.0.1")):
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield rs, peer
    finally:
        subprocess.run(["ip", "netns", "del", peer], check=False, capture_output=True)


def sysctl(ns: str, key: str) -> str:
    path = "/proc/sys/" + key.replace(".", "/")
    return subprocess.run(["ip", "netns", "exec", ns, "cat", path], capture_output=True,
                          text=True, check=True).stdout.strip()


def verify(rs: str, peer: str, *extra: str) -> tuple[int, dict[str, str]]:
    r = run_cli("--netns", rs, "ipvs", "realserver", "verify", "--vip", VIP, "--iface", "eth0",
                "--arp-from", peer, "--json", *extra)
    assert r.exit_code in (0, 1), r.stderr
    levels: dict[str, str] = {}
    for c in r.json["checks"]:  # a check name can repeat (a VIP in two places): keep the worst
        if levels.get(c["name"]) != "fail":
            levels[c["name"]] = c["level"]
    return r.exit_code, levels


def test_default_arp_answers_for_the_vip_and_apply_fixes_it(segment, tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    rs, peer = segment
    ip("-n", rs, "addr", "add", f"{VIP}/32", "dev", "lo")  # by hand, ARP left at defaults
    code, levels = verify(rs, peer)
    assert code == 1
    assert levels == {f"vip {VIP}": "pass", "arp_ignore": "fail", "arp_announce": "fail",
                      "rp_filter": "pass", "arp": "fail"}
    before = {k: sysctl(rs, k) for k in ("net.ipv4.conf.all.arp_ignore",
                                          "net.ipv4.conf.eth0.arp_announce")}

    r = run_cli("--netns", rs, "ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0",
                "--json")
    assert r.exit_code == 0, r.stderr
    changed = {c["object"] for c in r.json["changes"] if c["action"] == "change"}
    assert changed == {f"net.ipv4.conf.{s}.{k}" for s in ("all", "eth0")
                       for k in ("arp_ignore", "arp_announce")}
    assert verify(rs, peer) == (0, {f"vip {VIP}": "pass", "arp_ignore": "pass",
                                    "arp_announce": "pass", "rp_filter": "pass", "arp": "pass"})
    again = run_cli("--netns", rs, "ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0",
                    "--json")
    assert again.json["operations"] == 0 and again.json["journal"] is None

    assert run_cli("--netns", rs, "rollback").exit_code == 0
    assert {k: sysctl(rs, k) for k in before} == before
    assert verify(rs, peer)[1]["arp"] == "fail"  # the VIP was there before: answered again


def test_apply_places_the_vip_loosens_strict_rp_filter_and_teardown_removes_it(
    segment, tmp_path, monkeypatch
):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    rs, peer = segment
    subprocess.run(["ip", "netns", "exec", rs, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1"],
                   check=True)
    code, levels = verify(rs, peer)
    assert code == 1 and levels[f"vip {VIP}"] == "fail" and levels["rp_filter"] == "warn"
    assert levels["arp"] == "pass"  # no VIP, nobody answers
    r = run_cli("--netns", rs, "ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0",
                "--json")
    assert r.exit_code == 0, r.stderr
    assert sysctl(rs, "net.ipv4.conf.eth0.rp_filter") == "2"
    assert f"inet {VIP}/32 scope global lo" in ip("-n", rs, "addr", "show", "dev", "lo")
    assert verify(rs, peer)[0] == 0
    t = run_cli("--netns", rs, "ipvs", "realserver", "teardown", "--vip", VIP, "--iface", "eth0")
    assert t.exit_code == 0, t.stderr
    assert VIP not in ip("-n", rs, "addr", "show", "dev", "lo")


@pytest.mark.parametrize(
    ("where", "message"),
    [
        (["addr", "add", f"{VIP}/32", "dev", "eth0"], "is on eth0"),
        (["addr", "add", f"{VIP}/24", "dev", "lo"], "as /24"),
    ],
)
def test_misplaced_vips_fail_verify(segment, where, message):
    rs, _peer = segment
    ip("-n", rs, *where)
    r = run_cli("--netns", rs, "ipvs", "realserver", "verify", "--vip", VIP, "--iface", "eth0")
    assert r.exit_code == 1
    assert message in r.stdout


def test_selftest_client_side_from_another_namespace(segment):
    """client_exchanges (the client half the lab uses) talks from `peer` to a server in `rs`."""
    from tests.conftest import fork_call

    rs, peer = segment
    banner = os.path.join(os.path.dirname(os.path.dirname(__file__)), "banner_server.py")
    server = subprocess.Popen(["ip", "netns", "exec", rs, sys.executable, banner, "10.9.0.2",
                               "8080"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def probe() -> list[tuple[bool, bytes]]:
            import time

            from lbtune.ipvs.selftest import client_exchanges

            for _ in range(50):  # until the server listens
                got = client_exchanges("tcp", "10.9.0.2", 8080, 1, netns=peer)
                if got[0].ok:
                    break
                time.sleep(0.1)
            return [(e.ok, e.reply) for e in client_exchanges("tcp", "10.9.0.2", 8080, 3,
                                                              netns=peer)]

        got = fork_call(probe)
    finally:
        server.kill()
        server.wait()
    assert [ok for ok, _ in got] == [True] * 3
    assert all(b"server 10.9.0.2" in reply for _, reply in got)
