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
from typing import Any, Callable, Iterable, Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Evidence, Finding, Fix, Severity, rank
from lbtune.host.cpulist import format_cpulist
from lbtune.host.qdisc import QdiscStats
from lbtune.host.sockdiag import ListenSocket
from lbtune.observe.nicmaps import OTHER, POLICER, PORT_BUFFER, driver_map
from lbtune.tune.sysctl import conf_key, effective_conf

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


def moved(ctx: Context, counter: str, value: int, source: str) -> Evidence:
    """Evidence of a counter that moved by `value` over the window, with its rate."""
    return Evidence(counter, value, _fmt_rate(ctx, value), source)


def snmp_ev(ctx: Context, key: str) -> Evidence:
    source = NETSTAT if key.split(".")[0] in ("TcpExt", "IpExt", "MPTcpExt") else SNMP
    return moved(ctx, key, ctx.window.snmp(key), source)


def sysctl_fix(ctx: Context, key: str, needed: object, note: str = "") -> Fix:
    """A fix that sets one sysctl, with the profile line and the one-off command."""
    text = str(needed)
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
        # A fix whose needed value is the current one tells the user to change nothing.
        fixes=tuple(f for f in fixes if f.needed is None or f.needed != f.current),
    )


def _since(ctx: Context) -> str:
    if ctx.window.cumulative:
        return "since boot"
    s = ctx.window.seconds or 0.0
    return f"in {s:.1f} s"


