"""Reconcile the director's IPVS table with a config: desired state vs the kernel's, as a plan.

Level-triggered: every run reads what the kernel holds now and plans the difference, so
manual drift is repaired and a second run plans nothing. The plan is a tuning-engine plan
of IPVS knobs (`lbtune.tune.knobs.ipvs`), so apply, journal, read-back, rollback and the lock
are the engine's. Changes are edits in place, never a flush: a service whose scheduler
changes keeps its connections, a real server whose weight changes keeps its own.

Order of a plan: `net.ipv4.vs.*` sysctls, IPVS timeouts, VIP addresses, drains (weight 0
for every real server about to go), services, real servers, then the removals: real
servers (each once its active connections end or the drain timeout passes, all against
one deadline) and services.

`plan_director` computes the plan from the host alone (it reads and validates everything
itself), so the engine can call it under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Container, Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.ipvs import memo as memo_
from lbtune.host.ipvs.table import DestKey, Service, ServiceKey, available_schedulers, ipvs_of
from lbtune.host.net import addr as addrs
from lbtune.ipvs.config import DirectorConfig, HostFacts, check_host
from lbtune.ipvs.failover import failover_findings
from lbtune.tune.engine import FaultHook, apply_plan
from lbtune.tune.journal import Journal, StateDir
from lbtune.tune.knobs.ipvs import (
    ABSENT,
    PRESENT,
    AddressKnob,
    Drain,
    IpvsDestKnob,
    IpvsDrainKnob,
    IpvsServiceKnob,
    IpvsTimeoutKnob,
    address_obj,
    dest_obj,
    dest_text,
    service_text,
)
from lbtune.tune.knobs.sysctl import SysctlKnob
from lbtune.tune.plan import Plan, Target, make_plan

if TYPE_CHECKING:
    from lbtune.ipvs.resident import ResidentTable


def plan_name(cfg: DirectorConfig) -> str:
    """How journals and `lbtune history` name an IPVS apply."""
    return f"ipvs {cfg.source}"


def _removed(cfg: DirectorConfig, table: Mapping[ServiceKey, Service]) -> list[Service]:
    """Kernel services the config does not list and may remove (its `prune` policy)."""
    wanted = {s.key for s in cfg.services}
    if cfg.prune == "none":
        return []
    mine = cfg.service_addresses() | {v.address for v in cfg.vips}
    out = []
    for key, svc in table.items():
        if key in wanted:
            continue
        if cfg.prune == "vips" and (key.protocol == "fwmark" or key.addr not in mine):
            continue
        out.append(svc)
    return out


def _removal(svc: Service, d_key: DestKey, active: int, drain: Drain) -> list[Target]:
    obj = dest_obj(svc.key, d_key)
    why = f"not in the config: drained, deleted once its {active} active connection(s) end " \
          f"(at most {drain.timeout:g} s)" if active else "not in the config"  # fmt: skip
    return [
        Target(IpvsDrainKnob.of(svc.key, d_key, drain), "0",
               "no new connections while it drains", key=f"drain {obj}"),
        Target(IpvsDestKnob.of(svc.key, d_key, drain), ABSENT, why, key=f"remove {obj}"),
    ]


def in_place(cfg: DirectorConfig, table: Mapping[ServiceKey, Service],
             trusted: Container[ServiceKey] = frozenset()) -> frozenset[ServiceKey]:
    """Config services the kernel holds exactly: the same settings and the same real
    servers with the same settings (values compared as the kernel reports them, no text).
    Their knobs would all plan as ok: a reconcile of a table that needs nothing skips
    building 11,000 knobs to find that out. `trusted`: services known to be in place
    without comparing (`lbtune ipvs serve`: lbtune.ipvs.resident, the same replies and
    the same config object as when they were found in place)."""
    out = []
    for svc in cfg.services:
        if svc.key in trusted:
            out.append(svc.key)
            continue
        now = table.get(svc.key)
        if now is None or now.settings != svc.settings:
            continue
        have = now.dest_settings
        if len(have) == len(svc.servers) and all(
            have.get(rs.key) == rs.settings for rs in svc.servers
        ):
            out.append(svc.key)
    return frozenset(out)


def desired_targets(
    cfg: DirectorConfig,
    table: Mapping[ServiceKey, Service],
    drain: Drain,
    skip: frozenset[ServiceKey] = frozenset(),
) -> list[Target]:
    """Every knob target the config implies against `table` (plain data: no host reads).

    Targets that already hold are kept (the plan shows them as ok), except those of the
    services in `skip` (`in_place`: all ok); removals come from the table: real servers of
    listed services that the config drops, and services the prune policy removes (each of
    their real servers first).
    """
    sysctls = [Target(SysctlKnob(k), v, "IPVS setting from the config", key=f"sysctl {k}")
               for k, v in cfg.sysctls]  # fmt: skip
    timeouts = [Target(IpvsTimeoutKnob(k), str(v), "IPVS timeout from the config",
                       key=f"timeouts.{k}") for k, v in cfg.timeouts]  # fmt: skip
    vips = [Target(AddressKnob(address_obj(v.dev, v.address, v.prefix)), PRESENT,
                   "the director receives the VIP's packets", key=f"vip {v.address}")
            for v in cfg.vips]  # fmt: skip
    drains: list[Target] = []
    removals: list[Target] = []
    services: list[Target] = []
    dests: list[Target] = []
    for svc in cfg.services:
        if svc.key in skip:
            continue
        ident = svc.key.ident
        services.append(Target(IpvsServiceKnob.of(svc.key),
                               service_text(svc.key.family, svc.settings),
                               "service from the config", key=f"service {ident}"))
        for rs in svc.servers:
            knob = IpvsDestKnob.of(svc.key, rs.key)
            dests.append(Target(knob, dest_text(rs.settings), "real server from the config",
                                key=f"real_server {knob.obj}"))
        now = table.get(svc.key)
        if now is not None:
            listed = {rs.key for rs in svc.servers}
            for d in now.destinations:
                if d.key not in listed:
                    pair = _removal(now, d.key, d.active, drain)
                    drains.append(pair[0])
                    removals.append(pair[1])
    gone: list[Target] = []
    for svc_now in _removed(cfg, table):
        for d in svc_now.destinations:
            pair = _removal(svc_now, d.key, d.active, drain)
            drains.append(pair[0])
            removals.append(pair[1])
        gone.append(Target(IpvsServiceKnob.of(svc_now.key), ABSENT,
                           f"not in the config (prune = {cfg.prune})",
                           key=f"remove {svc_now.key.ident}"))  # fmt: skip
    return sysctls + timeouts + vips + drains + services + dests + removals + gone


def teardown_targets(
    cfg: DirectorConfig, table: Mapping[ServiceKey, Service], drain: Drain
) -> list[Target]:
    """Remove what the config put there: its services (drained first) and its VIPs.
    Sysctls and timeouts stay (they are host settings; `lbtune rollback` restores them)."""
    drains: list[Target] = []
    removals: list[Target] = []
    gone: list[Target] = []
    for svc in cfg.services:
        now = table.get(svc.key)
        if now is None:
            continue
        for d in now.destinations:
            pair = _removal(now, d.key, d.active, drain)
            drains.append(pair[0])
            removals.append(pair[1])
        gone.append(Target(IpvsServiceKnob.of(svc.key), ABSENT, "teardown",
                           key=f"remove {svc.key.ident}"))  # fmt: skip
    vips = [Target(AddressKnob(address_obj(v.dev, v.address, v.prefix)), ABSENT, "teardown",
                   key=f"vip {v.address}") for v in cfg.vips]  # fmt: skip
    return drains + removals + gone + vips


def host_facts(host: Host) -> HostFacts:
    """Schedulers the kernel offers, local addresses and interfaces of the director."""
    return HostFacts(
        available_schedulers(host.fs),
        frozenset(addrs.local_addresses(host)),
        frozenset(addrs.link_names(host)),
    )


@dataclass(frozen=True)
class DirectorPlan:
    """A plan, the drain its removals share, and warnings about how it will go.
    `in_place`: objects (services and real servers) already as wanted that the plan has
    no rows for (`plan_director(every_row=False)`); the plan's ok rows are the others."""

    plan: Plan
    drain: Drain = field(compare=False)
    warnings: tuple[str, ...] = ()
    in_place: int = 0
    placed: frozenset[ServiceKey] = field(default=frozenset(), compare=False)  # their keys
    table: Mapping[ServiceKey, Service] = field(default_factory=dict, compare=False,
                                                repr=False)  # as read for the plan


