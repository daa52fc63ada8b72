"""What the monitor's panels show, computed from one tick (no textual here).

`FrameBuilder` lives in the feed's worker thread: it turns each `Tick` (a counter window and
the probes' counts) into a `Frame` of plain values per panel, keeps the history the
sparklines draw and the samples of the last minutes, and writes a diagnose report of the
last N seconds from them (the same rules, evidence and renderers as `lbtune diagnose`).
Widgets only lay a `Frame` out; computing it never runs on the UI thread.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, replace
from typing import Callable, Deque, Optional, Sequence

from lbtune.diagnose import probe_evidence as pe
from lbtune.diagnose.context import Context
from lbtune.diagnose.report import LIVE, Report
from lbtune.diagnose.rules import run_rules
from lbtune.diagnose.view import FindingView, finding_view
from lbtune.observe.model import Sample
from lbtune.observe.probes import ProbeSample, merge_samples
from lbtune.observe.window import NicDelta, Window
from lbtune.tui.feed import PROBES_ON, PROBES_RECORDED, MonitorHost, Tick, monitor_rules

HISTORY = 60  # sparkline points kept per drop cause
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


# ------------------------------------------------------------------------------ drop causes

Counter = Callable[[Window], Optional[int]]


@dataclass(frozen=True)
class _Snmp:
    """The sum of protocol counters (keys as observe/procnet names them: `Udp6.NoPorts`)."""

    keys: tuple[str, ...]

    def __call__(self, w: Window) -> Optional[int]:
        if not any(w.has_snmp(k) for k in self.keys):
            return None
        return sum(w.snmp(k) for k in self.keys)


def _snmp(*keys: str) -> Counter:
    return _Snmp(keys)


def _nic_hw(w: Window) -> Optional[int]:
    if not w.after.nics:
        return None
    total = 0
    for d in w.nics():
        if d.nic_drops:  # the driver's own drop counters (ring empty, FIFO, port buffer)
            total += sum(d.nic_drops.values())
        else:
            total += sum(q.drops or 0 for q in d.queues if q.direction == "rx")
    return total


def _softnet(w: Window) -> Optional[int]:
    return sum(d.dropped for d in w.softnet()) if w.after.softnet else None


def _qdisc(w: Window) -> Optional[int]:
    if "qdisc" in w.after.missing:
        return None
    return sum(d.drops for d in w.qdiscs() if d.qdisc.parent == "root")


def _conntrack(w: Window) -> Optional[int]:
    if w.after.conntrack is None:
        return None
    return sum(w.conntrack(c) for c in ("drop", "early_drop", "insert_failed"))


CAUSES: tuple[tuple[str, str, Counter], ...] = (
    ("NIC ring/FIFO", "driver drop counters (ethtool -S), else per-queue rx drops", _nic_hw),
    ("CPU backlog", "softnet_stat dropped (netdev_max_backlog)", _softnet),
    ("accept queue", "TcpExt.ListenOverflows", _snmp("TcpExt.ListenOverflows")),
    ("SYN queue", "TcpExt.TCPReqQFullDrop", _snmp("TcpExt.TCPReqQFullDrop")),
    ("TCP backlog", "TcpExt.TCPBacklogDrop", _snmp("TcpExt.TCPBacklogDrop")),
    ("TCP rcvbuf prune", "TcpExt.RcvPruned", _snmp("TcpExt.RcvPruned")),
    ("UDP rcvbuf", "Udp(6).RcvbufErrors", _snmp("Udp.RcvbufErrors", "Udp6.RcvbufErrors")),
    ("UDP no port", "Udp(6).NoPorts", _snmp("Udp.NoPorts", "Udp6.NoPorts")),
    ("rp_filter", "TcpExt.IPReversePathFilter", _snmp("TcpExt.IPReversePathFilter")),
    ("IP discards", "Ip.InDiscards", _snmp("Ip.InDiscards")),
    ("qdisc", "root qdisc drops (tc -s qdisc)", _qdisc),
    ("conntrack", "nf_conntrack drop + early_drop + insert_failed", _conntrack),
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
        self._irqs = {qi.irq for nic in host.nics.values() for qi in nic.irqs}

    def frame(self, tick: Tick) -> Frame:
        w = tick.window
        secs = w.seconds or 0.0
        if self._start is None:
            self._start = w.before.monotonic if w.before is not None else w.after.monotonic
        self._keep(w, tick.probes)
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
            findings=self._findings(w, probes),
            probe_state=tick.probe_state,
            probe_note=tick.probe_note,
            interval=tick.interval,
            cumulative=w.cumulative,
            final=tick.final,
            missing=tuple(sorted(w.missing().items())),
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
        node_of = {c.id: c.node for c in topo.cpus} if topo else {}
        isolated = topo.isolated if topo else frozenset()
        net_rx = w.softirq("NET_RX") if w.after.softirqs else None
        rx_total = sum(net_rx.values()) if net_rx else 0
        irq_cpu: dict[int, int] = {}
        for irq in self._irqs:
            for cpu, n in w.irq(irq).items():
                irq_cpu[cpu] = irq_cpu.get(cpu, 0) + n
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

    def _findings(self, w: Window, probes: Optional[ProbeSample]) -> tuple[FindingView, ...]:
        ctx = Context(window=w, topology=self.host.topology, nics=self.host.nics,
                      netns=self.host.netns)  # fmt: skip
        findings = run_rules(ctx, monitor_rules())
        if probes is not None:
            findings = list(pe.explain(findings, probes))
        return tuple(finding_view(i, f) for i, f in enumerate(findings, 1))

    # -------------------------------------------------------------------- report

    def _keep(self, w: Window, probes: Optional[ProbeSample]) -> None:
        if not self._recent and w.before is not None:
            self._recent.append((w.before, None))
        self._recent.append((w.after, probes))
        newest = w.after.monotonic
        while len(self._recent) > 2 and newest - self._recent[1][0].monotonic >= KEEP_SECONDS:
            self._recent.popleft()

    def report(self, seconds: float, probe_state: str, generated: float) -> Report:
        """A diagnose report of the last `seconds` (or all that is kept, if less)."""
        if len(self._recent) < 2:
            raise ValueError("no complete window yet: wait for the first refresh")
        newest, _ = self._recent[-1]
        before = self._recent[0][0]
        for sample, _ in self._recent:
            if newest.monotonic - sample.monotonic >= seconds:
                before = sample
            else:
                break
        win = Window(before, newest)
        parts = [p for s, p in self._recent if s.monotonic > before.monotonic and p is not None]
        probes = merge_samples(parts) if parts else None
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