def _endpoint(family: int, addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if family == 6 else f"{addr}:{port}"


# ---------------------------------------------------------------------------- TCP listen


def _needed_backlog(backlog: int) -> int:
    return min(65535, max(1024, pow2_at_least(4 * max(1, backlog))))


def _backlog_fixes(
    ctx: Context, s: ListenSocket, somaxconn: Optional[int], needed: int
) -> list[Fix]:
    """Raise whichever of min(listen() backlog, somaxconn) is the limit (both if needed)."""
    fixes = []
    limited_by_somaxconn = somaxconn is not None and s.backlog >= somaxconn
    if limited_by_somaxconn or (somaxconn is not None and needed > somaxconn):
        fixes.append(
            sysctl_fix(
                ctx,
                "net.core.somaxconn",
                max(needed, somaxconn or 0),
                "a listener keeps the limit it got at listen(): reload the application after",
            )
        )
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
    return fixes


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
        needed = _needed_backlog(s.backlog)
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
        fixes = _backlog_fixes(ctx, s, somaxconn, needed)
        ev = [
            *evidence,
            moved(
                ctx,
                f"sock_diag {_endpoint(s.family, s.addr, s.port)} drops",
                d.drops or 0,
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


def _syn_suspects(ctx: Context) -> list[tuple[ListenSocket, Optional[int]]]:
    """Listeners whose SYN queue overflowed: those that dropped in the window (sk_drops),
    else those whose half-open requests reach their backlog now."""
    listeners = ctx.window.listeners()
    dropped: list[tuple[ListenSocket, Optional[int]]] = [
        (d.sock, d.drops) for d in listeners if d.drops
    ]
    if dropped:
        return dropped
    return [
        (d.sock, None)
        for d in listeners
        if d.sock.syn_recv is not None and d.sock.syn_recv >= max(1, d.sock.backlog)
    ]


def _syn_findings(
    ctx: Context,
    rule_id: str,
    severity: Severity,
    count: int,
    what: str,
    evidence: list[Evidence],
    extra_fixes: list[Fix],
) -> Iterator[Finding]:
    somaxconn = ctx.sysctl_int("net.core.somaxconn")
    suspects = _syn_suspects(ctx)
    title = (
        "SYN queue full: SYNs dropped"
        if rule_id == "syn-queue-full"
        else ("SYN queue overflow answered with syncookies")
    )
    if not suspects:
        fix = sysctl_fix(
            ctx,
            "net.core.somaxconn",
            max(4096, somaxconn or 0),
            "and the application's listen() backlog: a listener's SYN queue is bounded by "
            "its effective backlog",
        )
        yield finding(
            ctx,
            rule_id,
            title,
            severity,
            "tcp listeners",
            f"{count} SYNs {_since(ctx)} {what} No listener is identifiable now (per-socket "
            "drops unavailable and no SYN queue full at the end of the window).",
            count,
            evidence,
            [*extra_fixes, fix],
        )
        return
    for s, drops in suspects:
        n = drops if drops is not None and len(suspects) > 1 else count
        ep = _endpoint(s.family, s.addr, s.port)
        queue = f"{s.syn_recv} half-open now, " if s.syn_recv is not None else ""
        ev = list(evidence)
        if drops is not None:
            ev.append(moved(ctx, f"sock_diag {ep} drops", drops, "sock_diag"))
        if s.syn_recv is not None:
            ev.append(Evidence(f"sock_diag {ep} SYN-RECV", s.syn_recv, None, "sock_diag"))
        yield finding(
            ctx,
            rule_id,
            f"{title} on tcp port {s.port}",
            severity,
            f"tcp {ep}",
            f"{n} SYNs {_since(ctx)} {what} Listener {ep}: {queue}effective backlog "
            f"{s.backlog} = min(listen() backlog, net.core.somaxconn = {somaxconn}), which "
            "also bounds its SYN queue.",
            n,
            ev,
            [*extra_fixes, *_backlog_fixes(ctx, s, somaxconn, _needed_backlog(s.backlog))],
        )


@rule("syn-queue-full", "SYN queue full with syncookies off: SYNs dropped")
def syn_queue_full(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPReqQFullDrop")
    if n <= 0:
        return
    cookies = ctx.sysctl_int("net.ipv4.tcp_syncookies")
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
    max_syn = ctx.sysctl_int("net.ipv4.tcp_max_syn_backlog")
    if cookies != 1 and max_syn is not None:
        # Without cookies the kernel also drops once 3/4 of tcp_max_syn_backlog is used.
        biggest = max((_needed_backlog(s.backlog) for s, _ in _syn_suspects(ctx)), default=4096)
        if biggest > 0.75 * max_syn:
            fixes.append(
                sysctl_fix(ctx, "net.ipv4.tcp_max_syn_backlog", pow2_at_least(biggest * 4 / 3))
            )
    yield from _syn_findings(
        ctx,
        "syn-queue-full",
        Severity.CRITICAL,
        n,
        "were dropped because the listener's SYN queue (half-open connections) was full and "
        f"net.ipv4.tcp_syncookies is {cookies}. Clients retry after 1 s, 3 s, 7 s: it shows "
        "as connect-latency steps.",
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
    yield from _syn_findings(
        ctx,
        "syn-cookies",
        Severity.WARNING,
        count,
        "met a full SYN queue and were answered with syncookies: connections survive but "
        "lose the TCP options a cookie cannot carry. Either a SYN flood or a backlog too "
        "small for the connection rate.",
        [snmp_ev(ctx, "TcpExt.TCPReqQFullDoCookies"), snmp_ev(ctx, "TcpExt.SyncookiesSent")],
        [],
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
    if n6:
        ev.append(moved(ctx, "Udp6.RcvbufErrors", n6, "/proc/net/snmp6"))
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
                moved(
                    ctx,
                    f"sock_diag udp {_endpoint(s.family, s.addr, s.port)} drops",
                    d.drops or 0,
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
            [moved(ctx, f"softnet[cpu{d.cpu}].dropped", d.dropped, SOFTNET)],
            [sysctl_fix(ctx, "net.core.netdev_max_backlog", max(4 * current, 16384))],
        )


_MIN_SQUEEZE = 10


@rule("time-squeeze", "NAPI ran out of budget or time with work left (per CPU)")
def time_squeeze(ctx: Context) -> Iterator[Finding]:
    budget = ctx.sysctl_int("net.core.netdev_budget") or 300
    usecs = ctx.sysctl_int("net.core.netdev_budget_usecs") or 2000
    for d in ctx.window.softnet():
        # A rare squeeze is normal scheduling noise: report ten or more, and at least one
        # per 10,000 packets processed.
        if d.time_squeeze < _MIN_SQUEEZE or d.time_squeeze * 10000 < d.processed:
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
            [moved(ctx, f"softnet[cpu{d.cpu}].time_squeeze", d.time_squeeze, SOFTNET)],
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
                    moved(
                        ctx,
                        f"ethtool {d.dev} rx queue {q.queue} drops",
                        count,
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
                [moved(ctx, f"ethtool {d.dev} {name}", count, f"ethtool -S {d.dev}")],
                fixes,
            )
        nic = ctx.nics.get(d.dev)
        stacked = nic is not None and nic.kind in ("bond", "vlan", "bridge", "team")
        if not d.nic_drops and not per_queue and not stacked:
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
                            moved(
                                ctx,
                                f"{d.dev} statistics/{name}",
                                count,
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
                [moved(ctx, f"ethtool {d.dev} {name}", count, f"ethtool -S {d.dev}")],
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
        [moved(ctx, f"softirqs NET_RX cpu{cpu}", top, "/proc/softirqs")],
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
        node = nic.numa_node
        local = topo.node_cpus(node) if node is not None and node >= 0 else frozenset()
        isolated: list[tuple[Any, int, set[int]]] = []
        remote: list[tuple[Any, int, set[int]]] = []
        for qi in nic.irqs:
            fired = ctx.window.irq(qi.irq)
            busy = {cpu for cpu, n in fired.items() if n > 0}
            if not busy:
                continue
            count = sum(fired.values())
            if busy & topo.isolated:
                isolated.append((qi, count, busy & topo.isolated))
            elif len(topo.nodes) > 1 and local and not (busy & local):
                remote.append((qi, count, busy))
        for group, problem in ((isolated, "isolated"), (remote, "remote")):
            if not group:
                continue
            count = sum(c for _, c, _ in group)
            cpus_hit = sorted(set().union(*(b for _, _, b in group)))
            irqs = ", ".join(f"{qi.irq} (queue {qi.queue})" for qi, _, _ in group)
            if problem == "isolated":
                title = f"{nic.name}: {len(group)} queue IRQs run on isolated CPUs"
                cause = (
                    f"IRQs {irqs} of {nic.name} fired {count} times {_since(ctx)} on isolated "
                    f"CPU(s) {_cpus(cpus_hit)}, which should run only the pinned workload."
                )
                needed = (local or topo.online) - topo.isolated
                note = "and ban the isolated CPUs in irqbalance ([irqbalance] ban)"
            else:
                title = f"{nic.name}: {len(group)} queue IRQs run on a remote NUMA node"
                cause = (
                    f"IRQs {irqs} of {nic.name} (NUMA node {node}) fired {count} times "
                    f"{_since(ctx)} only on CPU(s) {_cpus(cpus_hit)} of another node: every "
                    "packet crosses the socket interconnect."
                )
                needed = local - topo.isolated
                note = ""
            current = sorted(
                set().union(*((qi.effective or qi.affinity or set()) for qi, _, _ in group))
            )
            yield finding(
                ctx,
                "irq-placement",
                title,
                Severity.WARNING,
                f"{nic.name} irqs",
                cause,
                count,
                [
                    moved(ctx, f"/proc/interrupts irq {qi.irq}", c, "/proc/interrupts")
                    for qi, c, _ in group
                ],
                [
                    Fix(
                        knob=f"{nic.name} queue IRQ affinity",
                        current=_cpus(current),
                        needed=_cpus(needed),
                        profile_key=_local_irqs(nic.name),
                        note=note,
                    )
                ],
            )


def _local_irqs(dev: str) -> str:
    return f'[nic."{dev}"] irq_affinity = {{ strategy = "local" }}'


def _cpus(cpus: Optional[Iterable[int]]) -> Optional[str]:
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
        values = (
            None
            if iface in ("all", "default", "lo")
            else effective_conf(ctx.fs, iface, "rp_filter")
        )
        if values is not None and values[0] == 1:
            strict.append((iface, values[2]))
    obj = ", ".join(i for i, _ in strict) if strict else "ipv4"
    fixes = []
    if all_v == 1:
        fixes.append(
            sysctl_fix(
                ctx, "net.ipv4.conf.all.rp_filter", 2, "the effective value is max(all, interface)"
            )
        )
    for iface, own in strict:
        if own == 1:
            fixes.append(sysctl_fix(ctx, conf_key(iface, "rp_filter"), 2))
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
        drop + early,
        [
            moved(ctx, "nf_conntrack drop", drop, "/proc/net/stat/nf_conntrack"),
            moved(ctx, "nf_conntrack early_drop", early, "/proc/net/stat/nf_conntrack"),
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
        [moved(ctx, "nf_conntrack insert_failed", n, "/proc/net/stat/nf_conntrack")],
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
# No queue: their drops come from tc filter actions (policing, `action drop`), not overflow.
_FILTER_ONLY = frozenset({"clsact", "ingress"})


def _bits(bps: float) -> str:
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("Kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.4g}{unit}"
    return f"{bps:.0f}bit"


def _tc_parent(q: QdiscStats) -> str:
    return "root" if q.parent in ("root", "") else f"parent {q.parent}"


@rule("qdisc-drop", "queueing discipline dropped packets on transmit")
def qdisc_drop(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.qdiscs():
        q = d.qdisc
        if d.drops <= 0 or q.kind in _AGGREGATING or q.kind in _FILTER_ONLY:
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
        elif q.rate_bps:
            offered = d.packets + d.drops
            needed_rate = math.ceil(q.rate_bps * offered / max(1, d.packets))
            fixes = [
                Fix(
                    knob=f"{q.kind} rate on {q.dev}",
                    current=_bits(q.rate_bps),
                    needed=_bits(needed_rate),
                    command=f"tc qdisc change dev {q.dev} {_tc_parent(q)} {q.kind} "
                    f"rate {_bits(needed_rate)} ...",
                    note=f"a {q.kind} shaper drops what exceeds its rate and burst by design; "
                    f"the needed rate carries the {offered} packets offered, not only the "
                    f"{d.packets} sent (or remove the shaper)",
                )
            ]
        else:
            fixes = [
                Fix(
                    knob=f"{q.kind} qdisc on {q.dev}",
                    current=None,
                    needed=None,
                    command=f"tc -s qdisc show dev {q.dev}",
                    note=f"a {q.kind} qdisc drops what exceeds its configured rate, burst or "
                    "limit: raise them, or remove it",
                )
            ]
        yield finding(
            ctx,
            "qdisc-drop",
            f"{q.kind} qdisc on {q.dev} dropping packets",
            Severity.CRITICAL,
            f"{q.dev} qdisc {q.kind} {q.handle}",
            f"{d.drops} packets dropped {_since(ctx)} by the {q.kind} qdisc {q.handle} "
            f"(parent {q.parent}) on {q.dev} ({d.overlimits} over its limits) out of "
            f"{d.packets + d.drops} offered: packets arrive faster than this queue drains.",
            d.drops,
            [
                moved(
                    ctx,
                    f"qdisc {q.dev} {q.handle} drops",
                    d.drops,
                    "rtnetlink" if not ctx.window.cumulative else "tc -s qdisc show",
                )
            ],
            fixes,
        )


# ---------------------------------------------------------------------------- client side


@rule("ephemeral-ports", "local ports nearly exhausted by connections and TIME_WAIT (client)")
def ephemeral_ports(ctx: Context) -> Iterator[Finding]:
    after = ctx.window.after
    st = after.sockstat
    rng = ctx.sysctl_ints("net.ipv4.ip_local_port_range")
    if st is None or not rng or len(rng) != 2:
        return
    size = max(1, rng[1] - rng[0] + 1)
    if after.ephemeral_in_use is not None:
        used = after.ephemeral_in_use
        how = "TCP sockets hold a local port of the range (counted with sock_diag)"
        evidence = Evidence("sock_diag tcp sockets in port range", used, None, "sock_diag")
        exact = True
    else:
        # A recorded tree has no per-socket list: TIME_WAIT holds its port for 60 s, but a
        # server's TIME_WAIT sockets hold the server port, not ephemeral ones.
        used = st.tcp_tw
        how = (
            "sockets are in TIME_WAIT (an estimate from /proc/net/sockstat: it matters only "
            "if this host opens the connections, e.g. a client or a proxy to upstreams)"
        )
        evidence = Evidence("sockstat TCP tw", used, None, "/proc/net/sockstat")
        exact = False
    if used < 0.8 * size:
        return
    yield finding(
        ctx,
        "ephemeral-ports",
        "Ephemeral ports nearly exhausted",
        Severity.CRITICAL if exact and used >= 0.95 * size else Severity.WARNING,
        "ip_local_port_range",
        f"{used} {how}, against a local port range of {size} ({rng[0]}-{rng[1]}): new "
        "outgoing connections to one destination address and port fail with EADDRNOTAVAIL "
        "once its ports are used up.",
        used,
        [evidence],
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
