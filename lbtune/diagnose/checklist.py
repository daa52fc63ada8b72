"""The pre-benchmark checklist: is this host ready for a load test in its role?

`run_checklist(host, role)` runs named checks and gives each a status (pass, warn, fail,
skip), a reason with the numbers it saw, and a fix (a profile key for `lbtune apply`, or a
command). A check whose source is unavailable (a host tree without that file, a namespace
that cannot see it) is skipped with the reason, never guessed. `--load CMD` adds the planned
load: its connection count sizes the port, backlog, conntrack and file checks, and
`lbtune.diagnose.loadlint` lints the command itself. Every check and threshold is documented
in docs/checklist.md.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from lbtune.diagnose.loadlint import (
    TIME_WAIT_SECONDS,
    LoadFacts,
    LoadIssue,
    LoadPlan,
    lint_load,
    open_connections,
    parse_load,
    planned_connections,
    read_load_facts,
)
from lbtune.errors import BadInput, LbtuneError
from lbtune.host.clock import ClockState, read_clock
from lbtune.host.cpulist import format_cpulist, parse_cpulist
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.host.mgmt import default_route_interfaces
from lbtune.host.nic import Nic
from lbtune.host.sockdiag import ListenSocket
from lbtune.observe.conntrack import read_conntrack
from lbtune.observe.procnet import read_sockstat
from lbtune.tune.engine import Status as KnobStatus
from lbtune.tune.engine import verify_targets
from lbtune.tune.plan import Target
from lbtune.tune.profile import Profile, load_profile, resolve
from lbtune.tune.sysctl import effective_conf, sysctl_path

# Role -> the profile in profiles/ that prepares a host for it.
ROLE_PROFILES = {
    "client": "loadgen",
    "lb-dr": "lb-dr",
    "lb-proxy": "lb-proxy",
    "web": "web",
    "realserver": "realserver-dr",
}
ROLES = tuple(ROLE_PROFILES)
ACCEPTING_ROLES = ("web", "lb-proxy", "realserver")  # roles whose host accepts the load
CONNECTING_ROLES = ("client", "lb-proxy")  # roles whose host opens connections

# Listen backlog: below BACKLOG_FAIL a connection burst of a typical load test (wrk -c 1000)
# overflows the accept queue whenever the server stalls for a moment; BACKLOG_WARN is the
# kernel's default somaxconn since 5.4 (and the base profile's).
BACKLOG_FAIL = 1024
BACKLOG_WARN = 4096
# Listeners that are not the service under test.
IGNORED_PORTS = {22: "sshd"}
WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 (addresses listeners bind to, not ours)
# Share of a table/limit in use before the next run is at risk.
FULL = 0.8
LEFTOVER = 0.1
# Descriptors: the profiles raise fs.file-max to at least this for servers and clients.
FILE_MAX_WANT = 1048576
NR_OPEN_DEFAULT = 1048576  # the kernel's default (and maximum RLIMIT_NOFILE unless raised)
NOFILE_DEFAULT = 1024  # the soft RLIMIT_NOFILE most distributions start shells with
CONNTRACK_TW_TIMEOUT = 120  # nf_conntrack_tcp_timeout_time_wait default, seconds
IP_ADDR_RECORD = "/sos_commands/networking/ip_-o_addr"
CPU_SYS = "/sys/devices/system/cpu"


class Status(str, enum.Enum):
    PASS = "pass"  # noqa: S105 (a status, not a password)
    WARN = "warn"  # the run will work but something skews or limits it
    FAIL = "fail"  # the run will measure a host limit, or not run
    SKIP = "skip"  # the source is unavailable here (host tree, namespace) or not for this role

    @property
    def rank(self) -> int:
        return {"fail": 0, "warn": 1, "pass": 2, "skip": 3}[self.value]


@dataclass(frozen=True)
class CheckResult:
    """One checklist line: the check's stable name, its status, why, and how to fix it."""

    name: str  # documented in docs/checklist.md: "listen-backlog", "load:ab-no-concurrency"
    status: Status
    reason: str  # what was seen, with the numbers
    fix: str = ""  # profile key for `lbtune apply`, or a command


@dataclass(frozen=True)
class Checklist:
    role: str
    profile: str
    iface: Optional[str]  # the data interface the checks used
    checks: tuple[CheckResult, ...]
    iface_how: str = ""  # how the data interface was chosen: "given with --iface", ...

    @property
    def failed(self) -> bool:
        return any(c.status is Status.FAIL for c in self.checks)

    def summary(self) -> dict[str, int]:
        return {s.value: sum(1 for c in self.checks if c.status is s) for s in Status}


@dataclass(frozen=True)
class LiveProbes:
    """What only the running machine can say: this process's file limit and the clock.

    None for a value means it could not be read (and on a host tree, never is).
    """

    nofile: Optional[tuple[int, int]] = None  # RLIMIT_NOFILE (soft, hard) of this shell
    clock: Optional[ClockState] = None
    clock_error: str = ""


