"""`lbtune ipvs adapt`: poll the real servers' agents and set IPVS weights from their reports.

Each poll fetches every agent once (concurrently, `timeout` each), runs the weight formula
(`lbtune.ipvs.weights`) per service, and applies the changed weights as a plan of weight
targets only (`ipvs_drain` knobs, in-place edits that keep thresholds and forwarding;
nothing is ever added or removed) under the tune lock. A round reads the table once; under
the lock it reads again only the services it edits, and reads back only those; a round
that changes no weight takes no lock and writes nothing.

Not journaled per change: a weight that moves every few seconds would write a journal each
time and bury `lbtune history`. The record to roll back to is the config itself: on exit
(end of `--duration`, Ctrl-C, SIGTERM) the configured weights go back, and
`lbtune ipvs apply CONFIG` restores them at any time. Every change is an `Event` with its
reason for the log.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from lbtune.errors import BadInput, Busy
from lbtune.host.endpoints.http import FetchError, fetch_json
from lbtune.host.host import Host
from lbtune.host.ipvs.table import Service, ServiceKey, ipvs_of
from lbtune.ipvs.config import DirectorConfig, RealServer, VirtualService
from lbtune.ipvs.nodereport import AgentReport, parse_report
from lbtune.ipvs.reconcile import plan_name
from lbtune.ipvs.weights import Decision, Policy, ServerState, step
from lbtune.tune.engine import Interrupted
from lbtune.tune.journal import StateDir, lbtune_command
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.ipvs import Drain, IpvsDrainKnob
from lbtune.tune.plan import Target, make_plan

Fetch = Callable[[str, float], Any]


@dataclass(frozen=True)
class Event:
    """One line of the adapt log: a weight change, or a notice (said once)."""

    time: float
    kind: str  # "weight" | "notice"
    service: str = ""
    server: str = ""
    previous: Optional[int] = None
    weight: Optional[int] = None
    reason: str = ""
    applied: bool = True  # False under --dry-run

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if v is not None and v != ""}
        if self.kind != "weight":
            out.pop("applied")
        return out


def agent_url(cfg: DirectorConfig, rs: RealServer) -> Optional[str]:
    """The agent of a real server: its `agent` URL, none, or http://ADDRESS:agent_port/."""
    if rs.agent == "none":
        return None
    if rs.agent:
        return rs.agent
    host = f"[{rs.address}]" if ":" in rs.address else rs.address
    return f"http://{host}:{cfg.agent_port}/"


def server_name(svc: VirtualService, rs: RealServer) -> str:
    """How adapt names a real server of `svc` (state, events, planned weights): its address,
    or ADDRESS:PORT where several real servers of the service share the address (masq and
    tunnel services may)."""
    if sum(1 for other in svc.servers if other.address == rs.address) > 1:
        return f"[{rs.address}]:{rs.port}" if ":" in rs.address else f"{rs.address}:{rs.port}"
    return rs.address


def server_names(svc: VirtualService) -> dict[str, RealServer]:
    """{`server_name`: real server} of every real server of `svc`, in config order (one
    pass: a poll names 10,000 real servers)."""
    shared: dict[str, int] = {}
    for rs in svc.servers:
        shared[rs.address] = shared.get(rs.address, 0) + 1
    return {(rs.address if shared[rs.address] == 1
             else f"[{rs.address}]:{rs.port}" if ":" in rs.address
             else f"{rs.address}:{rs.port}"): rs for rs in svc.servers}  # fmt: skip


def weight_targets(
    weights: Mapping[tuple[ServiceKey, str], tuple[int, str]],
) -> Callable[[DirectorConfig, Mapping[ServiceKey, Service], Drain], list[Target]]:
    """A reconcile planner of weight edits only, for destinations the kernel already has."""

    def targets(cfg: DirectorConfig, table: Mapping[ServiceKey, Service], drain: Drain
                ) -> list[Target]:  # fmt: skip
        out = []
        for svc in cfg.services:
            now = table.get(svc.key)
            if now is None:
                continue
            for rs in svc.servers:
                want = weights.get((svc.key, server_name(svc, rs)))
                if want is None or now.dest(rs.key) is None:
                    continue
                knob = IpvsDrainKnob.of(svc.key, rs.key)
                out.append(Target(knob, str(want[0]), want[1], key=f"weight {knob.obj}"))
        return out

    return targets