EXPIRE_NODEST = "net.ipv4.vs.expire_nodest_conn"


def plan_warnings(host: Host, cfg: DirectorConfig, plan: Plan) -> list[str]:
    """What the operator should know before this plan runs (with a [cluster]: what breaks
    stateless failover, lbtune.ipvs.failover)."""
    out = []
    removes = [c for c in plan.to_apply if c.knob.kind == "ipvs_dest" and c.desired == ABSENT]
    if removes:
        wanted = dict(cfg.sysctls).get(EXPIRE_NODEST)
        now = host.fs.read_int("/proc/sys/net/ipv4/vs/expire_nodest_conn")  # None: not loaded
        if (wanted if wanted is not None else str(now or 0)) == "0":
            out.append(
                f"{EXPIRE_NODEST} is 0: IPVS keeps old connections of a removed real server "
                "for up to the tcpfin timeout, and a new connection that reuses one's client "
                "port is sent to the removed server and dropped; set [sysctl] "
                "expire_nodest_conn = 1 so it is scheduled anew"
            )
    out += [f.text() for f in failover_findings(cfg)]
    return out


# Set by `lbtune ipvs serve` (lbtune.cli.ipvs.serve): what it keeps of the table between applies.
resident: Optional[ResidentTable] = None

Planner = Callable[[DirectorConfig, Mapping[ServiceKey, Service], Drain], list[Target]]