# ------------------------------------------------------------------ live probes


def live_probes() -> LiveProbes:
    """Read this process's RLIMIT_NOFILE and the clock state (call on the live host only)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clock: Optional[ClockState] = None
    error = ""
    try:
        clock = read_clock()
    except (OSError, AttributeError) as e:
        error = f"adjtimex failed: {e}"
    return LiveProbes((soft, hard), clock, error)


# ------------------------------------------------------------------ helpers


def _r(name: str, status: Status, reason: str, fix: str = "") -> CheckResult:
    return CheckResult(name, status, reason, fix)


def _worst(statuses: Sequence[Status]) -> Status:
    return min(statuses, key=lambda s: s.rank) if statuses else Status.PASS


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "?"


def _lowers(inv: HostInventory) -> set[str]:
    """Bond slaves: their traffic arrives on the bond."""
    out: set[str] = set()
    for n in inv.nics:
        if n.kind == "bond":
            out.update(n.lower)
    return out


def _up(n: Nic) -> bool:
    return n.kind != "loopback" and (n.operstate or "unknown") in ("up", "unknown")


def pick_data_interface(
    host: Host, inv: HostInventory, explicit: Optional[str]
) -> tuple[Optional[str], str]:
    """The interface load traffic uses, and how it was chosen (for the reasons)."""
    names = {n.name for n in inv.nics}
    if explicit is not None:
        if explicit not in names:
            have = ", ".join(sorted(names)) or "none"
            raise BadInput(f"--iface {explicit}: no such interface on this host (have: {have})")
        return explicit, "given with --iface"
    slaves = _lowers(inv)
    up = [n for n in inv.nics if _up(n) and n.name not in slaves]
    routed = default_route_interfaces(host) & {n.name for n in up}
    if len(routed) == 1:
        return next(iter(routed)), "carries the default route"
    physical = [n for n in up if n.kind == "physical"]
    if len(physical) == 1:
        return physical[0].name, "the only physical interface up"
    if len(physical) > 1:
        best = max(physical, key=lambda n: n.speed_mbps or 0)
        if sum(1 for n in physical if (n.speed_mbps or 0) == (best.speed_mbps or 0)) == 1:
            return best.name, f"the fastest interface up ({best.speed_mbps} Mb/s)"
    if len(up) == 1:
        return up[0].name, "the only interface up"
    return None, "no single data interface (choose one with --iface)"


def _sysctl(host: Host, key: str) -> Optional[int]:
    return host.fs.read_int(sysctl_path(key))


# ------------------------------------------------------------------ context


@dataclass(frozen=True)
class _Ctx:
    host: Host
    role: str
    profile_name: str
    inv: HostInventory
    iface: Optional[str]
    profile: Optional[Profile]
    targets: Optional[list[Target]]
    targets_error: str  # why targets is None
    resolve_failed: bool  # the profile does not resolve here (vs. needs --iface)
    vip: Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]
    plans: tuple[LoadPlan, ...]
    issues: tuple[LoadIssue, ...]
    facts: LoadFacts
    listeners: Optional[list[ListenSocket]]
    listeners_error: str
    probes: Optional[LiveProbes]

    @property
    def planned(self) -> Optional[int]:
        return planned_connections(self.plans) if self.plans else None

    @property
    def apply_cmd(self) -> str:
        iface = f" --iface {self.iface}" if self.iface and self.profile_needs_iface else ""
        netns = f"--netns {self.host.netns} " if self.host.netns else ""
        return f"lbtune {netns}apply {self.profile_name}{iface}"

    @property
    def profile_needs_iface(self) -> bool:
        return self.profile is not None and self.profile.needs_iface

    @property
    def where(self) -> str:
        return "in this namespace" if self.host.netns else "on this host"


# ------------------------------------------------------------------ checks


def check_profile(c: _Ctx) -> CheckResult:
    name = "profile-in-sync"
    if c.targets is None:
        if c.resolve_failed:
            return _r(name, Status.FAIL, c.targets_error)
        return _r(name, Status.SKIP, c.targets_error, "pass --iface IF")
    verdicts = verify_targets(c.host, c.targets)
    drift = [v for v in verdicts if v.status is KnobStatus.DRIFT]
    ok = sum(1 for v in verdicts if v.status is KnobStatus.OK)
    missing = sum(1 for v in verdicts if v.status is KnobStatus.MISSING)
    skipped = sum(1 for v in verdicts if v.status is KnobStatus.SKIPPED)
    notes = []
    if missing:
        notes.append(f"{missing} not on this host")
    if skipped:
        notes.append(f"{skipped} host-global not checked from a namespace")
    extra = f" ({', '.join(notes)})" if notes else ""
    if drift:
        first = ", ".join(
            f"{v.kind} {v.obj} = {' '.join((v.current or '').split())} (want {v.desired})"
            for v in drift[:3]
        )
        more = f", and {len(drift) - 3} more" if len(drift) > 3 else ""
        return _r(
            name,
            Status.FAIL,
            f"profile {c.profile_name}: {len(drift)} of {len(verdicts)} knobs drifted: "
            f"{first}{more}{extra}",
            c.apply_cmd,
        )
    return _r(name, Status.PASS, f"profile {c.profile_name}: {ok} knobs in effect{extra}")


def _pinned(c: _Ctx) -> dict[int, frozenset[int]]:
    """IRQ -> CPUs the role's profile pins it to."""
    out: dict[int, frozenset[int]] = {}
    for t in c.targets or ():
        if t.knob.kind == "irq_affinity":
            out[int(t.knob.obj)] = parse_cpulist(t.value)
    return out


