"""What the director's IPVS table holds now, and (given a config) whether it is in sync.

Services with their scheduler, flags and persistence; real servers with forwarding method,
weight, thresholds, active/inactive connections; the kernel's counters and its 2-second
rate estimates for both. With a config, every object gets a knob status (`ok`, `drift`,
`missing`) from the engine's `verify_targets` over the same targets `apply` would use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lbtune.host.host import Host
from lbtune.host.ipvs.table import (
    Counters,
    IpvsInfo,
    Service,
    SyncDaemon,
    Timeouts,
    flag_names,
    ipvs_of,
)
from lbtune.ipvs.config import DirectorConfig
from lbtune.ipvs.reconcile import desired_targets
from lbtune.tune.engine import KnobCheck, KnobStatus, verify_targets
from lbtune.tune.knobs.ipvs import Drain


@dataclass(frozen=True)
class RealServerRow:
    address: str  # ADDR:PORT
    forward: str
    weight: int
    upper: int
    lower: int
    active: int
    inactive: int
    persistent: int
    counters: Counters


@dataclass(frozen=True)
class ServiceRow:
    service: str  # ident: tcp:10.0.0.100:80
    scheduler: str
    flags: tuple[str, ...]
    persistence: int
    netmask: int
    counters: Counters
    real_servers: tuple[RealServerRow, ...]

    @property
    def active(self) -> int:
        return sum(r.active for r in self.real_servers)

    @property
    def inactive(self) -> int:
        return sum(r.inactive for r in self.real_servers)


@dataclass(frozen=True)
class DirectorStatus:
    loaded: bool  # IPVS present in this kernel (namespace) now
    info: Optional[IpvsInfo]
    timeouts: Optional[Timeouts]
    daemons: tuple[SyncDaemon, ...]
    services: tuple[ServiceRow, ...]
    knobs: tuple[KnobCheck, ...]  # with a config: one per planned object

    @property
    def in_sync(self) -> bool:
        return all(v.status in (KnobStatus.OK, KnobStatus.SKIPPED) for v in self.knobs)

    @property
    def drift(self) -> tuple[KnobCheck, ...]:
        return tuple(v for v in self.knobs if v.status not in (KnobStatus.OK, KnobStatus.SKIPPED))


def service_row(svc: Service) -> ServiceRow:
    s = svc.settings
    flags = tuple(f for f in flag_names(s.flags, s.scheduler) if f != "persistent")
    persistence = s.timeout if s.flags & 0x1 else 0
    rows = tuple(
        RealServerRow(d.key.ident, d.settings.fwd, d.settings.weight, d.settings.u_threshold,
                      d.settings.l_threshold, d.active, d.inactive, d.persistent, d.counters)
        for d in svc.destinations
    )
    return ServiceRow(svc.key.ident, s.scheduler, flags, persistence, s.netmask, svc.counters, rows)


def director_status(host: Host, cfg: Optional[DirectorConfig] = None) -> DirectorStatus:
    """Read the table (one pass) and, with `cfg`, verify every object the config implies."""
    session = ipvs_of(host)
    loaded = session.available()
    table = session.table(counters=True)
    verdicts: tuple[KnobCheck, ...] = ()
    if cfg is not None:
        # a server to remove shows as its removal; its drain step would say the same twice
        targets = [t for t in desired_targets(cfg, table, Drain(0)) if t.knob.kind != "ipvs_drain"]
        verdicts = tuple(verify_targets(host, targets))
    return DirectorStatus(
        loaded,
        session.info(),
        session.timeouts(),
        tuple(session.daemons()),
        tuple(service_row(s) for s in table.values()),
        verdicts,
    )
