"""Each diagnose rule fires on its counter, names the object and the fix, and stays quiet
when nothing moved. Samples are built directly, their sysctls (`Sample.config`) included:
rules read nothing but the samples."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Optional

import pytest

from lbtune.diagnose.context import Context, UndeclaredConfig
from lbtune.diagnose.finding import Finding
from lbtune.diagnose.rules import RULES, run_rules
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.host.net.qdisc import QdiscStats
from lbtune.host.net.sockdiag import ListenSocket, UdpSocket
from lbtune.observe.model import (
    ConntrackStats,
    NicCounters,
    QueueCounters,
    Sample,
    SnmpCounters,
    SockStat,
    Softirqs,
    SoftnetCpu,
)
from lbtune.observe.window import Window, counter_delta
from lbtune.vocab import Level

DOCS = pathlib.Path(__file__).resolve().parents[3] / "docs" / "diagnose.md"

SYSCTLS = {
    "net.core.somaxconn": "4096",
    "net.core.netdev_max_backlog": "1000",
    "net.core.netdev_budget": "300",
    "net.core.netdev_budget_usecs": "2000",
    "net.core.rmem_max": "212992",
    "net.ipv4.tcp_syncookies": "0",
    "net.ipv4.tcp_max_syn_backlog": "512",
    "net.ipv4.tcp_max_tw_buckets": "4",
    "net.ipv4.tcp_max_orphans": "65536",
    "net.ipv4.tcp_mem": "4000\t6000\t8000",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456",
    "net.ipv4.ip_local_port_range": "32768\t60999",
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.eth0.rp_filter": "1",
    "net.ipv4.conf.lo.rp_filter": "0",
    "net.netfilter.nf_conntrack_max": "1000",
}


def config(**sysctls: str) -> dict[str, str]:
    """Sample.config: SYSCTLS with `sysctls` (dotted keys) over them, as kernel paths."""
    values = {**SYSCTLS, **sysctls}
    out = {sysctl_path(k): " ".join(v.split()) for k, v in values.items()}
    out["/sys/class/net/v0/tx_queue_len"] = "1000"
    return out


@pytest.fixture
def conf() -> dict[str, str]:
    """The configuration every sample carries unless a test gives its own."""
    return config()


def sample(t: float = 0.0, **kw: Any) -> Sample:
    base: dict[str, Any] = dict(
        monotonic=t,
        wallclock=t,
        uptime=1000.0 + t,
        snmp=SnmpCounters({}),
        softnet=(),
        softirqs=None,
        interrupts={},
        nics={},
        listen=(),
        udp=(),
        sockstat=None,
        conntrack=None,
        qdiscs=(),
        ipvs=None,
        missing={},
        config=config(),
    )
    base.update(kw)
    if "snmp" in kw and isinstance(kw["snmp"], dict):
        base["snmp"] = SnmpCounters(kw["snmp"])
    return Sample(**base)


def run(conf: dict[str, str], before: Optional[Sample], after: Sample, **kw: Any) -> list[Finding]:
    """Run every rule on the window; `conf` (the configuration) replaces the later sample's."""
    after = dataclasses.replace(after, config=conf)
    return run_rules(Context(window=Window(before, after), **kw))


def one(findings: list[Finding], rule: str) -> Finding:
    hits = [f for f in findings if f.rule == rule]
    assert len(hits) == 1, [f.rule for f in findings]
    return hits[0]


def test_counter_delta_handles_reset() -> None:
    assert counter_delta(5, 9) == 4
    assert counter_delta(None, 9) == 9
    assert counter_delta(9, 3) == 3  # counter reset: counts from zero
    assert counter_delta(4, None) == 0


def test_quiet_when_nothing_moved(conf: dict[str, str]) -> None:
    snmp = {"TcpExt.ListenOverflows": 50, "Udp.RcvbufErrors": 7, "TcpExt.TCPTimeWaitOverflow": 3}
    sn = (SoftnetCpu(0, 100, 5, 5, 0, 0),)
    a = sample(0, snmp=snmp, softnet=sn)
    b = sample(2, snmp=snmp, softnet=sn)
    assert run(conf, a, b) == []


