"""Checks of the host's room for the load: leftover TIME_WAIT and orphans, conntrack,
file descriptors, ephemeral ports, listen backlogs (sized by the planned load, if given)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from lbtune.diagnose.checklist.model import (
    ACCEPTING_ROLES,
    BACKLOG_FAIL,
    BACKLOG_WARN,
    CONNECTING_ROLES,
    CONNTRACK_TW_TIMEOUT,
    FILE_MAX_WANT,
    FULL,
    IGNORED_PORTS,
    LEFTOVER,
    NOFILE_DEFAULT,
    NR_OPEN_DEFAULT,
    CheckResult,
    Ctx,
    pct,
    result,
    sysctl_int,
    worst,
)
from lbtune.diagnose.loadlint import TIME_WAIT_SECONDS, open_connections
from lbtune.host.net.sockdiag import ListenSocket
from lbtune.observe.conntrack import read_conntrack
from lbtune.observe.procnet import read_sockstat
from lbtune.vocab import Level


def check_drained(c: Ctx) -> CheckResult:
    name = "sockets-drained"
    ss = read_sockstat(c.host.fs)
    if ss is None:
        return result(name, Level.SKIP, "no /proc/net/sockstat here")
    max_tw = sysctl_int(c.host, "net.ipv4.tcp_max_tw_buckets")
    max_orph = sysctl_int(c.host, "net.ipv4.tcp_max_orphans")
    tw_lim = f" of tcp_max_tw_buckets {max_tw}" if max_tw else ""
    orph_lim = f" of tcp_max_orphans {max_orph}" if max_orph else ""
    reason = f"{ss.tcp_tw} TIME_WAIT{tw_lim}, {ss.tcp_orphan} orphaned{orph_lim} sockets {c.where}"
    fix = (
        f"wait {TIME_WAIT_SECONDS} s after the previous run (TIME_WAIT lasts {TIME_WAIT_SECONDS}"
        " s; orphans go after net.ipv4.tcp_fin_timeout)"
    )
    if (max_tw and ss.tcp_tw >= max_tw * 0.5) or (max_orph and ss.tcp_orphan >= max_orph * 0.5):
        return result(
            name,
            Level.FAIL,
            f"{reason}: the next run starts half full and will overflow (TIME_WAIT "
            "sockets destroyed early, orphans reset)",
            fix,
        )
    if ss.tcp_tw or ss.tcp_orphan:
        return result(
            name,
            Level.WARN,
            f"{reason}: left over from earlier connections; they hold ports and count "
            "against the limits during the run",
            fix,
        )
    return result(name, Level.PASS, reason)


def check_conntrack(c: Ctx) -> CheckResult:
    name = "conntrack"
    ct = read_conntrack(c.host.fs)
    if ct is None:
        if not c.host.is_live:
            return result(
                name,
                Level.SKIP,
                "no nf_conntrack files in this host tree (not loaded, or not captured)",
            )
        return result(name, Level.PASS, f"nf_conntrack is not loaded {c.where}: no table to fill")
    if ct.max is None:
        return result(name, Level.WARN, f"{ct.count} tracked connections; nf_conntrack_max unknown")
    need = 0
    plan_note = ""
    for p in c.plans:
        need += open_connections(p) or 0
        if p.conn_rate:
            timeout = sysctl_int(c.host, "net.netfilter.nf_conntrack_tcp_timeout_time_wait")
            need += int(p.conn_rate * (timeout or CONNTRACK_TW_TIMEOUT))
    if need:
        plan_note = f"; the planned load adds about {need}"
    reason = f"{ct.count} of nf_conntrack_max {ct.max} entries in use ({pct(ct.count, ct.max)})"
    fix = (
        "raise net.netfilter.nf_conntrack_max (and nf_conntrack_buckets); let old entries "
        "expire (conntrack -F drops the state of every live connection)"
    )
    if c.role == "lb-dr":
        fix += "; a DR director should not track VIP traffic (raw-table NOTRACK)"
    if ct.count >= FULL * ct.max or ct.count + need > ct.max:
        return result(
            name,
            Level.FAIL,
            f"{reason}{plan_note}: new connections are dropped when the table is full "
            "('nf_conntrack: table full, dropping packet')",
            fix,
        )
    if ct.count >= LEFTOVER * ct.max or ct.count + need > FULL * ct.max:
        return result(name, Level.WARN, f"{reason}{plan_note}: little room left for the run", fix)
    return result(name, Level.PASS, f"{reason}{plan_note}")


def check_nofile(c: Ctx) -> CheckResult:
    name = "nofile"
    file_max = sysctl_int(c.host, "fs.file-max")
    nr_open = sysctl_int(c.host, "fs.nr_open")
    if file_max is None and nr_open is None:
        return result(name, Level.SKIP, "no fs.file-max or fs.nr_open here")
    planned = c.planned
    parts = [
        f"fs.file-max {file_max if file_max is not None else '?'}",
        f"fs.nr_open {nr_open if nr_open is not None else '?'}",
    ]
    levels: list[Level] = []
    problems: list[str] = []
    fixes: list[str] = []
    if c.role != "lb-dr" and file_max is not None:
        if planned and file_max < 2 * planned:
            levels.append(Level.FAIL)
            problems.append(f"fs.file-max is below 2 x the {planned} planned connections")
            fixes.append(f"sysctl fs.file-max = {max(FILE_MAX_WANT, 4 * planned)}")
        elif file_max < FILE_MAX_WANT:
            levels.append(Level.WARN)
            problems.append(f"fs.file-max is below {FILE_MAX_WANT}")
            fixes.append(f"fs.file-max = {FILE_MAX_WANT} ({c.apply_cmd})")
    if nr_open is not None and planned and nr_open < planned + 64:
        levels.append(Level.FAIL)
        problems.append(f"fs.nr_open caps one process below the {planned} planned connections")
        fixes.append("sysctl fs.nr_open = 1048576")
    if c.readings is not None and c.readings.nofile is not None:
        soft, hard = c.readings.nofile
        parts.append(f"this shell's nofile soft {soft} hard {hard}")
        if c.role == "client" and soft <= NOFILE_DEFAULT:
            levels.append(Level.WARN)
            problems.append(f"a load generator started here gets only {soft} descriptors")
            fixes.append(f"ulimit -n {min(hard, NR_OPEN_DEFAULT)} before the run")
    elif c.role == "client":
        parts.append("the load shell's nofile limit is unknown (not the live host)")
    level = worst(levels)
    reason = ", ".join(parts) + (": " + "; ".join(problems) if problems else "")
    return result(name, level, reason, "; ".join(fixes))


def check_ports(c: Ctx) -> CheckResult:
    name = "ephemeral-ports"
    if c.role not in CONNECTING_ROLES:
        return result(name, Level.SKIP, f"role {c.role}: this host opens no connections of its own")
    f = c.facts
    ports = f.ephemeral_ports
    if ports is None or f.port_range is None:
        return result(name, Level.SKIP, "no net.ipv4.ip_local_port_range here")
    lo, hi = f.port_range
    reserved = f", {f.reserved_ports} reserved" if f.reserved_ports else ""
    have = f"{ports} ephemeral ports per destination (ip_local_port_range {lo}-{hi}{reserved})"
    fix = (
        'sysctl.net.ipv4.ip_local_port_range = "1024 65535" (lbtune apply loadgen), or more '
        "client IPs"
    )
    if c.role == "lb-proxy":
        fix = "more source IPs towards the backends (HAProxy 'source'), or a wider port range"
    planned = c.planned
    if planned is not None:
        if planned > ports:
            return result(
                name,
                Level.FAIL if c.role == "client" else Level.WARN,
                f"{planned} planned connections to one destination but {have}: connect() "
                "fails with EADDRNOTAVAIL past that",
                fix,
            )
        if planned > 0.8 * ports:
            return result(
                name,
                Level.WARN,
                f"{planned} planned connections use {pct(planned, ports)} of {have}",
                fix,
            )
        return result(name, Level.PASS, f"planned connections {planned} fit in {have}")
    if ports < 16384:
        return result(name, Level.WARN, f"only {have}", fix)
    return result(name, Level.PASS, have)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return False


def _listening_ports(listeners: list[ListenSocket]) -> dict[int, list[ListenSocket]]:
    """Listening sockets by port, leaving out loopback addresses and IGNORED_PORTS."""
    ports: dict[int, list[ListenSocket]] = {}
    for s in listeners:
        if _is_loopback(s.addr) or s.port in IGNORED_PORTS:
            continue
        ports.setdefault(s.port, []).append(s)
    return ports


@dataclass
class _Backlogs:
    """Each port's backlog sorted into bad, low and good, with the fixes the first two need."""

    bad: list[str] = field(default_factory=list)
    low: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    fixes: set[str] = field(default_factory=set)


