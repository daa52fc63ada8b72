"""The counter files of the fixture trees agree with each other and with the tree's topology.

Checked on the raw text, independently of lbtune's parsers, so that a change to generate.py
cannot make the diagnose tests pass on inconsistent data.
"""

from __future__ import annotations

import pathlib
import re

import pytest

from tests.conftest import AWS, DELL, HOSTS, KVM, TINY

TREES = [DELL, KVM, AWS, TINY]
NET = "sos_commands/networking"


def cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def snmp(root: pathlib.Path) -> dict[str, int]:
    v: dict[str, int] = {}
    for name in ("netstat", "snmp"):
        lines = (root / "proc/net" / name).read_text().splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            group = head.split(":")[0]
            v.update({f"{group}.{k}": int(x) for k, x in zip(head.split()[1:], vals.split()[1:])})
    return v


def ss_sockets(root: pathlib.Path) -> list[tuple[str, ...]]:
    """(netid, state, recv-q, send-q, local, skmem line) per inet socket of the ss recording."""
    lines = (root / NET / "ss_-peaonmi").read_text().splitlines()
    out = []
    for first, second in zip(lines, lines[1:]):
        f = first.split()
        if f[0] in ("tcp", "udp"):
            assert second.startswith("\t skmem:("), first
            out.append((f[0], f[1], f[2], f[3], f[4], second))
    return out


def drops(skmem: str) -> int:
    m = re.search(r",d(\d+)\)", skmem)
    assert m is not None
    return int(m.group(1))


@pytest.mark.parametrize("tree", TREES)
def test_per_cpu_files_follow_topology(tree: str) -> None:
    root = HOSTS / tree
    online = cpulist((root / "sys/devices/system/cpu/online").read_text())
    possible = cpulist((root / "sys/devices/system/cpu/possible").read_text())
    softnet = (root / "proc/net/softnet_stat").read_text().splitlines()
    # one line per online CPU, 13 columns, the CPU id in the last
    assert [int(line.split()[12], 16) for line in softnet] == online
    assert {len(line.split()) for line in softnet} == {13}
    header = (root / "proc/softirqs").read_text().splitlines()[0].split()
    assert header == [f"CPU{c}" for c in possible]
    stat = root / "proc/net/stat/nf_conntrack"
    if stat.exists():
        rows = stat.read_text().splitlines()
        assert len(rows) == 1 + len(possible)
        count = int((root / "proc/sys/net/netfilter/nf_conntrack_count").read_text())
        assert {int(r.split()[0], 16) for r in rows[1:]} == {count}
    uptime, idle = map(float, (root / "proc/uptime").read_text().split())
    assert 0 < idle < uptime * len(online)


@pytest.mark.parametrize("tree", TREES)
def test_recorded_commands(tree: str) -> None:
    root = HOSTS / tree
    comm = {p.name: (p / "comm").read_text().strip() for p in (root / "proc").glob("[0-9]*")}
    for name, pid in re.findall(
        r'\("([^"]+)",pid=(\d+),', (root / NET / "ss_-peaonmi").read_text()
    ):
        assert comm.get(pid) == name[:15], (name, pid)  # every process in ss exists
    # tc: an mq root's statistics are the sums of its children's
    tc = (root / NET / "tc_-s_qdisc_show").read_text()
    blocks = re.findall(
        r"qdisc (\S+) 0: dev (\S+) (root|parent \S+).*?\n Sent (\d+) bytes (\d+) "
        r"pkt \(dropped (\d+)",
        tc,
    )
    devs = {b[1] for b in blocks}
    for dev in devs:
        mine = [b for b in blocks if b[1] == dev]
        if mine[0][0] == "mq":
            for col in (3, 4, 5):
                assert int(mine[0][col]) == sum(int(b[col]) for b in mine[1:]), (dev, col)
    ifaces = {p.name for p in (root / "sys/class/net").iterdir() if p.is_symlink()}
    assert devs == ifaces


def test_r750_story() -> None:
    root = HOSTS / DELL
    v = snmp(root)
    socks = ss_sockets(root)
    listen = [s for s in socks if s[1] == "LISTEN"]
    # every ListenOverflow was a drop on some listener (sk_drops), here all on nginx :80
    assert (
        v["TcpExt.ListenOverflows"] == v["TcpExt.ListenDrops"] == sum(drops(s[5]) for s in listen)
    )
    (port80,) = [s for s in listen if s[4] == "0.0.0.0:80"]
    somaxconn = int((root / "proc/sys/net/core/somaxconn").read_text())
    assert (port80[2], port80[3]) == ("129", "128") and somaxconn > 128  # queue = backlog + 1
    assert drops(port80[5]) > 0
    tw = (root / "proc/net/sockstat").read_text().split("tw ")[1].split()[0]
    assert tw == (root / "proc/sys/net/ipv4/tcp_max_tw_buckets").read_text().strip()
    assert v["TcpExt.TCPTimeWaitOverflow"] > 0
    ct_max = int((root / "proc/sys/net/netfilter/nf_conntrack_max").read_text())
    assert int((root / "proc/sys/net/netfilter/nf_conntrack_count").read_text()) > 0.99 * ct_max
    assert v["Tcp.MaxConn"] == -1
    tc = (root / NET / "tc_-s_qdisc_show").read_text()
    dropping = re.findall(
        r"qdisc fq_codel 0: dev (\S+) parent (\S+).*\n Sent \d+ bytes \d+ pkt "
        r"\(dropped ([1-9]\d*)",
        tc,
    )
    assert dropping == [("ens1f0np0", ":6", "48377")]


def test_kvm_udp_story() -> None:
    root = HOSTS / KVM
    v = snmp(root)
    udp = [s for s in ss_sockets(root) if s[0] == "udp"]
    (syslog,) = [s for s in udp if s[4] == "0.0.0.0:514"]
    assert v["Udp.RcvbufErrors"] == drops(syslog[5]) == sum(drops(s[5]) for s in udp) > 0
    assert "rb8192," in syslog[5]
    assert v["Udp.InErrors"] >= v["Udp.RcvbufErrors"]


def test_quiet_hosts_have_no_loss_counters() -> None:
    loss = (
        "TcpExt.ListenOverflows",
        "TcpExt.ListenDrops",
        "TcpExt.TCPTimeWaitOverflow",
        "TcpExt.TCPBacklogDrop",
        "TcpExt.TCPReqQFullDrop",
        "TcpExt.PruneCalled",
        "TcpExt.IPReversePathFilter",
        "TcpExt.TCPAbortOnMemory",
    )
    for tree in (KVM, AWS, TINY):
        v = snmp(HOSTS / tree)
        assert [k for k in loss if v[k]] == [], tree
    for tree in (KVM, AWS):
        softnet = (HOSTS / tree / "proc/net/softnet_stat").read_text().split("\n")
        assert all(int(line.split()[1], 16) == 0 for line in softnet if line)
