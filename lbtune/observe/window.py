"""Deltas and rates between two samples, or "since boot" for a single one.

A live diagnosis compares a sample taken at the start of the window with one at the end. A
capture read offline has only one sample: its counters are treated as deltas since boot and
its uptime as the window, so rates are averages over the host's life (the report says so).
Counters that went backwards (a driver reset, a re-created device, a 32-bit wrap) count from
zero again rather than giving negative deltas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import ge, sub
from typing import Any, Callable, Iterable, Mapping, Optional, TypeVar

from lbtune.observe.model import (
    ListenSocket,
    NicCounters,
    QdiscStats,
    QueueCounters,
    Sample,
    SoftnetCpu,
    TcpReceiver,
    UdpSocket,
)


def counter_delta(before: Optional[int], after: Optional[int]) -> int:
    """after - before for a monotonic counter; a reset counts from zero."""
    if after is None:
        return 0
    if before is None:
        return after
    return after - before if after >= before else after


def _deltas(
    after: Mapping[str, Optional[int]], before: Mapping[str, Optional[int]]
) -> dict[str, int]:
    """`counter_delta` of each counter of `after` (`before`'s of the same name, if any):
    worked out in C when both have the same counters, all read, none gone down (a NIC's
    every tick)."""
    if after.keys() == before.keys():
        now, was = list(after.values()), list(map(before.__getitem__, after))
        if None not in now and None not in was and all(map(ge, now, was)):  # type: ignore[arg-type]
            return dict(zip(after, map(sub, now, was)))
    old = before.get
    return {k: counter_delta(old(k), v) for k, v in after.items()}


def _as_read(counters: Mapping[str, Optional[int]]) -> dict[str, int]:
    """`counter_delta(None, v)` of every counter: a copy (0 for one not read)."""
    if None not in counters.values():
        return dict(counters)  # type: ignore[arg-type]
    return {k: counter_delta(None, v) for k, v in counters.items()}


@dataclass(frozen=True)
class SoftnetDelta:
    cpu: int
    processed: int
    dropped: int
    time_squeeze: int
    received_rps: int
    flow_limit: int


@dataclass(frozen=True)
class QueueDelta:
    direction: str
    queue: int
    packets: Optional[int]
    drops: Optional[int]


@dataclass(frozen=True)
class NicDelta:
    dev: str
    driver: Optional[str]
    stats: Mapping[str, int]
    queues: tuple[QueueDelta, ...]
    nic_drops: Mapping[str, int]


@dataclass(frozen=True)
class ListenDelta:
    sock: ListenSocket  # as seen at the end of the window
    drops: Optional[int]  # sk_drops over the window


@dataclass(frozen=True)
class UdpDelta:
    sock: UdpSocket
    drops: Optional[int]


@dataclass(frozen=True)
class ReceiverDelta:
    sock: TcpReceiver  # as seen at the end of the window
    drops: Optional[int]  # segments it dropped over the window


@dataclass(frozen=True)
class QdiscDelta:
    qdisc: QdiscStats  # as seen at the end of the window
    packets: int
    drops: int
    overlimits: int


S = TypeVar("S", ListenSocket, UdpSocket, TcpReceiver)


def _key(s: S) -> tuple[int, str, int, int, str]:
    # Orphaned TCP sockets have inode 0: the peer tells connections of one port apart.
    return (s.family, s.addr, s.port, s.inode, getattr(s, "peer", ""))


def _socket_drops(before: Iterable[S], after: Iterable[S]) -> list[tuple[S, Optional[int]]]:
    """Each socket at the end of the window with its drops over it; a socket not in the
    earlier sample (opened since, or not yet under pressure: then it had dropped nothing)
    brings all of its drops."""
    old = {_key(s): s.drops for s in before}
    return [
        (s, None if s.drops is None else counter_delta(old.get(_key(s)), s.drops)) for s in after
    ]


@dataclass(frozen=True)
class Window:
    """What changed between `before` and `after`; `before=None` means since boot.

    `ticks` are the samples a live window took in between (every second by default), in
    order: `steps()` gives one window per tick, for per-second series.
    """

    before: Optional[Sample]
    after: Sample
    ticks: tuple[Sample, ...] = ()
    # Deltas already computed for this window: the monitor's rules ask for the same NIC's
    # deltas many times a second. Samples are immutable, so a delta never goes stale.
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _once(self, key: Any, make: Callable[[], Any]) -> Any:
        try:
            return self._memo[key]
        except KeyError:
            value = self._memo[key] = make()
            return value

    def steps(self) -> list[Window]:
        """One window per tick, from each sample to the next (empty since boot)."""
        if self.before is None:
            return []
        samples = (self.before, *self.ticks, self.after)
        return [Window(a, b) for a, b in zip(samples, samples[1:])]

    @property
    def cumulative(self) -> bool:
        return self.before is None

    @property
    def seconds(self) -> Optional[float]:
        if self.before is None:
            return self.after.uptime
        return max(0.0, self.after.monotonic - self.before.monotonic)

    def rate(self, value: int) -> Optional[float]:
        s = self.seconds
        if not s:
            return None
        return value / s

    def missing(self) -> dict[str, str]:
        out = dict(self.before.missing) if self.before else {}
        out.update(self.after.missing)
        return out

    # ------------------------------------------------------------------ counters
    def snmp(self, key: str) -> int:
        before = self.before.snmp.values.get(key) if self.before else None
        return counter_delta(before, self.after.snmp.values.get(key))

    def has_snmp(self, key: str) -> bool:
        return key in self.after.snmp.values

    def softnet(self) -> list[SoftnetDelta]:
        found: list[SoftnetDelta] = self._once("softnet", self._softnet)
        return list(found)  # the caller's list: callers sort and filter it

    def _softnet(self) -> list[SoftnetDelta]:
        old = {c.cpu: c for c in self.before.softnet} if self.before else {}
        out = []
        for c in self.after.softnet:
            b: Optional[SoftnetCpu] = old.get(c.cpu)
            out.append(
                SoftnetDelta(
                    cpu=c.cpu,
                    processed=counter_delta(b.processed if b else None, c.processed),
                    dropped=counter_delta(b.dropped if b else None, c.dropped),
                    time_squeeze=counter_delta(b.time_squeeze if b else None, c.time_squeeze),
                    received_rps=counter_delta(b.received_rps if b else None, c.received_rps),
                    flow_limit=counter_delta(b.flow_limit if b else None, c.flow_limit),
                )
            )
        return out

    def softirq(self, name: str) -> dict[int, int]:
        """Per-CPU count of one softirq type (`NET_RX`) over the window."""
        after = self.after.softirqs.counts.get(name, {}) if self.after.softirqs else {}
        before: Mapping[int, int] = {}
        if self.before and self.before.softirqs:
            before = self.before.softirqs.counts.get(name, {})
        return {cpu: counter_delta(before.get(cpu), v) for cpu, v in after.items()}

    def irq(self, irq: int) -> dict[int, int]:
        """Per-CPU interrupts of one IRQ over the window (computed once: the caller must not
        change the dict)."""
        found: dict[int, int] = self._once(("irq", irq), lambda: self._irq(irq))
        return found

    def _irq(self, irq: int) -> dict[int, int]:
        line = self.after.interrupts.get(irq)
        if line is None:
            return {}
        now = line.counts
        old = self.before.interrupts.get(irq) if self.before else None
        if old is None:
            return dict(zip(now.cpus, now.numbers))  # since boot: every count as it is
        was = old.counts
        if now.same_cpus(was):  # the same CPUs in the same order: the usual case
            # (a 48-CPU host's queue IRQs are a hundred rows of 48: worked out in C)
            new, old_numbers = now.numbers, was.numbers
            if new == old_numbers:
                return dict.fromkeys(now.cpus, 0)
            if all(map(ge, new, old_numbers)):
                return dict(zip(now.cpus, map(sub, new, old_numbers)))
        before = was.get
        return {
            cpu: (v - b if v >= b else v) if (b := before(cpu)) is not None else v
            for cpu, v in now.items()
        }

    def nic(self, dev: str) -> Optional[NicDelta]:
        found: Optional[NicDelta] = self._once(("nic", dev), lambda: self._nic(dev))
        return found

    def _nic(self, dev: str) -> Optional[NicDelta]:
        after = self.after.nics.get(dev)
        if after is None:
            return None
        before: Optional[NicCounters] = self.before.nics.get(dev) if self.before else None
        if before is None:  # since boot: every counter as it is
            return NicDelta(
                dev, after.driver, _as_read(after.stats),
                tuple(QueueDelta(q.direction, q.queue, q.packets, q.drops) for q in after.queues),
                _as_read(after.nic_drops),
            )  # fmt: skip
        old_q: dict[tuple[str, int], QueueCounters] = {
            (q.direction, q.queue): q for q in before.queues
        }
        queues = []
        for q in after.queues:
            b = old_q.get((q.direction, q.queue))
            bp, bd = (b.packets, b.drops) if b is not None else (None, None)
            packets = None if q.packets is None else counter_delta(bp, q.packets)
            drops = None if q.drops is None else counter_delta(bd, q.drops)
            queues.append(QueueDelta(q.direction, q.queue, packets, drops))
        return NicDelta(
            dev=dev,
            driver=after.driver,
            stats=_deltas(after.stats, before.stats),
            queues=tuple(queues),
            nic_drops=_deltas(after.nic_drops, before.nic_drops),
        )

    def ethtool(self, dev: str, name: str) -> Optional[int]:
        """One raw `ethtool -S` counter of `dev` over the window, None when the latest
        sample does not have it (another driver, or no ethtool statistics)."""
        after = self.after.nics.get(dev)
        if after is None or name not in after.ethtool:
            return None
        before = self.before.nics.get(dev) if self.before else None
        return counter_delta(before.ethtool.get(name) if before else None, after.ethtool[name])

    def nics(self) -> list[NicDelta]:
        return [d for d in (self.nic(name) for name in sorted(self.after.nics)) if d]

    def listeners(self) -> list[ListenDelta]:
        found: list[ListenDelta] = self._once("listeners", self._listeners)
        return list(found)  # the caller's list (computed once: rules and series ask again)

    def _listeners(self) -> list[ListenDelta]:
        before = self.before.listen if self.before else ()
        return [ListenDelta(s, d) for s, d in _socket_drops(before, self.after.listen)]

    def udp(self) -> list[UdpDelta]:
        found: list[UdpDelta] = self._once("udp", self._udp)
        return list(found)

    def _udp(self) -> list[UdpDelta]:
        before = self.before.udp if self.before else ()
        return [UdpDelta(s, d) for s, d in _socket_drops(before, self.after.udp)]

    def receivers(self) -> Optional[list[ReceiverDelta]]:
        """Connected TCP sockets under receive pressure at the end of the window, with their
        drops over it; None when the samples do not hold them."""
        after = self.after.tcp_receivers
        if after is None:
            return None
        before = (self.before.tcp_receivers or ()) if self.before else ()
        return [ReceiverDelta(s, d) for s, d in _socket_drops(before, after)]

    def qdiscs(self) -> list[QdiscDelta]:
        found: list[QdiscDelta] = self._once("qdiscs", self._qdiscs)
        return list(found)  # the caller's list (a rule asks again for every finding)

    def _qdiscs(self) -> list[QdiscDelta]:
        old = {(q.dev, q.handle, q.parent): q for q in self.before.qdiscs} if self.before else {}
        out = []
        for q in self.after.qdiscs:
            b = old.get((q.dev, q.handle, q.parent))
            out.append(
                QdiscDelta(
                    q,
                    packets=counter_delta(b.packets if b else None, q.packets),
                    drops=counter_delta(b.drops if b else None, q.drops),
                    overlimits=counter_delta(b.overlimits if b else None, q.overlimits),
                )
            )
        return out

    def conntrack(self, column: str) -> int:
        after = self.after.conntrack
        if after is None:
            return 0
        before = self.before.conntrack if self.before else None
        return counter_delta(
            before.totals.get(column) if before else None, after.totals.get(column)
        )
