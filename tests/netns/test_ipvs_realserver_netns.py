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


# -- strict rp_filter on a multi-homed real server -----------------------------------------
#
# `rs` faces the director on eth0 (10.9.0.2/24, the `peer` namespace stands in for the
# director forwarding a client's packet) and has its default route on eth1 (10.8.0.2/24 to
# namespace `up`). A client 198.51.100.7 beyond the director: its packets for the VIP come in
# on eth0 while the route back to it is the default via eth1.

CLIENT = "198.51.100.7"


@pytest.fixture
def multihomed(segment: tuple[str, str]) -> Iterator[tuple[str, str]]:
    rs, peer = segment
    up = f"{rs}-up"
    ip("netns", "add", up)
    try:
        ip("-n", up, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", "netns", rs)
        ip("-n", up, "addr", "add", "10.8.0.1/24", "dev", "eth0")
        ip("-n", rs, "addr", "add", "10.8.0.2/24", "dev", "eth1")
        for ns, dev in ((up, "eth0"), (rs, "eth1")):
            ip("-n", ns, "link", "set", dev, "up")
        ip("-n", rs, "route", "add", "default", "via", "10.8.0.1", "dev", "eth1")
        ip("-n", rs, "addr", "add", f"{VIP}/32", "dev", "lo")
        # the director's side: the client's address, the VIP forwarded to the real server
        ip("-n", peer, "addr", "add", f"{CLIENT}/32", "dev", "lo")
        ip("-n", peer, "route", "add", f"{VIP}/32", "via", "10.9.0.2", "dev", "eth0")
        # a director asks ARP with its own address (a request from the client's address
        # would itself fail rs's rp_filter, and nothing would be sent at all)
        subprocess.run(["ip", "netns", "exec", peer, "sysctl", "-qw",
                        "net.ipv4.conf.all.arp_announce=2"], check=True)
        for key in ("net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
                    "net.ipv4.conf.all.rp_filter=1"):
            subprocess.run(["ip", "netns", "exec", rs, "sysctl", "-qw", key], check=True)
        yield rs, peer
    finally:
        subprocess.run(["ip", "netns", "del", up], check=False, capture_output=True)


def rp_filter_drops(ns: str) -> int:
    """TcpExt.IPReversePathFilter of namespace `ns`: packets rp_filter dropped."""
    text = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/netstat"],
                          capture_output=True, text=True, check=True).stdout
    lines = [line.split() for line in text.splitlines() if line.startswith("TcpExt:")]
    return int(dict(zip(lines[0], lines[1]))["IPReversePathFilter"])


def send_to_vip(rs: str, peer: str, n: int, expect_arrival: bool) -> tuple[int, int]:
    """n UDP datagrams from CLIENT (in `peer`) to VIP:9999 (a socket in `rs`): how many
    arrived and how far IPReversePathFilter moved. Waits for the outcome it expects: every
    datagram in the socket, or every one counted as an rp_filter drop."""
    import socket
    import time

    from lbtune.host.net.netns import NetnsThread

    def bound(addr: str, port: int) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((addr, port))
        return s

    before = rp_filter_drops(rs)
    with NetnsThread(rs) as server, NetnsThread(peer) as client:
        rx = server.call(bound, VIP, 9999)
        tx = client.call(bound, CLIENT, 0)
        try:
            for i in range(n):
                tx.sendto(b"dr %d" % i, (VIP, 9999))
            got = 0
            deadline = time.monotonic() + 10  # a safety stop, not the assertion
            while time.monotonic() < deadline:
                if expect_arrival:
                    rx.settimeout(max(0.01, deadline - time.monotonic()))
                    try:
                        rx.recv(100)
                    except socket.timeout:
                        break
                    got += 1
                    if got == n:
                        break
                elif rp_filter_drops(rs) - before >= n:
                    break
                else:
                    time.sleep(0.05)
            rx.setblocking(False)
            while True:  # whatever else arrived
                try:
                    rx.recv(100)
                except BlockingIOError:
                    break
                got += 1
        finally:
            rx.close()
            tx.close()
    return got, rp_filter_drops(rs) - before


def rp_check(rs: str, *extra: str) -> tuple[int, dict[str, str]]:
    r = run_cli("--netns", rs, "ipvs", "realserver", "verify", "--vip", VIP, "--iface", "eth0",
                "--json", *extra)
    assert r.exit_code in (0, 1), r.stderr
    hits = [c for c in r.json["checks"] if c["name"] == "rp_filter"]
    assert len(hits) == 1, r.json
    return r.exit_code, hits[0]


def test_strict_rp_filter_with_the_route_back_elsewhere_fails_verify(multihomed):
    rs, peer = multihomed
    code, check = rp_check(rs, "--client", CLIENT)
    assert code == 1 and check["level"] == "fail", check
    assert "route back is default via eth1 gw 10.8.0.1, not eth0" in check["reason"]
    assert "IPReversePathFilter" in check["reason"]
    code, check = rp_check(rs)  # no --client: a stand-in for clients via the default route
    assert code == 1 and check["level"] == "fail"
    assert "clients via the default route (tested with 192.0.2.1)" in check["reason"]
    # positive control: the kernel really drops the VIP's packets here
    assert send_to_vip(rs, peer, 5, expect_arrival=False) == (0, 5)


def test_strict_rp_filter_with_the_route_back_via_the_facing_interface_passes(multihomed):
    rs, peer = multihomed
    ip("-n", rs, "route", "add", "198.51.100.0/24", "via", "10.9.0.1", "dev", "eth0")
    code, check = rp_check(rs, "--client", CLIENT)
    assert code == 0 and check["level"] == "pass", check
    assert "route back: 198.51.100.0/24 via eth0 gw 10.9.0.1" in check["reason"]
    assert send_to_vip(rs, peer, 5, expect_arrival=True) == (5, 0)
    # clients beyond the default route (eth1) are still dropped: said without --client
    code, check = rp_check(rs)
    assert code == 1 and check["level"] == "fail"


def test_realserver_apply_loosens_rp_filter_and_the_vip_traffic_arrives(multihomed, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    rs, peer = multihomed
    r = run_cli("--netns", rs, "ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0")
    assert r.exit_code == 0, r.stderr
    assert sysctl(rs, "net.ipv4.conf.eth0.rp_filter") == "2"
    for extra in ((), ("--client", CLIENT)):
        code, check = rp_check(rs, *extra)
        assert code == 0 and check["level"] == "pass", check
    assert send_to_vip(rs, peer, 5, expect_arrival=True) == (5, 0)


def test_loose_rp_filter_without_any_route_back_fails(segment):
    rs, _peer = segment
    ip("-n", rs, "addr", "add", f"{VIP}/32", "dev", "lo")
    subprocess.run(["ip", "netns", "exec", rs, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2"],
                   check=True)
    code, check = rp_check(rs, "--client", CLIENT)
    assert code == 1 and "no route back to 198.51.100.7" in check["reason"], check


@pytest.mark.parametrize("bad", ["2001:db8::1", "10.0.0.300", "127.0.0.1", "eth0"])
def test_bad_client_is_refused(segment, bad):
    rs, _peer = segment
    r = run_cli("--netns", rs, "ipvs", "realserver", "verify", "--vip", VIP, "--iface", "eth0",
                "--client", bad)
    assert r.exit_code == 2 and "--client" in r.stderr and "Traceback" not in r.stderr
