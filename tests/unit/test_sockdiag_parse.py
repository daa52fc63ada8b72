"""`ss` output parsing (sosreport's ss_-peaonmi and the -tlnm/-ulnm subsets) and its writer."""

from __future__ import annotations

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.net.sockdiag import (
    MAX_RECEIVERS,
    ListenSocket,
    UdpSocket,
    format_ss,
    parse_ss,
    parse_ss_receivers,
)

# Real `ss -peaonmi` output (iproute2 6.1, kernel 6.x) from a namespace, trailing blanks and
# all; process names with spaces and parens, skmem on the following tab-indented line for inet
# sockets and on the same line for netlink ones. One process name pretends to be ss fields.
PEAONMI = (
    "Netid State  Recv-Q Send-Q      Local Address:Port        Peer Address:Port Process"
    "                                    \n"
    "nl    UNCONN 0      0                       0:0                       *      sk=0 cb=0"
    " groups=0x00000000\t skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)          \n"
    "nl    UNCONN 4352   0                       4:10985                   *      sk=0 cb=0"
    " groups=0x00000000\t skmem:(r4352,rb2097152,t0,tb65536,f0,w0,o0,bl0,d0)        \n"
    "u_str ESTAB  0      0                  * 1056            * 1057 skmem:(r0,rb212992,t0,"
    "tb212992,f0,w0,o0,bl0,d0) <->                            \n"
    "p_raw UNCONN 0      0                       *:eth0                    *      "
    'users:(("dhclient",pid=511,fd=6)) ino:14021 sk:3 cgroup:/ <->\n'
    "\t skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)\n"
    "udp   ESTAB  0      0               127.0.0.1:48942          127.0.0.1:53    "
    'users:(("my (weird",pid=10926,fd=8)) ino:112702 sk:18 cgroup:unreachable:1 <->\n'
    "\t skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)                            \n"
    "udp   UNCONN 0      0            127.0.0.1%lo:53               0.0.0.0:*     "
    'users:(("my (weird",pid=10926,fd=6)) ino:112700 sk:19 cgroup:unreachable:1 <->\n'
    "\t skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)                     \n"
    "udp   UNCONN 213760 0                  [::1]:5353                [::]:*     "
    'users:(("my (weird",pid=10926,fd=7)) ino:112701 sk:1a cgroup:unreachable:1 v6only:1 <->\n'
    "\t skmem:(r213760,rb212992,t0,tb212992,f0,w0,o0,bl0,d1234)              \n"
    "tcp   ESTAB  0      0               127.0.0.1:34896          127.0.0.1:80    "
    'users:(("my (weird",pid=10926,fd=9)) ino:112703 sk:1b cgroup:unreachable:1 <->\n'
    "\t skmem:(r0,rb131072,t0,tb3939840,f0,w0,o0,bl0,d0) ts sack bbr wscale:10,10 rto:204"
    " rtt:0.023/0.011 mss:32741 cwnd:10 bytes_acked:1 segs_out:2 segs_in:1\n"
    "tcp   LISTEN 1      5                       *:80                     *:*     "
    'users:(("nginx: worker (2)",pid=10926,fd=3),("x ino:9 skmem:(d7)",pid=1,fd=3))'
    " ino:112697 sk:1c cgroup:unreachable:1 v6only:0 <->\n"
    "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d17) bbr cwnd:10 unacked:1       \n"
    "tcp   LISTEN 0      5                    [::]:81                  [::]:*     "
    'users:(("my (weird",pid=10926,fd=4)) ino:112698 sk:1d cgroup:unreachable:1 v6only:1 <->\n'
    "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0) bbr cwnd:10              \n"
    "tcp   LISTEN 0      4096   [::ffff:127.0.0.1]:82                     *:*     "
    'users:(("my (weird",pid=10926,fd=5)) ino:112699 sk:1e cgroup:unreachable:1 v6only:0 <->\n'
    "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0) bbr cwnd:10\n"
    "tcp   LISTEN 0      128            10.0.0.1%eth0:8080             0.0.0.0:*     "
    "ino:5 sk:20 <-> skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d2)\n"
    "tcp   LISTEN 0      128          [fe80::1]%eth1:22                   [::]:*     ino:6\n"
    "tcp   ESTAB  0      0      [::ffff:127.0.0.1]:80    [::ffff:127.0.0.1]:34896 ino:0 sk:1f"
    " cgroup:unreachable:1 <->\n"
    "\t skmem:(r0,rb131072,t0,tb3939840,f0,w0,o0,bl0,d0) ts sack bbr wscale:10,10\n"
)


