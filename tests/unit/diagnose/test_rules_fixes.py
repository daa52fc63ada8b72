"""Fixes that work where lbtune runs (issue 9 items 10 and 11), on samples built directly:
per-socket state decides between a sysctl and the application, host-global sysctls seen
from a namespace are host fixes, gauges have no rate, rules read only what they declare."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import pytest

from lbtune.diagnose.context import Context, UndeclaredConfig
from lbtune.diagnose.finding import APPLICATION, HOST, PROFILE, Finding
from lbtune.diagnose.rules import RULES, run_rules
from lbtune.diagnose.rules.registry import Rule, sample_spec
from lbtune.host.net.sockdiag import TcpReceiver, UdpSocket
from lbtune.observe.model import Sample, SockStat
from lbtune.observe.window import Window
from lbtune.vocab import Level
from tests.unit.diagnose.test_rules import config, sample

RMEM = {"net.ipv4.tcp_rmem": "4096 131072 6291456"}


def run(before: Sample, after: Sample, netns: Optional[str] = None, **conf: Any) -> list[Finding]:
    after = dataclasses.replace(after, config=config(**conf))
    return run_rules(Context(window=Window(before, after), netns=netns))


def of(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


def receiver(port: int, rcvbuf: int, queued: int, drops: int, inode: int = 1) -> TcpReceiver:
    return TcpReceiver(4, "10.0.0.1", port, f"10.0.0.2:{40000 + inode}", "ESTAB",
                       unread=queued // 2, queued=queued, rcvbuf=rcvbuf, drops=drops,
                       inode=inode)  # fmt: skip


PRUNE0 = {"TcpExt.PruneCalled": 0, "TcpExt.RcvPruned": 0, "TcpExt.OfoPruned": 0}
PRUNE1 = {"TcpExt.PruneCalled": 5, "TcpExt.RcvPruned": 3, "TcpExt.OfoPruned": 0}


def test_prune_on_sockets_with_so_rcvbuf_blames_the_application() -> None:
    """rcvbuf 4608 < tcp_rmem's default 131072: SO_RCVBUF was set, tcp_rmem cannot help."""
    a = sample(0, snmp=PRUNE0, tcp_receivers=(receiver(8443, 4608, 4000, 1, 1),))
    b = sample(2, snmp=PRUNE1, tcp_receivers=(
        receiver(8443, 4608, 6000, 4, 1), receiver(8443, 4608, 5000, 2, 2)))  # fmt: skip
    found = of(run(a, b, **RMEM), "rcvbuf-prune")
    assert [f.object for f in found] == ["tcp 10.0.0.1:8443"]
    f = found[0]
    # socket 1 dropped 3 in the window, socket 2 (new under pressure) all of its 2
    assert f.count == 5 and f.unit == "segments" and f.level is Level.FAIL
    assert "2 sockets of tcp 10.0.0.1:8443" in f.cause and "tcp_rmem does not apply" in f.cause
    assert {x.scope for x in f.fixes} == {APPLICATION}
    assert f.fixes[0].current == "4608" and "SO_RCVBUF" in f.fixes[0].knob
    assert not any("tcp_rmem" in x.knob for x in f.fixes)


def test_prune_on_autotuned_sockets_proposes_tcp_rmem() -> None:
    a = sample(0, snmp=PRUNE0, tcp_receivers=())
    b = sample(2, snmp=PRUNE1, tcp_receivers=(receiver(443, 6291456, 6300000, 3),))
    f = of(run(a, b, **RMEM), "rcvbuf-prune")
    assert [x.object for x in f] == ["tcp sockets"]
    fix = f[0].fixes[0]
    assert (fix.knob, fix.scope) == ("sysctl net.ipv4.tcp_rmem", PROFILE)
    assert fix.desired == "4096 131072 16777216" and "10.0.0.1:443" in f[0].cause


def test_prune_without_socket_data_says_so() -> None:
    f = of(run(sample(0, snmp=PRUNE0), sample(2, snmp=PRUNE1), **RMEM), "rcvbuf-prune")
    assert [x.object for x in f] == ["tcp sockets"]
    assert "Per-socket buffers were not read" in f[0].cause


def test_both_kinds_of_sockets_give_both_findings() -> None:
    recv = (receiver(8443, 4608, 6000, 4, 1), receiver(443, 6291456, 6300000, 3, 2))
    found = of(run(sample(0, snmp=PRUNE0), sample(2, snmp=PRUNE1, tcp_receivers=recv), **RMEM),
               "rcvbuf-prune")  # fmt: skip
    assert sorted(f.object for f in found) == ["tcp 10.0.0.1:8443", "tcp sockets"]


