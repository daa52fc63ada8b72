"""What the monitor's panels show, computed from one tick (no textual here).

`FrameBuilder` lives in the feed's worker thread: it turns each `Tick` (a counter window and
the probes' counts) into a `Frame` of plain values per panel, keeps the history the
sparklines draw and the samples of the last minutes, and writes a diagnose report of the
last N seconds from them (the same rules, evidence and renderers as `lbtune diagnose`).
Widgets only lay a `Frame` out; computing it never runs on the UI thread.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, replace
from operator import ge, sub
from typing import Callable, Deque, Optional, Sequence, TypeVar

from lbtune.diagnose import probe_evidence as pe
from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Finding
from lbtune.diagnose.report import LIVE, Report
from lbtune.diagnose.rules import run_rules
from lbtune.diagnose.view import FindingView, finding_view
from lbtune.observe.counters import series
from lbtune.observe.dropcauses import DROP_CAUSES, Counter, SnmpSum
from lbtune.observe.model import ListenSocket, Sample, TcpReceiver, UdpSocket
from lbtune.observe.probes import ProbeSample, SlidingMerge, merge_samples
from lbtune.observe.window import NicDelta, Window
from lbtune.tui.feed import PROBES_ON, PROBES_RECORDED, MonitorHost, Tick, monitor_rules

HISTORY = 60  # sparkline points kept per drop cause
JUDGE_SECONDS = 10.0  # the findings judge the counters of this sliding window
KEEP_SECONDS = 600.0  # samples kept for "report of the last N seconds"
HOT_QUEUE = 1.5  # a queue with this many times the mean rx rate is highlighted
MIN_IMBALANCE_PPS = 100.0  # below this mean rate per queue, balance does not matter


@dataclass(frozen=True)
class DropCause:
    """One way packets die, counted by kernel counters."""

    name: str
    counters: str  # what it sums, for the help and docs
    rate: Optional[float]  # per second over the last tick; None: not readable here
    total: int  # since the monitor started
    history: tuple[float, ...]
    detail: str = ""  # what the probes add: the port "UDP no port" datagrams went to


@dataclass(frozen=True)
class KernelReason:
    reason: str
    location: str
    protocol: str
    rate: float
    count: int


@dataclass(frozen=True)
class ListenRow:
    endpoint: str
    queue: int
    backlog: int  # the effective backlog: min(listen() backlog, somaxconn)
    fill: float  # queue / backlog
    overflows: Optional[float]  # sock_diag drops per second


@dataclass(frozen=True)
class QueueRow:
    queue: int
    rx_pps: Optional[float]
    tx_pps: Optional[float]
    drops_ps: Optional[float]
    rx_share: float  # of the NIC's rx packets
    hot: bool  # far above the mean: RSS/IRQ imbalance
    exhausted_ps: Optional[float]  # NAPI polls out of budget (napi probe)


@dataclass(frozen=True)
class NicView:
    dev: str
    driver: Optional[str]
    rows: tuple[QueueRow, ...]
    imbalance: Optional[float]  # busiest rx queue / mean rx queue
    rx_pps: float
    drops_ps: float
    note: str = ""


@dataclass(frozen=True)
class CpuRow:
    cpu: int
    node: Optional[int]
    isolated: bool
    processed_ps: float
    dropped_ps: float
    squeeze_ps: float
    net_rx_ps: Optional[float]
    net_rx_share: Optional[float]
    irq_share: Optional[float]  # of the NIC queue interrupts in the tick


@dataclass(frozen=True)
class ConntrackView:
    count: int
    max: Optional[int]
    fill: Optional[float]
    drops_ps: float
    early_drop_ps: float
    insert_failed_ps: float


@dataclass(frozen=True)
class Frame:
    """Everything on screen for one tick."""

    seconds: float
    elapsed: float  # since the monitor started
    drops: tuple[DropCause, ...]
    reasons: tuple[KernelReason, ...]
    listen: tuple[ListenRow, ...]
    nics: tuple[NicView, ...]  # busiest first
    cpus: tuple[CpuRow, ...]
    conntrack: Optional[ConntrackView]
    findings: tuple[FindingView, ...]
    probe_state: str
    probe_note: str
    interval: float
    cumulative: bool  # a recorded tree: since boot
    final: bool
    missing: tuple[tuple[str, str], ...]
    judged: float = 0.0  # seconds of counters the findings judged (up to JUDGE_SECONDS)
    # Per finding: seconds since the rules last reported it (0: in the window now). A
    # finding is held until it has been quiet for JUDGE_SECONDS.
    quiet: tuple[float, ...] = ()


# ------------------------------------------------------------------------------ drop causes

# The table lives in observe/dropcauses.py (the exporter sums the same counters); these
# names stay for the panels and their tests.
_Snmp = SnmpSum
CAUSES: tuple[tuple[str, str, Counter], ...] = tuple(
    (c.name, c.counters, c.count) for c in DROP_CAUSES
)


def _named_port(d: DropCause, probes: Optional[ProbeSample]) -> DropCause:
    """The "UDP no port" row with the port most of this tick's datagrams went to (the
    drops probe's port-unreachable count), when the probes ran and it moved."""
    if d.name != "UDP no port" or not d.rate or probes is None:
        return d
    udp = [p for p in probes.ports if p.proto == "udp"]
    if not udp:
        return d
    top = max(udp, key=lambda p: p.count)
    more = f" +{len(udp) - 1}" if len(udp) > 1 else ""
    return replace(d, detail=f"{endpoint(top.family, top.addr, top.port)}{more}")


