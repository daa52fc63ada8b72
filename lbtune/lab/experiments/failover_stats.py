"""What a failover run measured: the failover client's record cut into a window per VIP switch.

Pure functions over the failover client's timestamps (lbtune.lab.inguest.failoverclient) and
the orchestrator's event times (lbtune.lab.experiments.failover), both CLOCK_MONOTONIC in the
same guest:

* loss window: from the start of the first failed fresh connection to the start of the
  first successful one after the last failure, within the switch's window (0 when none
  failed). One every 20 ms: the resolution is about one interval;
* failed requests: the failed fresh connections of the window;
* keep-alive connections: those established (answered at least once) before the switch and
  still open then, and how many of them broke during the window;
* held (sync on): how many of the serving keep-alive connections the new master's IPVS
  table held when it took over (failover: when the master died, after the wait for sync;
  failback: when the returning master had the VIP). A connection it lacked is reset; one it
  held and still lost is sync failing, not timing.

A switch's window runs from its event to the next event (the last to the end of the run),
both moved back by the fresh connections' timeout: one started just before the kill can
fail because of it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional, Sequence

FRESH_TIMEOUT = 0.5  # the failover client's default --timeout


@dataclass(frozen=True)
class Event:
    """A switch the orchestrator caused: when, which kind, to whom, how long until the new
    master held the VIP (None: never), whom the client's ARP entry named after it."""

    t: float
    kind: str  # "failover" (master killed) or "failback" (master back)
    to: str
    took_s: Optional[float]
    arp: str = ""
    held: Optional[int] = None  # keep-alive connections the new master held (sync on)


@dataclass(frozen=True)
class Conn:
    opened: float
    broken: Optional[float]
    reason: str