def test_accept_queue_overflow_names_port_and_app_backlog(conf: dict[str, str]) -> None:
    ls0 = ListenSocket(4, "0.0.0.0", 8080, queue=3, backlog=2, drops=0, inode=7)
    ls1 = dataclasses.replace(ls0, drops=17)
    other = ListenSocket(4, "0.0.0.0", 22, queue=0, backlog=128, drops=0, inode=8)
    a = sample(0, snmp={"TcpExt.ListenOverflows": 0, "TcpExt.ListenDrops": 0}, listen=(ls0, other))
    b = sample(
        2, snmp={"TcpExt.ListenOverflows": 17, "TcpExt.ListenDrops": 17}, listen=(ls1, other)
    )
    f = one(run(conf, a, b), "accept-queue-overflow")
    assert f.object == "tcp 0.0.0.0:8080"
    assert f.count == 17 and f.rate == 8.5
    assert f.level is Level.FAIL
    fix = f.fixes[0]  # limited by the app (2 < somaxconn 4096): the app's backlog is the fix
    assert "listen() backlog" in fix.knob and fix.current == "2" and int(fix.desired or 0) >= 1024


def test_accept_queue_overflow_limited_by_somaxconn(conf: dict[str, str]) -> None:
    ls0 = ListenSocket(6, "::", 443, queue=4096, backlog=4096, drops=10, inode=1)
    ls1 = dataclasses.replace(ls0, drops=110)
    a = sample(0, snmp={"TcpExt.ListenOverflows": 0}, listen=(ls0,))
    b = sample(1, snmp={"TcpExt.ListenOverflows": 100}, listen=(ls1,))
    f = one(run(conf, a, b), "accept-queue-overflow")
    assert f.object == "tcp [::]:443" and f.count == 100
    assert f.fixes[0].knob == "sysctl net.core.somaxconn"
    assert f.fixes[0].current == "4096" and int(f.fixes[0].desired or 0) > 4096
    assert f.fixes[0].key == "sysctl.net.core.somaxconn"
    assert f.fixes[0].profile_lines == (
        'sysctl."net.core.somaxconn" = { value = 16384, mode = "raise", reason = "Accept queue '
        "overflow on tcp port 443: 100 handshake packets in 1.0 s (lbtune diagnose "
        'accept-queue-overflow)" }',
    )


def test_syn_queue_full_without_cookies(conf: dict[str, str]) -> None:
    a = sample(0, snmp={"TcpExt.TCPReqQFullDrop": 0})
    b = sample(2, snmp={"TcpExt.TCPReqQFullDrop": 40})
    f = one(run(conf, a, b), "syn-queue-full")
    knobs = {x.knob: x for x in f.fixes}
    assert knobs["sysctl net.ipv4.tcp_syncookies"].desired == "1"
    assert knobs["sysctl net.ipv4.tcp_syncookies"].current == "0"
    assert knobs["sysctl net.ipv4.tcp_max_syn_backlog"].current == "512"
    assert f.count == 40


def test_syn_cookies_is_a_warning(conf: dict[str, str]) -> None:
    a = sample(0, snmp={"TcpExt.TCPReqQFullDoCookies": 0, "TcpExt.SyncookiesSent": 0})
    b = sample(2, snmp={"TcpExt.TCPReqQFullDoCookies": 9, "TcpExt.SyncookiesSent": 9})
    f = one(run(conf, a, b), "syn-cookies")
    assert f.level is Level.WARN and f.count == 9