def check_irqbalance(c: _Ctx) -> CheckResult:
    name = "irqbalance"
    ib = c.inv.irqbalance
    if c.targets is None:
        return _r(name, Status.SKIP, f"profile not resolved: {c.targets_error}")
    pinned = _pinned(c)
    state = next((t.value for t in c.targets if t.knob.kind == "irqbalance"), None)
    running = f"irqbalance is running (pid {ib.pid})"
    if state == "stopped" and ib.running:
        return _r(
            name,
            Status.FAIL,
            f"{running}; profile {c.profile_name} wants it stopped",
            f'irqbalance.state = "stopped" ({c.apply_cmd})',
        )
    if not pinned:
        what = running if ib.running else "irqbalance is not running"
        return _r(name, Status.PASS, f"{what}; profile {c.profile_name} pins no IRQs")
    cpus = frozenset().union(*pinned.values())
    if not ib.running:
        if ib.enabled:
            return _r(
                name,
                Status.WARN,
                f"irqbalance is not running but enabled at boot: after a reboot it moves "
                f"the {len(pinned)} IRQs the profile pins to CPUs {format_cpulist(cpus)}",
                "systemctl disable irqbalance, or irqbalance.ban in the profile",
            )
        return _r(
            name,
            Status.PASS,
            f"irqbalance is not running; the {len(pinned)} IRQs the profile pins stay put",
        )
    loose = sorted(
        irq for irq, on in pinned.items() if irq not in ib.banned_irqs and not on <= ib.banned_cpus
    )
    if not loose:
        return _r(
            name,
            Status.PASS,
            f"{running} but bans CPUs {format_cpulist(ib.banned_cpus)}: it leaves the "
            f"{len(pinned)} pinned IRQs alone",
        )
    free = cpus - ib.banned_cpus
    return _r(
        name,
        Status.FAIL,
        f"{running} and does not ban CPUs {format_cpulist(free)}, where profile "
        f"{c.profile_name} pins {len(loose)} of {len(pinned)} NIC IRQs (e.g. IRQ "
        f"{', '.join(map(str, loose[:3]))}): it moves them away within seconds",
        f"irqbalance.ban ({c.apply_cmd}), then restart irqbalance; or stop irqbalance",
    )


def check_isolcpus(c: _Ctx) -> CheckResult:
    name = "isolcpus"
    topo = c.inv.cpus
    running = topo.cmdline.cpus("isolcpus") or frozenset()
    iso = format_cpulist(topo.isolated) or "none"
    if c.targets is None:
        return _r(name, Status.SKIP, f"profile not resolved: {c.targets_error}")
    wanted = next(
        (t for t in c.targets if t.knob.kind == "cmdline" and t.knob.obj == "isolcpus"), None
    )
    if wanted is not None:
        from lbtune.host.cmdline import KernelCmdline

        want = KernelCmdline.parse(f"isolcpus={wanted.value}").cpus("isolcpus") or frozenset()
        if want == running:
            return _r(
                name,
                Status.PASS,
                f"isolcpus={format_cpulist(running)} as profile {c.profile_name} expects",
            )
        return _r(
            name,
            Status.FAIL,
            f"profile {c.profile_name} expects isolcpus={format_cpulist(want)}; the "
            f"kernel booted with {format_cpulist(running) or 'none'}",
            f"{c.apply_cmd} --persist, then reboot",
        )
    on_isolated = {irq for irq, cpus in _pinned(c).items() if cpus & topo.isolated}
    if on_isolated:
        return _r(
            name,
            Status.FAIL,
            f"profile {c.profile_name} pins {len(on_isolated)} IRQs onto isolated CPUs "
            f"({iso}): isolated cores are meant to run only the application",
            "choose the data CPUs without isolated ones ([cpu] in the profile)",
        )
    return _r(
        name,
        Status.PASS,
        f"profile {c.profile_name} expects no isolation change; isolated CPUs: {iso}",
    )


def _ring_nics(c: _Ctx) -> list[Nic]:
    if c.iface is not None:
        names = {c.iface}
        grew = True
        while grew:  # a bond or VLAN: the rings are on the devices below it
            before = len(names)
            for n in c.inv.nics:
                if n.name in names:
                    names.update(n.lower)
            grew = len(names) > before
        return [n for n in c.inv.nics if n.name in names]
    return [n for n in c.inv.nics if _up(n) and n.kind == "physical"]


