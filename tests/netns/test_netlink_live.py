"""Raw-netlink readers against the real kernel: sock_diag listen/UDP queues and qdisc stats.

Each test makes the condition for real in a throwaway namespace (an accept queue overflow, a
full SYN queue, a UDP receive-buffer overflow, a tbf qdisc dropping a UDP flood) and checks our
numbers against the kernel's own counters and against `ss` / `tc` output read with our parsers.
"""

from __future__ import annotations

import errno
import json
import re
import socket
import subprocess
import time
from typing import Iterator

import pytest

from lbtune.host.net import netlink
from lbtune.host.net.qdisc import QdiscStats, dump_qdiscs, format_tc_qdisc, parse_tc_qdisc
from lbtune.host.net.sockdiag import (
    _REQ_V2,
    SOCK_DIAG_BY_FAMILY,
    ListenSocket,
    UdpSocket,
    dump_listen_sockets,
    dump_udp_sockets,
    format_ss,
    parse_ss,
)
from tests.netns.conftest import in_netns, ip
from tests.netns.faults import SynQueueFull, tcp_syn


def _snmp(path: str, section: str) -> dict[str, int]:
    """One section of /proc/net/snmp or /proc/net/netstat (this process's namespace)."""
    with open(path) as f:
        rows = [line.split() for line in f if line.startswith(section + ":")]
    return dict(zip(rows[0][1:], map(int, rows[1][1:])))


def _lo_up(ns: str) -> str:
    ip("-n", ns, "link", "set", "lo", "up")
    return ns


# ------------------------------------------------------------------------ listen queue


def _listen_overflow() -> tuple[list[ListenSocket], list[ListenSocket], int, str]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(3)
    port = srv.getsockname()[1]
    srv6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv6.bind(("::1", 0))
    srv6.listen(7)
    clients = []
    for _ in range(6):  # never accepted
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        clients.append(c)
    time.sleep(0.2)  # well before the first SYN retransmission (1 s)
    ours = dump_listen_sockets()
    listen_drops = _snmp("/proc/net/netstat", "TcpExt")["ListenDrops"]
    # all states and a Netid column, like sosreport's ss -peaonmi: syn_recv is known (0)
    ss = subprocess.run(["ss", "-tuanme"], capture_output=True, text=True, check=True).stdout
    theirs, _ = parse_ss(ss, "ss -tuanme")
    del clients, srv, srv6
    return ours, theirs, listen_drops, str(port)


def test_listen_queue_overflow(netns):
    ours, theirs, listen_drops, port = in_netns(_lo_up(netns), _listen_overflow)
    v4 = [s for s in ours if s.port == int(port)]
    assert len(v4) == 1
    s = v4[0]
    assert (s.family, s.addr) == (4, "127.0.0.1")
    # The kernel queues backlog + 1 connections (sk_acceptq_is_full: ack_backlog > max), then
    # drops each further SYN at the listener; the other two clients' SYNs were dropped once
    # each (no retransmission yet) and counted in sk_drops and the namespace's ListenDrops.
    assert s.queue == 4
    assert s.backlog == 3
    assert s.drops == listen_drops == 2
    assert s.inode > 0
    assert s.syn_recv == 0  # handshakes completed or SYNs dropped: nothing half-open
    v6 = [x for x in ours if x.family == 6]
    assert [(x.addr, x.queue, x.backlog, x.drops, x.syn_recv) for x in v6] == [("::1", 0, 7, 0, 0)]
    # ss read the same kernel state a moment later: same sockets, same numbers.
    assert sorted(theirs, key=lambda x: x.port) == sorted(ours, key=lambda x: x.port)


# ------------------------------------------------------------------------ SYN queue full


def _syn_queue_full(backlog: int, dual_syns: int) -> tuple[list[ListenSocket], str, str]:
    """SynQueueFull (syncookies off, spoofed SYNs never answered) on one listener, plus a
    dual-stack [::] listener that gets `dual_syns` IPv4 SYNs and an idle listener."""
    fault = SynQueueFull(cookies=False, backlog=backlog, syns=10 * backlog)
    fault.setup()
    try:
        dual = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        dual.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        dual.bind(("::", 18090))
        dual.listen(64)
        idle = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        idle.bind(("127.0.0.1", 18091))
        idle.listen(16)
        fault.trigger()
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        for i in range(dual_syns):
            syn = tcp_syn(f"10.99.5.{i + 1}", 30000 + i, fault.addr, 18090, 7919 * (i + 1))
            raw.sendto(syn, (fault.addr, 0))
        raw.close()
        time.sleep(0.05)
        ours = dump_listen_sockets()
        # the kernel's own list of half-open connections, and a full listing as sosreport has it
        truth = subprocess.run(["ss", "-tnH", "state", "syn-recv"], capture_output=True,
                               text=True, check=True).stdout  # fmt: skip
        peaonmi = subprocess.run(["ss", "-peaonmi"], capture_output=True, text=True,
                                 check=True).stdout  # fmt: skip
        dual.close()
        idle.close()
        return ours, truth, peaonmi
    finally:
        fault.close()