@dataclass
class Adapter:
    host: Host
    cfg: DirectorConfig
    state_dir: Optional[StateDir]  # None: dry run (nothing is written, no lock)
    policy: Policy = field(default_factory=Policy)
    timeout: float = 1.0
    fetch: Fetch = fetch_json
    state: dict[tuple[ServiceKey, str], ServerState] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)
    said: set[str] = field(default_factory=set)
    planned: dict[tuple[ServiceKey, str], int] = field(default_factory=dict)  # dry run
    _named: dict[ServiceKey, dict[str, RealServer]] = field(default_factory=dict, repr=False)

    def _names(self, svc: VirtualService) -> dict[str, RealServer]:
        names = self._named.get(svc.key)
        if names is None:
            names = self._named[svc.key] = server_names(svc)
        return names

    @property
    def dry_run(self) -> bool:
        return self.state_dir is None

    def _notice(self, events: list[Event], key: str, text: str) -> None:
        if key not in self.said:
            self.said.add(key)
            events.append(Event(time.time(), "notice", reason=text))

    def fetch_all(self, events: list[Event]) -> dict[str, Optional[AgentReport]]:
        urls = sorted({u for s in self.cfg.services for rs in s.servers
                       if (u := agent_url(self.cfg, rs)) is not None})  # fmt: skip

        def one(url: str) -> tuple[str, Optional[AgentReport], str]:
            try:
                return url, parse_report(self.fetch(url, self.timeout), url), ""
            except (FetchError, BadInput) as e:
                return url, None, str(e)

        out: dict[str, Optional[AgentReport]] = {}
        if not urls:
            return out
        with ThreadPoolExecutor(max_workers=min(16, len(urls))) as pool:
            for url, report, error in pool.map(one, urls):
                out[url] = report
                if report is None and url not in self.unreachable:
                    self.unreachable.add(url)
                    events.append(Event(time.time(), "notice", reason=(
                        f"agent {url} unreachable ({error}): its real servers keep their "
                        "configured weight until it answers")))  # fmt: skip
                elif report is not None and url in self.unreachable:
                    self.unreachable.discard(url)
                    events.append(Event(time.time(), "notice",
                                        reason=f"agent {url} answers again"))  # fmt: skip
        return out

    def _kernel_weights(self, svc: VirtualService, table: Mapping[ServiceKey, Service],
                        events: list[Event]) -> Optional[dict[str, int]]:  # fmt: skip
        now = table.get(svc.key)
        if now is None:
            self._notice(events, f"svc {svc.key}", f"service {svc.key.ident} is not in the "
                         "kernel: `lbtune ipvs apply` the config first; skipped")  # fmt: skip
            return None
        out = {}
        for name, rs in self._names(svc).items():
            d = now.dest(rs.key)
            if d is None:
                self._notice(events, f"rs {svc.key} {name}",
                             f"{svc.key.ident}: real server {name} is not in the kernel; "
                             "skipped (adapt never adds real servers)")  # fmt: skip
                continue
            planned = self.planned.get((svc.key, name))
            out[name] = planned if planned is not None else d.settings.weight
        return out

    def poll(self) -> list[Event]:
        """One round: fetch, decide, apply. The events of this round (changes and notices)."""
        events: list[Event] = []
        reports = self.fetch_all(events)
        session = ipvs_of(self.host)
        session.invalidate()
        table = session.table()
        wanted: dict[tuple[ServiceKey, str], tuple[int, str]] = {}
        changes: list[tuple[VirtualService, Decision]] = []
        for svc in self.cfg.services:
            current = self._kernel_weights(svc, table, events)
            if current is None:
                continue
            names = self._names(svc)
            servers = {n: rs for n, rs in names.items() if n in current}
            configured = {n: rs.weight for n, rs in servers.items()}
            rep: dict[str, Optional[AgentReport]] = {}
            for n, rs in servers.items():
                url = agent_url(self.cfg, rs)
                if url is not None:
                    rep[n] = reports.get(url)
            st = {n: self.state.get((svc.key, n), ServerState()) for n in servers}
            new, decisions = step(self.policy, configured, current, rep, st)
            for addr, s in new.items():
                self.state[(svc.key, addr)] = s
            for d in decisions:
                if d.changed:
                    wanted[(svc.key, d.server)] = (d.weight, d.reason)
                    changes.append((svc, d))
        if changes:
            applied = self._apply(wanted, events)
            for svc, d in changes:
                events.append(Event(time.time(), "weight", svc.key.ident, d.server, d.previous,
                                    d.weight, d.reason, applied))  # fmt: skip
        return events

    def _apply(self, wanted: Mapping[tuple[ServiceKey, str], tuple[int, str]],
               events: list[Event]) -> bool:  # fmt: skip
        if self.state_dir is None:
            self.planned.update({k: w for k, (w, _r) in wanted.items()})
            return False
        try:
            with self.state_dir.lock():
                stale = self.state_dir.interrupted()
                if stale is not None:
                    raise Interrupted(f"apply {stale.id} ({stale.profile}) was interrupted; "
                                      f"run `{lbtune_command(self.host, 'rollback')}` first")
                apply_weights(self.host, self.cfg, wanted, whole=False)
        except Busy:
            events.append(Event(time.time(), "notice",
                                reason="another lbtune run holds the lock: this round's "
                                       "weights wait for the next poll"))  # fmt: skip
            return False
        except (KnobError, OSError, BadInput) as e:  # BadInput: the host no longer fits
            events.append(Event(time.time(), "notice",  # the config (a VIP moved away)
                                reason=f"weights not set ({e}); the next poll tries again"))
            return False
        return True

    def restore(self) -> list[Event]:
        """Put the configured weights back (on exit)."""
        if self.state_dir is None:
            return []
        want = {(s.key, server_name(s, rs)): (rs.weight, "adapt stopped: configured weight")
                for s in self.cfg.services for rs in s.servers}  # fmt: skip
        with self.state_dir.lock():
            n = apply_weights(self.host, self.cfg, want)
        return [Event(time.time(), "notice", reason=f"adapt stopped: {n} configured "
                      "weight(s) restored")] if n else []  # fmt: skip


