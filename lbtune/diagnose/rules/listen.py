"""Rules for listening TCP sockets: a full accept queue, a full SYN queue, syncookies.

The counters here count packets, not connections: ListenOverflows/ListenDrops and a
listener's sock_diag drops move once per SYN (or final handshake ACK) dropped, and every
client retry (after 1 s, 3 s, 7 s) counts again. A listener's queues are bounded by its
effective backlog = min(listen() backlog, net.core.somaxconn), fixed at listen() time: the
fix names whichever of the two is the limit, and when it is the application's backlog, no
sysctl is proposed.
"""

from __future__ import annotations

from typing import Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import APPLICATION, Evidence, Finding, Fix
from lbtune.diagnose.rules.base import (
    endpoint,
    finding,
    moved,
    pow2_at_least,
    reading,
    since,
    snmp_ev,
    sysctl_fix,
)
from lbtune.diagnose.rules.registry import rule
from lbtune.host.net.sockdiag import ListenSocket
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.tune.lint import SYN_BACKLOG_MAX
from lbtune.tune.plan import Mode
from lbtune.vocab import Level

_COUNTED = "each client retry counted again: not a number of connections"


def _sock_drops(ctx: Context, s: ListenSocket, drops: int) -> Evidence:
    ep = endpoint(s.family, s.addr, s.port)
    ref = CounterRef(C.LISTEN, (s.family, s.addr, s.port))
    return moved(ctx, f"sock_diag {ep} drops", drops, "sock_diag", ref)


def needed_backlog(backlog: int) -> int:
    return min(65535, max(1024, pow2_at_least(4 * max(1, backlog))))


def _app_backlog_fix(port: Optional[int], current: Optional[int], needed: int) -> Fix:
    where = f" on port {port}" if port is not None else ""
    return Fix(
        knob=f"application listen() backlog{where}",
        current=None if current is None else str(current),
        desired=str(needed),
        note="e.g. nginx `listen ... backlog=N;`, HAProxy `backlog N`, then restart it; "
        "also check the accept loop is not starved (workers, CPU)",
        scope=APPLICATION,
    )


def backlog_fixes(
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
                "a listener keeps the limit it got at listen(): restart the application after",
            )
        )
    if not limited_by_somaxconn:
        fixes.append(_app_backlog_fix(s.port, s.backlog, needed))
    return fixes