def test_syn_queue_full_counts_half_open_requests(netns):
    backlog, dual_syns = 4, 3
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_syncookies=0")
    ours, truth, peaonmi = in_netns(netns, _syn_queue_full, backlog, dual_syns)

    # The true number: the kernel's own SYN-RECV list, per local port.
    per_port: dict[int, int] = {}
    for line in truth.splitlines():
        port = int(line.split()[2].rpartition(":")[2])
        per_port[port] = per_port.get(port, 0) + 1
    # The SYN queue holds backlog + 1 requests; the other SYNs were dropped (no cookies).
    assert per_port == {18081: backlog + 1, 18090: dual_syns}

    got = {(s.addr, s.port): (s.backlog, s.syn_recv) for s in ours}
    assert got == {
        ("10.9.0.1", 18081): (backlog, backlog + 1),
        # IPv4 SYNs to a dual-stack listener are IPv6 requests (v4-mapped): same family
        ("::", 18090): (64, dual_syns),
        ("127.0.0.1", 18091): (16, 0),
    }
    # ss's listing of the same sockets reads back to the same numbers.
    theirs, _ = parse_ss(peaonmi, "ss -peaonmi")
    assert {(s.addr, s.port): (s.backlog, s.syn_recv) for s in theirs} == got
    # and so does what `lbtune capture` would write
    assert parse_ss(format_ss(ours, []), "formatted")[0] == ours


# ------------------------------------------------------------------ UDP buffer overflow


def _udp_overflow(count: int) -> tuple[list[UdpSocket], int, int, int, int]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)  # kernel doubles, then a floor
    rx.bind(("127.0.0.1", 0))
    rcvbuf = rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    for _ in range(count):
        tx.sendto(b"x" * 200, rx.getsockname())
    time.sleep(0.05)
    ours = dump_udp_sockets()
    rcvbuf_errors = _snmp("/proc/net/snmp", "Udp")["RcvbufErrors"]
    rx.setblocking(False)
    received = 0
    while True:
        try:
            rx.recv(2048)
        except BlockingIOError:
            break
        received += 1
    return ours, rcvbuf, rx.getsockname()[1], received, rcvbuf_errors


def test_udp_receive_buffer_drops(netns):
    count = 200
    ours, rcvbuf, port, received, rcvbuf_errors = in_netns(_lo_up(netns), _udp_overflow, count)
    mine = [u for u in ours if u.port == port]
    assert len(mine) == 1
    u = mine[0]
    assert (u.family, u.addr) == (4, "127.0.0.1")
    assert u.rcvbuf == rcvbuf
    assert u.drops is not None and u.drops > 0
    # Every datagram was either queued (and read afterwards) or dropped at this socket.
    assert received + u.drops == count
    assert u.drops == rcvbuf_errors
    assert 0 < u.queue <= rcvbuf + 2048  # one skb may overshoot the limit
    # the sender is listed too (bound, unconnected) with nothing queued
    assert any(x.port != port and x.queue == 0 and x.drops == 0 for x in ours)


# --------------------------------------------------------------------- tbf qdisc drops


@pytest.fixture
def peer_ns(veth4: str) -> Iterator[tuple[str, str]]:
    """veth4 with v1 moved into a second namespace: v0 198.18.0.1 <-> v1 198.18.0.2."""
    peer = f"{veth4}-peer"
    ip("netns", "add", peer)
    try:
        ip("-n", veth4, "link", "set", "v1", "netns", peer)
        ip("-n", peer, "addr", "add", "198.18.0.2/24", "dev", "v1")
        ip("-n", peer, "link", "set", "v1", "up")
        ip("-n", veth4, "addr", "add", "198.18.0.1/24", "dev", "v0")
        # no IPv6 chatter (DAD, router solicitations) through the qdisc under test
        ip("netns", "exec", veth4, "sysctl", "-qw", "net.ipv6.conf.v0.disable_ipv6=1")
        mac = json.loads(ip("-n", peer, "-j", "link", "show", "v1"))[0]["address"]
        ip("-n", veth4, "neigh", "replace", "198.18.0.2", "lladdr", mac, "dev", "v0",
           "nud", "permanent")  # fmt: skip
        yield veth4, peer
    finally:
        subprocess.run(["ip", "netns", "del", peer], check=False, capture_output=True)


