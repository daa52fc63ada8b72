"""Running the checklist: choose the data interface, read the live readings, resolve the
role's profile, run every check for the role, and turn load-lint issues into lines."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Callable, Optional, Union

from lbtune.diagnose.checklist.capacity import (
    check_backlog,
    check_conntrack,
    check_drained,
    check_nofile,
    check_ports,
)
from lbtune.diagnose.checklist.model import (
    ACCEPTING_ROLES,
    ROLE_PROFILES,
    ROLES,
    Checklist,
    CheckResult,
    Ctx,
    LiveReadings,
    is_up,
    lowers,
    result,
)
from lbtune.diagnose.checklist.nic import (
    check_coalescing,
    check_offloads,
    check_pause,
    check_rss_hash,
    check_rss_indirection,
)
from lbtune.diagnose.checklist.realserver import check_arp, check_rp_filter, check_vip
from lbtune.diagnose.checklist.system import (
    check_clock,
    check_governor,
    check_irqbalance,
    check_isolcpus,
    check_profile,
    check_rings,
)
from lbtune.diagnose.loadlint import LoadPlan, lint_load, parse_load, read_load_facts
from lbtune.errors import BadInput, LbtuneError
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.host.kernel.timesync import ClockState, read_clock
from lbtune.host.limits import nofile_limit
from lbtune.host.net.ifname import check_ifname
from lbtune.host.net.mgmt import default_route_interfaces
from lbtune.host.net.sockdiag import ListenSocket
from lbtune.tune.plan import Target
from lbtune.tune.profile import Profile, load_profile, resolve
from lbtune.vocab import Level


def read_live() -> LiveReadings:
    """Read this process's RLIMIT_NOFILE and the clock state (call on the live host only)."""
    soft, hard = nofile_limit()
    clock: Optional[ClockState] = None
    error = ""
    try:
        clock = read_clock()
    except (OSError, AttributeError) as e:
        error = f"adjtimex failed: {e}"
    return LiveReadings((soft, hard), clock, error)


def pick_data_interface(
    host: Host, inv: HostInventory, explicit: Optional[str]
) -> tuple[Optional[str], str]:
    """The interface load traffic uses, and how it was chosen (for the reasons)."""
    names = {n.name for n in inv.nics}
    if explicit is not None:
        check_ifname(explicit, "--iface")
        if explicit not in names:
            have = ", ".join(sorted(names)) or "none"
            raise BadInput(f"--iface {explicit}: no such interface on this host (have: {have})")
        return explicit, "given with --iface"
    slaves = lowers(inv)
    up = [n for n in inv.nics if is_up(n) and n.name not in slaves]
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


_COVERED = {
    "connections-above-ports": "ephemeral-ports",
    "connections-near-ports": "ephemeral-ports",
    "connections-above-backlog": "listen-backlog",
}


def load_results(c: Ctx) -> list[CheckResult]:
    out = []
    for i in c.issues:
        if i.rule in _COVERED:
            continue
        out.append(result(f"load:{i.rule}", i.level, f"{i.reason}: {i.why}", i.fix))
    if c.plans and not out:
        tools = ", ".join(dict.fromkeys(p.tool for p in c.plans))
        out.append(result("load-command", Level.PASS, f"{tools}: no problem found in the options"))
    return out


IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


def parse_vip(text: str) -> IPAddress:
    try:
        vip = ipaddress.ip_address(text.strip())
    except ValueError:
        raise BadInput(f"--vip {text!r}: not an IP address") from None
    if vip.is_loopback or vip.is_unspecified or vip.is_multicast:
        raise BadInput(f"--vip {vip}: not a service address (loopback, unspecified or multicast)")
    return vip


_CHECKS_ALL: tuple[Callable[[Ctx], CheckResult], ...] = (
    check_profile,
    check_irqbalance,
    check_isolcpus,
    check_rings,
    check_rss_hash,
    check_rss_indirection,
    check_offloads,
    check_coalescing,
    check_pause,
    check_drained,
    check_conntrack,
    check_nofile,
    check_ports,
    check_backlog,
)


