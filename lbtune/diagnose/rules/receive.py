"""Rules for sockets that cannot take what arrives: TCP backlog drops, pruning, UDP buffers.

Before blaming a sysctl these look at the sockets themselves (sock_diag memory info). A
TCP socket whose receive buffer is below net.ipv4.tcp_rmem's default was fixed by the
application with SO_RCVBUF: the kernel no longer autotunes it and tcp_rmem does nothing
for it (measured), so the fix is in the application, and the finding names its port. A UDP
socket gets net.core.rmem_default unless the application sets SO_RCVBUF: only then is the
sysctl the fix. A full receive queue also means the application reads too slowly, which no
buffer size cures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import APPLICATION, Evidence, Finding, Fix
from lbtune.diagnose.rules.base import (
    endpoint,
    finding,
    moved,
    pow2_at_least,
    since,
    snmp_ev,
    sysctl_fix,
)
from lbtune.diagnose.rules.registry import rule
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.window import ReceiverDelta
from lbtune.vocab import Level

_TCP_RMEM_DEFAULT = [4096, 131072, 6291456]  # the kernel's tcp_rmem when it cannot be read


@dataclass(frozen=True)
class _Pinned:
    """Connected TCP sockets of one local endpoint whose SO_RCVBUF the application fixed."""

    family: int
    addr: str
    port: int
    sockets: int
    rcvbuf: int  # the smallest receive buffer among them
    queued: int  # the most receive memory in use
    unread: int  # bytes waiting to be read, all sockets
    drops: int  # segments dropped over the window, all sockets

    @property
    def endpoint(self) -> str:
        return endpoint(self.family, self.addr, self.port)


def _split(
    receivers: list[ReceiverDelta], rmem_default: int
) -> tuple[list[_Pinned], list[ReceiverDelta]]:
    """Sockets under pressure: (pinned below tcp_rmem's default, grouped by local
    endpoint, most drops first; the others)."""
    groups: dict[tuple[int, str, int], list[ReceiverDelta]] = {}
    others = []
    for r in receivers:
        if r.sock.rcvbuf < rmem_default:
            groups.setdefault((r.sock.family, r.sock.addr, r.sock.port), []).append(r)
        else:
            others.append(r)
    pinned = [
        _Pinned(
            family=k[0],
            addr=k[1],
            port=k[2],
            sockets=len(rs),
            rcvbuf=min(r.sock.rcvbuf for r in rs),
            queued=max(r.sock.queued for r in rs),
            unread=sum(r.sock.unread for r in rs),
            drops=sum(r.drops or 0 for r in rs),
        )
        for k, rs in groups.items()
    ]
    pinned.sort(key=lambda p: (-p.drops, p.port))
    return pinned, others


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


@dataclass(frozen=True)
class _TcpLoss:
    """A TCP receive-side loss as one rule saw it, before it is blamed on a socket or a sysctl.

    `pinned_title` takes `{port}`. `default_too`: the loss is bounded by the socket's buffer
    as it is now, not as far as it may grow, so the fix raises tcp_rmem's default as well as
    its maximum."""

    rule_id: str
    title: str
    pinned_title: str
    level: Level
    count: int
    unit: str
    what: str  # the sentence that opens every finding's text
    evidence: tuple[Evidence, ...]
    default_too: bool = False


def _tcp_receive(ctx: Context, loss: _TcpLoss) -> Iterator[Finding]:
    """Findings of a TCP receive-side loss: per application port whose sockets pin a small
    SO_RCVBUF (the application's fix), and a tcp_rmem finding for the rest."""
    rmem = ctx.sysctl_ints("net.ipv4.tcp_rmem") or _TCP_RMEM_DEFAULT
    receivers = ctx.window.receivers()
    pinned, others = _split(receivers or [], rmem[1])
    for p in pinned:
        yield _pinned_finding(ctx, loss, p, rmem)
    if pinned and not others:
        return
    yield _tcp_rmem_finding(ctx, loss, rmem, receivers, others)


def _pinned_finding(ctx: Context, loss: _TcpLoss, p: _Pinned, rmem: list[int]) -> Finding:
    """The application's finding: its sockets on one port fixed a small SO_RCVBUF."""
    several = (
        f"{p.sockets} sockets of tcp {p.endpoint} have"
        if p.sockets > 1
        else (f"The socket of tcp {p.endpoint} has")
    )
    return finding(
        ctx,
        loss.rule_id,
        loss.pinned_title.format(port=p.port),
        loss.level,
        f"tcp {p.endpoint}",
        f"{loss.what} {several} a receive buffer of {p.rcvbuf} "
        f"bytes, below net.ipv4.tcp_rmem's default ({rmem[1]}): the application set "
        "SO_RCVBUF, so the kernel does not autotune it and tcp_rmem does not apply to it. "
        f"{p.queued} bytes of receive memory in use, {p.unread} bytes unread: the "
        "application also reads more slowly than data arrives.",
        p.drops or loss.count,
        "segments" if p.drops else loss.unit,
        [
            *loss.evidence,
            moved(
                ctx,
                f"sock_diag tcp {p.endpoint} drops",
                p.drops,
                "sock_diag",
                CounterRef(C.RECEIVERS, (p.family, p.addr, p.port)),
            ),
        ],
        [
            Fix(
                knob=f"SO_RCVBUF of the application's sockets on tcp port {p.port}",
                current=str(p.rcvbuf),
                desired="not set",
                note="stop setting it (TCP then autotunes up to tcp_rmem's maximum, "
                f"{rmem[2]}) or set it to at least {pow2_at_least(4 * p.rcvbuf)}; raising "
                "net.ipv4.tcp_rmem changes nothing for these sockets",
                scope=APPLICATION,
            ),
            Fix(
                knob=f"the application's read loop on tcp port {p.port}",
                current=None,
                desired=None,
                note="data waits unread: more workers or threads, or less work per read",
                scope=APPLICATION,
            ),
        ],
    )


def _pressure(receivers: Optional[list[ReceiverDelta]], others: list[ReceiverDelta]) -> str:
    """The sentence on autotuned sockets under pressure (worst one named), for tcp_rmem's
    finding."""
    if receivers is None:
        return " Per-socket buffers were not read here (`ss -tm` shows them)."
    if others:
        w = max(others, key=lambda r: (r.drops or 0, r.sock.queued)).sock
        return (
            f" {len(others)} autotuned socket(s) under pressure, e.g. tcp "
            f"{endpoint(w.family, w.addr, w.port)} <- {w.peer}: receive buffer {w.rcvbuf}, "
            f"{w.queued} in use."
        )
    return " No socket was under receive pressure at the end of the window."


def _tcp_rmem_finding(
    ctx: Context,
    loss: _TcpLoss,
    rmem: list[int],
    receivers: Optional[list[ReceiverDelta]],
    others: list[ReceiverDelta],
) -> Finding:
    """The host's finding: tcp_rmem (its maximum, and its default when `default_too`)."""
    default = max(2 * rmem[1], 131072) if loss.default_too else rmem[1]
    needed = f"{rmem[0]} {default} {max(2 * rmem[2], 16777216)}"
    how = (
        "the default too: an autotuned socket's buffer starts there and grows only as the "
        "application reads; sockets take it when created (accepted ones from their "
        "listener): restart the application; and read faster"
        if loss.default_too
        else "and read faster"
    )
    return finding(
        ctx,
        loss.rule_id,
        loss.title,
        loss.level,
        "tcp sockets",
        f"{loss.what} The application reads too slowly, or tcp_rmem's maximum is too small for "
        f"the bandwidth-delay product.{_pressure(receivers, others)}",
        loss.count,
        loss.unit,
        list(loss.evidence),
        [sysctl_fix(ctx, "net.ipv4.tcp_rmem", needed, how)],
    )


@rule(
    "socket-backlog-drop",
    "packets dropped because a socket's backlog was full",
    sysctls=("net.ipv4.tcp_rmem",),
    receivers=True,
)
def socket_backlog_drop(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.TCPBacklogDrop")
    if n <= 0:
        return
    loss = _TcpLoss(
        "socket-backlog-drop",
        "TCP segments dropped: socket backlog full",
        "TCP segments dropped on port {port}: SO_RCVBUF set small by the application",
        Level.FAIL,
        n,
        "segments",
        f"{n} segments dropped {since(ctx)}: they arrived while the application held the "
        "socket and its backlog (bounded by the receive + send buffer) was full.",
        (snmp_ev(ctx, "TcpExt.TCPBacklogDrop"),),
        # the backlog limit is sk_rcvbuf + sk_sndbuf + 64 KiB as they are (tcp_add_backlog):
        # measured in a namespace, raising tcp_rmem's maximum alone left the drops as they
        # were (median 53 drops per trigger either way), raising the default stopped them
        # (bench/results/receive_faults.md)
        default_too=True,
    )
    yield from _tcp_receive(ctx, loss)


@rule(
    "rcvbuf-prune",
    "TCP receive queues pruned or collapsed for lack of buffer",
    sysctls=("net.ipv4.tcp_rmem",),
    receivers=True,
)
def rcvbuf_prune(ctx: Context) -> Iterator[Finding]:
    """Fires when the kernel had to collapse (TCPRcvCollapsed) or drop (RcvPruned, OfoPruned)
    queued data. PruneCalled alone is not a finding: tcp_prune_queue first grows an autotuned
    buffer to the memory in use, up to tcp_rmem's maximum (tcp_clamp_window), and counts
    PruneCalled for every such growth (bench/results/receive_faults.md: more calls once the
    maximum is raised, and no collapse); only a buffer that cannot grow collapses or drops."""
    w = ctx.window
    pruned = w.snmp("TcpExt.RcvPruned")
    ofo = w.snmp("TcpExt.OfoPruned")
    called = w.snmp("TcpExt.PruneCalled")
    collapsed = w.snmp("TcpExt.TCPRcvCollapsed")
    lost = pruned + ofo
    if lost <= 0 and collapsed <= 0:
        return
    loss = _TcpLoss(
        "rcvbuf-prune",
        "TCP receive buffer pressure: queues pruned",
        "TCP receive queues pruned on port {port}: SO_RCVBUF set small by the application",
        Level.FAIL if lost else Level.WARN,
        lost or collapsed,
        "prunes" if lost else "collapsed segments",
        f"The kernel ran out of receive buffer {_times(called)} {since(ctx)} and had to "
        f"collapse queues ({collapsed} segments copied); {_times(lost)} it dropped queued "
        "data (the sender retransmits).",
        tuple(
            snmp_ev(ctx, k)
            for k in (
                "TcpExt.PruneCalled",
                "TcpExt.TCPRcvCollapsed",
                "TcpExt.RcvPruned",
                "TcpExt.OfoPruned",
            )
        ),
    )
    yield from _tcp_receive(ctx, loss)


_READ_FASTER = "or read faster (more threads, SO_REUSEPORT)"


def _unknown_socket_fixes(ctx: Context) -> list[Fix]:
    """Fixes when no socket is known: the ceiling, the default, and the application."""
    rmem_max = ctx.sysctl_int("net.core.rmem_max") or 212992
    rmem_default = ctx.sysctl_int("net.core.rmem_default") or 212992
    return [
        sysctl_fix(
            ctx,
            "net.core.rmem_max",
            pow2_at_least(4 * rmem_max),
            "the ceiling of SO_RCVBUF requests: then raise SO_RCVBUF in the application",
        ),
        sysctl_fix(
            ctx,
            "net.core.rmem_default",
            pow2_at_least(4 * rmem_default),
            "for sockets that do not set SO_RCVBUF",
        ),
    ]


def _udp_fixes(
    ctx: Context, port: int, rcvbuf: Optional[int], rmem_default: Optional[int]
) -> list[Fix]:
    rmem_max = ctx.sysctl_int("net.core.rmem_max")
    needed = pow2_at_least(4 * max(rcvbuf or 0, 65536))
    read_faster = _READ_FASTER
    if rcvbuf is not None and rmem_default is not None and rcvbuf == rmem_default:
        # The application did not set SO_RCVBUF: the socket has net.core.rmem_default.
        return [
            sysctl_fix(
                ctx,
                "net.core.rmem_default",
                needed,
                f"sockets that do not set SO_RCVBUF get it; {read_faster}",
            )
        ]
    fixes = [
        Fix(
            knob=f"SO_RCVBUF of the socket on udp port {port}",
            current=None if rcvbuf is None else str(rcvbuf),
            desired=str(needed),
            note="set by the application (the kernel doubles the value asked for, up to "
            f"2 x net.core.rmem_max); {read_faster}",
            scope=APPLICATION,
        )
    ]
    if rmem_max is None or needed > 2 * rmem_max:
        fixes.append(
            sysctl_fix(
                ctx,
                "net.core.rmem_max",
                needed // 2,
                "the ceiling of SO_RCVBUF requests: alone it changes nothing, the "
                "application must ask for more",
            )
        )
    return fixes


@rule(
    "udp-rcvbuf-errors",
    "UDP datagrams dropped: socket receive buffer full",
    sysctls=("net.core.rmem_max", "net.core.rmem_default"),
)
def udp_rcvbuf_errors(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    n4 = w.snmp("Udp.RcvbufErrors")
    n6 = w.snmp("Udp6.RcvbufErrors")
    total = n4 + n6
    if total <= 0:
        return
    rmem_default = ctx.sysctl_int("net.core.rmem_default")
    ev = [snmp_ev(ctx, "Udp.RcvbufErrors")]
    if n6:
        ev.append(
            moved(
                ctx,
                "Udp6.RcvbufErrors",
                n6,
                "/proc/net/snmp6",
                CounterRef(C.SNMP, ("Udp6.RcvbufErrors",)),
            )
        )
    sockets = [d for d in w.udp() if d.drops]
    if not sockets:
        yield finding(
            ctx,
            "udp-rcvbuf-errors",
            "UDP receive buffer errors",
            Level.FAIL,
            "udp",
            f"{total} datagrams dropped {since(ctx)} because a socket's receive buffer was "
            "full (the socket is not known: per-socket drops unavailable or already gone).",
            total,
            "datagrams",
            ev,
            _unknown_socket_fixes(ctx),
        )
        return
    for d in sockets:
        s = d.sock
        ep = endpoint(s.family, s.addr, s.port)
        set_by = (
            "net.core.rmem_default: the application did not set SO_RCVBUF"
            if s.rcvbuf is not None and s.rcvbuf == rmem_default
            else "set by the application with SO_RCVBUF"
        )
        yield finding(
            ctx,
            "udp-rcvbuf-errors",
            f"UDP receive buffer full on port {s.port}",
            Level.FAIL,
            f"udp {ep}",
            f"{d.drops} datagrams to this socket dropped {since(ctx)}: its receive buffer "
            f"({s.rcvbuf} bytes, {set_by}; {s.queue} in use now) filled faster than the "
            "application read.",
            d.drops or 0,
            "datagrams",
            [
                *ev,
                moved(
                    ctx,
                    f"sock_diag udp {ep} drops",
                    d.drops or 0,
                    "sock_diag",
                    CounterRef(C.UDP, (s.family, s.addr, s.port)),
                ),
            ],
            _udp_fixes(ctx, s.port, s.rcvbuf, rmem_default),
        )