def _per_s(value: Optional[int], seconds: float) -> Optional[float]:
    if value is None:
        return None
    return value / seconds if seconds > 0 else 0.0


def endpoint(family: int, addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if family == 6 else f"{addr}:{port}"


# ------------------------------------------------------------------------------ builder


def _sum_by_cpu(counts: list[dict[int, int]]) -> dict[int, int]:
    """Per-CPU counts of several IRQs added up. A big host's queue IRQs each count on the
    same CPUs in the same order (the rows of /proc/interrupts): then column by column."""
    counts = [c for c in counts if c]
    if not counts:
        return {}
    cpus = list(counts[0])
    if all(list(c) == cpus for c in counts):
        return dict(zip(cpus, map(sum, zip(*(c.values() for c in counts)))))
    out: dict[int, int] = {}
    for c in counts:
        for cpu, n in c.items():
            out[cpu] = out.get(cpu, 0) + n
    return out


# (the IRQs a sample has of those asked for, their CPUs, the per-CPU sums of their counts)
_Columns = tuple[tuple[int, ...], tuple[int, ...], list[int]]


def _columns(sample: Sample, irqs: tuple[int, ...]) -> Optional[_Columns]:
    """The rows of `irqs` in the sample added up CPU by CPU, when they all have the same
    CPUs in the same order (a big host's queue IRQs: a hundred rows of 48); None when not."""
    lines = sample.interrupts
    rows = [(i, line.counts) for i in irqs if (line := lines.get(i)) is not None]
    if not rows:
        return None
    first = rows[0][1]
    if not all(c.same_cpus(first) for _, c in rows):
        return None
    return (tuple(i for i, _ in rows), first.cpus,
            list(map(sum, zip(*(c.numbers for _, c in rows)))))  # fmt: skip


class FrameBuilder:
    """Turns ticks into frames; keeps sparkline history and recent samples (one thread)."""

    def __init__(self, host: MonitorHost) -> None:
        self.host = host
        self._history: dict[str, Deque[float]] = {
            name: collections.deque(maxlen=HISTORY) for name, _, _ in CAUSES
        }
        self._totals: dict[str, int] = {name: 0 for name, _, _ in CAUSES}
        self._recent: Deque[tuple[Sample, Optional[ProbeSample]]] = collections.deque()
        self._start: Optional[float] = None
        self._irqs = tuple(sorted({qi.irq for nic in host.nics.values() for qi in nic.irqs}))
        topo = host.topology
        self._node_of = {c.id: c.node for c in topo.cpus} if topo else {}
        # the NIC queue IRQ columns (`_columns`) of the last two samples asked for
        self._columns: list[tuple[Sample, Optional[_Columns]]] = []
        # (rule, object) -> the finding as last reported and when (the newest sample's clock)
        self._held: dict[tuple[str, str], tuple[Finding, float]] = {}
        self._judged_probes = SlidingMerge()  # the probe counts of the findings' window
        # id -> (a kept probe sample, the same without its queue rows), for the findings'
        # window: the rules' probe evidence (`pe.explain`) reads no queue row, and summing
        # a big host's hundred queues with their size histograms was a third of that merge
        # (0.31 to 0.22 ms a tick of the 48-CPU replay, timed in one process)
        self._bare: dict[int, tuple[ProbeSample, ProbeSample]] = {}

    def frame(self, tick: Tick) -> Frame:
        w = tick.window
        secs = w.seconds or 0.0
        if self._start is None:
            self._start = w.before.monotonic if w.before is not None else w.after.monotonic
        probes = tick.probes if tick.probe_state in (PROBES_ON, PROBES_RECORDED) else None
        self._keep(w, probes)
        judged, findings, quiet = self._judge(w, probes)
        drops = []
        for name, what, count in CAUSES:
            value = count(w)
            rate = _per_s(value, secs)
            self._totals[name] += value or 0
            self._history[name].append(rate or 0.0)
            drops.append(DropCause(name, what, rate, self._totals[name],
                                   tuple(self._history[name])))  # fmt: skip
        probes = tick.probes if tick.probe_state in (PROBES_ON, PROBES_RECORDED) else None
        drops = [_named_port(d, probes) for d in drops]
        return Frame(
            seconds=secs,
            elapsed=w.after.monotonic - self._start,
            drops=tuple(drops),
            reasons=_reasons(probes),
            listen=self._listen(w, secs),
            nics=self._nics(w, secs, probes),
            cpus=self._cpus(w, secs),
            conntrack=_conntrack_view(w, secs),
            findings=findings,
            probe_state=tick.probe_state,
            probe_note=tick.probe_note,
            interval=tick.interval,
            cumulative=w.cumulative,
            final=tick.final,
            missing=tuple(sorted(w.missing().items())),
            judged=judged,
            quiet=quiet,
        )

    # -------------------------------------------------------------------- panels

    def _listen(self, w: Window, secs: float) -> tuple[ListenRow, ...]:
        rows = []
        for d in w.listeners():
            s = d.sock
            fill = s.queue / s.backlog if s.backlog else 0.0
            rows.append(ListenRow(endpoint(s.family, s.addr, s.port), s.queue, s.backlog, fill,
                                  _per_s(d.drops, secs)))  # fmt: skip
        rows.sort(key=lambda r: (-r.fill, -(r.overflows or 0.0), r.endpoint))
        return tuple(rows)

    def _nics(
        self, w: Window, secs: float, probes: Optional[ProbeSample]
    ) -> tuple[NicView, ...]:
        out = [self._nic(d, secs, probes) for d in w.nics() if d.dev != "lo"]
        out.sort(key=lambda n: (-n.rx_pps, n.dev))
        return tuple(out)

    def _nic(self, d: NicDelta, secs: float, probes: Optional[ProbeSample]) -> NicView:
        by_q: dict[int, dict[str, Optional[int]]] = {}
        for q in d.queues:
            slot = by_q.setdefault(q.queue, {})
            slot[f"{q.direction}_packets"] = q.packets
            if q.direction == "rx" or slot.get("drops") is None:
                slot["drops"] = q.drops if slot.get("drops") is None else slot["drops"]
        exhausted: dict[int, int] = {}
        if probes is not None:
            for n in probes.napi:
                if n.dev == d.dev and n.queue is not None:
                    exhausted[n.queue] = exhausted.get(n.queue, 0) + n.exhausted
        known = [p for p in (v.get("rx_packets") for v in by_q.values()) if p is not None]
        total_rx = sum(known)
        mean = total_rx / len(known) if known else 0.0
        busy = mean / secs >= MIN_IMBALANCE_PPS if secs else False
        rows = []
        for qn in sorted(by_q):
            v = by_q[qn]
            rxp = v.get("rx_packets")
            rows.append(
                QueueRow(
                    queue=qn,
                    rx_pps=_per_s(rxp, secs),
                    tx_pps=_per_s(v.get("tx_packets"), secs),
                    drops_ps=_per_s(v.get("drops"), secs),
                    rx_share=(rxp or 0) / total_rx if total_rx else 0.0,
                    hot=busy and len(known) > 1 and (rxp or 0) > HOT_QUEUE * mean,
                    exhausted_ps=_per_s(exhausted.get(qn), secs) if probes is not None else None,
                )
            )
        imbalance = max(known) / mean if known and mean > 0 and len(known) > 1 else None
        note = "" if by_q else "no per-queue counters from this driver"
        drops = sum(d.nic_drops.values()) or sum(
            q.drops or 0 for q in d.queues if q.direction == "rx"
        )
        rx_all = total_rx if known else d.stats.get("rx_packets", 0)
        return NicView(d.dev, d.driver, tuple(rows), imbalance, _per_s(rx_all, secs) or 0.0,
                       _per_s(drops, secs) or 0.0, note)  # fmt: skip

    def _cpus(self, w: Window, secs: float) -> tuple[CpuRow, ...]:
        topo = self.host.topology
        node_of = self._node_of
        isolated = topo.isolated if topo else frozenset()
        net_rx = w.softirq("NET_RX") if w.after.softirqs else None
        rx_total = sum(net_rx.values()) if net_rx else 0
        irq_cpu = self._irq_cpu(w)
        irq_total = sum(irq_cpu.values())
        rows = []
        for d in w.softnet():
            nrx = net_rx.get(d.cpu) if net_rx is not None else None
            rows.append(
                CpuRow(
                    cpu=d.cpu,
                    node=node_of.get(d.cpu),
                    isolated=d.cpu in isolated,
                    processed_ps=_per_s(d.processed, secs) or 0.0,
                    dropped_ps=_per_s(d.dropped, secs) or 0.0,
                    squeeze_ps=_per_s(d.time_squeeze, secs) or 0.0,
                    net_rx_ps=_per_s(nrx, secs),
                    net_rx_share=(nrx or 0) / rx_total if net_rx is not None and rx_total else None,
                    irq_share=irq_cpu.get(d.cpu, 0) / irq_total if irq_total else None,
                )
            )
        return tuple(rows)

    def _irq_cpu(self, w: Window) -> dict[int, int]:
        """The NIC queue IRQs' interrupts over the window by CPU: `_sum_by_cpu` of each
        IRQ's (`Window.irq`), from the per-CPU sums of the two samples' rows where every
        row has the same CPUs in the same order and no count went down (a big host's
        every tick: the newest sample's sums are kept for the next tick)."""
        if w.before is not None:
            now, was = w.after.interrupts, w.before.interrupts
            # the older first: it is the one kept from the tick before (two are kept)
            before, after = self._columns_of(w.before), self._columns_of(w.after)
            if (
                after is not None
                and before is not None
                and after[:2] == before[:2]
                and all(
                    all(map(ge, now[i].counts.numbers, was[i].counts.numbers)) for i in after[0]
                )
            ):
                return dict(zip(after[1], map(sub, after[2], before[2])))
        return _sum_by_cpu([w.irq(irq) for irq in self._irqs])

    def _columns_of(self, sample: Sample) -> Optional[_Columns]:
        for kept, found in self._columns:
            if kept is sample:
                return found
        found = _columns(sample, self._irqs)
        self._columns = [*self._columns[-1:], (sample, found)]
        return found

    def _judge(
        self, w: Window, probes: Optional[ProbeSample]
    ) -> tuple[float, tuple[FindingView, ...], tuple[float, ...]]:
        """The diagnose rules over the last JUDGE_SECONDS of samples (not one refresh: a
        queue that overflows every few seconds must not blink in and out). A finding of
        counted losses stays while the window holds them, that is until quiet for
        JUDGE_SECONDS; a reading (a gauge: a table nearly full now) is held for as long
        after the rules last reported it."""
        if w.cumulative or len(self._recent) < 2:
            win, seen = w, probes
        else:
            win, seen = self._window(JUDGE_SECONDS, self._judged_merge)
        ctx = Context(window=win, topology=self.host.topology, nics=self.host.nics,
                      netns=self.host.netns)  # fmt: skip
        findings = run_rules(ctx, monitor_rules())
        if seen is not None:
            findings = list(pe.explain(findings, seen))
        now = win.after.monotonic
        shown: list[tuple[Finding, float]] = []
        for f in findings:
            if f.rate is None:  # a reading at the window's end
                self._held[(f.rule, f.object)] = (f, now)
            shown.append((f, 0.0))
        reported = {(f.rule, f.object) for f in findings}
        for key, (f, last) in list(self._held.items()):
            if key in reported:
                continue
            if now - last >= JUDGE_SECONDS:
                del self._held[key]
            else:
                shown.append((f, now - last))
        views = tuple(finding_view(i, f) for i, (f, _) in enumerate(shown, 1))
        return win.seconds or 0.0, views, tuple(q for _, q in shown)

    def _judged_merge(self, parts: Sequence[ProbeSample]) -> ProbeSample:
        """What the probes counted over the findings' window, queue rows left out (see
        `_bare`): each kept sample stripped once, the same object every tick after, so
        that the sliding merge adds the newest and takes the oldest."""
        bare: list[ProbeSample] = []
        kept: dict[int, tuple[ProbeSample, ProbeSample]] = {}
        for p in parts:
            pair = self._bare.get(id(p))
            if pair is None or pair[0] is not p:
                pair = (p, replace(p, queues=()) if p.queues else p)
            kept[id(p)] = pair
            bare.append(pair[1])
        self._bare = kept
        return self._judged_probes.merged(bare)

    def _window(
        self, seconds: float, merge: Callable[[Sequence[ProbeSample]], ProbeSample] = merge_samples
    ) -> tuple[Window, Optional[ProbeSample]]:
        """The kept samples of the last `seconds` (all that is kept, if less) as one window
        with its ticks, the sockets seen in it, and what the probes counted over it (summed
        by `merge`)."""
        recent = self._recent
        newest = recent[-1][0].monotonic
        # The newest kept sample at least `seconds` old starts it (the oldest kept, if none
        # is): looked for from the newest end, the ten seconds the findings judge every tick
        # cost a dozen steps, not one per sample of the ten minutes kept.
        start = 0
        for i in range(len(recent) - 2, -1, -1):
            if newest - recent[i][0].monotonic >= seconds:
                start = i
                break
        kept = [recent[i] for i in range(start, len(recent))]
        samples = [s for s, _ in kept]
        win = Window(samples[0], with_sockets_seen(samples[1:]), tuple(samples[1:-1]))
        parts = [p for _, p in kept[1:] if p is not None]
        return win, merge(parts) if parts else None

    # -------------------------------------------------------------------- report

    def _keep(self, w: Window, probes: Optional[ProbeSample]) -> None:
        if not self._recent and w.before is not None:
            self._recent.append((w.before, None))
        self._recent.append((w.after, probes))
        newest = w.after.monotonic
        while len(self._recent) > 2 and newest - self._recent[1][0].monotonic >= KEEP_SECONDS:
            self._recent.popleft()

    def report(self, seconds: float, probe_state: str, generated: float) -> Report:
        """A diagnose report of the last `seconds` (or all that is kept, if less): the
        rules over the samples kept, with the sockets seen in that time (a server that has
        closed its socket since is still the one that dropped), each evidence counter's
        per-tick series and the per-CPU and per-queue counts the charts draw."""
        if len(self._recent) < 2:
            raise ValueError("no complete window yet: wait for the first refresh")
        win, probes = self._window(seconds)
        ctx = Context(window=win, topology=self.host.topology, nics=self.host.nics,
                      netns=self.host.netns)  # fmt: skip
        findings = run_rules(ctx, monitor_rules())
        if probes is not None:
            findings = list(pe.explain(findings, probes))
            run: Optional[pe.ProbeRun] = pe.ran(probes, win.seconds)
        elif probe_state in (PROBES_ON, PROBES_RECORDED):
            run = pe.ProbeRun(pe.NOT_READY, missing="no probe counts in the window", fix="")
        else:
            run = pe.ProbeRun(pe.OFF if probe_state == "off" else pe.UNAVAILABLE,
                              missing=f"probes {probe_state} in the monitor",
                              fix="see the monitor's header line")  # fmt: skip
        refs = list(dict.fromkeys(e.ref for f in findings for e in f.evidence if e.ref))
        h = self.host
        return Report(
            hostname=h.hostname,
            kernel=h.kernel,
            netns=h.netns,
            root=h.source,
            mode=LIVE,
            seconds=None if win.seconds is None else round(win.seconds, 3),
            findings=tuple(findings),
            missing=win.missing(),
            generated=generated,
            probes=run,
            series={r: s for r in refs for s in [series(r, win)] if s is not None},
            softnet=tuple(win.softnet()),
            queues={d.dev: d.queues for d in win.nics() if d.queues},
        )


S = TypeVar("S", ListenSocket, UdpSocket, TcpReceiver)


def _socket_key(s: S) -> tuple[int, str, int, int, str]:
    return (s.family, s.addr, s.port, s.inode, getattr(s, "peer", ""))


def _seen(samples: Sequence[tuple[S, ...]]) -> tuple[S, ...]:
    """The sockets of the newest list, then those only earlier lists hold (as last seen)."""
    out: dict[tuple[int, str, int, int, str], S] = {}
    for socks in samples:
        for sock in socks:
            out[_socket_key(sock)] = sock
    now = {_socket_key(sock) for sock in samples[-1]}
    gone: list[S] = [v for k, v in out.items() if k not in now]
    return tuple(samples[-1]) + tuple(gone)


def with_sockets_seen(samples: Sequence[Sample]) -> Sample:
    """The newest of `samples` holding also the sockets that only the earlier ones saw (in
    their last seen state): a UDP server that dropped and has closed its socket since, a
    listener gone with its drops. The rules then name the socket and its SO_RCVBUF instead
    of an unknown one."""
    newest = samples[-1]
    if len(samples) == 1:
        return newest
    receivers = newest.tcp_receivers
    if receivers is not None:
        receivers = _seen([s.tcp_receivers or () for s in samples])
    return dataclasses.replace(
        newest,
        listen=_seen([s.listen for s in samples]),
        udp=_seen([s.udp for s in samples]),
        tcp_receivers=receivers,
    )


def _reasons(probes: Optional[ProbeSample]) -> tuple[KernelReason, ...]:
    if probes is None:
        return ()
    secs = probes.seconds or 0.0
    return tuple(
        KernelReason(d.reason or "-", d.location, d.protocol, (d.count / secs) if secs else 0.0,
                     d.count)
        for d in probes.drops[:8]
    )


def _conntrack_view(w: Window, secs: float) -> Optional[ConntrackView]:
    ct = w.after.conntrack
    if ct is None:
        return None
    fill = ct.count / ct.max if ct.max else None
    return ConntrackView(
        ct.count, ct.max, fill,
        _per_s(w.conntrack("drop"), secs) or 0.0,
        _per_s(w.conntrack("early_drop"), secs) or 0.0,
        _per_s(w.conntrack("insert_failed"), secs) or 0.0,
    )  # fmt: skip


def sparkline(values: Sequence[float], width: int) -> str:
    """The last `width` values as block characters, scaled to their own maximum."""
    blocks = " ▁▂▃▄▅▆▇█"
    shown = list(values)[-width:]
    top = max(shown, default=0.0)
    if top <= 0:
        return "▁" * len(shown)
    return "".join(blocks[max(1, round(v / top * 8))] if v > 0 else "▁" for v in shown)


def bar(fraction: float, width: int) -> str:
    """A horizontal bar of `fraction` (0..1) in `width` cells, eighths resolution."""
    parts = " ▏▎▍▌▋▊▉█"
    eighths = max(0, min(width * 8, round(fraction * width * 8)))
    full, rest = divmod(eighths, 8)
    return ("█" * full + (parts[rest] if rest else "")).ljust(width)