def test_peaonmi_listen_sockets():
    listen, _ = parse_ss(PEAONMI, "ss_-peaonmi")
    # An all-states listing (Netid column) without SYN-RECV lines: no half-open requests.
    assert listen == [
        ListenSocket(6, "::", 80, queue=1, backlog=5, drops=17, inode=112697, syn_recv=0),
        ListenSocket(6, "::", 81, queue=0, backlog=5, drops=0, inode=112698, syn_recv=0),
        ListenSocket(6, "::ffff:127.0.0.1", 82, 0, 4096, drops=0, inode=112699, syn_recv=0),
        ListenSocket(4, "10.0.0.1", 8080, queue=0, backlog=128, drops=2, inode=5, syn_recv=0),
        ListenSocket(6, "fe80::1", 22, queue=0, backlog=128, drops=None, inode=6, syn_recv=0),
    ]


def test_peaonmi_udp_sockets_all_states():
    _, udp = parse_ss(PEAONMI, "ss_-peaonmi")
    assert udp == [
        UdpSocket(4, "127.0.0.1", 48942, queue=0, rcvbuf=212992, drops=0, inode=112702),
        UdpSocket(4, "127.0.0.1", 53, queue=0, rcvbuf=212992, drops=0, inode=112700),
        UdpSocket(6, "::1", 5353, queue=213760, rcvbuf=212992, drops=1234, inode=112701),
    ]


def test_subsets_without_netid_column():
    tlnm = (
        "State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n"
        "LISTEN 129    128          0.0.0.0:2024      0.0.0.0:*   \n"
        "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d4711)\n"
        "LISTEN 0      511             [::]:443          [::]:*\n"
    )
    listen, udp = parse_ss(tlnm, "ss -tlnm")
    assert udp == []
    # `-l` hides SYN-RECV: the half-open requests are unknown, not zero.
    assert listen == [
        ListenSocket(4, "0.0.0.0", 2024, 129, 128, drops=4711, syn_recv=None),
        ListenSocket(6, "::", 443, 0, 511, drops=None, syn_recv=None),
    ]
    ulnm = (
        "State  Recv-Q Send-Q Local Address:Port Peer Address:PortProcess\n"
        "UNCONN 0      0          127.0.0.53%lo:53        0.0.0.0:*\n"
        "\t skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)\n"
        "UNCONN 768    0                      *:5353            *:*\n"
        "\t skmem:(r768,rb2048,t0,tb212992,f0,w0,o0,bl0,d3)\n"
    )
    listen, udp = parse_ss(ulnm, "ss -ulnm")
    assert listen == []
    assert udp == [
        UdpSocket(4, "127.0.0.53", 53, 0, rcvbuf=212992, drops=0),
        UdpSocket(6, "::", 5353, 768, rcvbuf=2048, drops=3),
    ]


def test_unix_lines_without_netid_are_skipped():
    xl = (
        "State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n"
        "LISTEN 0      4096   /run/systemd/private 13579            * 0\n"
        "LISTEN 0      128    0.0.0.0:22 0.0.0.0:*\n"
    )
    listen, _ = parse_ss(xl, "ss -xtl")
    assert [s.port for s in listen] == [22]