def test_socket_backlog_drop_on_pinned_socket() -> None:
    a = sample(0, snmp={"TcpExt.TCPBacklogDrop": 0})
    b = sample(1, snmp={"TcpExt.TCPBacklogDrop": 9},
               tcp_receivers=(receiver(9000, 2304, 2304, 9),))  # fmt: skip
    f = of(run(a, b, **RMEM), "socket-backlog-drop")
    assert [x.object for x in f] == ["tcp 10.0.0.1:9000"]
    assert f[0].fixes[0].scope == APPLICATION and f[0].count == 9


def test_udp_socket_with_rmem_default_gets_the_sysctl() -> None:
    u0 = UdpSocket(4, "0.0.0.0", 53, queue=0, rcvbuf=212992, drops=0, inode=3)
    u1 = dataclasses.replace(u0, queue=212992, drops=40)
    a = sample(0, snmp={"Udp.RcvbufErrors": 0}, udp=(u0,))
    b = sample(2, snmp={"Udp.RcvbufErrors": 40}, udp=(u1,))
    f = of(run(a, b, **{"net.core.rmem_default": "212992"}), "udp-rcvbuf-errors")[0]
    assert [(x.knob, x.scope) for x in f.fixes] == [("sysctl net.core.rmem_default", PROFILE)]
    assert "did not set SO_RCVBUF" in f.cause and f.unit == "datagrams"


def test_host_global_sysctl_from_a_namespace_is_a_host_fix() -> None:
    """A namespace does not show net.core.netdev_max_backlog: the fix is the host's, its
    current value unknown (not the kernel default presented as fact)."""
    conf = config()
    del conf["/proc/sys/net/core/netdev_max_backlog"]
    from lbtune.observe.model import SoftnetCpu

    a = sample(0, softnet=(SoftnetCpu(0, 10, 0, 0, 0, 0),))
    b = sample(1, softnet=(SoftnetCpu(0, 900, 33, 0, 0, 0),), config=conf)
    ctx = Context(window=Window(a, b), netns="lb1")
    f = of(run_rules(ctx), "cpu-backlog-drop")[0]
    fix = f.fixes[0]
    assert fix.scope == HOST and fix.current is None and "set it on the host" in fix.note
    assert "netdev_max_backlog = unknown here" in f.cause
    # the same window outside a namespace: an ordinary profile fix
    f = of(run_rules(Context(window=Window(a, b))), "cpu-backlog-drop")[0]
    assert f.fixes[0].scope == PROFILE


def test_read_only_sysctl_in_a_namespace_is_a_host_fix() -> None:
    u1 = UdpSocket(4, "0.0.0.0", 53, queue=0, rcvbuf=212992, drops=40, inode=3)
    a = sample(0, snmp={"Udp.RcvbufErrors": 0}, udp=(dataclasses.replace(u1, drops=0),))
    b = sample(2, snmp={"Udp.RcvbufErrors": 40}, udp=(u1,),
               config=config(**{"net.core.rmem_default": "212992"}),
               config_readonly=frozenset({"/proc/sys/net/core/rmem_default"}))  # fmt: skip
    f = of(run_rules(Context(window=Window(a, b), netns="lb1")), "udp-rcvbuf-errors")[0]
    assert f.fixes[0].scope == HOST and f.fixes[0].current == "212992"


@pytest.mark.parametrize(
    ("kw", "rule"),
    [
        ({"sockstat": SockStat(0, 27000, 0, 1000, 27000, 1, 0, 0), "ephemeral_in_use": 27500},
         "ephemeral-ports"),
        ({"sockstat": SockStat(0, 10, 60000, 0, 10, 1, 0, 0)}, "orphan-overflow"),
        ({"sockstat": SockStat(0, 10, 0, 0, 10, 7000, 0, 0)}, "tcp-memory-pressure"),
    ],
)  # fmt: skip
def test_snapshot_counts_have_no_rate(kw: dict[str, Any], rule: str) -> None:
    f = of(run(sample(0), sample(2, **kw)), rule)
    assert len(f) == 1 and f[0].gauge and f[0].rate is None, f


