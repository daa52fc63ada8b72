"""The health gate of a cluster director (`lbtune ipvs gate`): announce a VIP only while the
director can serve it.

A VIP passes a check when (1) the director's IPVS table is in sync with the config (the
verdict of `ipvs status CONFIG`) and (2) every TCP service on the VIP has at least
`[cluster.gate] min_real_servers` real servers (weight above 0) that accept a TCP connect
within `timeout`. The gate checks every `interval` seconds and keeps, per VIP, the state
it announces: a withdrawn VIP is announced after `rise` passing checks in a row, an
announced one withdrawn after `fall` failing checks in a row, so a check that flaps does
not flap the route. The state starts withdrawn.

The switch is BIRD's (lbtune.ipvs.bird): each VIP's static protocol, enabled while the VIP
is announced. Every round also puts BIRD back to the gate's state (a BIRD that restarted,
a `birdc configure` that restarted a protocol, a hand-typed `birdc disable`): level, not
edge. When the gate stops (SIGTERM, Ctrl-C) it withdraws every VIP: nothing checks the
director any more, so it must not attract flows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol

from lbtune.host.endpoints.reach import tcp_reachable
from lbtune.host.host import Host
from lbtune.ipvs.bird import AnnouncedVip, announced_vips
from lbtune.ipvs.cluster import ClusterConfig, Gate
from lbtune.ipvs.config import DirectorConfig
from lbtune.ipvs.status import director_status


@dataclass(frozen=True)
class VipHealth:
    """One check of one VIP: passed or not, and why not."""

    vip: AnnouncedVip
    ok: bool
    reason: str  # "" when ok


def _sync_reason(host: Host, cfg: DirectorConfig) -> str:
    st = director_status(host, cfg)
    if not st.loaded:
        return "IPVS is not loaded"
    if st.in_sync:
        return ""
    first = st.drift[0]
    return (f"the IPVS table differs from the config ({len(st.drift)} object(s); first: "
            f"{first.kind} {first.object})")  # fmt: skip


def check_vips(host: Host, cfg: DirectorConfig, gate: Gate) -> list[VipHealth]:
    """One round of checks of every VIP `cfg` announces (see the module docstring)."""
    sync = _sync_reason(host, cfg)
    tcp = [s for s in cfg.services if s.key.protocol == "tcp"]
    endpoints = [(rs.address, rs.port) for s in tcp for rs in s.servers if rs.weight > 0]
    reach = tcp_reachable(endpoints, gate.timeout) if endpoints and not sync else {}
    out = []
    for vip in announced_vips(cfg):
        if sync:
            out.append(VipHealth(vip, False, sync))
            continue
        reason = ""
        for svc in (s for s in tcp if s.key.addr == vip.address):
            live = [rs for rs in svc.servers if rs.weight > 0 and reach.get(
                (rs.address, rs.port)) == ""]
            if len(live) < gate.min_real_servers:
                down = [f"{rs.address}:{rs.port} {reach.get((rs.address, rs.port), 'weight 0')}"
                        for rs in svc.servers if rs not in live]
                reason = (f"{svc.key.ident}: {len(live)} of {len(svc.servers)} real servers "
                          f"reachable, {gate.min_real_servers} needed ({'; '.join(down)})")
                break
        out.append(VipHealth(vip, not reason, reason))
    return out


@dataclass
class Hysteresis:
    """rise/fall for one VIP: `feed` each check, get the new state when it changes."""

    rise: int
    fall: int
    up: bool = False
    streak: int = 0  # checks in a row that disagree with the current state

    def feed(self, ok: bool) -> Optional[bool]:
        if ok == self.up:
            self.streak = 0
            return None
        self.streak += 1
        if self.streak >= (self.rise if ok else self.fall):
            self.up, self.streak = ok, 0
            return ok
        return None


class Switch(Protocol):
    """What turns a VIP's announcement on and off (BIRD's control socket, in production)."""

    def protocol_states(self) -> dict[str, str]: ...

    def set_enabled(self, name: str, enabled: bool) -> None: ...


@dataclass(frozen=True)
class GateEvent:
    time: float
    vip: str  # the address, or "" for the gate itself
    kind: str  # check, announce, withdraw, repair, error, bird (answers again), stop
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"time": round(self.time, 3), "vip": self.vip, "event": self.kind,
                "reason": self.reason}  # fmt: skip


@dataclass
class GateRun:
    """The gate of one director: its VIPs' hysteresis and the switch it drives."""

    host: Host
    cfg: DirectorConfig
    switch: Switch
    log: Callable[[GateEvent], None]
    states: dict[str, Hysteresis] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)  # the last verdict logged per VIP
    error: str = ""  # the last BIRD error logged (a BIRD that is down is said once)

    @property
    def cluster(self) -> ClusterConfig:
        assert self.cfg.cluster is not None
        return self.cfg.cluster

    def round(self) -> None:
        """One check of every VIP, then BIRD put to the announced state of each."""
        g = self.cluster.gate
        checks = check_vips(self.host, self.cfg, g)
        changed = set()
        for c in checks:
            h = self.states.setdefault(c.vip.address, Hysteresis(g.rise, g.fall))
            new = h.feed(c.ok)
            if new is not None:
                changed.add(c.vip.address)
                self.log(GateEvent(time.time(), c.vip.address, "announce" if new else "withdraw",
                                   f"{g.rise} check(s) in a row passed" if new else
                                   f"{g.fall} check(s) in a row failed: {c.reason}"))
            elif self.reasons.get(c.vip.address) != c.reason:
                self.log(GateEvent(time.time(), c.vip.address, "check",
                                   f"failed: {c.reason}" if c.reason else "passed"))
            self.reasons[c.vip.address] = c.reason
        self.enforce([c.vip for c in checks], changed)

    def enforce(self, vips: list[AnnouncedVip], changed: set[str]) -> None:
        """Each VIP's static protocol enabled exactly while the VIP is announced; a
        difference the gate did not just decide is logged as a repair."""
        from lbtune.host.endpoints.bird import BirdError

        try:
            now = self.switch.protocol_states()
            for vip in vips:
                h = self.states.get(vip.address)
                want = bool(h and h.up)
                state = now.get(vip.protocol)
                if state is None:
                    self.log(GateEvent(time.time(), vip.address, "error",
                                       f"BIRD has no protocol {vip.protocol}: load the "
                                       "config of `ipvs export --format bird`"))  # fmt: skip
                elif (state != "down") != want:  # enabled: up, or start/feed on its way
                    self.switch.set_enabled(vip.protocol, want)
                    if vip.address not in changed:
                        self.log(GateEvent(time.time(), vip.address, "repair",
                                           f"BIRD had {vip.protocol} {state}: "
                                           f"{'enabled' if want else 'disabled'} it"))
        except BirdError as e:
            if str(e) != self.error:
                self.log(GateEvent(time.time(), "", "error", str(e)))
            self.error = str(e)
            return
        if self.error:
            self.log(GateEvent(time.time(), "", "bird", "BIRD answers again"))
            self.error = ""

    def stop(self) -> None:
        """Withdraw every VIP (the gate is going away)."""
        vips = list(announced_vips(self.cfg))
        for h in self.states.values():
            h.up, h.streak = False, 0
        self.enforce(vips, {v.address for v in vips})
        self.log(GateEvent(time.time(), "", "stop", "gate stopped: every VIP withdrawn"))


def run(gate: GateRun, duration: Optional[float] = None) -> None:
    """Rounds every `interval` seconds until `duration` passes (None: until stopped)."""
    interval = gate.cluster.gate.interval
    end = None if duration is None else time.monotonic() + duration
    nxt = time.monotonic()
    while end is None or time.monotonic() < end:
        gate.round()
        nxt += interval
        time.sleep(max(0.0, nxt - time.monotonic()))