def test_old_iproute2_star_is_ipv4_any():
    # RHEL 7's ss (iproute 3.10) prints IPv4 any as "*" and IPv6 unbracketed.
    old = (
        "Netid  State      Recv-Q Send-Q Local Address:Port               Peer Address:Port\n"
        'tcp    LISTEN     0      128       *:22                    *:*                   users:(("sshd",pid=1,fd=3)) ino:1 sk:1 <->\n'  # noqa: E501
        "\t skmem:(r0,rb87380,t0,tb16384,f0,w0,o0,bl0)\n"
        "tcp    LISTEN     0      128      :::22                   :::*                   ino:2 sk:2 v6only:1 <->\n"  # noqa: E501
    )
    listen, _ = parse_ss(old, "old")
    assert listen == [
        ListenSocket(4, "0.0.0.0", 22, 0, 128, drops=None, inode=1, syn_recv=0),  # no d before 4.x
        ListenSocket(6, "::", 22, 0, 128, drops=None, inode=2, syn_recv=0),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "tcp   LISTEN x      128    0.0.0.0:80 0.0.0.0:*",
        "tcp   LISTEN 0      128    999.0.0.1:80 0.0.0.0:*",
        "udp   UNCONN 0      0      [::zz]:53 [::]:*",
        "udp   UNCONN 0      0      127.0.0.1:99999 0.0.0.0:*",
        "tcp   LISTEN 0      128",
        "tcp   SYN-RECV 0    0      10.0.0.1:http 10.0.0.2:4000",
        "tcp   SYN-RECV 0    0",
        "udp",
        "udp   UNCONN 0      0      127.0.0.1 0.0.0.0:*",
    ],
)
def test_broken_inet_lines_are_malformed(line):
    text = "Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port\n" + line + "\n"
    with pytest.raises(MalformedHostFile, match=r"ss_-peaonmi: line 2"):
        parse_ss(text, "ss_-peaonmi")


def test_empty_and_header_only():
    assert parse_ss("", "x") == ([], [])
    assert parse_ss("Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port\n", "x") == (
        [],
        [],
    )


def test_round_trip():
    listen = [
        ListenSocket(4, "0.0.0.0", 80, 3, 128, drops=12, inode=1234, syn_recv=0),
        ListenSocket(6, "::", 443, 0, 4096, drops=None, inode=0, syn_recv=2),
        ListenSocket(6, "::ffff:10.0.0.1", 8080, 5, 4, drops=0, inode=7, syn_recv=0),
        ListenSocket(4, "192.0.2.10", 22, 0, 5, drops=None, inode=99, syn_recv=1),
    ]
    udp = [
        UdpSocket(4, "127.0.0.53", 53, 0, rcvbuf=212992, drops=0, inode=55),
        UdpSocket(6, "fe80::1", 546, 768, rcvbuf=None, drops=9, inode=56),
        UdpSocket(6, "::", 5353, 0, rcvbuf=2304, drops=None, inode=57),
        UdpSocket(4, "0.0.0.0", 0, 0),
    ]
    text = format_ss(listen, udp)
    assert parse_ss(text, "formatted") == (listen, udp)
    assert text.startswith("Netid State")
    assert "skmem:(rb212992,d0)" in text


def test_round_trip_with_half_open_requests():
    listen = [
        ListenSocket(4, "10.9.0.1", 18081, 0, 4, drops=35, inode=1, syn_recv=5),
        ListenSocket(6, "::", 18090, 0, 8, drops=0, inode=2, syn_recv=3),
        ListenSocket(4, "0.0.0.0", 80, 0, 511, drops=0, inode=3, syn_recv=0),
        ListenSocket(6, "::", 80, 0, 511, drops=0, inode=4, syn_recv=1),
        ListenSocket(4, "0.0.0.0", 443, 0, 511, drops=0, inode=5, syn_recv=0),
    ]
    udp = [UdpSocket(4, "127.0.0.53", 53, 0, rcvbuf=212992, drops=0, inode=55)]
    text = format_ss(listen, udp)
    assert parse_ss(text, "formatted") == (listen, udp)
    assert text.startswith("Netid State")
    lines = text.splitlines()
    assert [" ".join(x.split()) for x in lines if "SYN-RECV" in x] == [
        *["tcp SYN-RECV 0 0 10.9.0.1:18081 *:*"] * 5,
        *["tcp SYN-RECV 0 0 [::]:18090 *:*"] * 3,
        "tcp SYN-RECV 0 0 [::]:80 *:*",
    ]
    # Known zeros survive without any SYN-RECV line: the Netid column says "all states".
    zero = [ListenSocket(4, "0.0.0.0", 22, 0, 128, drops=0, inode=9, syn_recv=0)]
    assert parse_ss(format_ss(zero, []), "formatted") == (zero, [])