@dataclass(frozen=True)
class ClientRecord:
    """The failover client's output: its fresh connections ("probes") as (start, ok) and its
    keep-alive connections."""

    probes: tuple[tuple[float, bool], ...]
    conns: tuple[Conn, ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClientRecord:
        probes = tuple(sorted((float(p[0]), bool(p[1])) for p in data["probes"]))
        conns = tuple(Conn(float(c["opened"]), None if c["broken"] is None else
                           float(c["broken"]), str(c["reason"])) for c in data["conns"])
        return cls(probes, conns)


@dataclass(frozen=True)
class Window:
    """One switch as the client saw it."""

    switch: int  # 1-based, in event order
    kind: str
    to: str
    took_s: Optional[float]  # orchestrator: event -> VIP on the new master
    arp: str
    loss_s: float
    failed: int
    probes: int
    established: int  # keep-alive connections open and serving at the switch
    lost: int  # of those, broken during the window
    recovered: bool  # a fresh connection succeeded after the window's last failure
    reasons: tuple[str, ...] = ()
    max_gap_s: float = 0.0  # longest pause between fresh-connection starts: the resolution achieved
    held: Optional[int] = None  # keep-alive connections the new master held at the switch


def switch_windows(
    record: ClientRecord, events: Sequence[Event], end: float, timeout: float = FRESH_TIMEOUT
) -> tuple[Window, ...]:
    out = []
    for i, ev in enumerate(events):
        lo = ev.t - timeout
        hi = (events[i + 1].t if i + 1 < len(events) else end) - timeout
        probes = [(t, ok) for t, ok in record.probes if lo <= t < hi]
        failed = [t for t, ok in probes if not ok]
        loss, recovered = 0.0, any(ok for _, ok in probes)
        if failed:
            after = [t for t, ok in probes if ok and t > failed[-1]]
            loss, recovered = (after[0] if after else hi) - failed[0], bool(after)
        open_at = [c for c in record.conns
                   if c.opened < ev.t and (c.broken is None or c.broken >= ev.t)]  # fmt: skip
        lost = [c for c in open_at if c.broken is not None and c.broken < hi + timeout]
        took = None if ev.took_s is None else round(ev.took_s, 3)
        starts = [t for t, _ in probes]
        gap = max((b - a for a, b in zip(starts, starts[1:])), default=0.0)
        out.append(Window(i + 1, ev.kind, ev.to, took, ev.arp, round(loss, 3),
                          len(failed), len(probes), len(open_at), len(lost), recovered,
                          tuple(sorted({c.reason for c in lost})), round(gap, 3),
                          ev.held))  # fmt: skip
    return tuple(out)


@dataclass(frozen=True)
class KindSummary:
    """All switches of one kind: loss windows (median, max), failed requests, connections."""

    kind: str
    switches: int
    loss_median_s: float
    loss_max_s: float
    failed: int
    established: int
    lost: int


def summarize(windows: Sequence[Window], kind: str) -> Optional[KindSummary]:
    ws = [w for w in windows if w.kind == kind]
    if not ws:
        return None
    losses = [w.loss_s for w in ws]
    return KindSummary(kind, len(ws), round(statistics.median(losses), 3), max(losses),
                       sum(w.failed for w in ws), sum(w.established for w in ws),
                       sum(w.lost for w in ws))  # fmt: skip


@dataclass(frozen=True)
class FailoverResult:
    config: dict[str, Any]
    ok: bool
    reason: str
    windows: tuple[Window, ...]
    summary: tuple[KindSummary, ...]
    configs: dict[str, str] = field(default_factory=dict)  # keepalived.conf per director
    kernel: str = ""

    @classmethod
    def build(cls, config: dict[str, Any], windows: Sequence[Window], reason: str,
              configs: dict[str, str], kernel: str) -> FailoverResult:  # fmt: skip
        summary = tuple(s for s in (summarize(windows, k) for k in ("failover", "failback"))
                        if s is not None)  # fmt: skip
        if not reason:
            missed = [w.switch for w in windows if w.took_s is None]
            wrong = [w.switch for w in windows if w.arp and w.arp != w.to]
            stuck = [w.switch for w in windows if not w.recovered]
            if not windows:
                reason = "no switch was measured"
            elif stuck:
                reason = f"switch {stuck[0]}: no request succeeded after it"
            elif missed:
                reason = f"switch {missed[0]}: the VIP did not move"
            elif wrong:
                reason = f"switch {wrong[0]}: the client's ARP entry names the wrong director"
            elif config.get("sync") and any(w.lost for w in windows):
                reason = _sync_reason(windows, config)
        return cls(config, not reason, reason, tuple(windows), summary, configs, kernel)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _sync_reason(windows: Sequence[Window], config: Mapping[str, Any]) -> str:
    """Why established connections broke with sync on: sync losing what the new master
    held, or timing (the new master took over before sync carried them)."""
    broke_held = [w for w in windows if w.lost and (w.held is None or w.lost > w.established
                                                     - w.held)]  # fmt: skip
    if broke_held:
        lost = sum(w.lost for w in broke_held)
        where = ", ".join(f"{w.switch} ({w.kind})" for w in broke_held)
        return (f"{lost} established connection(s) broke although sync was on and the new "
                f"master held them: switch {where}")
    w = next(w for w in windows if w.lost)
    if w.kind == "failback":
        return (f"switch {w.switch} (failback): {w.to} took the VIP back holding {w.held} of "
                f"{w.established} keep-alive connection(s), and {w.lost} it lacked broke: "
                f"sync needs longer than preempt_delay {config.get('preempt_delay', 0):g} s "
                f"(a busy connection is re-sent every 50 packets, net.ipv4.vs.sync_threshold); "
                f"raise --preempt-delay")
    return (f"switch {w.switch} (failover): {w.to} held {w.held} of {w.established} keep-alive "
            f"connection(s) when the master died, and {w.lost} it lacked broke: sync had not "
            f"sent them within the wait")


def result_from_json(data: Mapping[str, Any]) -> FailoverResult:
    return FailoverResult(
        config=dict(data["config"]),
        ok=bool(data["ok"]),
        reason=str(data["reason"]),
        windows=tuple(Window(**{**w, "reasons": tuple(w.get("reasons", ()))})
                      for w in data["windows"]),
        summary=tuple(KindSummary(**s) for s in data["summary"]),
        configs=dict(data.get("configs", {})),
        kernel=str(data.get("kernel", "")),
    )