def apply_weights(host: Host, cfg: DirectorConfig,
                  wanted: Mapping[tuple[ServiceKey, str], tuple[int, str]],
                  whole: bool = True) -> int:  # fmt: skip
    """Plan weight edits and write them (pipelined), then read each back; the number
    changed. The caller holds the lock.

    `whole`: read the whole table first (and again after). Otherwise (a poll round, which
    has just read the table) only the services of `wanted` are read again, now that the
    lock is held, and only those edited are read back: one table read per round. Weight
    edits need no host facts: adapt never adds a service, a real server or an address."""
    session = ipvs_of(host)
    services = sorted({svc for svc, _name in wanted})
    if whole:
        session.invalidate()
    else:
        session.refresh(services)
    targets = weight_targets(wanted)(cfg, session.table(), Drain(0))
    todo = make_plan(host, plan_name(cfg), targets).to_apply
    if not todo:
        return 0
    with session.batching():
        for c in todo:
            c.knob.write(host, c.desired)
    if whole:
        session.invalidate()
    else:
        session.refresh(sorted({c.knob.svc for c in todo if isinstance(c.knob, IpvsDrainKnob)}))
    for c in todo:
        now = c.knob.read(host)
        if not c.knob.same(now, c.desired):
            raise KnobError(f"{c.knob.ident}: wrote weight {c.desired} but the kernel has {now}")
    return len(todo)


def run(adapter: Adapter, interval: float, duration: Optional[float],
        log: Callable[[Event], None]) -> None:  # fmt: skip
    """Poll every interval until duration (None: until interrupted)."""
    end = None if duration is None else time.monotonic() + duration
    while True:
        t0 = time.monotonic()
        for e in adapter.poll():
            log(e)
        if end is not None and time.monotonic() >= end:
            return
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))