def test_format_unknown_syn_recv_stays_unknown():
    # Listeners read from `ss -tlnm` (syn_recv None): written without a Netid column, like
    # `ss -tlnm` + `ss -ulnm`, so they read back as unknown rather than as 0.
    listen = [ListenSocket(4, "0.0.0.0", 22, 0, 128, drops=None, inode=9)]
    udp = [UdpSocket(6, "::", 5353, 0, rcvbuf=2304, drops=1, inode=57)]
    text = format_ss(listen, udp)
    assert text.startswith("State")
    assert parse_ss(text, "formatted") == (listen, udp)


def test_format_nothing_parses_to_nothing():
    assert parse_ss(format_ss([], []), "x") == ([], [])


def test_recorded_host_reads_ss_file_or_says_unavailable(tmp_path):
    from lbtune.host.host import Host

    host = Host.open(str(tmp_path))
    assert host.listen_sockets() is None
    assert host.udp_sockets() is None
    rec = tmp_path / "sos_commands" / "networking"
    rec.mkdir(parents=True)
    (rec / "ss_-peaonmi").write_text(PEAONMI)
    listen, udp = parse_ss(PEAONMI, "x")
    assert host.listen_sockets() == listen
    assert host.udp_sockets() == udp
    (rec / "ss_-peaonmi").write_text("Netid State\n")
    assert host.listen_sockets() == []  # recorded, and no listeners: not the same as None



def test_a_recorded_tree_reads_both_kinds_of_socket_from_one_parse(tmp_path):
    """`Host.recorded_sockets` is what `listen_sockets` and `udp_sockets` read one by one,
    and the sampler of a tree takes both from it: the same sockets, and when the record is
    unreadable the same reason for each of the two sources."""
    from lbtune.host.host import Host
    from lbtune.observe.sampler import Sampler

    host = Host.open(str(tmp_path))
    assert host.recorded_sockets() is None
    first = Sampler(host).take()
    assert first.missing["listen"] == first.missing["udp"] == "no sock_diag and no ss recording"
    rec = tmp_path / "sos_commands" / "networking"
    rec.mkdir(parents=True)
    (rec / "ss_-peaonmi").write_text(PEAONMI)
    assert host.recorded_sockets() == (host.listen_sockets(), host.udp_sockets())
    sample = Sampler(host).take()
    assert (list(sample.listen), list(sample.udp)) == parse_ss(PEAONMI, "x")
    assert "listen" not in sample.missing and "udp" not in sample.missing
    (rec / "ss_-peaonmi").write_text("tcp LISTEN x 0 nowhere *:*\n")
    with pytest.raises(MalformedHostFile) as e:
        host.listen_sockets()
    bad = Sampler(host).take()
    assert bad.missing["listen"] == bad.missing["udp"] == str(e.value)
    assert bad.listen == bad.udp == ()
    with pytest.raises(ValueError):
        Host.open("/").recorded_sockets()

