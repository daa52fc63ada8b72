"""Rules for TCP's table and memory limits: TIME_WAIT buckets, orphans, tcp_mem, local ports.

Where a finding is about how full something is now (orphans, memory pages, ports in use) its
count is a gauge: a reading at the end of the window, with no per-second rate.
tcp_max_orphans and tcp_mem are host-global (a namespace does not show them);
tcp_max_tw_buckets and ip_local_port_range belong to each namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import APPLICATION, Evidence, Finding, Fix
from lbtune.diagnose.rules.base import (
    finding,
    pow2_at_least,
    reading,
    shown,
    since,
    snmp_ev,
    sysctl_fix,
)
from lbtune.diagnose.rules.registry import rule
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.model import Sample, SockStat
from lbtune.observe.procnet import SOCKSTAT
from lbtune.tune.plan import Mode
from lbtune.vocab import Level


def _sockstat(name: str, field: str, value: int) -> Evidence:
    """A /proc/net/sockstat TCP gauge (`TCP: ... tw N`)."""
    return reading(f"sockstat TCP {name}", value, SOCKSTAT, CounterRef(C.SOCKSTAT, (field,)))


@rule(
    "timewait-overflow",
    "TIME_WAIT bucket table full: sockets closed without TIME_WAIT",
    sysctls=("net.ipv4.tcp_max_tw_buckets",),
)
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
        Level.WARN,
        "tcp",
        f"{n} sockets {since(ctx)} skipped TIME_WAIT because net.ipv4.tcp_max_tw_buckets = "
        f"{cap} was reached ({tw_now} in TIME_WAIT now). Late segments of those connections "
        "can corrupt new ones on the same ports; the kernel logs 'TCP: time wait bucket "
        "table overflow'.",
        n,
        "sockets closed without TIME_WAIT",
        [snmp_ev(ctx, "TcpExt.TCPTimeWaitOverflow"), _sockstat("tw", "tcp_tw", tw_now)],
        [
            sysctl_fix(
                ctx,
                "net.ipv4.tcp_max_tw_buckets",
                needed,
                "or use keep-alive so fewer connections close",
            )
        ],
    )


@rule(
    "orphan-overflow",
    "too many orphaned sockets or TCP out of memory: connections reset",
    sysctls=("net.ipv4.tcp_max_orphans",),
)
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
        Level.FAIL if n > 0 else Level.WARN,
        "tcp",
        f"{n} connections reset {since(ctx)} because orphaned sockets (closed by the "
        f"application, still sending) exceeded net.ipv4.tcp_max_orphans = {shown(cap)} or TCP "
        f"ran out of memory; {orphans} orphans now.",
        n or orphans,
        "connections reset" if n else "orphaned sockets now",
        [
            snmp_ev(ctx, "TcpExt.TCPAbortOnMemory"),
            _sockstat("orphan", "tcp_orphan", orphans),
        ],
        [sysctl_fix(ctx, "net.ipv4.tcp_max_orphans", pow2_at_least(max(2 * (cap or 0), 65536)))],
        gauge=n <= 0,
    )


@rule(
    "tcp-memory-pressure",
    "TCP memory above tcp_mem pressure threshold",
    sysctls=("net.ipv4.tcp_mem",),
)
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
        # Twice each threshold, and the pressure threshold at least four times what is in
        # use now: doubling a limit far below the load would leave it under pressure.
        wanted = [max(2 * tcp_mem[0], 2 * pages), max(2 * tcp_mem[1], 4 * pages)]
        wanted.append(max(2 * tcp_mem[2], 8 * pages, wanted[1]))
        needed = " ".join(str(v) for v in wanted)
    yield finding(
        ctx,
        "tcp-memory-pressure",
        "TCP memory pressure",
        Level.WARN,
        "tcp",
        f"TCP entered memory pressure {n} times {since(ctx)}; {pages} pages in use now "
        f"against tcp_mem = {shown(ctx.sysctl('net.ipv4.tcp_mem'))} (min pressure max, in "
        "pages). Under pressure the kernel shrinks buffers; above max it drops.",
        n or pages,
        "times under pressure" if n else "pages in use",
        [
            snmp_ev(ctx, "TcpExt.TCPMemoryPressures"),
            _sockstat("mem", "tcp_mem_pages", pages),
        ],
        [sysctl_fix(ctx, "net.ipv4.tcp_mem", needed)] if needed else [],
        gauge=n <= 0,
    )


PORT_RANGE = "10000 65535"  # as profiles/web.toml and lb-proxy.toml set it


@dataclass(frozen=True)
class _PortsUsed:
    """How many ports of the range are taken, and how that was counted."""

    used: int
    how: str  # the sentence after the number
    evidence: Evidence
    exact: bool  # counted per destination (sock_diag), not estimated from TIME_WAIT
    unit: str


def _ports_used(after: Sample, st: SockStat, size: int) -> _PortsUsed:
    if after.ephemeral_in_use is not None:
        how = (
            "TCP sockets hold a local port of the range toward one destination (the busiest "
            "pair of source address and destination, counted with sock_diag)"
        )
        evidence = reading(
            "sock_diag tcp ports in range, busiest destination", after.ephemeral_in_use,
            "sock_diag", CounterRef(C.EPHEMERAL),
        )  # fmt: skip
        return _PortsUsed(after.ephemeral_in_use, how, evidence, True, "ports in use")
    # A recorded tree has no per-socket list: TIME_WAIT holds its port for 60 s, but a
    # server's TIME_WAIT sockets hold the server port, not ephemeral ones.
    used = st.tcp_tw
    how = (
        "sockets are in TIME_WAIT (an estimate from /proc/net/sockstat: it matters only "
        "if this host opens the connections, e.g. a client or a proxy to upstreams)"
    )
    if used > size:
        how += (
            f"; more than the range's {size} ports, so they go to several destinations: "
            "the range runs out per (source, destination) pair, and a capture cannot "
            "count per pair"
        )
    return _PortsUsed(used, how, _sockstat("tw", "tcp_tw", used), False, "sockets in TIME_WAIT")


def _port_fixes(ctx: Context) -> list[Fix]:
    """A wider range, TIME_WAIT reuse, and fewer connections per destination."""
    return [
        sysctl_fix(
            ctx,
            "net.ipv4.ip_local_port_range",
            PORT_RANGE,
            "the range of the shipped web and lb-proxy profiles: 55,536 ports per "
            "destination, above the common service ports. To go lower, list the ports "
            "services listen on in net.ipv4.ip_local_reserved_ports first",
            mode=Mode.SET,
        ),
        sysctl_fix(
            ctx,
            "net.ipv4.tcp_tw_reuse",
            1,
            "reuse TIME_WAIT ports for new outgoing connections (safe with timestamps)",
            mode=Mode.SET,
        ),
        Fix(
            knob="connections per destination",
            current=None,
            desired=None,
            note="reuse connections (keep-alive, connection pools) or spread them over "
            "more source addresses or destinations: the range is per destination",
            scope=APPLICATION,
        ),
    ]


@rule(
    "ephemeral-ports",
    "local ports used up by connections and TIME_WAIT (client)",
    sysctls=("net.ipv4.ip_local_port_range", "net.ipv4.tcp_tw_reuse"),
)
def ephemeral_ports(ctx: Context) -> Iterator[Finding]:
    after = ctx.window.after
    st = after.sockstat
    rng = ctx.sysctl_ints("net.ipv4.ip_local_port_range")
    if st is None or not rng or len(rng) != 2:
        return
    size = max(1, rng[1] - rng[0] + 1)
    p = _ports_used(after, st, size)
    if p.used < 0.8 * size:
        return
    if p.exact and p.used >= size:
        title = "Ephemeral ports exhausted"
        effect = (
            "every port of the range is held: new outgoing connections to a destination "
            "address and port whose ports are all used fail with EADDRNOTAVAIL now"
        )
    else:
        title = "Ephemeral ports nearly exhausted"
        effect = (
            "new outgoing connections to one destination address and port fail with "
            "EADDRNOTAVAIL once its ports are used up"
        )
    yield finding(
        ctx,
        "ephemeral-ports",
        title,
        Level.FAIL if p.exact and p.used >= 0.95 * size else Level.WARN,
        "ip_local_port_range",
        f"{p.used} {p.how}, against a local port range of {size} ({rng[0]}-{rng[1]}): {effect}.",
        p.used,
        p.unit,
        [p.evidence],
        _port_fixes(ctx),
        gauge=True,
    )