def test_exhausted_when_every_port_is_held() -> None:
    st = SockStat(0, 30000, 0, 0, 30000, 1, 0, 0)
    f = of(run(sample(0), sample(1, sockstat=st, ephemeral_in_use=28232)), "ephemeral-ports")[0]
    assert f.title == "Ephemeral ports exhausted" and "fail with EADDRNOTAVAIL now" in f.cause
    f = of(run(sample(0), sample(1, sockstat=st, ephemeral_in_use=27500)), "ephemeral-ports")[0]
    assert f.title == "Ephemeral ports nearly exhausted"


def test_listen_counts_say_they_count_packets() -> None:
    from lbtune.host.net.sockdiag import ListenSocket

    ls0 = ListenSocket(4, "0.0.0.0", 8080, queue=3, backlog=2, drops=0, inode=7)
    a = sample(0, snmp={"TcpExt.ListenOverflows": 0}, listen=(ls0,))
    b = sample(1, snmp={"TcpExt.ListenOverflows": 9},
               listen=(dataclasses.replace(ls0, drops=9),))  # fmt: skip
    f = of(run(a, b), "accept-queue-overflow")[0]
    assert f.unit == "handshake packets" and "not a number of connections" in f.cause
    assert "connections dropped" not in f.cause


def test_a_rule_reading_an_undeclared_value_is_caught() -> None:
    def sneaky(ctx: Context) -> list[Finding]:
        ctx.sysctl("net.core.somaxconn")
        return []

    rule = Rule("sneaky", "reads what it did not declare", sneaky)
    with pytest.raises(UndeclaredConfig):
        run_rules(Context(window=Window(None, sample(0))), [rule])
    declared = dataclasses.replace(rule, sysctls=("net.core.somaxconn",))
    assert run_rules(Context(window=Window(None, sample(0))), [declared]) == []


def test_every_rule_declares_what_the_sampler_reads() -> None:
    spec = sample_spec(RULES)
    assert "/proc/sys/net/ipv4/conf/*/rp_filter" in spec.config
    assert "/sys/class/net/*/tx_queue_len" in spec.config
    assert spec.receivers
    assert all(p.startswith(("/proc/sys/", "/sys/")) for p in spec.config)


def test_socket_backlog_drop_on_autotuned_sockets_raises_the_default_too() -> None:
    """The backlog limit is the socket's buffer as it is (it starts at tcp_rmem's default and
    grows only as the application reads): raising the maximum alone left the drops as they
    were in tests/netns/test_fix_loop.py's fault, so the default is raised as well."""
    a = sample(0, snmp={"TcpExt.TCPBacklogDrop": 0})
    b = sample(1, snmp={"TcpExt.TCPBacklogDrop": 9},
               tcp_receivers=(receiver(9000, 131072, 131072, 9),))  # fmt: skip
    (f,) = of(run(a, b, **RMEM), "socket-backlog-drop")
    assert f.object == "tcp sockets"
    (fix,) = f.fixes
    assert (fix.knob, fix.scope) == ("sysctl net.ipv4.tcp_rmem", PROFILE)
    assert fix.desired == "4096 262144 16777216" and "restart the application" in fix.note
    small = of(run(a, b, **{"net.ipv4.tcp_rmem": "4096 4096 4096"}), "socket-backlog-drop")
    assert small[0].fixes[0].desired == "4096 131072 16777216"
    # rcvbuf-prune keeps the default: its buffer grows within the maximum (tcp_clamp_window)
    p = of(run(sample(0, snmp=PRUNE0), sample(2, snmp=PRUNE1), **RMEM), "rcvbuf-prune")
    assert p[0].fixes[0].desired == "4096 131072 16777216"


def test_prune_called_alone_is_no_finding_collapse_is() -> None:
    """PruneCalled counts each time the kernel grows an autotuned buffer (tcp_clamp_window);
    only collapsed or pruned data is a finding."""
    grown = {"TcpExt.PruneCalled": 22, "TcpExt.TCPRcvCollapsed": 0, "TcpExt.RcvPruned": 0}
    zero = dict.fromkeys(grown, 0)
    assert of(run(sample(0, snmp=zero), sample(2, snmp=grown), **RMEM), "rcvbuf-prune") == []
    collapsed = {**grown, "TcpExt.PruneCalled": 2, "TcpExt.TCPRcvCollapsed": 18}
    (f,) = of(run(sample(0, snmp=zero), sample(2, snmp=collapsed), **RMEM), "rcvbuf-prune")
    assert (f.level, f.count, f.unit) == (Level.WARN, 18, "collapsed segments")