def check_rings(c: _Ctx) -> CheckResult:
    name = "nic-rings"
    nics = [n for n in _ring_nics(c) if n.rings is not None and n.rings.rx_max]
    if not nics:
        what = (
            f"{c.iface} (and the devices below it) reports no"
            if c.iface
            else "no physical interface that is up reports"
        )
        return _r(name, Status.SKIP, f"{what} ring sizes (veth, bond, VLAN and lo have none)")
    short, ok = [], []
    cmds = []
    for n in nics:
        r = n.rings
        assert r is not None
        parts = []
        for d in ("rx", "tx"):
            cur, mx = getattr(r, d), getattr(r, f"{d}_max")
            if cur is not None and mx and cur < mx:
                parts.append(f"{d} {cur}/{mx}")
        if parts:
            short.append(f"{n.name} {' '.join(parts)}")
            cmds.append(
                f"ethtool -G {n.name} rx {r.rx_max}" + (f" tx {r.tx_max}" if r.tx_max else "")
            )
        else:
            ok.append(n.name)
    if short:
        return _r(
            name,
            Status.WARN,
            f"rings below the hardware maximum: {'; '.join(short)} (smaller rings drop "
            "bursts the CPU does not drain at once)",
            f'nic.data.rings = "max" (profile), or {"; ".join(cmds)} (resets the link)',
        )
    return _r(name, Status.PASS, f"rings at maximum on {', '.join(ok)}")


def check_drained(c: _Ctx) -> CheckResult:
    name = "sockets-drained"
    ss = read_sockstat(c.host.fs)
    if ss is None:
        return _r(name, Status.SKIP, "no /proc/net/sockstat here")
    max_tw = _sysctl(c.host, "net.ipv4.tcp_max_tw_buckets")
    max_orph = _sysctl(c.host, "net.ipv4.tcp_max_orphans")
    tw_lim = f" of tcp_max_tw_buckets {max_tw}" if max_tw else ""
    orph_lim = f" of tcp_max_orphans {max_orph}" if max_orph else ""
    reason = f"{ss.tcp_tw} TIME_WAIT{tw_lim}, {ss.tcp_orphan} orphaned{orph_lim} sockets {c.where}"
    fix = (
        f"wait {TIME_WAIT_SECONDS} s after the previous run (TIME_WAIT lasts {TIME_WAIT_SECONDS}"
        " s; orphans go after net.ipv4.tcp_fin_timeout)"
    )
    if (max_tw and ss.tcp_tw >= max_tw * 0.5) or (max_orph and ss.tcp_orphan >= max_orph * 0.5):
        return _r(
            name,
            Status.FAIL,
            f"{reason}: the next run starts half full and will overflow (TIME_WAIT "
            "sockets destroyed early, orphans reset)",
            fix,
        )
    if ss.tcp_tw or ss.tcp_orphan:
        return _r(
            name,
            Status.WARN,
            f"{reason}: left over from earlier connections; they hold ports and count "
            "against the limits during the run",
            fix,
        )
    return _r(name, Status.PASS, reason)


def check_conntrack(c: _Ctx) -> CheckResult:
    name = "conntrack"
    ct = read_conntrack(c.host.fs)
    if ct is None:
        if not c.host.is_live:
            return _r(
                name,
                Status.SKIP,
                "no nf_conntrack files in this host tree (not loaded, or not captured)",
            )
        return _r(name, Status.PASS, f"nf_conntrack is not loaded {c.where}: no table to fill")
    if ct.max is None:
        return _r(name, Status.WARN, f"{ct.count} tracked connections; nf_conntrack_max unknown")
    need = 0
    plan_note = ""
    for p in c.plans:
        need += open_connections(p) or 0
        if p.conn_rate:
            timeout = _sysctl(c.host, "net.netfilter.nf_conntrack_tcp_timeout_time_wait")
            need += int(p.conn_rate * (timeout or CONNTRACK_TW_TIMEOUT))
    if need:
        plan_note = f"; the planned load adds about {need}"
    reason = f"{ct.count} of nf_conntrack_max {ct.max} entries in use ({_pct(ct.count, ct.max)})"
    fix = (
        "raise net.netfilter.nf_conntrack_max (and nf_conntrack_buckets); let old entries "
        "expire (conntrack -F drops the state of every live connection)"
    )
    if c.role == "lb-dr":
        fix += "; a DR director should not track VIP traffic (raw-table NOTRACK)"
    if ct.count >= FULL * ct.max or ct.count + need > ct.max:
        return _r(
            name,
            Status.FAIL,
            f"{reason}{plan_note}: new connections are dropped when the table is full "
            "('nf_conntrack: table full, dropping packet')",
            fix,
        )
    if ct.count >= LEFTOVER * ct.max or ct.count + need > FULL * ct.max:
        return _r(name, Status.WARN, f"{reason}{plan_note}: little room left for the run", fix)
    return _r(name, Status.PASS, f"{reason}{plan_note}")