def test_udp_rcvbuf_errors_per_socket(conf: dict[str, str]) -> None:
    u0 = UdpSocket(4, "127.0.0.1", 5140, queue=0, rcvbuf=4608, drops=0, inode=3)
    u1 = dataclasses.replace(u0, queue=4608, drops=250)
    a = sample(0, snmp={"Udp.RcvbufErrors": 0}, udp=(u0,))
    b = sample(2, snmp={"Udp.RcvbufErrors": 250}, udp=(u1,))
    f = one(run(conf, a, b), "udp-rcvbuf-errors")
    assert f.object == "udp 127.0.0.1:5140" and f.count == 250
    assert f.fixes[0].current == "4608"


def test_udp_rcvbuf_errors_without_socket(conf: dict[str, str]) -> None:
    a = sample(0, snmp={"Udp.RcvbufErrors": 0})
    b = sample(2, snmp={"Udp.RcvbufErrors": 5})
    f = one(run(conf, a, b), "udp-rcvbuf-errors")
    assert f.object == "udp" and f.fixes[0].knob == "sysctl net.core.rmem_max"


def test_softnet_drops_and_squeeze_use_cpu_ids(conf: dict[str, str]) -> None:
    a = sample(0, softnet=(SoftnetCpu(0, 10, 0, 0, 0, 0), SoftnetCpu(2, 10, 0, 0, 0, 0)))
    b = sample(1, softnet=(SoftnetCpu(0, 20, 0, 0, 0, 0), SoftnetCpu(2, 900, 33, 40, 0, 0)))
    found = run(conf, a, b)
    drop = one(found, "cpu-backlog-drop")
    assert drop.object == "cpu 2" and drop.count == 33
    assert drop.fixes[0].current == "1000" and int(drop.fixes[0].desired or 0) >= 4000
    sq = one(found, "time-squeeze")
    assert sq.object == "cpu 2" and sq.count == 40
    assert drop.sort_key < sq.sort_key  # critical before warning


def test_nic_per_queue_drops(conf: dict[str, str]) -> None:
    def nic(drops: int, pk: int) -> NicCounters:
        qs = (
            QueueCounters("rx", 0, packets=pk, drops=0),
            QueueCounters("rx", 1, packets=pk * 3, drops=drops),
        )
        return NicCounters("eth1", "virtio_net", {}, qs, {}, {})

    found = run(conf, sample(0, nics={"eth1": nic(0, 100)}), sample(2, nics={"eth1": nic(12, 200)}))
    f = one(found, "nic-rx-drop")
    assert f.object == "eth1 rx-queue 1" and f.count == 12
    assert "rx queue 1 carried 75%" in f.cause


def test_qdisc_drop_skips_aggregating_parent(conf: dict[str, str]) -> None:
    def q(kind: str, handle: str, parent: str, drops: int) -> QdiscStats:
        return QdiscStats("v0", kind, handle, parent, 10 * drops, 0, drops, drops, 0, 0, 0)

    a = sample(0, qdiscs=(q("mq", "0:", "root", 0), q("pfifo_fast", "0:", ":1", 0)))
    b = sample(2, qdiscs=(q("mq", "0:", "root", 9), q("pfifo_fast", "0:", ":1", 9)))
    f = one(run(conf, a, b), "qdisc-drop")
    assert f.object == "v0 qdisc pfifo_fast 0:" and f.count == 9
    assert f.fixes[0].knob == "txqueuelen v0" and f.fixes[0].current == "1000"


def test_pfifo_fast_under_a_shaper_is_not_resized_by_txqueuelen(conf: dict[str, str]) -> None:
    """txqueuelen resizes only the pfifo_fast a transmit queue holds (root, mq child): under
    a shaper's class it keeps the size it was created with, so the fix is to create it again."""

    def q(kind: str, handle: str, parent: str, drops: int) -> QdiscStats:
        return QdiscStats("v0", kind, handle, parent, 10 * drops, 0, drops, drops, 0, 0, 0)

    a = sample(0, qdiscs=(q("htb", "1:", "root", 0), q("pfifo_fast", "10:", "1:10", 0)))
    b = sample(2, qdiscs=(q("htb", "1:", "root", 0), q("pfifo_fast", "10:", "1:10", 9)))
    f = one(run(conf, a, b), "qdisc-drop")
    assert [x.scope for x in f.fixes] == ["manual"] and not f.fixes[0].settings
    assert "tc qdisc replace dev v0 parent 1:10 pfifo_fast" in (f.fixes[0].command or "")


