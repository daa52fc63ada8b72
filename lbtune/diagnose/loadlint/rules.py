"""The load linter's host rules: each compares one load plan with one of the host's limits.

A rule is a small function of (plan, role, facts) registered with `@host_rule`, like the
diagnose rules (diagnose/rules/registry.py): it declares the issue ids it reports (each
listed in docs/checklist.md) and the roles whose facts it judges (a client's ports and
open-file limit, a server's backlogs and TIME_WAIT buckets). `host_issues` runs them in the
order they are registered here, which is the order their issues are reported in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

from lbtune.diagnose.loadlint.model import (
    CLIENT_ROLES,
    FD_OVERHEAD,
    NEAR,
    SERVER_ROLES,
    SLOW_RESPONSE,
    STALLED_RESPONSE,
    TIME_WAIT_SECONDS,
    LoadFacts,
    LoadIssue,
    LoadPlan,
    fmt_number,
)
from lbtune.vocab import Level

HostRuleFn = Callable[[LoadPlan, str, LoadFacts], Iterable[LoadIssue]]


@dataclass(frozen=True)
class HostRule:
    ids: tuple[str, ...]  # the LoadIssue.rule values it reports
    roles: Optional[tuple[str, ...]]  # the roles it judges; None: every role
    fn: HostRuleFn


HOST_RULES: list[HostRule] = []


def host_rule(
    *ids: str, roles: Optional[Sequence[str]] = None
) -> Callable[[HostRuleFn], HostRuleFn]:
    """Register a host rule reporting `ids`, run only for `roles` (every role when None)."""

    def register(fn: HostRuleFn) -> HostRuleFn:
        HOST_RULES.append(HostRule(ids, None if roles is None else tuple(roles), fn))
        return fn

    return register


def host_issues(plan: LoadPlan, role: str, facts: LoadFacts) -> list[LoadIssue]:
    """Every host rule's issues for one plan run against (or from) a host of `role`."""
    out: list[LoadIssue] = []
    for r in HOST_RULES:
        if r.roles is None or role in r.roles:
            out.extend(r.fn(plan, role, facts))
    return out


def _ephemeral_ports(plan: LoadPlan, facts: LoadFacts) -> Optional[int]:
    # A tool that picks its own source ports has its own rule; the kernel's range is not used.
    return None if plan.own_ports else facts.ephemeral_ports


_PORT_FIX = (
    'sysctl net.ipv4.ip_local_port_range = "1024 65535" (profile loadgen), or spread '
    "the load over more client IPs or target addresses"
)
_TIME_WAIT_FIX = (
    "use keep-alive, or net.ipv4.tcp_tw_reuse = 1 and a wider ip_local_port_range (profile "
    "loadgen)"
)