def _flood_then_dump(count: int) -> list[QdiscStats]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(count):
        s.sendto(b"x" * 1000, ("198.18.0.2", 9))  # a qdisc drop does not fail sendto
    time.sleep(0.2)  # let tbf drain its few queued packets
    return dump_qdiscs()


def test_tbf_drops_match_tc(peer_ns):
    ns, _peer = peer_ns
    subprocess.run(
        ["tc", "-n", ns, "qdisc", "add", "dev", "v0", "root", "tbf", "rate", "1mbit",
         "burst", "1600", "latency", "5ms"],
        check=True, capture_output=True,
    )  # fmt: skip
    count = 300
    ours = in_netns(ns, _flood_then_dump, count)
    tc_out = subprocess.run(
        ["tc", "-n", ns, "-s", "qdisc", "show"], check=True, capture_output=True, text=True
    ).stdout
    theirs = parse_tc_qdisc(tc_out, "tc -s qdisc show")

    ours_v0 = [q for q in ours if q.dev == "v0"]
    assert [(q.kind, q.parent) for q in ours_v0] == [("tbf", "root")]
    tbf = ours_v0[0]
    assert re.fullmatch(r"8[0-9a-f]{3}:", tbf.handle)  # auto-allocated, counts up per qdisc
    assert tbf.rate_bps == 1_000_000  # "rate 1mbit": 125000 bytes/s in TCA_TBF_PARMS
    assert all(q.rate_bps is None for q in ours if q.kind != "tbf")
    assert tbf.drops > 0
    assert tbf.backlog_packets == 0 and tbf.backlog_bytes == 0
    # Every datagram was sent or dropped by tbf (a stray packet of the stack may add one).
    assert count <= tbf.packets + tbf.drops <= count + 3
    # at least count - drops of ours went out, 1042 bytes each (1000 + UDP 8 + IP 20 + Eth 14)
    assert tbf.bytes >= (count - tbf.drops) * 1042

    # tc read the same counters just after: identical up to what went out in between.
    their = {(q.dev, q.handle, q.parent): q for q in theirs}
    assert their.keys() == {(q.dev, q.handle, q.parent) for q in ours}
    t = their[("v0", tbf.handle, "root")]
    assert t.kind == "tbf"
    assert "rate 1Mbit" in tc_out
    assert t.rate_bps == tbf.rate_bps
    assert parse_tc_qdisc(format_tc_qdisc(ours), "formatted") == ours
    assert tbf.drops <= t.drops <= tbf.drops + 3
    assert tbf.packets <= t.packets <= tbf.packets + 3
    assert (t.overlimits, t.requeues) >= (tbf.overlimits, tbf.requeues)


# ------------------------------------------------------------------- errors and Host


def test_nlmsg_error_raises_oserror_with_kernel_errno():
    # An address family sock_diag does not know: the kernel answers NLMSG_ERROR -EINVAL.
    bad_family = _REQ_V2.pack(200, socket.IPPROTO_TCP, 0, 0xFFFFFFFF)
    with pytest.raises(OSError) as e:
        list(netlink.dump(netlink.NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, bad_family))
    assert e.value.errno == errno.EINVAL
    # A protocol without a diag handler: the dump starts and ends with NLMSG_DONE -ENOENT.
    no_handler = _REQ_V2.pack(socket.AF_INET, 255, 0, 0xFFFFFFFF)
    with pytest.raises(OSError) as e:
        list(netlink.dump(netlink.NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, no_handler))
    assert e.value.errno == errno.ENOENT


def _host_reads() -> tuple[object, object, object]:
    from lbtune.host.host import Host

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 8080))
    s.listen(5)
    u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    u.bind(("::1", 5353))
    with Host.open("/") as host:
        return host.listen_sockets(), host.udp_sockets(), host.qdiscs()


def test_live_host_reads_its_namespace(netns):
    listen, udp, qdiscs = in_netns(_lo_up(netns), _host_reads)
    assert listen == [
        ListenSocket(4, "127.0.0.1", 8080, 0, 5, drops=0, inode=listen[0].inode, syn_recv=0)
    ]
    assert [(x.family, x.addr, x.port) for x in udp] == [(6, "::1", 5353)]
    assert [(q.dev, q.kind) for q in qdiscs] == [("lo", "noqueue")]