# Real `ss -peaonmi` (iproute2 6.1, kernel 6.18) in a namespace: a v4 listener with backlog 4
# whose SYN queue a spoofed-SYN flood filled (backlog + 1 = 5 requests), and a dual-stack
# listener that got three IPv4 SYNs (reported as IPv6 requests, v4-mapped). Request sockets
# have a tab-indented blank continuation line.
SYN_RECV_PEAONMI = (
    "Netid State    Recv-Q Send-Q     Local Address:Port        Peer Address:Port Process   \n"
    "raw   UNCONN   0      0                0.0.0.0:255              0.0.0.0:*     "
    'users:(("python",pid=16244,fd=6))\n'
    "tcp   LISTEN   0      4               10.9.0.1:18081            0.0.0.0:*     "
    'users:(("python",pid=16244,fd=3)) ino:338675 sk:10bf cgroup:unreachable:1 <->\n'
    "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d35) bbr cwnd:10        \n"
    + "".join(
        f"tcp   SYN-RECV 0      0               10.9.0.1:18081          10.99.0.{i}:2000{i} "
        f"timer:(on,912ms,0) ino:0 sk:10a{i}\n\t{' ' * 60}\n"
        for i in range(1, 6)
    )
    + "tcp   LISTEN   0      8                      *:18090                  *:*     "
    'users:(("python",pid=16244,fd=5)) ino:338676 sk:10c0 cgroup:unreachable:1 v6only:0 <->\n'
    "\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0) bbr cwnd:10\n"
    + "".join(
        f"tcp   SYN-RECV 0      0      [::ffff:10.9.0.1]:18090 [::ffff:10.99.5.{i}]:3000{i} "
        f"timer:(on,936ms,0) ino:0 sk:10b{i}\n\t{' ' * 60}\n"
        for i in range(1, 4)
    )
    + "tcp   LISTEN   0      128             127.0.0.1:8080            0.0.0.0:*     ino:7\n"
)


def test_syn_recv_counted_per_listener():
    listen, _ = parse_ss(SYN_RECV_PEAONMI, "ss_-peaonmi")
    assert [(s.addr, s.port, s.backlog, s.syn_recv) for s in listen] == [
        ("10.9.0.1", 18081, 4, 5),
        ("::", 18090, 8, 3),
        ("127.0.0.1", 8080, 128, 0),
    ]
    assert [s.inode for s in listen] == [338675, 338676, 7]  # requests are not listeners


def test_syn_recv_attribution_by_port_family_and_address():
    text = (
        "Netid State Recv-Q Send-Q Local Address:Port Peer Address:Port\n"
        "tcp LISTEN 0 128 0.0.0.0:80 0.0.0.0:*\n"
        "tcp LISTEN 0 128 [::]:80 [::]:*\n"  # v6only:1 twin of the v4 listener
        "tcp LISTEN 0 128 127.0.0.1:443 0.0.0.0:*\n"
        "tcp LISTEN 0 128 10.0.0.1:443 0.0.0.0:*\n"
        "tcp LISTEN 0 128 [::]:22 [::]:*\n"
        # separate v4/v6 listeners on 80: by family
        "tcp SYN-RECV 0 0 10.0.0.1:80 10.0.0.9:1000\n"
        "tcp SYN-RECV 0 0 10.0.0.2:80 10.0.0.9:1001\n"
        "tcp SYN-RECV 0 0 [2001:db8::1]:80 [2001:db8::9]:1000\n"
        # two v4 listeners on 443: by exact address
        "tcp SYN-RECV 0 0 10.0.0.1:443 10.0.0.9:1002\n"
        # a v4 request on a port only an IPv6 listener has (kernels reporting it as IPv4)
        "tcp SYN-RECV 0 0 10.0.0.1:22 10.0.0.9:1003\n"
        # a port nobody listens on any more: not counted anywhere
        "tcp SYN-RECV 0 0 10.0.0.1:8443 10.0.0.9:1004\n"
    )
    listen, _ = parse_ss(text, "x")
    assert [(s.family, s.addr, s.port, s.syn_recv) for s in listen] == [
        (4, "0.0.0.0", 80, 2),
        (6, "::", 80, 1),
        (4, "127.0.0.1", 443, 0),
        (4, "10.0.0.1", 443, 1),
        (6, "::", 22, 1),
    ]