def test_rp_filter_drop_names_strict_interface(conf: dict[str, str]) -> None:
    a = sample(0, snmp={"TcpExt.IPReversePathFilter": 0})
    b = sample(2, snmp={"TcpExt.IPReversePathFilter": 6})
    f = one(run(conf, a, b), "rp-filter-drop")
    assert f.object == "eth0"
    assert [(x.knob, x.current, x.desired) for x in f.fixes] == [
        ("sysctl net.ipv4.conf.eth0.rp_filter", "1", "2")
    ]


def test_conntrack_full(conf: dict[str, str]) -> None:
    def ct(count: int, drop: int) -> ConntrackStats:
        return ConntrackStats(count, 1000, {"drop": drop, "early_drop": 0}, ())

    f = one(
        run(conf, sample(0, conntrack=ct(990, 0)), sample(2, conntrack=ct(1000, 31))),
        "conntrack-full",
    )
    assert f.count == 31 and f.level is Level.FAIL
    assert f.fixes[0].current == "1000" and int(f.fixes[0].desired or 0) >= 2000


def test_conntrack_nearly_full_without_drops_is_warning(conf: dict[str, str]) -> None:
    ct = ConntrackStats(950, 1000, {"drop": 0, "early_drop": 0}, ())
    f = one(run(conf, sample(0, conntrack=ct), sample(2, conntrack=ct)), "conntrack-full")
    assert f.level is Level.WARN


def test_timewait_overflow_fix_uses_current_cap(conf: dict[str, str]) -> None:
    st = SockStat(10, 5, 0, 4, 5, 1, 0, 0)
    a = sample(0, snmp={"TcpExt.TCPTimeWaitOverflow": 0}, sockstat=st)
    b = sample(2, snmp={"TcpExt.TCPTimeWaitOverflow": 20}, sockstat=st)
    f = one(run(conf, a, b), "timewait-overflow")
    assert f.fixes[0].current == "4" and int(f.fixes[0].desired or 0) >= 600


def test_irq_imbalance(conf: dict[str, str]) -> None:
    def si(counts: dict[int, int]) -> Softirqs:
        return Softirqs((0, 1, 2, 3), {"NET_RX": counts})

    a = sample(0, softirqs=si({0: 0, 1: 0, 2: 0, 3: 0}))
    b = sample(2, softirqs=si({0: 9000, 1: 400, 2: 300, 3: 300}))
    f = one(run(conf, a, b), "irq-imbalance")
    assert f.object == "cpu 0" and f.count == 9000