def _dump_tick() -> tuple[list[int], list[int], int]:
    socks = []
    for port in (80, 443, 8080):
        s = socket.socket()
        s.bind(("127.0.0.1", port))
        s.listen(128)
        socks.append(s)
    for port in (53, 123):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind(("127.0.0.1", port))
        socks.append(u)
    try:
        listen = sorted(x.port for x in dump_listen_sockets())
        udp = sorted(x.port for x in dump_udp_sockets())
        qdiscs = len(dump_qdiscs())
    finally:
        for x in socks:
            x.close()
    return listen, udp, qdiscs


def test_one_tick_of_dumps_sees_every_socket_and_qdisc(veth4):
    """One sampling tick's listen + UDP + qdisc dumps (their cost is measured in
    bench/diagnose.py, not asserted here)."""
    listen, udp, qdiscs = in_netns(_lo_up(veth4), _dump_tick)
    assert listen == [80, 443, 8080]
    assert udp == [53, 123]
    assert qdiscs >= 2  # at least the root qdiscs of v0 and v1


# ------------------------------------------------------------------- receive pressure


def _pinned_receiver() -> tuple[list, list, int]:  # type: ignore[type-arg]
    """A receiver with a pinned small SO_RCVBUF that stopped reading (faults.py), read by
    sock_diag and by `ss -peaonmi` through our parser, while both ends are open."""
    from lbtune.host.net.sockdiag import dump_tcp_receivers, parse_ss_receivers
    from tests.netns.faults import PinnedRcvbufPrune

    fault = PinnedRcvbufPrune(port=18092, rcvbuf=2048)
    try:
        fault.setup()
        truth = fault.trigger()
        ours = dump_tcp_receivers()
        ss = subprocess.run(["ss", "-peaonmi"], capture_output=True, text=True, check=True)
        theirs = parse_ss_receivers(ss.stdout, "ss -peaonmi")
        return ours, theirs, int(truth.knobs["SO_RCVBUF"])
    finally:
        fault.close()


def test_tcp_receiver_under_pressure_matches_ss(netns):
    ours, theirs, rcvbuf = in_netns(_lo_up(netns), _pinned_receiver)
    mine = [r for r in ours if r.port == 18092]
    assert len(mine) == 1, ours  # the receiver; the idle sender is not under pressure
    r = mine[0]
    assert r.rcvbuf == rcvbuf and r.queued >= r.rcvbuf // 2 and r.unread > 0, r
    assert r.state == "ESTAB" and r.peer.startswith("127.0.0.1:")
    assert (r.drops or 0) >= 1  # the kernel pruned and dropped for it
    same = [t for t in theirs if t.port == 18092]
    assert [(t.addr, t.port, t.peer, t.rcvbuf, t.inode) for t in same] == [
        (r.addr, r.port, r.peer, r.rcvbuf, r.inode)
    ]


# ------------------------------------------------------------------------ link counters


def _link_stats_and_files() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]], int]:
    """Frames sent on v0 (an AF_PACKET socket: they arrive on v1), then the netlink dump
    between two reads of every statistics directory, until both reads agree (IPv6 on a new
    link may send a packet meanwhile)."""
    from lbtune.host.fs import HostFS
    from lbtune.host.net.linkstats import dump_link_stats

    fs = HostFS("/")
    sent = 7
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind(("v0", 0))
        for _ in range(sent):
            s.send(b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5" + b"x" * 46)

    def files() -> dict[str, dict[str, int]]:
        names = fs.listdir("/sys/class/net")
        return {n: fs.read_int_dir(f"/sys/class/net/{n}/statistics") for n in names
                if fs.isdir(f"/sys/class/net/{n}")}  # fmt: skip

    for _ in range(20):
        before = files()
        dumped = dump_link_stats()
        if files() == before:
            return dumped, before, sent
        time.sleep(0.05)
    raise AssertionError("the link counters never stood still")


def test_link_stats_dump_equals_the_statistics_files(veth4):
    """The sampler's one RTM_GETLINK dump gives what /sys/class/net/*/statistics give: the
    same interfaces, the same 24 names, the same values."""
    dumped, files, sent = in_netns(_lo_up(veth4), _link_stats_and_files)
    assert set(dumped) == set(files) == {"lo", "v0", "v1"}
    for name, counters in files.items():
        assert len(counters) == 24 and dumped[name] == counters, name
    assert dumped["v0"]["tx_packets"] >= sent and dumped["v1"]["rx_packets"] >= sent