def _judge_backlogs(c: Ctx, ports: dict[int, list[ListenSocket]]) -> _Backlogs:
    somax = c.facts.somaxconn
    planned = c.planned
    out = _Backlogs()
    for port in sorted(ports):
        s = min(ports[port], key=lambda x: x.backlog)
        where = f"port {port} ({s.addr})"
        # The kernel caps the backlog at listen() time; a later somaxconn change does not move it.
        capped = somax is not None and s.backlog >= somax
        limit = "capped by somaxconn" if capped else "the application's, or somaxconn at its start"
        text = f"{where} backlog {s.backlog} ({limit})"
        if s.backlog < BACKLOG_FAIL:
            out.bad.append(f"{text} < {BACKLOG_FAIL}")
        elif planned and s.backlog < planned:
            out.bad.append(f"{text} < {planned} planned connections")
        elif s.backlog < BACKLOG_WARN:
            out.low.append(f"{text} < {BACKLOG_WARN}")
        else:
            out.good.append(f"{where} backlog {s.backlog}")
            continue
        if capped:
            out.fixes.add(f"sysctl.net.core.somaxconn ({c.apply_cmd})")
        else:
            out.fixes.add(
                f"the application's listen backlog (nginx: listen {port} backlog=4096;), "
                "then restart it"
            )
            if somax is not None and somax < BACKLOG_WARN:
                out.fixes.add(f"sysctl.net.core.somaxconn ({c.apply_cmd})")
    return out


