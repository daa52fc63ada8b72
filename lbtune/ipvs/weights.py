"""Adaptive weights: the director's formula from agent reports to IPVS weights (pure).

Per real server, every poll (docs/ipvs.md, "Adaptive weights"):

1. **Smooth** the agent's load L (utilisation of its busiest resource, 0..1) and its egress
   throughput T with an exponential moving average (factor `alpha`).
2. **Capacity** C = T / L: what the server would send at full load. A server that sends
   20 Mbit/s at 100 % has C = 20 Mbit/s; one that sends 40 Mbit/s at 50 % has
   C = 80 Mbit/s. Only samples with L >= `measure_min` update it (an idle server's ratio
   is noise); until a server has an estimate it counts as the largest (an unknown server
   is not assumed slow).
3. **Capacity left**: score = C / max(C) x (floor + (1 - floor) x (1 - L)) and
   target = configured weight x `scale` x score / (the highest score of the servers in
   service). The capacity term spreads connections in proportion to what each server can
   do (what wlc needs); the headroom term moves them away from a server nearing saturation,
   and `floor` keeps a busy but healthy server in the rotation. IPVS weights are relative:
   dividing by the top score keeps the best server at its full weight, so servers that
   get busier together change nothing (and nothing is written).
4. **Overload**: a server whose agent says down (nothing listens) or reports listen-queue
   drops in its last interval, or whose smoothed pressure (work waiting or refused: listen
   queue, run queue, memory, connection limit; not CPU or link use, a busy server is not
   an overloaded one) reaches `high`, gets weight 0 and keeps it until its smoothed
   pressure is back at `low` or below with no new drops (hysteresis: no flapping around
   one threshold).
5. **Deadband**: a weight changes only when the target differs from the weight in the
   kernel by at least `deadband` of it (and by at least `min_step`); entering or leaving 0
   always applies.
6. **Never all 0**: when every server with a configured weight would be 0, the overloaded
   ones keep serving at their capacity share (load taken as 1); when all are down, every
   server gets its configured weight (there is nothing better to do).
7. **Unreachable agent**: the configured weight x `scale` (the config is the fallback: the
   same ratio to the others as configured, as if idle), said once by the caller.
8. **Agent that cannot read**: a report whose health is `unknown` (the agent could not
   read the server's listeners) keeps the weight the kernel holds and the state as it was:
   a read error is not an outage, nor a reason to move traffic. An egress rate the agent
   could not read leaves the throughput estimate as it was.

A configured weight of 0 stays 0 (the operator drained that server).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from lbtune.ipvs.nodereport import AgentReport

MAX_WEIGHT = 65535


@dataclass(frozen=True)
class Policy:
    alpha: float = 0.5  # EWMA factor of new samples
    high: float = 0.95  # smoothed load from which a server counts as overloaded
    low: float = 0.80  # ... and back in service at or below this
    floor: float = 0.25  # share of its capacity weight a fully busy healthy server keeps
    scale: int = 100  # weight units per configured weight unit
    measure_min: float = 0.2  # capacity is estimated only from samples at least this busy
    deadband: float = 0.15  # relative change below which a weight is left alone
    min_step: int = 2  # absolute change below which a weight is left alone


@dataclass(frozen=True)
class ServerState:
    """What the formula remembers about one server between polls."""

    load: Optional[float] = None  # smoothed
    pressure: Optional[float] = None  # smoothed
    throughput: Optional[float] = None  # smoothed bits/s
    capacity: Optional[float] = None  # last estimate, bits/s
    overloaded: bool = False
    fallback: bool = False  # the last poll could not reach the agent


@dataclass(frozen=True)
class Decision:
    server: str
    weight: int  # what the kernel should hold
    previous: int  # what it holds now
    reason: str

    @property
    def changed(self) -> bool:
        return self.weight != self.previous


def _ewma(old: Optional[float], new: float, alpha: float) -> float:
    return new if old is None else alpha * new + (1 - alpha) * old


def observe(policy: Policy, st: ServerState, r: Optional[AgentReport]) -> ServerState:
    """Fold one report (None: unreachable) into the server's state."""
    if r is None:
        return replace(st, fallback=True)
    if r.health == "unknown":
        return replace(st, fallback=False)
    load = _ewma(st.load, r.load, policy.alpha)
    pressure = _ewma(st.pressure, r.pressure, policy.alpha)
    tput = (st.throughput if r.egress_bps is None
            else _ewma(st.throughput, r.egress_bps, policy.alpha))  # fmt: skip
    cap = st.capacity
    if load >= policy.measure_min and tput is not None and tput > 0:
        cap = tput / load
    # down and listen drops act at once; a load the agent calls overloaded goes through the
    # smoothing like any load (one busy sample is not an overload)
    bad = r.health == "down" or r.listen_drops_delta > 0
    # hysteresis: in at `high`, out only at `low`
    overloaded = bad or (pressure > policy.low if st.overloaded else pressure >= policy.high)
    return ServerState(load, pressure, tput, cap, overloaded, False)


