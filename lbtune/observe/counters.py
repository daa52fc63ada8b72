"""Named counters: which number of a sample an evidence line is, readable in any window.

A rule's evidence says what moved: a TcpExt counter, one CPU's softnet drops, one queue's
drops, one listener's drops. `CounterRef` names it as data, so the same number can be read
again over each tick of the window (`series`: the per-second series of a report) or between
two captures and since boot before the first (`before_after`). A gauge (entries in use,
sockets in TIME_WAIT) is read at the end of each window instead of subtracted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

from lbtune.observe.window import Window

SNMP = "snmp"  # (key,)  "TcpExt.ListenOverflows"
SOFTNET = "softnet"  # (cpu, field)  field of SoftnetDelta: "dropped", "time_squeeze"
SOFTIRQ = "softirq"  # (name, cpu)
IRQ = "irq"  # (irq,)  all CPUs
NIC_QUEUE = "nic-queue"  # (dev, direction, queue, field)  field "drops" or "packets"
NIC_DROP = "nic-drop"  # (dev, ethtool name)
NIC_STAT = "nic-stat"  # (dev, statistics name)
NIC_ETHTOOL = "nic-ethtool"  # (dev, ethtool -S name)  any raw counter (pause frames)
LISTEN = "listen"  # (family, addr, port)  sk_drops of the listener(s)
UDP = "udp"  # (family, addr, port)
RECEIVERS = "receivers"  # (family, addr, port)  drops of connected sockets of that endpoint
QDISC = "qdisc"  # (dev, handle, parent)
CONNTRACK = "conntrack"  # (column,)  /proc/net/stat/nf_conntrack, summed over CPUs
# gauges: read at the end of the window
SYN_RECV = "syn-recv"  # (family, addr, port)
CONNTRACK_COUNT = "conntrack-count"  # ()
SOCKSTAT = "sockstat"  # (field,)  of SockStat: "tcp_tw", "tcp_orphan", "tcp_mem_pages"
EPHEMERAL = "ephemeral"  # ()  TCP sockets holding a port of the local range

GAUGES = frozenset({SYN_RECV, CONNTRACK_COUNT, SOCKSTAT, EPHEMERAL})

Arg = Union[str, int]


@dataclass(frozen=True)
class CounterRef:
    """Which counter: a kind (the constants above) and its arguments."""

    kind: str
    args: tuple[Arg, ...] = ()

    @property
    def gauge(self) -> bool:
        return self.kind in GAUGES


def _s(ref: CounterRef, i: int) -> str:
    return str(ref.args[i])


def _i(ref: CounterRef, i: int) -> int:
    return int(ref.args[i])


def _endpoint(ref: CounterRef, family: int, addr: str, port: int) -> bool:
    return (family, addr, port) == (_i(ref, 0), _s(ref, 1), _i(ref, 2))


def _softnet(ref: CounterRef, w: Window) -> Optional[int]:
    for d in w.softnet():
        if d.cpu == _i(ref, 0):
            return int(getattr(d, _s(ref, 1)))
    return None


def _nic_queue(ref: CounterRef, w: Window) -> Optional[int]:
    d = w.nic(_s(ref, 0))
    for q in d.queues if d else ():
        if (q.direction, q.queue) == (_s(ref, 1), _i(ref, 2)):
            value = q.drops if _s(ref, 3) == "drops" else q.packets
            return value
    return None


def _nic_map(ref: CounterRef, w: Window) -> Optional[int]:
    d = w.nic(_s(ref, 0))
    if d is None:
        return None
    table = d.nic_drops if ref.kind == NIC_DROP else d.stats
    return table.get(_s(ref, 1))


def _listen(ref: CounterRef, w: Window) -> Optional[int]:
    hits = [d for d in w.listeners() if _endpoint(ref, d.sock.family, d.sock.addr, d.sock.port)]
    return sum(d.drops or 0 for d in hits) if hits else None


def _udp(ref: CounterRef, w: Window) -> Optional[int]:
    hits = [d for d in w.udp() if _endpoint(ref, d.sock.family, d.sock.addr, d.sock.port)]
    return sum(d.drops or 0 for d in hits) if hits else None


def _receivers(ref: CounterRef, w: Window) -> Optional[int]:
    rs = w.receivers()
    if rs is None:
        return None
    return sum(r.drops or 0 for r in rs if _endpoint(ref, r.sock.family, r.sock.addr, r.sock.port))


def _qdisc(ref: CounterRef, w: Window) -> Optional[int]:
    for d in w.qdiscs():
        q = d.qdisc
        if (q.dev, q.handle, q.parent) == (_s(ref, 0), _s(ref, 1), _s(ref, 2)):
            return d.drops
    return None


def _syn_recv(ref: CounterRef, w: Window) -> Optional[int]:
    for s in w.after.listen:
        if _endpoint(ref, s.family, s.addr, s.port):
            return s.syn_recv
    return None


def _sockstat(ref: CounterRef, w: Window) -> Optional[int]:
    st = w.after.sockstat
    return None if st is None else int(getattr(st, _s(ref, 0)))


def _conntrack_count(ref: CounterRef, w: Window) -> Optional[int]:
    return None if w.after.conntrack is None else w.after.conntrack.count


_READ: dict[str, Callable[[CounterRef, Window], Optional[int]]] = {
    SNMP: lambda r, w: w.snmp(_s(r, 0)) if w.has_snmp(_s(r, 0)) else None,
    SOFTNET: _softnet,
    SOFTIRQ: lambda r, w: w.softirq(_s(r, 0)).get(_i(r, 1)),
    IRQ: lambda r, w: sum(w.irq(_i(r, 0)).values()) if _i(r, 0) in w.after.interrupts else None,
    NIC_QUEUE: _nic_queue,
    NIC_DROP: _nic_map,
    NIC_STAT: _nic_map,
    NIC_ETHTOOL: lambda r, w: w.ethtool(_s(r, 0), _s(r, 1)),
    LISTEN: _listen,
    UDP: _udp,
    RECEIVERS: _receivers,
    QDISC: _qdisc,
    CONNTRACK: lambda r, w: None if w.after.conntrack is None else w.conntrack(_s(r, 0)),
    SYN_RECV: _syn_recv,
    CONNTRACK_COUNT: _conntrack_count,
    SOCKSTAT: _sockstat,
    EPHEMERAL: lambda r, w: w.after.ephemeral_in_use,
}


def measure(ref: CounterRef, window: Window) -> Optional[int]:
    """The counter's movement over `window` (a gauge: its reading at the end); None when
    the samples do not hold it."""
    read = _READ.get(ref.kind)
    if read is None:
        raise ValueError(f"unknown counter kind {ref.kind!r}")
    return read(ref, window)


@dataclass(frozen=True)
class Series:
    """A counter tick by tick over a window: `values[i]` moved in the tick ending `ends[i]`
    seconds after the window opened and lasting `seconds[i]` (a gauge: its reading then)."""

    ref: CounterRef
    ends: tuple[float, ...]
    seconds: tuple[float, ...]
    values: tuple[Optional[int], ...]

    @property
    def rates(self) -> tuple[Optional[float], ...]:
        """Per second in each tick (a gauge: the readings)."""
        if self.ref.gauge:
            return tuple(None if v is None else float(v) for v in self.values)
        return tuple(
            None if v is None or s <= 0 else v / s for v, s in zip(self.values, self.seconds)
        )


def series(ref: CounterRef, window: Window) -> Optional[Series]:
    """The counter in each tick of `window` (None without ticks: a capture, or a window
    sampled only at its ends)."""
    steps = window.steps()
    if len(steps) < 2 or window.before is None:
        return None
    start = window.before.monotonic
    return Series(
        ref=ref,
        ends=tuple(round(s.after.monotonic - start, 3) for s in steps),
        seconds=tuple(round(s.seconds or 0.0, 3) for s in steps),
        values=tuple(measure(ref, s) for s in steps),
    )


@dataclass(frozen=True)
class BeforeAfter:
    """A counter between two captures (`after`, over `after_seconds`) against the same
    counter since boot up to the first one (`before`, over `before_seconds`): did it get
    worse? For a gauge, the readings at the two captures."""

    ref: CounterRef
    before: Optional[int]
    before_seconds: Optional[float]
    after: Optional[int]
    after_seconds: Optional[float]

    @staticmethod
    def _rate(v: Optional[int], s: Optional[float], gauge: bool) -> Optional[float]:
        if v is None:
            return None
        if gauge:
            return float(v)
        return None if not s else v / s

    @property
    def before_rate(self) -> Optional[float]:
        return self._rate(self.before, self.before_seconds, self.ref.gauge)

    @property
    def after_rate(self) -> Optional[float]:
        return self._rate(self.after, self.after_seconds, self.ref.gauge)


def before_after(ref: CounterRef, window: Window) -> Optional[BeforeAfter]:
    """The counter before and between two captures (None unless `window` has both)."""
    if window.before is None:
        return None
    boot = Window(None, window.before)
    return BeforeAfter(ref, measure(ref, boot), boot.seconds, measure(ref, window), window.seconds)