def check_nofile(c: _Ctx) -> CheckResult:
    name = "nofile"
    file_max = _sysctl(c.host, "fs.file-max")
    nr_open = _sysctl(c.host, "fs.nr_open")
    if file_max is None and nr_open is None:
        return _r(name, Status.SKIP, "no fs.file-max or fs.nr_open here")
    planned = c.planned
    parts = [
        f"fs.file-max {file_max if file_max is not None else '?'}",
        f"fs.nr_open {nr_open if nr_open is not None else '?'}",
    ]
    statuses: list[Status] = []
    problems: list[str] = []
    fixes: list[str] = []
    if c.role != "lb-dr" and file_max is not None:
        if planned and file_max < 2 * planned:
            statuses.append(Status.FAIL)
            problems.append(f"fs.file-max is below 2 x the {planned} planned connections")
            fixes.append(f"sysctl fs.file-max = {max(FILE_MAX_WANT, 4 * planned)}")
        elif file_max < FILE_MAX_WANT:
            statuses.append(Status.WARN)
            problems.append(f"fs.file-max is below {FILE_MAX_WANT}")
            fixes.append(f"fs.file-max = {FILE_MAX_WANT} ({c.apply_cmd})")
    if nr_open is not None and planned and nr_open < planned + 64:
        statuses.append(Status.FAIL)
        problems.append(f"fs.nr_open caps one process below the {planned} planned connections")
        fixes.append("sysctl fs.nr_open = 1048576")
    if c.probes is not None and c.probes.nofile is not None:
        soft, hard = c.probes.nofile
        parts.append(f"this shell's nofile soft {soft} hard {hard}")
        if c.role == "client" and soft <= NOFILE_DEFAULT:
            statuses.append(Status.WARN)
            problems.append(f"a load generator started here gets only {soft} descriptors")
            fixes.append(f"ulimit -n {min(hard, NR_OPEN_DEFAULT)} before the run")
    elif c.role == "client":
        parts.append("the load shell's nofile limit is unknown (not the live host)")
    status = _worst(statuses)
    reason = ", ".join(parts) + (": " + "; ".join(problems) if problems else "")
    return _r(name, status, reason, "; ".join(fixes))


def check_ports(c: _Ctx) -> CheckResult:
    name = "ephemeral-ports"
    if c.role not in CONNECTING_ROLES:
        return _r(name, Status.SKIP, f"role {c.role}: this host opens no connections of its own")
    f = c.facts
    ports = f.ephemeral_ports
    if ports is None or f.port_range is None:
        return _r(name, Status.SKIP, "no net.ipv4.ip_local_port_range here")
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
            return _r(
                name,
                Status.FAIL if c.role == "client" else Status.WARN,
                f"{planned} planned connections to one destination but {have}: connect() "
                "fails with EADDRNOTAVAIL past that",
                fix,
            )
        if planned > 0.8 * ports:
            return _r(
                name,
                Status.WARN,
                f"{planned} planned connections use {_pct(planned, ports)} of {have}",
                fix,
            )
        return _r(name, Status.PASS, f"planned connections {planned} fit in {have}")
    if ports < 16384:
        return _r(name, Status.WARN, f"only {have}", fix)
    return _r(name, Status.PASS, have)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_backlog(c: _Ctx) -> CheckResult:
    name = "listen-backlog"
    if c.role not in ACCEPTING_ROLES:
        why = (
            "an IPVS DR director forwards in the kernel and accepts nothing"
            if c.role == "lb-dr"
            else "a load client accepts no connections"
        )
        return _r(name, Status.SKIP, why)
    if c.listeners is None:
        return _r(name, Status.SKIP, c.listeners_error or "no listening-socket source here")
    target = next((p.port for p in c.plans if p.port is not None), None)
    ports: dict[int, list[ListenSocket]] = {}
    for s in c.listeners:
        if _is_loopback(s.addr) or s.port in IGNORED_PORTS:
            continue
        ports.setdefault(s.port, []).append(s)
    somax = c.facts.somaxconn
    if target is not None:
        if target not in ports:
            return _r(
                name,
                Status.WARN,
                f"nothing listens on port {target}, the --load target, {c.where}",
                "start the server before the run",
            )
        ports = {target: ports[target]}
    if not ports:
        return _r(
            name,
            Status.WARN,
            f"no listening TCP socket {c.where} apart from loopback and sshd",
            "start the server before the run",
        )
    planned = c.planned
    bad: list[str] = []
    low: list[str] = []
    good: list[str] = []
    fixes: set[str] = set()
    for port in sorted(ports):
        s = min(ports[port], key=lambda x: x.backlog)
        where = f"port {port} ({s.addr})"
        # The kernel caps the backlog at listen() time; a later somaxconn change does not move it.
        capped = somax is not None and s.backlog >= somax
        limit = "capped by somaxconn" if capped else "the application's, or somaxconn at its start"
        text = f"{where} backlog {s.backlog} ({limit})"
        if s.backlog < BACKLOG_FAIL:
            bad.append(f"{text} < {BACKLOG_FAIL}")
        elif planned and s.backlog < planned:
            bad.append(f"{text} < {planned} planned connections")
        elif s.backlog < BACKLOG_WARN:
            low.append(f"{text} < {BACKLOG_WARN}")
        else:
            good.append(f"{where} backlog {s.backlog}")
            continue
        if capped:
            fixes.add(f"sysctl.net.core.somaxconn ({c.apply_cmd})")
        else:
            fixes.add(
                f"the application's listen backlog (nginx: listen {port} backlog=4096;), "
                "then restart it"
            )
            if somax is not None and somax < BACKLOG_WARN:
                fixes.add(f"sysctl.net.core.somaxconn ({c.apply_cmd})")
    somax_text = f"somaxconn {somax}" if somax is not None else "somaxconn ?"
    if bad:
        return _r(
            name,
            Status.FAIL,
            f"{'; '.join(bad)} ({somax_text}): a connection burst overflows the accept queue "
            "and clients wait for SYN retransmits (1 s, 3 s)",
            "; ".join(sorted(fixes)),
        )
    if low:
        return _r(
            name,
            Status.WARN,
            f"{'; '.join(low)} ({somax_text}): enough for moderate bursts only",
            "; ".join(sorted(fixes)),
        )
    return _r(name, Status.PASS, f"{'; '.join(good)} ({somax_text})")