@host_rule("connections-above-ports", "connections-near-ports", roles=(*CLIENT_ROLES, "lb-proxy"))
def _connections_vs_ports(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    ports = _ephemeral_ports(plan, facts)
    conns = plan.connections
    if ports is None or conns is None:
        return
    tool = plan.tool
    where = "per destination" if role in CLIENT_ROLES else "per backend address"
    if conns > ports:
        yield LoadIssue(
            "connections-above-ports",
            Level.FAIL if role in CLIENT_ROLES else Level.WARN,
            tool,
            f"{tool} opens {conns} connections but this host has {ports} ephemeral ports "
            f"{where} (ip_local_port_range {facts.port_range[0]}-{facts.port_range[1]}"  # type: ignore[index]
            + (f", {facts.reserved_ports} reserved" if facts.reserved_ports else "")
            + ")",
            "each connection to one address:port needs its own source port; past the range "
            "connect() fails with EADDRNOTAVAIL and the tool reports socket errors, not "
            "server errors",
            f"at most {ports} connections per client IP, or widen the range: {_PORT_FIX}",
        )
    elif conns > NEAR * ports:
        yield LoadIssue(
            "connections-near-ports",
            Level.WARN,
            tool,
            f"{tool} opens {conns} connections, {100 * conns // ports}% of the {ports} "
            f"ephemeral ports {where}",
            "the connections of anything else on this host (and TIME_WAIT left over from "
            "earlier runs) share the same ports",
            _PORT_FIX,
        )


@host_rule("time-wait-exhausts-ports", roles=CLIENT_ROLES)
def _time_wait_vs_ports(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    ports = _ephemeral_ports(plan, facts)
    rate = plan.conn_rate
    if ports is None or (rate is None and plan.keepalive):
        return
    reuse = facts.tw_reuse == 1
    reuse_note = (
        " (tcp_tw_reuse=1 lets connect() reuse TIME_WAIT ports, so this may still work)"
        if reuse else ""
    )  # fmt: skip
    if rate is not None and rate * TIME_WAIT_SECONDS > ports:
        yield LoadIssue(
            "time-wait-exhausts-ports",
            Level.WARN if reuse else Level.FAIL,
            plan.tool,
            f"{fmt_number(rate)} new connections/s x {TIME_WAIT_SECONDS} s TIME_WAIT = "
            f"{int(rate * TIME_WAIT_SECONDS)} ports, more than the {ports} ephemeral "
            f"ports{reuse_note}",
            "a connection closed by the client keeps its source port in TIME_WAIT for "
            "60 s; at this rate the ports run out within the first minute and "
            "connect() fails",
            _TIME_WAIT_FIX,
        )
    elif rate is None and (plan.new_connections or 0) > ports:
        yield LoadIssue(
            "time-wait-exhausts-ports",
            Level.WARN,
            plan.tool,
            f"{plan.tool} opens {plan.new_connections} connections in one run, more "
            f"than the {ports} ephemeral ports{reuse_note}",
            "each closed connection keeps its source port 60 s in TIME_WAIT; a run "
            f"faster than {ports // TIME_WAIT_SECONDS} connections/s runs out of ports",
            _TIME_WAIT_FIX,
        )


@host_rule("time-wait-buckets", roles=SERVER_ROLES)
def _time_wait_vs_buckets(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    rate = plan.conn_rate
    buckets = facts.max_tw_buckets
    if rate is None or buckets is None or rate * TIME_WAIT_SECONDS <= buckets:
        return
    yield LoadIssue(
        "time-wait-buckets",
        Level.WARN,
        plan.tool,
        f"{fmt_number(rate)} new connections/s x {TIME_WAIT_SECONDS} s = "
        f"{int(rate * TIME_WAIT_SECONDS)} TIME_WAIT sockets, more than "
        f"net.ipv4.tcp_max_tw_buckets {buckets}",
        "when the server closes first it keeps TIME_WAIT; past tcp_max_tw_buckets the "
        "kernel destroys them early (TCPTimeWaitOverflow) and late packets of old "
        "connections can hit new ones",
        "use keep-alive, or raise net.ipv4.tcp_max_tw_buckets",
    )


@host_rule("connections-above-backlog", roles=SERVER_ROLES)
def _connections_vs_backlog(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    conns = plan.connections
    if plan.port is None or plan.port not in facts.backlogs or conns is None:
        return
    backlog = facts.backlogs[plan.port]
    if conns <= backlog:
        return
    somaxconn = facts.somaxconn if facts.somaxconn is not None else "?"
    yield LoadIssue(
        "connections-above-backlog",
        Level.FAIL,
        plan.tool,
        f"{plan.tool} opens {conns} connections at once; port {plan.port} accepts a "
        f"queue of {backlog} (effective backlog = min(listen() backlog, somaxconn "
        f"{somaxconn}))",
        "connections beyond the accept queue are dropped until the server accepts; "
        "the client retries their SYN after 1 s, 3 s, 7 s, which shows up as latency "
        "the server does not have",
        "raise the application's listen backlog (nginx: listen ... backlog=N) and "
        "net.core.somaxconn above the connection count",
    )


def _nofile(plan: LoadPlan, role: str, facts: LoadFacts) -> Optional[tuple[int, str]]:
    """The open-file limit the tool runs under and where it comes from, None when unknown:
    a `ulimit -n` on the line counts for every role, the shell's own only for a client."""
    nofile = plan.nofile_soft or (facts.nofile_soft if role in CLIENT_ROLES else None)
    if nofile is None:
        return None
    source = "ulimit -n on the command line" if plan.nofile_soft else "this shell's soft limit"
    return nofile, source


def _fixed_rate_vegeta(plan: LoadPlan) -> bool:
    return plan.tool == "vegeta" and bool(plan.rate)


@host_rule("vegeta-nofile")
def _vegeta_vs_nofile(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    limit = _nofile(plan, role, facts)
    if limit is None or not _fixed_rate_vegeta(plan) or plan.rate is None:
        return
    nofile, source = limit
    rate, cap = plan.rate, plan.connections
    need, need_warn = rate * SLOW_RESPONSE, rate * STALLED_RESPONSE
    if cap is not None:
        need, need_warn = min(need, cap), min(need_warn, cap)
    if need + FD_OVERHEAD > nofile:
        verdict, lat = Level.FAIL, SLOW_RESPONSE
    elif need_warn + FD_OVERHEAD > nofile:
        verdict, lat = Level.WARN, STALLED_RESPONSE
    else:
        return
    held = int(min(rate * lat, cap) if cap else rate * lat)
    yield LoadIssue(
        "vegeta-nofile",
        verdict,
        plan.tool,
        f"vegeta at {fmt_number(rate)} requests/s holds {held} sockets "
        f"open when responses take {int(lat * 1000)} ms; the open-file limit "
        f"is {nofile} ({source})",
        "vegeta keeps sending at the fixed rate whatever the server's latency, so "
        "sockets in flight = rate x response time; past the limit it reports "
        "'too many open files' errors that look like server failures",
        f"ulimit -n {max(65536, int(rate) * 2)} before the run, or bound it "
        "with -max-workers",
    )


@host_rule("connections-above-nofile")
def _connections_vs_nofile(plan: LoadPlan, role: str, facts: LoadFacts) -> Iterator[LoadIssue]:
    limit = _nofile(plan, role, facts)
    conns = plan.connections
    # A fixed-rate vegeta's sockets follow its rate, not a connection count: its own rule.
    if limit is None or _fixed_rate_vegeta(plan) or conns is None:
        return
    nofile, source = limit
    if conns + FD_OVERHEAD <= nofile:
        return
    yield LoadIssue(
        "connections-above-nofile",
        Level.FAIL,
        plan.tool,
        f"{plan.tool} opens {conns} connections; the open-file limit is {nofile} ({source})",
        "every connection is a file descriptor; past the limit socket() fails with "
        "EMFILE and the tool counts errors, not server responses",
        f"ulimit -n {max(65536, conns * 2)} before the run",
    )
