"""Linting a whole load command: its stages parsed by the tool parsers, then the rules that
compare each plan with the host's limits (ephemeral ports, TIME_WAIT, listen backlogs,
open files)."""

from __future__ import annotations

import posixpath
from typing import Optional, Sequence

from lbtune.diagnose.loadlint.model import (
    CLIENT_ROLES,
    FD_OVERHEAD,
    KNOWN_TOOLS,
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
from lbtune.diagnose.loadlint.options import split_command, unwrap
from lbtune.diagnose.loadlint.tools import TOOLS
from lbtune.errors import BadInput
from lbtune.vocab import Level


def _ulimit_nofile(argv: list[str]) -> Optional[int]:
    """N of `ulimit -n N` / `ulimit -Sn N` (the soft limit later stages start with)."""
    if posixpath.basename(argv[0]) != "ulimit" or len(argv) < 3:
        return None
    flags = "".join(a.lstrip("-") for a in argv[1:-1] if a.startswith("-"))
    if "n" in flags and argv[-1].isdigit() and "H" not in flags:
        return int(argv[-1])
    return None


def _parse(command: str) -> list[tuple[LoadPlan, list[LoadIssue]]]:
    stages = split_command(command)
    words = [w for s in stages for w in s]
    out = []
    nofile: Optional[int] = None
    seen: list[str] = []
    for stage in stages:
        argv = unwrap(stage)
        if not argv:
            continue
        limit = _ulimit_nofile(argv)
        if limit is not None:
            nofile = limit
            continue
        name = posixpath.basename(argv[0])
        seen.append(name)
        parser = TOOLS.get(name)
        if parser is None:
            continue
        parsed = parser(argv, words)
        if parsed is None:
            continue
        plan, issues = parsed
        if nofile is not None:
            plan = _with_nofile(plan, nofile)
        out.append((plan, issues))
    if not out:
        what = ", ".join(dict.fromkeys(seen)) or "nothing"
        raise BadInput(
            f"--load: no load generator found in the command (saw {what}; "
            f"know {', '.join(KNOWN_TOOLS)})"
        )
    return out


def _with_nofile(plan: LoadPlan, nofile: int) -> LoadPlan:
    from dataclasses import replace

    return replace(plan, nofile_soft=nofile)


def parse_load(command: str) -> list[LoadPlan]:
    """The load plans of a command line; BadInput when it cannot be split or runs no known tool."""
    return [plan for plan, _ in _parse(command)]


def open_connections(plan: LoadPlan) -> Optional[int]:
    """Connections one plan holds open at once, None when unknown.

    Fixed-rate tools without a connection count (vegeta, httperf) hold rate x response time;
    this assumes a saturated server's 250 ms, capped by the tool's own connection/worker limit.
    """
    if plan.rate and plan.tool in ("vegeta", "httperf"):
        n = int(plan.rate * SLOW_RESPONSE)
        return min(n, plan.connections) if plan.connections else n
    return plan.connections


def planned_connections(plans: Sequence[LoadPlan]) -> Optional[int]:
    """Connections all plans hold open at once (see `open_connections`), None when unknown."""
    counts = [n for n in map(open_connections, plans) if n is not None]
    return sum(counts) if counts else None


# ------------------------------------------------------------------ rules against the host


def _host_rules(plan: LoadPlan, role: str, facts: LoadFacts) -> list[LoadIssue]:
    out: list[LoadIssue] = []
    tool = plan.tool
    # A tool that picks its own source ports has its own rule; the kernel's range is not used.
    ports = None if plan.own_ports else facts.ephemeral_ports
    conns = plan.connections
    port_fix = (
        'sysctl net.ipv4.ip_local_port_range = "1024 65535" (profile loadgen), or spread '
        "the load over more client IPs or target addresses"
    )
    if role in (*CLIENT_ROLES, "lb-proxy") and ports is not None and conns is not None:
        where = "per destination" if role in CLIENT_ROLES else "per backend address"
        if conns > ports:
            level = Level.FAIL if role in CLIENT_ROLES else Level.WARN
            out.append(
                LoadIssue(
                    "connections-above-ports",
                    level,
                    tool,
                    f"{tool} opens {conns} connections but this host has {ports} ephemeral ports "
                    f"{where} (ip_local_port_range {facts.port_range[0]}-{facts.port_range[1]}"  # type: ignore[index]
                    + (f", {facts.reserved_ports} reserved" if facts.reserved_ports else "")
                    + ")",
                    "each connection to one address:port needs its own source port; past the range "
                    "connect() fails with EADDRNOTAVAIL and the tool reports socket errors, not "
                    "server errors",
                    f"at most {ports} connections per client IP, or widen the range: {port_fix}",
                )
            )
        elif conns > NEAR * ports:
            out.append(
                LoadIssue(
                    "connections-near-ports",
                    Level.WARN,
                    tool,
                    f"{tool} opens {conns} connections, {100 * conns // ports}% of the {ports} "
                    f"ephemeral ports {where}",
                    "the connections of anything else on this host (and TIME_WAIT left over from "
                    "earlier runs) share the same ports",
                    port_fix,
                )
            )
    rate = plan.conn_rate
    if rate is not None or not plan.keepalive:
        if role in CLIENT_ROLES and ports is not None:
            reuse = facts.tw_reuse == 1
            reuse_note = (
                " (tcp_tw_reuse=1 lets connect() reuse TIME_WAIT ports, so this may still work)"
                if reuse else ""
            )  # fmt: skip
            if rate is not None and rate * TIME_WAIT_SECONDS > ports:
                out.append(
                    LoadIssue(
                        "time-wait-exhausts-ports",
                        Level.WARN if reuse else Level.FAIL,
                        tool,
                        f"{fmt_number(rate)} new connections/s x {TIME_WAIT_SECONDS} s TIME_WAIT = "
                        f"{int(rate * TIME_WAIT_SECONDS)} ports, more than the {ports} ephemeral "
                        f"ports{reuse_note}",
                        "a connection closed by the client keeps its source port in TIME_WAIT for "
                        "60 s; at this rate the ports run out within the first minute and "
                        "connect() fails",
                        "use keep-alive, or net.ipv4.tcp_tw_reuse = 1 and a wider "
                        "ip_local_port_range (profile loadgen)",
                    )
                )
            elif rate is None and (plan.new_connections or 0) > ports:
                out.append(
                    LoadIssue(
                        "time-wait-exhausts-ports",
                        Level.WARN,
                        tool,
                        f"{tool} opens {plan.new_connections} connections in one run, more "
                        f"than the {ports} ephemeral ports{reuse_note}",
                        "each closed connection keeps its source port 60 s in TIME_WAIT; a run "
                        f"faster than {ports // TIME_WAIT_SECONDS} connections/s runs out of ports",
                        "use keep-alive, or net.ipv4.tcp_tw_reuse = 1 and a wider "
                        "ip_local_port_range (profile loadgen)",
                    )
                )
        if (
            role in SERVER_ROLES
            and rate is not None
            and facts.max_tw_buckets is not None
            and rate * TIME_WAIT_SECONDS > facts.max_tw_buckets
        ):
            out.append(
                LoadIssue(
                    "time-wait-buckets",
                    Level.WARN,
                    tool,
                    f"{fmt_number(rate)} new connections/s x {TIME_WAIT_SECONDS} s = "
                    f"{int(rate * TIME_WAIT_SECONDS)} TIME_WAIT sockets, more than "
                    f"net.ipv4.tcp_max_tw_buckets {facts.max_tw_buckets}",
                    "when the server closes first it keeps TIME_WAIT; past tcp_max_tw_buckets the "
                    "kernel destroys them early (TCPTimeWaitOverflow) and late packets of old "
                    "connections can hit new ones",
                    "use keep-alive, or raise net.ipv4.tcp_max_tw_buckets",
                )
            )
    if role in SERVER_ROLES and plan.port is not None and plan.port in facts.backlogs:
        backlog = facts.backlogs[plan.port]
        if conns is not None and conns > backlog:
            out.append(
                LoadIssue(
                    "connections-above-backlog",
                    Level.FAIL,
                    tool,
                    f"{tool} opens {conns} connections at once; port {plan.port} accepts a "
                    f"queue of {backlog} (effective backlog = min(listen() backlog, somaxconn "
                    f"{facts.somaxconn if facts.somaxconn is not None else '?'}))",
                    "connections beyond the accept queue are dropped until the server accepts; "
                    "the client retries their SYN after 1 s, 3 s, 7 s, which shows up as latency "
                    "the server does not have",
                    "raise the application's listen backlog (nginx: listen ... backlog=N) and "
                    "net.core.somaxconn above the connection count",
                )
            )
    nofile = plan.nofile_soft or (facts.nofile_soft if role in CLIENT_ROLES else None)
    if nofile is not None:
        source = "ulimit -n on the command line" if plan.nofile_soft else "this shell's soft limit"
        if tool == "vegeta" and plan.rate:
            cap = conns
            need = plan.rate * SLOW_RESPONSE
            need_warn = plan.rate * STALLED_RESPONSE
            if cap is not None:
                need, need_warn = min(need, cap), min(need_warn, cap)
            verdict: Optional[Level] = None
            lat = SLOW_RESPONSE
            if need + FD_OVERHEAD > nofile:
                verdict, lat = Level.FAIL, SLOW_RESPONSE
            elif need_warn + FD_OVERHEAD > nofile:
                verdict, lat = Level.WARN, STALLED_RESPONSE
            if verdict is not None:
                held = int(min(plan.rate * lat, cap) if cap else plan.rate * lat)
                out.append(
                    LoadIssue(
                        "vegeta-nofile",
                        verdict,
                        tool,
                        f"vegeta at {fmt_number(plan.rate)} requests/s holds {held} sockets "
                        f"open when responses take {int(lat * 1000)} ms; the open-file limit "
                        f"is {nofile} ({source})",
                        "vegeta keeps sending at the fixed rate whatever the server's latency, so "
                        "sockets in flight = rate x response time; past the limit it reports "
                        "'too many open files' errors that look like server failures",
                        f"ulimit -n {max(65536, int(plan.rate) * 2)} before the run, or bound it "
                        "with -max-workers",
                    )
                )
        elif conns is not None and conns + FD_OVERHEAD > nofile:
            out.append(
                LoadIssue(
                    "connections-above-nofile",
                    Level.FAIL,
                    tool,
                    f"{tool} opens {conns} connections; the open-file limit is {nofile} ({source})",
                    "every connection is a file descriptor; past the limit socket() fails with "
                    "EMFILE and the tool counts errors, not server responses",
                    f"ulimit -n {max(65536, conns * 2)} before the run",
                )
            )
    return out


def lint_load(command: str, role: str, facts: LoadFacts) -> list[LoadIssue]:
    """Problems of the load command `command` run against (or from) a host of `role`.

    `role` says which side `facts` describe: `client` = the command runs on this host (its
    ports and open-file limit count); `web`, `lb-proxy`, `realserver` = this host serves the
    load (its listen backlogs and TIME_WAIT buckets count). Rules about the tool's own options
    apply to every role. BadInput when the command cannot be parsed.
    """
    out: list[LoadIssue] = []
    for plan, issues in _parse(command):
        out.extend(issues)
        out.extend(_host_rules(plan, role, facts))
    return out