# --- DR real server


@dataclass(frozen=True)
class IfAddr:
    ifname: str
    family: int  # 4 or 6
    addr: str
    prefix: int


def parse_ip_o_addr(text: str) -> list[IfAddr]:
    """`ip -o addr` lines: `1: lo    inet 127.0.0.1/8 scope host lo\\ ...`."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or not words[0].endswith(":") or words[2] not in ("inet", "inet6"):
            continue
        addr, _, prefix = words[3].partition("/")
        try:
            ipaddress.ip_address(addr)
            bits = int(prefix) if prefix else (32 if words[2] == "inet" else 128)
        except ValueError:
            continue
        out.append(IfAddr(words[1].split("@")[0], 4 if words[2] == "inet" else 6, addr, bits))
    return out


def _addresses(c: _Ctx) -> tuple[Optional[list[IfAddr]], str]:
    if c.host.is_live:
        res = c.host.runner.run(["ip", "-o", "addr", "show"])
        if not res.ok:
            return None, f"`ip -o addr show` failed: {res.stderr.strip() or res.returncode}"
        return parse_ip_o_addr(res.stdout), ""
    text = c.host.fs.read(IP_ADDR_RECORD)
    if text is None:
        return None, f"no {IP_ADDR_RECORD.lstrip('/')} recording in this host tree"
    return parse_ip_o_addr(text), ""


def check_vip(c: _Ctx) -> CheckResult:
    name = "dr-vip"
    assert c.vip is not None
    vip = str(c.vip)
    full = 32 if c.vip.version == 4 else 128
    addrs, error = _addresses(c)
    if addrs is None:
        return _r(name, Status.SKIP, error)
    hits = [a for a in addrs if a.addr == vip]
    add = f"ip addr add {vip}/{full} dev lo"
    if c.role == "lb-dr":
        on = [a for a in hits if a.ifname != "lo"]
        if on:
            return _r(name, Status.PASS, f"VIP {vip} is on {on[0].ifname}")
        return _r(
            name,
            Status.WARN,
            f"VIP {vip} is not configured {c.where} (keepalived holds it only on the "
            "active director)",
            "check keepalived state; the VIP belongs on the data interface of the active director",
        )
    elsewhere = [a for a in hits if a.ifname != "lo"]
    if elsewhere:
        return _r(
            name,
            Status.FAIL,
            f"VIP {vip} is on {elsewhere[0].ifname}: this real server answers ARP for it "
            "and clients bypass the director",
            f"ip addr del {vip}/{elsewhere[0].prefix} dev {elsewhere[0].ifname}; {add}",
        )
    on_lo = [a for a in hits if a.ifname == "lo"]
    if not on_lo:
        return _r(
            name,
            Status.FAIL,
            f"VIP {vip} is not on lo: the kernel drops packets the director forwards to it",
            add,
        )
    if on_lo[0].prefix != full:
        return _r(
            name,
            Status.FAIL,
            f"VIP {vip} is on lo as /{on_lo[0].prefix}: the whole prefix becomes local "
            "and replies to clients in it never leave the host",
            f"ip addr del {vip}/{on_lo[0].prefix} dev lo; {add}",
        )
    if c.listeners is not None:
        accepting = [
            s for s in c.listeners if s.addr in (vip, *WILDCARDS) and s.port not in IGNORED_PORTS
        ]
        if not accepting:
            return _r(
                name,
                Status.WARN,
                f"VIP {vip}/{full} is on lo, but no listener accepts on the VIP or on a "
                "wildcard address",
                "bind the service to 0.0.0.0 or the VIP",
            )
    return _r(name, Status.PASS, f"VIP {vip}/{full} is on lo")


def _facing(c: _Ctx) -> list[str]:
    """Interfaces that can receive client/director traffic: up, not lo, not bond slaves."""
    slaves = _lowers(c.inv)
    names = [n.name for n in c.inv.nics if _up(n) and n.name not in slaves]
    return [n for n in names if c.host.fs.exists(f"/proc/sys/net/ipv4/conf/{n}")]


def _effective(c: _Ctx, key: str, ifaces: list[str]) -> dict[str, tuple[int, int, int]]:
    """iface -> (effective, all, iface) for a max(all, iface) setting."""
    out = {}
    for i in ifaces:
        values = effective_conf(c.host.fs, i, key)
        if values is not None:
            out[i] = values
    return out


def check_arp(c: _Ctx, key: str, want: int, why: str) -> CheckResult:
    name = f"dr-{key.replace('_', '-')}"
    if c.vip is not None and c.vip.version == 6:
        return _r(name, Status.SKIP, "IPv6 VIP: neighbour discovery, not ARP")
    ifaces = _facing(c)
    values = _effective(c, key, ifaces)
    if not values:
        return _r(name, Status.SKIP, f"no net.ipv4.conf.*.{key} for the interfaces {c.where}")
    low = {i: v for i, v in values.items() if v[0] < want}
    shown = ", ".join(f"{i} {v[0]} (all {v[1]}, {i} {v[2]})" for i, v in sorted(values.items()))
    if low:
        return _r(
            name,
            Status.FAIL,
            f"effective {key} (max of all and the interface) below {want}: {shown}; {why}",
            f"sysctl.net.ipv4.conf.all.{key} = {want}, which raises every interface's effective "
            f"value ({c.apply_cmd})",
        )
    return _r(name, Status.PASS, f"effective {key}: {shown}")


def check_rp_filter(c: _Ctx) -> CheckResult:
    name = "dr-rp-filter"
    ifaces = [c.iface] if c.iface else _facing(c)
    values = _effective(c, "rp_filter", ifaces)
    if not values:
        return _r(name, Status.SKIP, f"no net.ipv4.conf.*.rp_filter for the interfaces {c.where}")
    strict = {i: v for i, v in values.items() if v[0] == 1}
    shown = ", ".join(f"{i} {v[0]} (all {v[1]}, {i} {v[2]})" for i, v in sorted(values.items()))
    if strict:
        return _r(
            name,
            Status.FAIL,
            f"strict reverse-path filter (1) on the interface receiving VIP traffic: "
            f"{shown}; packets whose route back leaves by another interface are dropped "
            "(IPReversePathFilter), common with DR's asymmetric paths",
            "sysctl.net.ipv4.conf.all.rp_filter = 2, which makes every interface at least loose "
            f"({c.apply_cmd})",
        )
    return _r(name, Status.PASS, f"effective rp_filter (0 off, 2 loose): {shown}")


# --- clock and governor


def check_clock(c: _Ctx) -> CheckResult:
    name = "clock-sync"
    if c.probes is None:
        return _r(name, Status.SKIP, "clock state is only readable on the live host")
    if c.probes.clock is None:
        return _r(name, Status.SKIP, c.probes.clock_error or "clock state unavailable")
    if c.probes.clock.synced:
        return _r(name, Status.PASS, f"kernel clock {c.probes.clock.detail}")
    return _r(
        name,
        Status.WARN,
        f"{c.probes.clock.detail}: latency timestamps and logs of client and server disagree",
        "enable NTP: timedatectl set-ntp true (or start chronyd)",
    )


def check_governor(c: _Ctx) -> CheckResult:
    name = "cpu-governor"
    online = sorted(c.inv.cpus.online)
    governors = {}
    for cpu in online:
        g = c.host.fs.read(f"{CPU_SYS}/cpu{cpu}/cpufreq/scaling_governor")
        if g is not None:
            governors[cpu] = g.strip()
    if not governors:
        return _r(name, Status.SKIP, "no cpufreq (VM, or no cpufreq driver)")
    other = {cpu: g for cpu, g in governors.items() if g != "performance"}
    if other:
        kinds = sorted(set(other.values()))
        return _r(
            name,
            Status.WARN,
            f"{'/'.join(kinds)} on {len(other)} of {len(online)} CPUs "
            f"({format_cpulist(other)}): clock ramp-up adds latency and noise between runs",
            'governor.all = "performance" (profile), or cpupower frequency-set -g performance',
        )
    return _r(name, Status.PASS, f"performance on all {len(governors)} CPUs with cpufreq")


# ------------------------------------------------------------------ load command


# Load rules whose comparison a host check already makes (with the same numbers).
_COVERED = {
    "connections-above-ports": "ephemeral-ports",
    "connections-near-ports": "ephemeral-ports",
    "connections-above-backlog": "listen-backlog",
}


def load_results(c: _Ctx) -> list[CheckResult]:
    out = []
    for i in c.issues:
        if i.rule in _COVERED:
            continue
        out.append(_r(f"load:{i.rule}", Status(i.status), f"{i.reason}: {i.why}", i.fix))
    if c.plans and not out:
        tools = ", ".join(dict.fromkeys(p.tool for p in c.plans))
        out.append(_r("load-command", Status.PASS, f"{tools}: no problem found in the options"))
    return out


# ------------------------------------------------------------------ entry point


def parse_vip(text: str) -> Union[ipaddress.IPv4Address, ipaddress.IPv6Address]:
    try:
        vip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise BadInput(f"--vip {text!r}: not an IP address") from None
    if vip.is_loopback or vip.is_unspecified or vip.is_multicast:
        raise BadInput(f"--vip {vip}: not a service address (loopback, unspecified or multicast)")
    return vip


_CHECKS_ALL: tuple[Callable[[_Ctx], CheckResult], ...] = (
    check_profile,
    check_irqbalance,
    check_isolcpus,
    check_rings,
    check_drained,
    check_conntrack,
    check_nofile,
    check_ports,
    check_backlog,
)


def run_checklist(
    host: Host,
    role: str,
    vip: Optional[str] = None,
    load: Optional[str] = None,
    iface: Optional[str] = None,
    probes: Optional[LiveProbes] = None,
) -> Checklist:
    """Run every check for `role` on `host`.

    `vip` is required for `realserver` (and checked on `lb-dr` when given); `load` is the
    planned load command (linted, and its connection count sizes the checks); `iface` the data
    interface (default: chosen from the host, see `pick_data_interface`). `probes` replaces
    the live-host probes (file limit, clock); by default they are read on a live host only.
    Raises BadInput for an unknown role, a bad VIP or a load command that cannot be parsed.
    """
    if role not in ROLE_PROFILES:
        raise BadInput(f"--role {role!r}: unknown role (one of {', '.join(ROLES)})")
    parsed_vip = parse_vip(vip) if vip is not None else None
    if role == "realserver" and parsed_vip is None:
        raise BadInput("--role realserver needs --vip IP (the virtual IP the director forwards)")
    if parsed_vip is not None and role not in ("realserver", "lb-dr"):
        raise BadInput(f"--vip is for --role realserver or lb-dr, not {role}")
    plans: tuple[LoadPlan, ...] = tuple(parse_load(load)) if load is not None else ()

    inv = discover_host(host)
    data, how = pick_data_interface(host, inv, iface)
    if probes is None and host.is_live:
        probes = live_probes()
    listeners: Optional[list[ListenSocket]] = None
    listeners_error = ""
    try:
        listeners = host.listen_sockets()
        if listeners is None:
            listeners_error = "no `ss` recording (sos_commands/networking/ss_-peaonmi) here"
    except OSError as e:
        listeners_error = f"sock_diag failed: {e.strerror or e}"
    facts = read_load_facts(
        host.fs,
        listeners if role in ACCEPTING_ROLES else None,
        probes.nofile if probes is not None else None,
    )
    issues = tuple(lint_load(load, role, facts)) if load is not None else ()

    name = ROLE_PROFILES[role]
    profile: Optional[Profile] = None
    targets: Optional[list[Target]] = None
    error = ""
    failed = False
    try:
        profile = load_profile(name, root=host.fs.root)
        if profile.needs_iface and data is None:
            error = f"profile {name} tunes the data interface and there is {how}"
        else:
            targets = resolve(profile, inv, data if profile.needs_iface else None)
    except LbtuneError as e:
        error, failed = f"profile {name} does not resolve on this host: {e}", True

    ctx = _Ctx(
        host=host,
        role=role,
        profile_name=name,
        inv=inv,
        iface=data,
        profile=profile,
        targets=targets,
        targets_error=error,
        resolve_failed=failed,
        vip=parsed_vip,
        plans=plans,
        issues=issues,
        facts=facts,
        listeners=listeners,
        listeners_error=listeners_error,
        probes=probes,
    )
    checks = [check(ctx) for check in _CHECKS_ALL]
    if parsed_vip is not None:
        checks.append(check_vip(ctx))
    if role == "realserver":
        checks.append(
            check_arp(
                ctx,
                "arp_ignore",
                1,
                "the host answers ARP for the VIP on lo and steals it from the director",
            )
        )
        checks.append(
            check_arp(
                ctx,
                "arp_announce",
                2,
                "ARP requests may carry the VIP as source and poison the router's ARP cache",
            )
        )
        checks.append(check_rp_filter(ctx))
    checks.append(check_clock(ctx))
    checks.append(check_governor(ctx))
    checks.extend(load_results(ctx))
    return Checklist(role, name, data, tuple(checks), how)