def check_backlog(c: Ctx) -> CheckResult:
    name = "listen-backlog"
    if c.role not in ACCEPTING_ROLES:
        why = (
            "an IPVS DR director forwards in the kernel and accepts nothing"
            if c.role == "lb-dr"
            else "a load client accepts no connections"
        )
        return result(name, Level.SKIP, why)
    if c.listeners is None:
        return result(name, Level.SKIP, c.listeners_error or "no listening-socket source here")
    target = next((p.port for p in c.plans if p.port is not None), None)
    ports = _listening_ports(c.listeners)
    if target is not None:
        if target not in ports:
            return result(
                name,
                Level.WARN,
                f"nothing listens on port {target}, the --load target, {c.where}",
                "start the server before the run",
            )
        ports = {target: ports[target]}
    if not ports:
        return result(
            name,
            Level.WARN,
            f"no listening TCP socket {c.where} apart from loopback and sshd",
            "start the server before the run",
        )
    judged = _judge_backlogs(c, ports)
    somax = c.facts.somaxconn
    somax_text = f"somaxconn {somax}" if somax is not None else "somaxconn ?"
    if judged.bad:
        return result(
            name,
            Level.FAIL,
            f"{'; '.join(judged.bad)} ({somax_text}): a connection burst overflows the accept "
            "queue and clients wait for SYN retransmits (1 s, 3 s)",
            "; ".join(sorted(judged.fixes)),
        )
    if judged.low:
        return result(
            name,
            Level.WARN,
            f"{'; '.join(judged.low)} ({somax_text}): enough for moderate bursts only",
            "; ".join(sorted(judged.fixes)),
        )
    return result(name, Level.PASS, f"{'; '.join(judged.good)} ({somax_text})")