def _two_node_vm(nic_node: int) -> tuple[Any, dict[str, Any]]:
    """The VM lab's shape: CPUs 0-1 on node 0, 2-3 on node 1; eth0's 4 rx queue IRQs 30-33."""
    from lbtune.host.kernel.cmdline import KernelCmdline
    from lbtune.host.kernel.cputopology import Cpu, CpuTopology, NumaNode
    from lbtune.host.net.nic import Nic, QueueIrq

    topo = CpuTopology(
        cpus=tuple(Cpu(i, True, i // 2, i // 2, i % 2, frozenset({i}), False) for i in range(4)),
        nodes=(NumaNode(0, frozenset({0, 1})), NumaNode(1, frozenset({2, 3}))),
        possible=frozenset(range(4)), isolated=frozenset(), nohz_full=frozenset(),
        cmdline=KernelCmdline.parse(""), default_irq_affinity=None,
    )  # fmt: skip
    irqs = tuple(QueueIrq(30 + q, "rx", q, f"virtio3-input.{q}", "virtio", None, None, None,
                          None, 0) for q in range(4))  # fmt: skip
    nic = Nic("eth0", 2, "physical", "virtio_net", "0000:41:01.0", nic_node, None, None, 1500,
              "up", None, 1000, (), (), None, None, irqs, ())  # fmt: skip
    # a single-queue NIC without a node (the VM's e1000e): a few interrupts of its own
    mgmt = dataclasses.replace(nic, name="eth1", numa_node=-1, irqs=(
        QueueIrq(40, "rx", 0, "eth1", "e1000e", None, None, None, None, 0),))  # fmt: skip
    return topo, {"eth0": nic, "eth1": mgmt}


def _spread(conf: dict[str, str], nic_node: int, net_rx: dict[int, int]) -> list[Finding]:
    """NET_RX as given, each CPU's share of it from eth0's queue IRQs that ran there; eth1
    fires 3 interrupts on every CPU (its reach, all 4 CPUs, must not decide eth0's)."""
    from lbtune.host.kernel.interrupts import CpuCounts, IrqLine

    topo, nics = _two_node_vm(nic_node)
    cpus = (0, 1, 2, 3)

    def at(t: float, k: int) -> Sample:
        irq = {30 + q: IrqLine(30 + q, CpuCounts.of({c: k * net_rx.get(c, 0) // 4 for c in cpus}),
                               "PCI-MSI", (f"virtio3-input.{q}",)) for q in range(4)}  # fmt: skip
        irq[40] = IrqLine(40, CpuCounts.of({c: k * 3 for c in cpus}), "PCI-MSI", ("eth1",))
        rx = Softirqs(cpus, {"NET_RX": {c: k * net_rx.get(c, 0) for c in cpus}})
        return sample(t, softirqs=rx, interrupts=irq)

    return [f for f in run(conf, at(0, 0), at(2, 1), topology=topo, nics=nics)
            if f.rule == "irq-imbalance"]  # fmt: skip


def test_irq_imbalance_is_judged_against_the_cpus_the_fix_can_use(conf: dict[str, str]) -> None:
    # eth0 on node 1 (CPUs 2-3): the fix spreads its queues over those two, 50 % each
    assert _spread(conf, 1, {2: 5000, 3: 5000}) == []
    assert _spread(conf, 1, {2: 7000, 3: 3000}) == []  # 70 %: under 1.5 x the even 50 %
    (f,) = _spread(conf, 1, {2: 8000, 3: 2000})  # 80 %: one of the two does most of it
    assert f.object == "cpu 2"
    (f,) = _spread(conf, 1, {1: 9900, 2: 50, 3: 50})  # the fault: all on CPU 1 (node 0)
    assert f.object == "cpu 1"
    # without a node every CPU is local: 4 CPUs, even is 25 %, so 50 % decides
    (f,) = _spread(conf, -1, {2: 5000, 3: 5000})
    assert f.object in ("cpu 2", "cpu 3")
    assert _spread(conf, -1, {0: 2500, 1: 2500, 2: 2500, 3: 2500}) == []


def _placement(conf: dict[str, str], effective: Optional[frozenset[int]],
               cumulative: bool = False) -> list[Finding]:
    """eth0 on node 1 (CPUs 2-3); its queue IRQs fired only on CPU 1 (node 0) in the window,
    and their effective affinity is now `effective`."""
    from lbtune.host.kernel.interrupts import CpuCounts, IrqLine

    topo, nics = _two_node_vm(1)
    eth0 = nics["eth0"]
    nics["eth0"] = dataclasses.replace(eth0, irqs=tuple(
        dataclasses.replace(q, affinity=effective, effective=effective) for q in eth0.irqs))

    def at(t: float, k: int) -> Sample:
        irq = {30 + q: IrqLine(30 + q, CpuCounts.of({0: 0, 1: k * 50, 2: 0, 3: 0}), "PCI-MSI",
                               (f"virtio3-input.{q}",)) for q in range(4)}  # fmt: skip
        return sample(t, interrupts=irq)

    before = None if cumulative else at(0, 0)
    return [f for f in run(conf, before, at(2, 1), topology=topo, nics=nics)
            if f.rule == "irq-placement"]  # fmt: skip


def test_irq_placement_finds_remote_irqs_and_skips_ones_already_placed(
    conf: dict[str, str],
) -> None:
    # misplaced now: a finding, and its fix moves them to the NIC's node
    (f,) = _placement(conf, frozenset({1}))
    assert "remote NUMA node" in f.title and f.count == 200
    (fx,) = f.fixes
    assert (fx.current, fx.desired) == ("1", "2-3")
    # placed now where the fix would put them, in a live window as since boot: the counts
    # came before the move, and a finding without a fix is not one
    assert _placement(conf, frozenset({2})) == []
    assert _placement(conf, frozenset({2, 3}), cumulative=True) == []
    # partly placed: still misplaced, so still found
    (f,) = _placement(conf, frozenset({1, 2}))
    assert f.fixes[0].current == "1-2"


def test_cumulative_window_uses_uptime(conf: dict[str, str]) -> None:
    b = sample(0, snmp={"TcpExt.TCPReqQFullDrop": 2000}, uptime=1000.0)
    f = one(run(conf, None, b), "syn-queue-full")
    assert f.count == 2000 and f.rate == 2.0 and "since boot" in f.cause


def test_every_rule_is_documented() -> None:
    text = DOCS.read_text()
    for r in RULES:
        assert f"`{r.id}`" in text, r.id


def test_rare_time_squeeze_is_noise(conf: dict[str, str]) -> None:
    a = sample(0, softnet=(SoftnetCpu(0, 0, 0, 0, 0, 0),))
    few = sample(1, softnet=(SoftnetCpu(0, 1000, 0, 9, 0, 0),))  # fewer than 10
    rare = sample(1, softnet=(SoftnetCpu(0, 10_000_000, 0, 50, 0, 0),))  # < 1 in 10,000
    assert run(conf, a, few) == [] and run(conf, a, rare) == []


def test_ephemeral_ports_counted_exactly(conf: dict[str, str]) -> None:
    st = SockStat(0, 27000, 0, 1000, 27000, 1, 0, 0)
    b = sample(1, sockstat=st, ephemeral_in_use=27500)  # range 32768-60999 = 28232 ports
    f = one(run(conf, sample(0, sockstat=st), b), "ephemeral-ports")
    assert f.level is Level.FAIL and f.count == 27500
    # one range everywhere: the shipped web/lb-proxy profiles' 10000-65535, and how to go lower
    assert f.fixes[0].desired == "10000 65535" and f.fixes[0].current == "32768 60999"
    assert "ip_local_reserved_ports" in f.fixes[0].note
    assert f.unit == "ports in use" and "busiest pair" in f.cause


def test_ephemeral_ports_estimate_never_claims_more_ports_than_exist(
    conf: dict[str, str],
) -> None:
    """262,144 TIME_WAIT sockets against a range of 28,232 ports: they are sockets, spread
    over several destinations, not "262,144 ports in use"."""
    st = SockStat(0, 10, 0, 262144, 10, 1, 0, 0)
    f = one(run(conf, None, sample(0, sockstat=st)), "ephemeral-ports")
    assert f.count == 262144 and f.unit == "sockets in TIME_WAIT", (f.count, f.unit)
    assert "several destinations" in f.cause and "per (source, destination) pair" in f.cause


def test_busiest_pair_counts_ports_per_destination() -> None:
    from lbtune.host.net.sockdiag import busiest_pair

    pairs = [("10.0.0.1", "10.0.0.9:80")] * 3 + [("10.0.0.1", "10.0.0.8:80")] * 2
    assert busiest_pair(pairs) == 3
    assert busiest_pair([]) == 0


def test_ephemeral_ports_estimate_is_only_a_warning(conf: dict[str, str]) -> None:
    st = SockStat(0, 10, 0, 28000, 10, 1, 0, 0)
    f = one(run(conf, None, sample(0, sockstat=st)), "ephemeral-ports")
    assert f.level is Level.WARN and "estimate" in f.cause


def test_no_op_fixes_are_dropped() -> None:
    conf = config(**{"net.ipv4.tcp_syncookies": "1", "net.ipv4.tcp_max_syn_backlog": "8192"})
    a = sample(0, snmp={"TcpExt.TCPReqQFullDrop": 0})
    b = sample(1, snmp={"TcpExt.TCPReqQFullDrop": 3})
    f = one(run(conf, a, b), "syn-queue-full")
    assert all(x.desired != x.current for x in f.fixes)
    assert "sysctl net.ipv4.tcp_syncookies" not in {x.knob for x in f.fixes}


@pytest.mark.parametrize(
    ("key", "rule"),
    [("Udp.NoPorts", "udp-no-port"), ("Tcp.OutRsts", "tcp-no-listener"),
     ("Ip.InAddrErrors", "addr-not-local")],
)  # fmt: skip
def test_closed_port_levels_follow_the_rate(conf: dict[str, str], key: str, rule: str) -> None:
    """Over 10 s: 5/s is scanner noise (no finding), 50/s a warning, 200/s a failure."""
    a = sample(0, snmp={key: 0})
    levels = []
    for n in (50, 500, 2000):
        found = [f for f in run(conf, a, sample(10, snmp={key: n})) if f.rule == rule]
        levels.append(found[0].level if found else None)
    assert levels == [None, Level.WARN, Level.FAIL]


def test_resets_of_aborted_connections_are_not_closed_ports(conf: dict[str, str]) -> None:
    a = sample(0, snmp={"Tcp.OutRsts": 0, "TcpExt.TCPAbortOnClose": 0})
    b = sample(10, snmp={"Tcp.OutRsts": 900, "TcpExt.TCPAbortOnClose": 880})
    assert [f for f in run(conf, a, b) if f.rule == "tcp-no-listener"] == []


def test_irq_placement_counts_only_cpus_an_irq_fired_on(conf: dict[str, str]) -> None:
    """Since boot (one capture), counts as read: IRQs that never fired are no evidence, a
    CPU is one an IRQ ran on when its count is above 0 (a malformed negative one is not)."""
    from lbtune.host.kernel.interrupts import CpuCounts, IrqLine

    topo, nics = _two_node_vm(1)
    eth0 = nics["eth0"]
    nics["eth0"] = dataclasses.replace(eth0, irqs=tuple(
        dataclasses.replace(q, affinity=frozenset({1}), effective=frozenset({1}))
        for q in eth0.irqs))  # fmt: skip
    rows = {30: {0: -5, 1: 50, 2: 0, 3: 0}, 31: {0: 0, 1: 0, 2: 0, 3: 0},
            32: {0: 7, 1: 0, 2: 0, 3: 0}, 33: {0: -1, 1: 0, 2: 0, 3: 0}}  # fmt: skip
    irq = {i: IrqLine(i, CpuCounts.of(c), "PCI-MSI", (f"virtio3-input.{i - 30}",))
           for i, c in rows.items()}  # fmt: skip
    (f,) = [f for f in run(conf, None, sample(2, interrupts=irq), topology=topo, nics=nics)
            if f.rule == "irq-placement"]  # fmt: skip
    assert f.count == 45 + 7 and "IRQs 30 (queue 0), 32 (queue 2) " in f.cause
    assert "CPU(s) 0-1 " in f.cause


def test_a_rules_context_is_the_context_with_its_declared_paths() -> None:
    ctx = Context(window=Window(sample(0.0), sample(1.0)), netns="ns1")
    declared = frozenset({sysctl_path("net.core.somaxconn")})
    ruled = ctx.allowing(declared)
    assert ruled == dataclasses.replace(ctx, allowed=declared)
    assert ruled.allowed == declared and ctx.allowed is None  # the original is untouched
    assert ruled.sysctl("net.core.somaxconn") == ctx.sysctl("net.core.somaxconn")
    with pytest.raises(UndeclaredConfig, match="does not declare it"):
        ruled.sysctl("net.core.rmem_max")