def plan_director(
    host: Host,
    cfg: DirectorConfig,
    facts: Optional[HostFacts] = None,
    targets_of: Planner = desired_targets,
    every_row: bool = True,
    trusted: Container[ServiceKey] = frozenset(),
) -> DirectorPlan:
    """Validate `cfg` against the host and plan it against the kernel's table now.

    `every_row=False` (apply, and plan without -v): services the kernel holds exactly
    (`in_place`) get no rows, only their count in `DirectorPlan.in_place`; the changes are
    the same either way."""
    check_host(cfg, facts if facts is not None else host_facts(host))
    drain = Drain(cfg.drain_timeout)
    table = ipvs_of(host).table()
    skip: frozenset[ServiceKey] = frozenset()
    if not every_row and targets_of is desired_targets:
        skip = in_place(cfg, table, trusted)
        targets = desired_targets(cfg, table, drain, skip)
    else:
        targets = targets_of(cfg, table, drain)
    plan = make_plan(host, plan_name(cfg), targets)
    n = sum(1 + len(s.servers) for s in cfg.services if s.key in skip)
    return DirectorPlan(plan, drain, tuple(plan_warnings(host, cfg, plan)), n, skip,
                        table)


@dataclass(frozen=True)
class Applied:
    """What an apply did: the plan, its journal (None: nothing to do), and the real servers
    deleted at the drain timeout while still holding active connections."""

    plan: Plan
    journal: Optional[Journal]
    cut: Mapping[str, int]
    warnings: tuple[str, ...] = ()
    in_place: int = 0  # objects already as wanted without a plan row (DirectorPlan)


def apply_director(
    host: Host,
    cfg: DirectorConfig,
    state: StateDir,
    targets_of: Planner = desired_targets,
    fault: Optional[FaultHook] = None,
    every_row: bool = True,
    memo: bool = False,
) -> Applied:
    """Take the lock, load IPVS if needed, read the kernel's table, plan, and apply through the
    engine (journaled, rolled back on any failure). The lock comes first so that two runs
    never plan from the same table and both apply. IPVS requests are pipelined; the engine's
    read-back checks them all.

    `memo` (the CLI's `ipvs apply` on the live host): a run that plans nothing records
    what it found, under the lock, so the next run with the same config can tell the same
    without planning (lbtune.host.ipvs.memo); a run that changes something removes the record."""
    with state.lock():
        session = ipvs_of(host)
        modules = memo_.modules_signature() if memo else None  # before what it describes
        facts = host_facts(host)
        check_host(cfg, facts)  # a config the host cannot take loads no module
        session.load()
        keep = resident if memo else None
        if memo:
            session.tap = memo_.TableDigest if keep is None else keep.reader(cfg)
        try:
            planned = plan_director(host, cfg, facts, targets_of=targets_of,
                                    every_row=every_row,
                                    trusted=keep.trusted if keep is not None else frozenset())
        finally:
            session.tap = None
        if keep is not None:
            keep.remember(cfg, planned.table, planned.placed)
        digest = session.digest
        if memo and planned.plan.to_apply:
            memo_.forget(state.fs, state.base)
        with session.batching():
            journal = apply_plan(host, planned.plan, state, fault=fault)
        if (memo and journal is None and digest is not None and not planned.warnings
                and not planned.drain.cut and cfg.text_sha256):
            _record(state, cfg, digest, planned.in_place + planned.plan.unchanged, modules)
    return Applied(planned.plan, journal, dict(planned.drain.cut), planned.warnings,
                   planned.in_place)


def _record(state: StateDir, cfg: DirectorConfig, digest: str, unchanged: int,
            modules: object) -> None:
    """The record of this no-op that `lbtune.host.ipvs.memo.check` vouches for the next
    identical run from: what the config needs of the host, as values to compare."""
    placed = {v.address for v in cfg.vips}
    memo_.record(
        state.fs, state.base, source=cfg.source, config_sha256=cfg.text_sha256,
        table=digest, modules=modules, sysctls=cfg.sysctls, timeouts=cfg.timeouts,
        vips=tuple((v.dev, v.address, v.prefix) for v in cfg.vips),
        local=tuple(sorted(a for a in cfg.service_addresses() if a not in placed)),
        unchanged=unchanged,
    )


def require_services(cfg: DirectorConfig) -> None:
    if not cfg.services and not cfg.vips:
        raise BadInput(f"{cfg.source}: no [[service]] and no [[vip]]: nothing to configure")