def step(
    policy: Policy,
    configured: Mapping[str, int],
    current: Mapping[str, int],
    reports: Mapping[str, Optional[AgentReport]],
    state: Mapping[str, ServerState],
) -> tuple[dict[str, ServerState], list[Decision]]:
    """One poll: new state and a decision (weight + reason) per configured server.

    configured: server -> weight from the config; current: server -> weight in the kernel
    now; reports: server -> its agent's report (None: unreachable; missing: no agent).
    """
    new = {s: observe(policy, state.get(s, ServerState()), reports.get(s))
           for s in configured}  # fmt: skip
    caps = [st.capacity for s, st in new.items() if st.capacity and not st.fallback]
    top = max(caps) if caps else None
    health = {s: (reports[s].health if reports.get(s) is not None else None)  # type: ignore[union-attr]
              for s in configured}  # fmt: skip

    def share(st: ServerState) -> float:
        if top is None or not st.capacity:
            return 1.0
        return st.capacity / top

    def score(st: ServerState, load: float) -> float:
        return share(st) * (policy.floor + (1 - policy.floor) * (1 - load))

    def target(s: str, st: ServerState, load: float, top_score: float) -> int:
        w = configured[s] * policy.scale * score(st, load) / top_score
        return min(MAX_WEIGHT, max(1, round(w)))

    serving = [st for s, st in new.items() if configured[s] > 0 and not st.fallback
               and st.load is not None and not st.overloaded]  # fmt: skip
    top_score = max((score(st, st.load or 0.0) for st in serving), default=1.0) or 1.0
    targets: dict[str, int] = {}
    reasons: dict[str, str] = {}
    for s, st in new.items():
        r = reports.get(s)
        if configured[s] == 0:
            targets[s], reasons[s] = 0, "configured weight 0"
        elif r is not None and r.health == "unknown":
            targets[s] = current.get(s, configured[s])
            reasons[s] = f"agent cannot read its sources ({r.reason}): weight kept"
        elif st.fallback or st.load is None:
            targets[s] = min(MAX_WEIGHT, configured[s] * policy.scale)
            reasons[s] = "agent unreachable: configured weight"
        elif st.overloaded:
            assert r is not None
            targets[s] = 0
            if r.health == "down":
                reasons[s] = f"down ({r.reason}); back once it serves"
            elif r.listen_drops_delta > 0:
                reasons[s] = f"overloaded ({r.reason}); back without drops and at pressure " \
                             f"<= {policy.low:g}"  # fmt: skip
            else:
                reasons[s] = f"overloaded (pressure {st.pressure:.2f}); back at pressure " \
                             f"<= {policy.low:g}"  # fmt: skip
        else:
            targets[s] = target(s, st, st.load, top_score)
            reasons[s] = (f"load {st.load:.2f}, capacity share {share(st):.2f}")
    wanted = [s for s in configured if configured[s] > 0]
    if wanted and all(targets[s] == 0 for s in wanted):
        alive = [s for s in wanted if health[s] in ("ok", "overloaded")]
        if alive:
            top_all = max(score(new[s], 1.0) for s in alive)
            for s in alive:
                targets[s] = target(s, new[s], 1.0, top_all)
                reasons[s] = "every server overloaded: weights by capacity alone"
        else:
            for s in wanted:
                targets[s] = min(MAX_WEIGHT, configured[s] * policy.scale)
                reasons[s] = "every server down: configured weights"
    decisions = []
    for s in configured:
        now = current.get(s, configured[s])
        want = targets[s]
        if want != now and want > 0 and now > 0:
            delta = abs(want - now)
            if delta < policy.min_step or delta < policy.deadband * now:
                want = now  # inside the deadband: leave it
        decisions.append(Decision(s, want, now, reasons[s]))
    return new, decisions


def weights_of(decisions: Sequence[Decision]) -> dict[str, int]:
    return {d.server: d.weight for d in decisions}
