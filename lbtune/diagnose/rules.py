"""The rules: kernel counter movements turned into findings with their cause and fix.

Each rule reads a `Context` (a window of samples plus the host's sysctls and topology) and
yields findings. A rule fires only when something was lost or a limit was hit inside the
window, so an idle host gives no findings. Every rule id is documented in docs/diagnose.md
with its counters, meaning and fix (a test checks that), and every fix names the knob, its
current value, the value needed and the `lbtune apply` profile key that sets it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Evidence, Finding, Fix, Severity, rank
from lbtune.observe.nicmaps import OTHER, POLICER, PORT_BUFFER, driver_map

NETSTAT = "/proc/net/netstat"
SNMP = "/proc/net/snmp"
SOFTNET = "/proc/net/softnet_stat"

RuleFn = Callable[[Context], Iterable[Finding]]


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    fn: RuleFn


RULES: list[Rule] = []


def rule(rule_id: str, summary: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append(Rule(rule_id, summary, fn))
        return fn

    return register


def run_rules(ctx: Context, only: Optional[Iterable[str]] = None) -> list[Finding]:
    """All findings of all (or the named) rules, most severe and biggest first."""
    wanted = set(only) if only else None
    out: list[Finding] = []
    for r in RULES:
        if wanted is None or r.id in wanted:
            out.extend(r.fn(ctx))
    return rank(out)


# ---------------------------------------------------------------------------- helpers


def _fmt_rate(ctx: Context, value: int) -> Optional[float]:
    r = ctx.rate(value)
    return None if r is None else round(r, 3)


def snmp_ev(ctx: Context, key: str) -> Evidence:
    value = ctx.window.snmp(key)
    source = NETSTAT if key.split(".")[0] in ("TcpExt", "IpExt", "MPTcpExt") else SNMP
    return Evidence(key, value, _fmt_rate(ctx, value), source)


def _needed_text(value: object) -> str:
    return str(value)


def sysctl_fix(ctx: Context, key: str, needed: object, note: str = "") -> Fix:
    """A fix that sets one sysctl, with the profile line and the one-off command."""
    text = _needed_text(needed)
    quoted = f'"{text}"' if not text.lstrip("-").isdigit() else text
    return Fix(
        knob=f"sysctl {key}",
        current=ctx.sysctl(key),
        needed=text,
        profile_key=f'[sysctl] "{key}" = {quoted}',
        command=f"sysctl -w {key}={text}" if " " not in text else f'sysctl -w {key}="{text}"',
        note=note,
    )


def pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, n))))


def finding(
    ctx: Context,
    rule_id: str,
    title: str,
    severity: Severity,
    obj: str,
    cause: str,
    count: int,
    evidence: Iterable[Evidence],
    fixes: Iterable[Fix],
) -> Finding:
    return Finding(
        rule=rule_id,
        title=title,
        severity=severity,
        object=obj,
        cause=cause,
        count=count,
        rate=_fmt_rate(ctx, count),
        evidence=tuple(evidence),
        fixes=tuple(fixes),
    )


def _since(ctx: Context) -> str:
    if ctx.window.cumulative:
        return "since boot"
    s = ctx.window.seconds or 0.0
    return f"in {s:.1f} s"


def _endpoint(family: int, addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if family == 6 else f"{addr}:{port}"


# ---------------------------------------------------------------------------- TCP listen


@rule("accept-queue-overflow", "accept queue of a listening socket full: connections dropped")
def accept_queue_overflow(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    overflows = w.snmp("TcpExt.ListenOverflows")
    drops = w.snmp("TcpExt.ListenDrops")
    if overflows <= 0:
        return
    somaxconn = ctx.sysctl_int("net.core.somaxconn")
    guilty = [d for d in w.listeners() if d.drops]
    if not guilty:  # no per-socket drops known: the fullest listeners are the suspects
        guilty = [d for d in w.listeners() if d.sock.backlog and d.sock.queue >= d.sock.backlog]
    evidence = [snmp_ev(ctx, "TcpExt.ListenOverflows"), snmp_ev(ctx, "TcpExt.ListenDrops")]
    if not guilty:
        yield finding(
            ctx,
            "accept-queue-overflow",
            "Accept queue overflow (listener unknown)",
            Severity.CRITICAL,
            "tcp listeners",
            f"{overflows} connections found a full accept queue {_since(ctx)}; no listener "
            "is full now and per-socket drops are not available, so the port is unknown.",
            overflows,
            evidence,
            [
                sysctl_fix(
                    ctx,
                    "net.core.somaxconn",
                    max(4096, somaxconn or 0),
                    "and raise the application's listen() backlog to match",
                )
            ],
        )
        return
    total_sock_drops = sum(d.drops or 0 for d in guilty)
    for d in guilty:
        s = d.sock
        count = d.drops if d.drops else (overflows if len(guilty) == 1 else 0)
        if total_sock_drops and d.drops is None:
            continue
        limited_by_somaxconn = somaxconn is not None and s.backlog >= somaxconn
        needed = min(65535, max(1024, pow2_at_least(4 * max(1, s.backlog))))
        limit = (
            f"somaxconn ({somaxconn}): the application asked for at least that"
            if limited_by_somaxconn
            else f"the application's listen() backlog ({s.backlog}; somaxconn is {somaxconn})"
        )
        cause = (
            f"{count} connections dropped {_since(ctx)} because the accept queue was full: "
            f"{s.queue} waiting now of an effective backlog of {s.backlog} = min(app backlog, "
            f"net.core.somaxconn); the limit here is {limit}. The application accepts "
            "connections more slowly than they arrive."
        )
        fixes = []
        if limited_by_somaxconn or (somaxconn is not None and needed > somaxconn):
            fixes.append(sysctl_fix(ctx, "net.core.somaxconn", max(needed, somaxconn or 0)))
        if not limited_by_somaxconn:
            fixes.append(
                Fix(
                    knob=f"application listen() backlog on port {s.port}",
                    current=str(s.backlog),
                    needed=str(needed),
                    note="e.g. nginx `listen ... backlog=N;`, HAProxy `backlog N`; "
                    "also check the accept loop is not starved (workers, CPU)",
                )
            )
        ev = [
            *evidence,
            Evidence(
                f"sock_diag {_endpoint(s.family, s.addr, s.port)} drops",
                d.drops or 0,
                _fmt_rate(ctx, d.drops or 0),
                "sock_diag",
            ),
        ]
        yield finding(
            ctx,
            "accept-queue-overflow",
            f"Accept queue overflow on tcp port {s.port}",
            Severity.CRITICAL,
            f"tcp {_endpoint(s.family, s.addr, s.port)}",
            cause,
            count or drops,
            ev,
            fixes,
        )


@rule("syn-queue-full", "SYN queue full with syncookies off: SYNs dropped")
def syn_queue_full(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPReqQFullDrop")
    if n <= 0:
        return
    cookies = ctx.sysctl_int("net.ipv4.tcp_syncookies")
    max_syn = ctx.sysctl_int("net.ipv4.tcp_max_syn_backlog") or 0
    somaxconn = ctx.sysctl_int("net.core.somaxconn") or 0
    fixes = []
    if cookies != 1:
        fixes.append(
            sysctl_fix(
                ctx,
                "net.ipv4.tcp_syncookies",
                1,
                "answer with a cookie instead of dropping when the queue is full",
            )
        )
    fixes.append(
        sysctl_fix(
            ctx,
            "net.ipv4.tcp_max_syn_backlog",
            max(8192, 2 * max_syn),
            "with syncookies off the kernel drops SYNs once this is 3/4 used",
        )
    )
    fixes.append(
        sysctl_fix(
            ctx,
            "net.core.somaxconn",
            max(4096, somaxconn),
            "the SYN queue of a listener is bounded by its effective backlog "
            "min(listen() backlog, somaxconn): raise both",
        )
    )
    yield finding(
        ctx,
        "syn-queue-full",
        "SYN queue full: SYNs dropped (syncookies off)",
        Severity.CRITICAL,
        "tcp listeners",
        f"{n} SYNs dropped {_since(ctx)} because a listener's SYN queue (half-open "
        f"connections) was full and net.ipv4.tcp_syncookies is {cookies}. Clients retry "
        "after 1 s, 3 s, 7 s: this shows up as connect latency steps.",
        n,
        [snmp_ev(ctx, "TcpExt.TCPReqQFullDrop")],
        fixes,
    )


@rule("syn-cookies", "SYN queue overflowed and syncookies answered")
def syn_cookies(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPReqQFullDoCookies")
    sent = ctx.window.snmp("TcpExt.SyncookiesSent")
    count = max(n, sent)
    if count <= 0:
        return
    somaxconn = ctx.sysctl_int("net.core.somaxconn") or 0
    yield finding(
        ctx,
        "syn-cookies",
        "SYN queue overflow answered with syncookies",
        Severity.WARNING,
        "tcp listeners",
        f"{count} SYNs {_since(ctx)} met a full SYN queue and were answered with syncookies: "
        "connections survive but lose TCP options the cookie cannot carry (window scaling "
        "on old kernels, SACK without timestamps). Either a SYN flood or backlogs too small "
        "for the connection rate.",
        count,
        [snmp_ev(ctx, "TcpExt.TCPReqQFullDoCookies"), snmp_ev(ctx, "TcpExt.SyncookiesSent")],
        [
            sysctl_fix(
                ctx,
                "net.core.somaxconn",
                max(4096, somaxconn),
                "and the application's listen() backlog: the SYN queue of a listener is "
                "bounded by its effective backlog",
            )
        ],
    )


# ---------------------------------------------------------------------------- TCP receive


@rule("socket-backlog-drop", "packets dropped because a socket's backlog was full")
def socket_backlog_drop(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPBacklogDrop")
    if n <= 0:
        return
    rmem = ctx.sysctl_ints("net.ipv4.tcp_rmem") or [4096, 131072, 6291456]
    needed = f"{rmem[0]} {rmem[1]} {max(2 * rmem[2], 16777216)}"
    yield finding(
        ctx,
        "socket-backlog-drop",
        "TCP segments dropped: socket backlog full",
        Severity.CRITICAL,
        "tcp sockets",
        f"{n} segments dropped {_since(ctx)}: they arrived while the application held the "
        "socket and its backlog (bounded by the receive + send buffer) was full.",
        n,
        [snmp_ev(ctx, "TcpExt.TCPBacklogDrop")],
        [sysctl_fix(ctx, "net.ipv4.tcp_rmem", needed, "larger receive buffers raise the limit")],
    )


@rule("rcvbuf-prune", "TCP receive queues pruned or collapsed for lack of buffer")
def rcvbuf_prune(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    pruned = w.snmp("TcpExt.RcvPruned")
    ofo = w.snmp("TcpExt.OfoPruned")
    called = w.snmp("TcpExt.PruneCalled")
    if pruned + ofo <= 0 and called <= 0:
        return
    lost = pruned + ofo
    rmem = ctx.sysctl_ints("net.ipv4.tcp_rmem") or [4096, 131072, 6291456]
    needed = f"{rmem[0]} {rmem[1]} {max(2 * rmem[2], 16777216)}"
    yield finding(
        ctx,
        "rcvbuf-prune",
        "TCP receive buffer pressure: queues pruned",
        Severity.CRITICAL if lost else Severity.WARNING,
        "tcp sockets",
        f"the kernel ran out of receive buffer {called} times {_since(ctx)} and had to "
        f"collapse queues; {lost} times it dropped queued data (the sender retransmits). "
        "The application reads too slowly or tcp_rmem's maximum is too small for the "
        "bandwidth-delay product.",
        lost or called,
        [snmp_ev(ctx, k) for k in ("TcpExt.PruneCalled", "TcpExt.RcvPruned", "TcpExt.OfoPruned")],
        [sysctl_fix(ctx, "net.ipv4.tcp_rmem", needed)],
    )


# ---------------------------------------------------------------------------- UDP


@rule("udp-rcvbuf-errors", "UDP datagrams dropped: socket receive buffer full")
def udp_rcvbuf_errors(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    n4 = w.snmp("Udp.RcvbufErrors")
    n6 = w.snmp("Udp6.RcvbufErrors")
    total = n4 + n6
    if total <= 0:
        return
    rmem_max = ctx.sysctl_int("net.core.rmem_max") or 212992
    ev = [snmp_ev(ctx, "Udp.RcvbufErrors")]
    if w.has_snmp("Udp6.RcvbufErrors"):
        ev.append(Evidence("Udp6.RcvbufErrors", n6, _fmt_rate(ctx, n6), "/proc/net/snmp6"))
    sockets = [d for d in w.udp() if d.drops]
    if not sockets:
        needed = pow2_at_least(4 * rmem_max)
        yield finding(
            ctx,
            "udp-rcvbuf-errors",
            "UDP receive buffer errors",
            Severity.CRITICAL,
            "udp",
            f"{total} datagrams dropped {_since(ctx)} because a socket's receive buffer was "
            "full (the socket is not known: per-socket drops unavailable or already gone).",
            total,
            ev,
            [
                sysctl_fix(
                    ctx, "net.core.rmem_max", needed, "then raise SO_RCVBUF in the application"
                )
            ],
        )
        return
    for d in sockets:
        s = d.sock
        rcvbuf = s.rcvbuf or 0
        needed = pow2_at_least(4 * max(rcvbuf, 65536))
        fixes = [
            Fix(
                knob=f"SO_RCVBUF of the socket on udp port {s.port}",
                current=str(rcvbuf) if s.rcvbuf is not None else None,
                needed=str(needed),
                note="set by the application (the kernel doubles the requested value); "
                "or read faster (more threads, SO_REUSEPORT)",
            )
        ]
        if needed > rmem_max:
            fixes.append(
                sysctl_fix(ctx, "net.core.rmem_max", needed, "the ceiling for SO_RCVBUF requests")
            )
        yield finding(
            ctx,
            "udp-rcvbuf-errors",
            f"UDP receive buffer full on port {s.port}",
            Severity.CRITICAL,
            f"udp {_endpoint(s.family, s.addr, s.port)}",
            f"{d.drops} datagrams to this socket dropped {_since(ctx)}: its receive buffer "
            f"({rcvbuf} bytes, {s.queue} in use now) filled faster than the application read.",
            d.drops or 0,
            [
                *ev,
                Evidence(
                    f"sock_diag udp {_endpoint(s.family, s.addr, s.port)} drops",
                    d.drops or 0,
                    _fmt_rate(ctx, d.drops or 0),
                    "sock_diag",
                ),
            ],
            fixes,
        )


# ---------------------------------------------------------------------------- softnet / CPUs


@rule("cpu-backlog-drop", "per-CPU input backlog full (netdev_max_backlog): packets dropped")
def cpu_backlog_drop(ctx: Context) -> Iterator[Finding]:
    current = ctx.sysctl_int("net.core.netdev_max_backlog") or 1000
    for d in ctx.window.softnet():
        if d.dropped <= 0:
            continue
        yield finding(
            ctx,
            "cpu-backlog-drop",
            f"CPU {d.cpu} input backlog overflow",
            Severity.CRITICAL,
            f"cpu {d.cpu}",
            f"{d.dropped} packets dropped {_since(ctx)} on CPU {d.cpu} because its input "
            f"backlog (RPS/RFS, veth, loopback, non-NAPI drivers) held "
            f"net.core.netdev_max_backlog = {current} packets; it processed {d.processed}.",
            d.dropped,
            [
                Evidence(
                    f"softnet[cpu{d.cpu}].dropped", d.dropped, _fmt_rate(ctx, d.dropped), SOFTNET
                )
            ],
            [sysctl_fix(ctx, "net.core.netdev_max_backlog", max(4 * current, 16384))],
        )


@rule("time-squeeze", "NAPI ran out of budget or time with work left (per CPU)")
def time_squeeze(ctx: Context) -> Iterator[Finding]:
    budget = ctx.sysctl_int("net.core.netdev_budget") or 300
    usecs = ctx.sysctl_int("net.core.netdev_budget_usecs") or 2000
    for d in ctx.window.softnet():
        if d.time_squeeze <= 0:
            continue
        yield finding(
            ctx,
            "time-squeeze",
            f"CPU {d.cpu} softirq time squeeze",
            Severity.WARNING,
            f"cpu {d.cpu}",
            f"{d.time_squeeze} times {_since(ctx)} the receive softirq on CPU {d.cpu} stopped "
            f"with packets still waiting (net.core.netdev_budget = {budget} packets or "
            f"netdev_budget_usecs = {usecs} us used up); the rest waits for ksoftirqd and "
            "the NIC ring fills meanwhile.",
            d.time_squeeze,
            [
                Evidence(
                    f"softnet[cpu{d.cpu}].time_squeeze",
                    d.time_squeeze,
                    _fmt_rate(ctx, d.time_squeeze),
                    SOFTNET,
                )
            ],
            [
                sysctl_fix(ctx, "net.core.netdev_budget", max(600, 2 * budget)),
                sysctl_fix(ctx, "net.core.netdev_budget_usecs", max(4000, 2 * usecs)),
            ],
        )


# ---------------------------------------------------------------------------- NICs


def _ring_fix(ctx: Context, dev: str) -> list[Fix]:
    nic = ctx.nics.get(dev)
    rings = nic.rings if nic else None
    fixes: list[Fix] = []
    if rings and rings.rx is not None and rings.rx_max and rings.rx < rings.rx_max:
        fixes.append(
            Fix(
                knob=f"ring {dev} rx",
                current=str(rings.rx),
                needed=str(rings.rx_max),
                profile_key=f'[nic."{dev}"] rings = "max"',
                command=f"ethtool -G {dev} rx {rings.rx_max}",
                note="most drivers reset the link when rings change",
            )
        )
    ch = nic.channels if nic else None
    if ch and ch.combined is not None and ch.combined_max and ch.combined < ch.combined_max:
        fixes.append(
            Fix(
                knob=f"channels {dev} combined",
                current=str(ch.combined),
                needed=str(ch.combined_max),
                profile_key=f'[nic."{dev}"] channels = "max"',
                command=f"ethtool -L {dev} combined {ch.combined_max}",
                note="more queues spread receive work over more CPUs",
            )
        )
    if not fixes:
        fixes.append(
            Fix(
                knob=f"receive CPUs of {dev}",
                current=None,
                needed=None,
                profile_key=f'[nic."{dev}"] irq_affinity = {{ strategy = "local" }}',
                note="rings and queues are at their maximum: spread queue IRQs over more "
                "NUMA-local cores and raise net.core.netdev_budget",
            )
        )
    return fixes


def _queue_share(deltas: Iterable[tuple[int, int]]) -> Optional[tuple[int, float]]:
    items = [(q, p) for q, p in deltas if p > 0]
    total = sum(p for _, p in items)
    if len(items) < 2 or total <= 0:
        return None
    q, p = max(items, key=lambda x: x[1])
    return q, p / total


@rule("nic-rx-drop", "NIC dropped received packets (ring, FIFO, port buffer) per queue")
def nic_rx_drop(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        dmap = driver_map(d.driver)
        rx_packets = [(q.queue, q.packets or 0) for q in d.queues if q.direction == "rx"]
        share = _queue_share(rx_packets)
        skew = ""
        if share and share[1] >= 0.4:
            skew = (
                f" rx queue {share[0]} carried {share[1]:.0%} of the received packets: "
                "RSS puts too many flows on one queue/CPU."
            )
        per_queue = [q for q in d.queues if q.direction == "rx" and q.drops]
        for q in per_queue:
            count = q.drops or 0
            yield finding(
                ctx,
                "nic-rx-drop",
                f"{d.dev} rx queue {q.queue} dropping packets",
                Severity.CRITICAL,
                f"{d.dev} rx-queue {q.queue}",
                f"{count} packets dropped {_since(ctx)} by {d.driver or 'the driver'} on rx "
                f"queue {q.queue} of {d.dev}: the queue's ring was full when they arrived "
                f"(its CPU did not drain it in time).{skew}",
                count,
                [
                    Evidence(
                        f"ethtool {d.dev} rx queue {q.queue} drops",
                        count,
                        _fmt_rate(ctx, count),
                        f"ethtool -S {d.dev}",
                    )
                ],
                _ring_fix(ctx, d.dev),
            )
        for name, count in sorted(d.nic_drops.items()):
            if count <= 0:
                continue
            info = dmap.drop(name) if dmap else None
            meaning = info.meaning if info else None
            where = info.where if info else OTHER
            if where == POLICER:
                continue  # reported by nic-policer
            fixes = _ring_fix(ctx, d.dev)
            if where == PORT_BUFFER:
                fixes.append(
                    Fix(
                        knob=f"flow control on {d.dev}",
                        current=None,
                        needed=None,
                        command=f"ethtool -a {d.dev}",
                        note="drops in the NIC's port buffer before any ring: the host as a "
                        "whole is too slow or pause frames are off",
                    )
                )
            yield finding(
                ctx,
                "nic-rx-drop",
                f"{d.dev} dropping received packets ({name})",
                Severity.CRITICAL,
                d.dev,
                f"{count} packets dropped {_since(ctx)} by {d.driver or 'the NIC'} "
                f"({name}: {meaning or 'driver drop counter'}).{skew}",
                count,
                [
                    Evidence(
                        f"ethtool {d.dev} {name}",
                        count,
                        _fmt_rate(ctx, count),
                        f"ethtool -S {d.dev}",
                    )
                ],
                fixes,
            )
        if not d.nic_drops and not per_queue:
            # Drivers without a map: the generic netdev counters.
            for name in ("rx_missed_errors", "rx_fifo_errors", "rx_over_errors"):
                count = d.stats.get(name, 0)
                if count > 0:
                    yield finding(
                        ctx,
                        "nic-rx-drop",
                        f"{d.dev} dropping received packets ({name})",
                        Severity.CRITICAL,
                        d.dev,
                        f"{count} packets lost {_since(ctx)} in the NIC ({name}: ring or "
                        f"FIFO full).{skew}",
                        count,
                        [
                            Evidence(
                                f"{d.dev} statistics/{name}",
                                count,
                                _fmt_rate(ctx, count),
                                f"/sys/class/net/{d.dev}/statistics/{name}",
                            )
                        ],
                        _ring_fix(ctx, d.dev),
                    )


@rule("nic-policer", "cloud NIC allowance exceeded: packets shaped or dropped by the platform")
def nic_policer(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        dmap = driver_map(d.driver)
        if not dmap:
            continue
        for name, count in sorted(d.nic_drops.items()):
            info = dmap.drop(name)
            if count <= 0 or info is None or info.where != POLICER:
                continue
            yield finding(
                ctx,
                "nic-policer",
                f"{d.dev}: {name}",
                Severity.CRITICAL,
                d.dev,
                f"{count} packets queued or dropped {_since(ctx)} by the cloud platform "
                f"({name}: {info.meaning}). No host setting lifts this limit.",
                count,
                [
                    Evidence(
                        f"ethtool {d.dev} {name}",
                        count,
                        _fmt_rate(ctx, count),
                        f"ethtool -S {d.dev}",
                    )
                ],
                [
                    Fix(
                        knob="instance type / network allowance",
                        current=None,
                        needed=None,
                        note="a larger instance type, or spread the load over more instances",
                    )
                ],
            )


# ---------------------------------------------------------------------------- IRQ placement

_MIN_NET_RX = 2000  # NET_RX softirqs in the window below which balance does not matter


@rule("irq-imbalance", "one CPU takes most of the receive softirq work")
def irq_imbalance(ctx: Context) -> Iterator[Finding]:
    per_cpu = ctx.window.softirq("NET_RX")
    total = sum(per_cpu.values())
    if len(per_cpu) < 4 or total < _MIN_NET_RX:
        return
    cpu, top = max(per_cpu.items(), key=lambda kv: kv[1])
    share = top / total
    if share < 0.5:
        return
    yield finding(
        ctx,
        "irq-imbalance",
        f"CPU {cpu} handles {share:.0%} of NET_RX softirqs",
        Severity.WARNING,
        f"cpu {cpu}",
        f"{top} of {total} receive softirqs {_since(ctx)} ran on CPU {cpu} out of "
        f"{len(per_cpu)} CPUs: receive work is not spread (single queue, IRQs pinned to one "
        "core, or RSS hashing few flows to one queue).",
        top,
        [Evidence(f"softirqs NET_RX cpu{cpu}", top, _fmt_rate(ctx, top), "/proc/softirqs")],
        [
            Fix(
                knob="queue IRQ affinity / RPS",
                current=None,
                needed=None,
                profile_key='[nic."{data}"] irq_affinity = { strategy = "local" }',
                note="one queue per core with IRQs spread over NUMA-local cores; RPS when the "
                "NIC has a single queue",
            )
        ],
    )


@rule("irq-placement", "NIC queue IRQs running on isolated or remote-NUMA CPUs")
def irq_placement(ctx: Context) -> Iterator[Finding]:
    topo = ctx.topology
    if topo is None:
        return
    for nic in ctx.nics.values():
        for qi in nic.irqs:
            fired = ctx.window.irq(qi.irq)
            busy = {cpu for cpu, n in fired.items() if n > 0}
            if not busy:
                continue
            count = sum(fired.values())
            on_isolated = busy & topo.isolated
            if on_isolated:
                yield finding(
                    ctx,
                    "irq-placement",
                    f"{nic.name} queue {qi.queue} IRQ on isolated CPUs",
                    Severity.WARNING,
                    f"{nic.name} irq {qi.irq}",
                    f"IRQ {qi.irq} ({qi.name}) fired {count} times {_since(ctx)}, on isolated "
                    f"CPU(s) {sorted(on_isolated)} that should run only the pinned workload.",
                    count,
                    [
                        Evidence(
                            f"/proc/interrupts irq {qi.irq}",
                            count,
                            _fmt_rate(ctx, count),
                            "/proc/interrupts",
                        )
                    ],
                    [
                        Fix(
                            knob=f"irq {qi.irq} affinity",
                            current=_cpus(qi.effective or qi.affinity),
                            needed=_cpus(topo.housekeeping),
                            profile_key=f'[nic."{nic.name}"] '
                            'irq_affinity = { strategy = "local" }',
                            note="and ban the isolated CPUs in irqbalance ([irqbalance] ban)",
                        )
                    ],
                )
                continue
            node = nic.numa_node
            if node is None or node < 0 or len(topo.nodes) < 2:
                continue
            local = topo.node_cpus(node)
            if local and not (busy & local):
                yield finding(
                    ctx,
                    "irq-placement",
                    f"{nic.name} queue {qi.queue} IRQ on remote NUMA node",
                    Severity.WARNING,
                    f"{nic.name} irq {qi.irq}",
                    f"IRQ {qi.irq} ({qi.name}) of {nic.name} (NUMA node {node}) fired {count} "
                    f"times {_since(ctx)} on CPU(s) {sorted(busy)} of another node: every "
                    "packet crosses the socket interconnect.",
                    count,
                    [
                        Evidence(
                            f"/proc/interrupts irq {qi.irq}",
                            count,
                            _fmt_rate(ctx, count),
                            "/proc/interrupts",
                        )
                    ],
                    [
                        Fix(
                            knob=f"irq {qi.irq} affinity",
                            current=_cpus(qi.effective or qi.affinity),
                            needed=_cpus(local - topo.isolated),
                            profile_key=_local_irqs(nic.name),
                        )
                    ],
                )


def _local_irqs(dev: str) -> str:
    return f'[nic."{dev}"] irq_affinity = {{ strategy = "local" }}'


def _cpus(cpus: Optional[Iterable[int]]) -> Optional[str]:
    from lbtune.host.cpulist import format_cpulist

    return None if cpus is None else format_cpulist(frozenset(cpus))


# ---------------------------------------------------------------------------- routing


@rule("rp-filter-drop", "reverse-path filter dropped packets (strict rp_filter, asymmetric path)")
def rp_filter_drop(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.IPReversePathFilter")
    if n <= 0:
        return
    all_v = ctx.sysctl_int("net.ipv4.conf.all.rp_filter") or 0
    strict = []
    for iface in ctx.fs.listdir("/proc/sys/net/ipv4/conf"):
        if iface in ("all", "default", "lo"):
            continue
        v = ctx.sysctl_int(ctx.conf_key("ipv4", iface, "rp_filter"))
        if v is not None and max(all_v, v) == 1:
            strict.append(iface)
    obj = ", ".join(strict) if strict else "ipv4"
    fixes = []
    if all_v == 1:
        fixes.append(
            sysctl_fix(
                ctx, "net.ipv4.conf.all.rp_filter", 2, "the effective value is max(all, interface)"
            )
        )
    for iface in strict:
        if (ctx.sysctl_int(ctx.conf_key("ipv4", iface, "rp_filter")) or 0) == 1:
            fixes.append(sysctl_fix(ctx, ctx.conf_key("ipv4", iface, "rp_filter"), 2))
    if not fixes:
        fixes.append(sysctl_fix(ctx, "net.ipv4.conf.all.rp_filter", 2))
    yield finding(
        ctx,
        "rp-filter-drop",
        "Packets dropped by strict reverse-path filtering",
        Severity.CRITICAL,
        obj,
        f"{n} packets dropped {_since(ctx)}: they arrived on an interface that is not the one "
        f"the route back to their source uses, and rp_filter is strict (1) there "
        f"(effective value = max(all={all_v}, interface)). Typical on DR directors and real "
        "servers, multi-homed hosts and policy routing: use loose mode (2).",
        n,
        [snmp_ev(ctx, "TcpExt.IPReversePathFilter")],
        fixes,
    )


# ---------------------------------------------------------------------------- conntrack


@rule("conntrack-full", "conntrack table full: new flows dropped")
def conntrack_full(ctx: Context) -> Iterator[Finding]:
    ct = ctx.window.after.conntrack
    if ct is None:
        return
    drop = ctx.window.conntrack("drop")
    early = ctx.window.conntrack("early_drop")
    full = ct.max is not None and ct.max > 0 and ct.count >= 0.9 * ct.max
    if drop <= 0 and early <= 0 and not full:
        return
    needed = pow2_at_least(max(2 * (ct.max or 65536), 2 * ct.count))
    sev = Severity.CRITICAL if drop > 0 or early > 0 else Severity.WARNING
    yield finding(
        ctx,
        "conntrack-full",
        "Conntrack table full",
        sev,
        "nf_conntrack",
        f"{ct.count} of {ct.max} conntrack entries in use; {drop} packets dropped and "
        f"{early} entries evicted early {_since(ctx)} because the table was full "
        "(kernel log: 'nf_conntrack: table full, dropping packet').",
        drop or early or ct.count,
        [
            Evidence(
                "nf_conntrack drop", drop, _fmt_rate(ctx, drop), "/proc/net/stat/nf_conntrack"
            ),
            Evidence(
                "nf_conntrack early_drop",
                early,
                _fmt_rate(ctx, early),
                "/proc/net/stat/nf_conntrack",
            ),
            Evidence("nf_conntrack_count", ct.count, None, "/proc/sys/net/netfilter"),
        ],
        [
            sysctl_fix(
                ctx,
                "net.netfilter.nf_conntrack_max",
                needed,
                "also raise the hash size (nf_conntrack hashsize module parameter); on an "
                "IPVS DR director, better not to track VIP traffic at all (NOTRACK)",
            )
        ],
    )


@rule("conntrack-insert-failed", "conntrack entries failed to insert (races, clashes)")
def conntrack_insert_failed(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.conntrack("insert_failed")
    if n <= 0:
        return
    yield finding(
        ctx,
        "conntrack-insert-failed",
        "Conntrack insert failures",
        Severity.WARNING,
        "nf_conntrack",
        f"{n} packets {_since(ctx)} created a conntrack entry that clashed with one inserted "
        "by another CPU at the same time (parallel UDP, e.g. DNS A+AAAA from one socket) and "
        "were dropped.",
        n,
        [
            Evidence(
                "nf_conntrack insert_failed", n, _fmt_rate(ctx, n), "/proc/net/stat/nf_conntrack"
            )
        ],
        [
            Fix(
                knob="client resolver / UDP flow pattern",
                current=None,
                needed=None,
                note="glibc `options single-request-reopen`, or NOTRACK for the flow",
            )
        ],
    )


# ---------------------------------------------------------------------------- TCP limits


@rule("timewait-overflow", "TIME_WAIT bucket table full: sockets closed without TIME_WAIT")
def timewait_overflow(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPTimeWaitOverflow")
    if n <= 0:
        return
    cap = ctx.sysctl_int("net.ipv4.tcp_max_tw_buckets") or 0
    tw_now = ctx.window.after.sockstat.tcp_tw if ctx.window.after.sockstat else 0
    rate = ctx.rate(n) or 0.0
    # TIME_WAIT lasts 60 s: the table must hold 60 s of closes.
    needed = pow2_at_least(max(2 * cap, cap + 60 * rate, 2 * tw_now, 4096))
    yield finding(
        ctx,
        "timewait-overflow",
        "TIME_WAIT table overflow",
        Severity.WARNING,
        "tcp",
        f"{n} sockets {_since(ctx)} skipped TIME_WAIT because net.ipv4.tcp_max_tw_buckets = "
        f"{cap} was reached ({tw_now} in TIME_WAIT now). Late segments of those connections "
        "can corrupt new ones on the same ports; the kernel logs 'TCP: time wait bucket "
        "table overflow'.",
        n,
        [snmp_ev(ctx, "TcpExt.TCPTimeWaitOverflow")],
        [
            sysctl_fix(
                ctx,
                "net.ipv4.tcp_max_tw_buckets",
                needed,
                "or use keep-alive so fewer connections close",
            )
        ],
    )


@rule("orphan-overflow", "too many orphaned sockets or TCP out of memory: connections reset")
def orphan_overflow(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPAbortOnMemory")
    st = ctx.window.after.sockstat
    cap = ctx.sysctl_int("net.ipv4.tcp_max_orphans")
    near = st is not None and cap and st.tcp_orphan >= 0.8 * cap
    if n <= 0 and not near:
        return
    orphans = st.tcp_orphan if st else 0
    yield finding(
        ctx,
        "orphan-overflow",
        "Orphaned sockets at the limit",
        Severity.CRITICAL if n > 0 else Severity.WARNING,
        "tcp",
        f"{n} connections reset {_since(ctx)} because orphaned sockets (closed by the "
        f"application, still sending) exceeded net.ipv4.tcp_max_orphans = {cap} or TCP ran "
        f"out of memory; {orphans} orphans now.",
        n or orphans,
        [
            snmp_ev(ctx, "TcpExt.TCPAbortOnMemory"),
            Evidence("sockstat TCP orphan", orphans, None, "/proc/net/sockstat"),
        ],
        [sysctl_fix(ctx, "net.ipv4.tcp_max_orphans", pow2_at_least(max(2 * (cap or 0), 65536)))],
    )


@rule("tcp-memory-pressure", "TCP memory above tcp_mem pressure threshold")
def tcp_memory_pressure(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPMemoryPressures")
    tcp_mem = ctx.sysctl_ints("net.ipv4.tcp_mem")
    st = ctx.window.after.sockstat
    over = bool(st and tcp_mem and len(tcp_mem) == 3 and st.tcp_mem_pages >= tcp_mem[1])
    if n <= 0 and not over:
        return
    pages = st.tcp_mem_pages if st else 0
    needed = None
    if tcp_mem and len(tcp_mem) == 3:
        needed = " ".join(str(2 * v) for v in tcp_mem)
    yield finding(
        ctx,
        "tcp-memory-pressure",
        "TCP memory pressure",
        Severity.WARNING,
        "tcp",
        f"TCP entered memory pressure {n} times {_since(ctx)}; {pages} pages in use now "
        f"against tcp_mem = {ctx.sysctl('net.ipv4.tcp_mem')} (min pressure max, in pages). "
        "Under pressure the kernel shrinks buffers; above max it drops.",
        n or pages,
        [
            snmp_ev(ctx, "TcpExt.TCPMemoryPressures"),
            Evidence("sockstat TCP mem", pages, None, "/proc/net/sockstat"),
        ],
        [sysctl_fix(ctx, "net.ipv4.tcp_mem", needed)] if needed else [],
    )


# ---------------------------------------------------------------------------- transmit

_AGGREGATING = frozenset({"mq", "mqprio", "taprio"})  # their counters sum their children


@rule("qdisc-drop", "queueing discipline dropped packets on transmit")
def qdisc_drop(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.qdiscs():
        q = d.qdisc
        if d.drops <= 0 or q.kind in _AGGREGATING:
            continue
        txql = ctx.fs.read_int(f"/sys/class/net/{q.dev}/tx_queue_len")
        fixes: list[Fix]
        if q.kind in ("pfifo_fast", "pfifo", "bfifo", "fq_codel", "fq"):
            needed = max(10000, 2 * (txql or 1000))
            fixes = [
                Fix(
                    knob=f"txqueuelen {q.dev}",
                    current=None if txql is None else str(txql),
                    needed=str(needed),
                    profile_key=f'[nic."{q.dev}"] txqueuelen = {needed}',
                    command=f"ip link set dev {q.dev} txqueuelen {needed}",
                    note="pfifo_fast/pfifo use it as their limit; fq_codel and fq have a "
                    "`limit` of their own (tc qdisc change ... limit N)",
                )
            ]
        else:
            fixes = [
                Fix(
                    knob=f"{q.kind} qdisc on {q.dev}",
                    current=None,
                    needed=None,
                    command=f"tc -s qdisc show dev {q.dev}",
                    note=f"a {q.kind} shaper drops what exceeds its configured rate/burst "
                    "by design: raise the rate or burst, or remove the shaper",
                )
            ]
        yield finding(
            ctx,
            "qdisc-drop",
            f"{q.kind} qdisc on {q.dev} dropping packets",
            Severity.CRITICAL,
            f"{q.dev} qdisc {q.kind} {q.handle}",
            f"{d.drops} packets dropped {_since(ctx)} by the {q.kind} qdisc {q.handle} "
            f"(parent {q.parent}) on {q.dev} ({d.overlimits} over its limits), out of "
            f"{d.packets} sent: the sender is faster than this queue drains.",
            d.drops,
            [
                Evidence(
                    f"qdisc {q.dev} {q.handle} drops",
                    d.drops,
                    _fmt_rate(ctx, d.drops),
                    "rtnetlink" if not ctx.window.cumulative else "tc -s qdisc show",
                )
            ],
            fixes,
        )


# ---------------------------------------------------------------------------- client side


@rule("ephemeral-ports", "local ports nearly exhausted by connections and TIME_WAIT (client)")
def ephemeral_ports(ctx: Context) -> Iterator[Finding]:
    st = ctx.window.after.sockstat
    rng = ctx.sysctl_ints("net.ipv4.ip_local_port_range")
    if st is None or not rng or len(rng) != 2:
        return
    size = max(1, rng[1] - rng[0] + 1)
    used = st.tcp_tw  # TIME_WAIT sockets hold their local port for 60 s
    if used < 0.8 * size:
        return
    yield finding(
        ctx,
        "ephemeral-ports",
        "Ephemeral ports nearly exhausted",
        Severity.CRITICAL if used >= size else Severity.WARNING,
        "ip_local_port_range",
        f"{used} sockets in TIME_WAIT against a local port range of {size} "
        f"({rng[0]}-{rng[1]}): a client opening new connections to the same destination "
        "gets EADDRNOTAVAIL (estimate: ports are per destination address and port).",
        used,
        [Evidence("sockstat TCP tw", used, None, "/proc/net/sockstat")],
        [
            sysctl_fix(ctx, "net.ipv4.ip_local_port_range", "1024 65535"),
            sysctl_fix(
                ctx,
                "net.ipv4.tcp_tw_reuse",
                1,
                "reuse TIME_WAIT ports for new outgoing connections (safe with timestamps)",
            ),
        ],
    )
