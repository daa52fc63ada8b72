"""What a director-cluster run measured: the client's record cut into one row per event.

Pure functions over the failover client's record (lbtune.lab.inguest.failoverclient: fresh
connections and keep-alive connections, each keep-alive one with its client port) and the
orchestrator's events (lbtune.lab.experiments.cluster), on the guest's one CLOCK_MONOTONIC:

* an event: a director killed like a dead host (`kill`), brought back (`return`), added
  (`add`) or drained (`drain`), with the seconds until the router's kernel table stopped
  (kill, drain) or started (return, add) using it, and which director the router sends each
  keep-alive connection to just before the event and after it settled (by client port: the
  router's own `ip route get` with the flow's ports, under its L4 hash);
* per event: the failed fresh connections of its window (from the event to the next one,
  both moved back by the fresh connections' timeout), the keep-alive connections open at the
  event split into those the event's director carried and those the others carried, how
  many of each broke within the window, and how many the router sends to another director
  after it (moved, whether they survived the move or not).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Sequence

FRESH_TIMEOUT = 0.5  # the failover client's default --timeout
KINDS = ("kill", "return", "add", "drain")


@dataclass(frozen=True)
class ClusterEvent:
    """One event the orchestrator caused."""

    t: float
    kind: str  # KINDS
    director: str
    took_s: Optional[float]  # event -> the router's table without (kill, drain) / with it
    before: Mapping[int, str] = field(default_factory=dict)  # client port -> director
    after: Mapping[int, str] = field(default_factory=dict)
    paths_before: int = 0  # the router's nexthops for the VIP
    paths_after: int = 0


@dataclass(frozen=True)
class KaConn:
    port: int
    opened: float
    broken: Optional[float]
    reason: str


@dataclass(frozen=True)
class ClientLog:
    probes: tuple[tuple[float, bool], ...]
    conns: tuple[KaConn, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientLog:
        probes = tuple(sorted((float(p[0]), bool(p[1])) for p in data["probes"]))
        conns = tuple(KaConn(int(c.get("port", 0)), float(c["opened"]),
                             None if c["broken"] is None else float(c["broken"]),
                             str(c["reason"])) for c in data["conns"])  # fmt: skip
        return cls(probes, conns)


@dataclass(frozen=True)
class EventRow:
    """One event as the client and the router saw it."""

    n: int
    kind: str
    director: str
    took_s: Optional[float]
    paths: str  # "3 -> 2"
    failed: int  # fresh connections that failed in the window
    probes: int
    carried_dir: int  # keep-alive connections open at the event on the event's director
    carried_others: int  # ... on the other directors
    broken_dir: int
    broken_others: int
    moved: int  # open at the event, sent to another director afterwards (broken or not)
    unknown: int = 0  # open at the event but the router's answer named no director
    reasons: tuple[str, ...] = ()


def event_rows(log: ClientLog, events: Sequence[ClusterEvent], end: float,
               timeout: float = FRESH_TIMEOUT) -> tuple[EventRow, ...]:  # fmt: skip
    rows = []
    for i, ev in enumerate(events):
        lo = ev.t - timeout
        hi = (events[i + 1].t if i + 1 < len(events) else end) - timeout
        probes = [ok for t, ok in log.probes if lo <= t < hi]
        live = [c for c in log.conns
                if c.opened and c.opened < ev.t and (c.broken is None or c.broken >= ev.t)]
        mine: list[KaConn] = []
        others: list[KaConn] = []
        unknown = 0
        for c in live:
            who = ev.before.get(c.port, "")
            if not who:
                unknown += 1
            (mine if who == ev.director else others).append(c)

        def broke(cs: list[KaConn], until: float = hi + timeout) -> list[KaConn]:
            return [c for c in cs if c.broken is not None and c.broken < until]

        moved = sum(1 for c in live if ev.before.get(c.port) and ev.after.get(c.port)
                    and ev.after[c.port] != ev.before[c.port])
        took = None if ev.took_s is None else round(ev.took_s, 3)
        rows.append(EventRow(i + 1, ev.kind, ev.director, took,
                             f"{ev.paths_before} -> {ev.paths_after}",
                             sum(1 for ok in probes if not ok), len(probes), len(mine),
                             len(others), len(broke(mine)), len(broke(others)), moved, unknown,
                             tuple(sorted({c.reason for c in broke(live)}))))  # fmt: skip
    return tuple(rows)


@dataclass(frozen=True)
class ClusterResult:
    config: dict[str, Any]
    ok: bool
    reason: str
    rows: tuple[EventRow, ...]
    stateless: bool  # mh + sloppy TCP: nothing may break
    configs: dict[str, str] = field(default_factory=dict)  # bird.conf per director, router
    kernel: str = ""
    router_log: tuple[str, ...] = ()  # the router BIRD's session changes (BGP, BFD)
    # wrk through every active director ("rps", "directors") and through one ("one_rps")
    throughput: dict[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, config: dict[str, Any], rows: Sequence[EventRow], reason: str,
              configs: dict[str, str], kernel: str,
              router_log: Sequence[str] = (),
              throughput: Optional[dict[str, float]] = None) -> ClusterResult:  # fmt: skip
        stateless = config.get("scheduler") == "mh" and bool(config.get("sloppy"))
        if not reason:
            missed = [r.n for r in rows if r.took_s is None]
            if not rows:
                reason = "no event was measured"
            elif missed:
                reason = f"event {missed[0]}: the router's table did not change"
            elif not any(r.carried_dir for r in rows if r.kind == "kill"):
                reason = "no killed director carried a keep-alive connection"
            elif stateless and any(r.broken_dir or r.broken_others for r in rows):
                r = next(r for r in rows if r.broken_dir or r.broken_others)
                reason = (f"event {r.n} ({r.kind} {r.director}): "
                          f"{r.broken_dir + r.broken_others} established connection(s) broke "
                          f"with mh and sloppy TCP ({', '.join(r.reasons)})")
        return cls(config, not reason, reason, tuple(rows), stateless, configs, kernel,
                   tuple(router_log), dict(throughput or {}))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def result_from_json(data: Mapping[str, Any]) -> ClusterResult:
    return ClusterResult(
        config=dict(data["config"]),
        ok=bool(data["ok"]),
        reason=str(data["reason"]),
        rows=tuple(EventRow(**{**r, "reasons": tuple(r.get("reasons", ()))})
                   for r in data["rows"]),
        stateless=bool(data["stateless"]),
        configs=dict(data.get("configs", {})),
        kernel=str(data.get("kernel", "")),
        router_log=tuple(data.get("router_log", ())),
        throughput=dict(data.get("throughput", {})),
    )