@rule(
    "accept-queue-overflow",
    "accept queue of a listening socket full: handshakes dropped",
    sysctls=("net.core.somaxconn",),
)
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
    unit = "handshake packets"
    if not guilty:
        yield finding(
            ctx,
            "accept-queue-overflow",
            "Accept queue overflow (listener unknown)",
            Level.FAIL,
            "tcp listeners",
            f"{overflows} SYNs and handshake ACKs ({_COUNTED}) found a full accept queue "
            f"{since(ctx)}; no listener is full now and per-socket drops are not available, "
            "so the port is unknown.",
            overflows,
            unit,
            evidence,
            [
                _app_backlog_fix(None, None, 4096),
                sysctl_fix(ctx, "net.core.somaxconn", max(4096, somaxconn or 0)),
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
        limit = (
            f"somaxconn ({somaxconn}): the application asked for at least that"
            if limited_by_somaxconn
            else f"the application's listen() backlog ({s.backlog}; somaxconn is {somaxconn})"
        )
        ep = endpoint(s.family, s.addr, s.port)
        cause = (
            f"{count} SYNs and handshake ACKs ({_COUNTED}) dropped {since(ctx)} because the "
            f"accept queue was full: {s.queue} waiting now of an effective backlog of "
            f"{s.backlog} = min(app backlog, net.core.somaxconn); the limit here is {limit}. "
            "The application accepts connections more slowly than they arrive."
        )
        ev = [*evidence, _sock_drops(ctx, s, d.drops or 0)]
        yield finding(
            ctx,
            "accept-queue-overflow",
            f"Accept queue overflow on tcp port {s.port}",
            Level.FAIL,
            f"tcp {ep}",
            cause,
            count or drops,
            unit,
            ev,
            backlog_fixes(ctx, s, somaxconn, needed_backlog(s.backlog)),
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
    level: Level,
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
        else "SYN queue overflow answered with syncookies"
    )
    if not suspects:
        yield finding(
            ctx,
            rule_id,
            title,
            level,
            "tcp listeners",
            f"{count} SYNs {since(ctx)} {what} No listener is identifiable now (per-socket "
            "drops unavailable and no SYN queue full at the end of the window).",
            count,
            "SYNs",
            evidence,
            [
                *extra_fixes,
                _app_backlog_fix(None, None, 4096),
                sysctl_fix(
                    ctx,
                    "net.core.somaxconn",
                    max(4096, somaxconn or 0),
                    "a listener's SYN queue is bounded by its effective backlog",
                ),
            ],
        )
        return
    for s, drops in suspects:
        n = drops if drops is not None and len(suspects) > 1 else count
        ep = endpoint(s.family, s.addr, s.port)
        queue = f"{s.syn_recv} half-open now, " if s.syn_recv is not None else ""
        ev = list(evidence)
        if drops is not None:
            ev.append(_sock_drops(ctx, s, drops))
        if s.syn_recv is not None:
            ev.append(
                reading(
                    f"sock_diag {ep} SYN-RECV",
                    s.syn_recv,
                    "sock_diag",
                    CounterRef(C.SYN_RECV, (s.family, s.addr, s.port)),
                )
            )
        yield finding(
            ctx,
            rule_id,
            f"{title} on tcp port {s.port}",
            level,
            f"tcp {ep}",
            f"{n} SYNs {since(ctx)} {what} Listener {ep}: {queue}effective backlog "
            f"{s.backlog} = min(listen() backlog, net.core.somaxconn = {somaxconn}), which "
            "also bounds its SYN queue.",
            n,
            "SYNs",
            ev,
            [*extra_fixes, *backlog_fixes(ctx, s, somaxconn, needed_backlog(s.backlog))],
        )


@rule(
    "syn-queue-full",
    "SYN queue full with syncookies off: SYNs dropped",
    sysctls=("net.core.somaxconn", "net.ipv4.tcp_syncookies", "net.ipv4.tcp_max_syn_backlog"),
    syn_queues_on=("TcpExt.TCPReqQFullDrop",),
)
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
                mode=Mode.SET,
            )
        )
    max_syn = ctx.sysctl_int("net.ipv4.tcp_max_syn_backlog")
    if cookies != 1 and max_syn is not None:
        # Without cookies the kernel also drops once 3/4 of tcp_max_syn_backlog is used; only
        # then is it part of the limit (measured: with backlog 4 raising it changes nothing).
        biggest = max((needed_backlog(s.backlog) for s, _ in _syn_suspects(ctx)), default=4096)
        needed = min(SYN_BACKLOG_MAX, pow2_at_least(biggest * 4 / 3))
        if biggest > 0.75 * max_syn and needed > max_syn:
            fixes.append(sysctl_fix(ctx, "net.ipv4.tcp_max_syn_backlog", needed))
    yield from _syn_findings(
        ctx,
        "syn-queue-full",
        Level.FAIL,
        n,
        f"({_COUNTED}) were dropped because the listener's SYN queue (half-open connections) "
        f"was full and net.ipv4.tcp_syncookies is {cookies}. Clients retry after 1 s, 3 s, "
        "7 s: it shows as connect-latency steps.",
        [snmp_ev(ctx, "TcpExt.TCPReqQFullDrop")],
        fixes,
    )


@rule(
    "syn-cookies",
    "SYN queue overflowed and syncookies answered",
    sysctls=("net.core.somaxconn",),
    syn_queues_on=("TcpExt.TCPReqQFullDoCookies", "TcpExt.SyncookiesSent"),
)
def syn_cookies(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPReqQFullDoCookies")
    sent = ctx.window.snmp("TcpExt.SyncookiesSent")
    count = max(n, sent)
    if count <= 0:
        return
    yield from _syn_findings(
        ctx,
        "syn-cookies",
        Level.WARN,
        count,
        "met a full SYN queue and were answered with syncookies: connections survive but "
        "lose the TCP options a cookie cannot carry. Either a SYN flood or a backlog too "
        "small for the connection rate.",
        [snmp_ev(ctx, "TcpExt.TCPReqQFullDoCookies"), snmp_ev(ctx, "TcpExt.SyncookiesSent")],
        [],
    )