def test_syn_recv_in_listing_without_netid_column():
    # `ss -tan`: no Netid column, but SYN-RECV lines say all states are listed.
    tan = (
        "State    Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
        "LISTEN   0      4          10.9.0.1:18081      0.0.0.0:*\n"
        "LISTEN   0      128       127.0.0.1:8080       0.0.0.0:*\n"
        "SYN-RECV 0      0          10.9.0.1:18081    10.99.0.5:20004\n"
        "SYN-RECV 0      0          10.9.0.1:18081    10.99.0.2:20001\n"
        "ESTAB    0      0         127.0.0.1:8080     127.0.0.1:40000\n"
    )
    listen, _ = parse_ss(tan, "ss -tan")
    assert [(s.port, s.syn_recv) for s in listen] == [(18081, 2), (8080, 0)]


# --------------------------------------------------------------- receivers under pressure

ESTAB = """Netid State  Recv-Q Send-Q        Local Address:Port   Peer Address:Port  Process
tcp   ESTAB  0      0                 10.0.0.23:80      203.0.113.7:52231 ino:31000 sk:10 <->
\t skmem:(r0,rb131072,t0,tb87040,f0,w0,o0,bl0,d0) ts sack cubic wscale:7,7
tcp   ESTAB  6000   0                 127.0.0.1:18090     127.0.0.1:50110 ino:31001 sk:11 <->
\t skmem:(r6832,rb4096,t0,tb3939840,f1360,w0,o0,bl0,d2) bbr wscale:10,10
tcp   CLOSE-WAIT 70000 0            [2001:db8::1]:443   [2001:db8::2]:40000 ino:31002 <->
\t skmem:(r70000,rb131072,t0,tb87040,f0,w0,o0,bl0,d0) cubic
tcp   ESTAB  9      0                 10.0.0.23:80      203.0.113.8:52232 ino:31003 <->
\t skmem:(r100,rb131072,t0,tb87040,f0,w0,o0,bl0,d1)
tcp   TIME-WAIT 0   0                 10.0.0.23:80      203.0.113.9:52233
tcp   LISTEN 0      511                 0.0.0.0:80          0.0.0.0:*     ino:20410 <->
\t skmem:(r0,rb131072,t0,tb16384,f0,w0,o0,bl0,d0) cubic cwnd:10
"""


def test_receivers_under_pressure_from_ss():
    """Half the receive buffer in use, or any drops; most drops first. Idle connections,
    TIME-WAIT and listeners are not receivers."""
    got = parse_ss_receivers(ESTAB, "ss_-peaonmi")
    assert [(r.addr, r.port, r.peer, r.state, r.drops) for r in got] == [
        ("127.0.0.1", 18090, "127.0.0.1:50110", "ESTAB", 2),
        ("10.0.0.23", 80, "203.0.113.8:52232", "ESTAB", 1),
        ("2001:db8::1", 443, "[2001:db8::2]:40000", "CLOSE-WAIT", 0),
    ]
    r = got[0]
    assert (r.unread, r.queued, r.rcvbuf, r.sndbuf, r.backlog, r.inode) == (
        6000, 6832, 4096, 3939840, 0, 31001)  # fmt: skip
    # parse_ss is unchanged by the connected lines
    listen, _ = parse_ss(ESTAB, "ss_-peaonmi")
    assert [(s.port, s.backlog) for s in listen] == [(80, 511)]


def test_receivers_round_trip_through_format_ss():
    got = parse_ss_receivers(ESTAB, "x")
    listen, udp = parse_ss(ESTAB, "x")
    text = format_ss(listen, udp, got)
    assert parse_ss_receivers(text, "formatted") == got
    assert parse_ss(text, "formatted") == (listen, udp)


def test_receivers_are_capped():
    line = ("tcp   ESTAB  10 0 10.0.0.1:{p} 10.0.0.2:{p} ino:{p} <->\n"
            "\t skmem:(r10,rb10,t0,tb10,f0,w0,o0,bl0,d{d})\n")  # fmt: skip
    text = "Netid State Recv-Q Send-Q Local Peer\n" + "".join(
        line.format(p=1000 + i, d=i % 7) for i in range(MAX_RECEIVERS + 50)
    )
    got = parse_ss_receivers(text, "x")
    assert len(got) == MAX_RECEIVERS and got[0].drops == 6