def _check_role(role: str, vip: Optional[str]) -> Optional[IPAddress]:
    """Refuse an unknown role and a VIP the role does not take; the parsed VIP."""
    if role not in ROLE_PROFILES:
        raise BadInput(f"--role {role!r}: unknown role (one of {', '.join(ROLES)})")
    parsed_vip = parse_vip(vip) if vip is not None else None
    if role == "realserver" and parsed_vip is None:
        raise BadInput("--role realserver needs --vip IP (the virtual IP the director forwards)")
    if parsed_vip is not None and role not in ("realserver", "lb-dr"):
        raise BadInput(f"--vip is for --role realserver or lb-dr, not {role}")
    return parsed_vip


def _listeners(host: Host) -> tuple[Optional[list[ListenSocket]], str]:
    """The host's listening sockets, or None and why they could not be read."""
    try:
        listeners = host.listen_sockets()
    except OSError as e:
        return None, f"sock_diag failed: {e.strerror or e}"
    if listeners is None:
        return None, "no `ss` recording (sos_commands/networking/ss_-peaonmi) here"
    return listeners, ""


@dataclass(frozen=True)
class _Resolved:
    """The role's profile on this host: its targets, or why there are none."""

    profile: Optional[Profile] = None
    targets: Optional[list[Target]] = None
    error: str = ""
    failed: bool = False  # the profile does not resolve (not merely: no data interface)


def _resolve_role_profile(
    host: Host, name: str, inv: HostInventory, data: Optional[str], how: str
) -> _Resolved:
    profile: Optional[Profile] = None
    try:
        profile = load_profile(name, root=host.fs.root)
        if profile.needs_iface and data is None:
            why = f"profile {name} tunes the data interface and there is {how}"
            return _Resolved(profile, None, why)
        return _Resolved(profile, resolve(profile, inv, data if profile.needs_iface else None))
    except LbtuneError as e:
        return _Resolved(profile, None, f"profile {name} does not resolve on this host: {e}", True)


def _role_checks(ctx: Ctx) -> list[CheckResult]:
    """Every check of `ctx.role`, in the order the checklist lists them."""
    checks = [check(ctx) for check in _CHECKS_ALL]
    if ctx.vip is not None:
        checks.append(check_vip(ctx))
    if ctx.role == "realserver":
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
    return checks


def run_checklist(
    host: Host,
    role: str,
    vip: Optional[str] = None,
    load: Optional[str] = None,
    iface: Optional[str] = None,
    readings: Optional[LiveReadings] = None,
) -> Checklist:
    """Run every check for `role` on `host`.

    `vip` is required for `realserver` (and checked on `lb-dr` when given); `load` is the
    planned load command (linted, and its connection count sizes the checks); `iface` the data
    interface (default: chosen from the host, see `pick_data_interface`). `readings`
    replaces the live host's readings (file limit, clock); by default they are read on a live
    host only.
    Raises BadInput for an unknown role, a bad VIP or a load command that cannot be parsed.
    """
    parsed_vip = _check_role(role, vip)
    plans: tuple[LoadPlan, ...] = tuple(parse_load(load)) if load is not None else ()

    inv = discover_host(host)
    data, how = pick_data_interface(host, inv, iface)
    if readings is None and host.is_live:
        readings = read_live()
    listeners, listeners_error = _listeners(host)
    facts = read_load_facts(
        host.fs,
        listeners if role in ACCEPTING_ROLES else None,
        readings.nofile if readings is not None else None,
    )
    issues = tuple(lint_load(load, role, facts)) if load is not None else ()

    name = ROLE_PROFILES[role]
    resolved = _resolve_role_profile(host, name, inv, data, how)
    ctx = Ctx(
        host=host,
        role=role,
        profile_name=name,
        inv=inv,
        iface=data,
        profile=resolved.profile,
        targets=resolved.targets,
        targets_error=resolved.error,
        resolve_failed=resolved.failed,
        vip=parsed_vip,
        plans=plans,
        issues=issues,
        facts=facts,
        listeners=listeners,
        listeners_error=listeners_error,
        readings=readings,
    )
    return Checklist(role, name, data, tuple(_role_checks(ctx)), how)
