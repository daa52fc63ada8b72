"""netstat/snmp/snmp6/sockstat parsers: kernel text, this machine's files, malformed input."""

from __future__ import annotations

import os
import pathlib

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.procnet import (
    parse_snmp,
    parse_snmp6,
    parse_sockstat,
    read_snmp,
    read_sockstat,
)
from tests.conftest import DELL, HOSTS

# /proc/net/snmp of a 6.1 kernel (abridged to four groups; IcmpMsg only lists types seen).
SNMP = (
    "Ip: Forwarding DefaultTTL InReceives InHdrErrors InAddrErrors ForwDatagrams InUnknownProtos "
    "InDiscards InDelivers OutRequests OutDiscards OutNoRoutes ReasmTimeout ReasmReqds ReasmOKs "
    "ReasmFails FragOKs FragFails FragCreates\n"
    "Ip: 2 64 11109 0 0 0 0 0 11109 6779 0 0 0 0 0 0 0 0 0\n"
    "IcmpMsg: InType3\n"
    "IcmpMsg: 2\n"
    "Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets "
    "CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
    "Tcp: 1 200 120000 -1 96 5 1 0 0 10921 6593 0 0 148 0\n"
    "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors "
    "IgnoredMulti MemErrors\n"
    "Udp: 186 0 7 188 7 0 0 0 0\n"
)

NETSTAT = (
    "TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed ListenOverflows ListenDrops "
    "TCPTimeWaitOverflow\n"
    "TcpExt: 0 0 0 48211 48211 1302177\n"
    "IpExt: InNoRoutes InTruncatedPkts InOctets OutOctets\n"
    "IpExt: 0 0 412930859 787245\n"
)


def test_snmp_pairs_keyed_by_group() -> None:
    v = parse_snmp(SNMP, "snmp")
    assert v["Tcp.MaxConn"] == -1  # a gauge, negative, kept as printed
    assert v["Ip.Forwarding"] == 2 and v["Ip.InReceives"] == 11109
    assert v["IcmpMsg.InType3"] == 2
    assert (v["Udp.RcvbufErrors"], v["Udp.InErrors"]) == (7, 7)
    assert len(v) == 19 + 1 + 15 + 9


def test_netstat() -> None:
    v = parse_snmp(NETSTAT, "netstat")
    assert v["TcpExt.ListenOverflows"] == v["TcpExt.ListenDrops"] == 48211
    assert v["TcpExt.TCPTimeWaitOverflow"] == 1302177
    assert v["IpExt.InOctets"] == 412930859


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("TcpExt: A B C\nTcpExt: 1 2\n", "3 names but 2 values"),
        ("TcpExt: A B\nTcpExt: 1 x\n", "non-integer"),
        ("TcpExt: A B\n", "header line without values"),
        ("TcpExt: A B\nIpExt: 1 2\n", "not a 'TcpExt:' pair"),
        ("TcpExt A B\nTcpExt 1 2\n", "pair"),
        ("TcpExt: A B\nTcpExt: 1 2\nIp: X\nIp: 1.5\n", "Ip: non-integer"),
    ],
)
def test_snmp_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem) as e:
        parse_snmp(text, "/h/proc/net/netstat")
    assert e.value.path == "/h/proc/net/netstat"


SNMP6 = (
    "Ip6InReceives                   \t12\n"
    "Ip6InDiscards                   \t0\n"
    "Icmp6InMsgs                     \t4\n"
    "Icmp6InType135                  \t2\n"
    "Icmp6OutType143                 \t6\n"
    "Udp6RcvbufErrors                \t3\n"
    "UdpLite6InDatagrams             \t0\n"
)


def test_snmp6_groups() -> None:
    v = parse_snmp6(SNMP6, "snmp6")
    assert v == {
        "Ip6.InReceives": 12,
        "Ip6.InDiscards": 0,
        "Icmp6.InMsgs": 4,
        "Icmp6.InType135": 2,
        "Icmp6.OutType143": 6,
        "Udp6.RcvbufErrors": 3,
        "UdpLite6.InDatagrams": 0,
    }


@pytest.mark.parametrize(
    "text",
    ["Ip6InReceives 12 13\n", "Ip6InReceives x\n", "InReceives 12\n", "Ip6 12\n"],
)
def test_snmp6_malformed(text: str) -> None:
    with pytest.raises(MalformedHostFile):
        parse_snmp6(text, "snmp6")


SOCKSTAT = (
    "sockets: used 22142\n"
    "TCP: inuse 18321 orphan 214 tw 262144 alloc 18690 mem 91234\n"
    "UDP: inuse 6 mem 3\n"
    "UDPLITE: inuse 0\n"
    "RAW: inuse 0\n"
    "FRAG: inuse 0 memory 0\n"
)
SOCKSTAT6 = (
    "TCP6: inuse 4\nUDP6: inuse 1\nUDPLITE6: inuse 0\nRAW6: inuse 0\nFRAG6: inuse 0 memory 0\n"
)


def test_sockstat() -> None:
    s = parse_sockstat(SOCKSTAT, SOCKSTAT6, "sockstat")
    assert (s.sockets_used, s.tcp_inuse, s.tcp_orphan, s.tcp_tw, s.tcp_alloc) == (
        22142,
        18321,
        214,
        262144,
        18690,
    )
    assert (s.tcp_mem_pages, s.udp_inuse, s.udp_mem_pages) == (91234, 6, 3)
    assert (s.tcp6_inuse, s.udp6_inuse) == (4, 1)
    assert parse_sockstat(SOCKSTAT, None, "sockstat").tcp6_inuse == 0


@pytest.mark.parametrize(
    ("text", "text6", "problem"),
    [
        (SOCKSTAT.replace("tw 262144 ", ""), None, "missing TCP.tw"),
        (SOCKSTAT.replace("mem 3", "mem"), None, "UDP"),
        (SOCKSTAT.replace("used 22142", "used many"), None, "sockets used: not an integer"),
        (SOCKSTAT, "TCP6: inuse\n", "sockstat6"),
    ],
)
def test_sockstat_malformed(text: str, text6: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem):
        parse_sockstat(text, text6, "sockstat")


@pytest.mark.skipif(not os.path.exists("/proc/net/netstat"), reason="no /proc/net")
def test_this_machine_parses() -> None:
    fs = HostFS("/")
    v = read_snmp(fs).values
    for key in ("TcpExt.ListenOverflows", "TcpExt.TCPTimeWaitOverflow", "Tcp.MaxConn"):
        assert key in v
    assert v["Tcp.RtoMin"] > 0
    s = read_sockstat(fs)
    assert s is not None and s.sockets_used > 0


@pytest.mark.skipif(
    not os.path.exists("/proc/net/snmp6"), reason="capability: IPv6 is off in this kernel"
)
def test_this_machine_parses_snmp6() -> None:
    v = read_snmp(HostFS("/")).values
    assert "Ip6.InReceives" in v and "Udp6.RcvbufErrors" in v


def test_fixture_r750() -> None:
    fs = HostFS(str(HOSTS / DELL))
    snmp = read_snmp(fs)
    assert snmp.get("TcpExt.ListenOverflows") == snmp.get("TcpExt.ListenDrops") == 48211
    assert snmp.get("TcpExt.TCPTimeWaitOverflow") > 0
    assert snmp.get("Tcp.MaxConn") == -1
    assert snmp.get("Icmp6.OutType143") == 6
    sock = read_sockstat(fs)
    assert sock is not None
    assert sock.tcp_tw == int(
        (HOSTS / DELL / "proc/sys/net/ipv4/tcp_max_tw_buckets").read_text()
    )


def test_absent_files(tmp_path: pathlib.Path) -> None:
    fs = HostFS(str(tmp_path))
    assert read_snmp(fs).values == {}
    assert read_sockstat(fs) is None
