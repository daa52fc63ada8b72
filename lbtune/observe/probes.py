"""eBPF probes as typed samples: plan, open one session, read deltas, close.

Three probes add what kernel counters cannot say (docs/probes.md):

* ``drops``  -- every `skb:kfree_skb` drop by the kernel's own reason, the kernel function
  that dropped it, and the packet's protocol;
* ``queues`` -- packets, bytes and sizes per interface and queue, for queues without
  per-queue counters (where netlink qstats or the driver's ethtool counters exist, those
  win and the sample says which source each number came from);
* ``napi``   -- NAPI polls, work and budget exhaustion per NAPI instance and CPU.

`plan_probes` (lbtune.observe.probe_plan) checks the kernel, resolves drop-reason names and
interfaces, and builds the final C. `ProbeSession` compiles and loads everything once,
attaches, and turns each `read()` into a `ProbeSample` of deltas since the previous read
(the first read: since opening). A session may be read from a worker thread while another
thread closes it; `close()` detaches every program and switches BPF statistics off.

Namespaces: tracepoints fire for every namespace. Device names are the only identity the
queues and napi tracepoints carry, so in `--netns` the namespace's interfaces are matched by
name (a same-named interface elsewhere would count too; collisions with the host namespace
are reported). `kfree_skb` carries neither device nor namespace: drops are host-wide, and
every sample says so (`drops_scope`).
"""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass
from itertools import chain
from typing import Any, Optional, Sequence

from lbtune.host.host import Host
from lbtune.host.trace.kallsyms import Kallsyms, read_kallsyms
from lbtune.observe.probe_plan import (
    BACKLOG,
    SIZE_BOUNDS,
    SIZE_LABELS,
    InterfacePlan,
    ProbePlan,
    Status,
    plan_probes,
)
from lbtune.observe.probe_source import name_words

__all__ = [
    "SIZE_BOUNDS",
    "SIZE_LABELS",
    "DropCount",
    "InterfacePlan",
    "NapiCount",
    "PortCount",
    "ProbeCost",
    "ProbePlan",
    "ProbeSample",
    "ProbeSession",
    "QueueCount",
    "merge_samples",
    "plan_probes",
]

# BPF run-time statistics cost two clock reads per program run: as much as the probes
# themselves on some machines (measured: bench/results/probes.md). They are switched on for
# COST_WINDOW_S of every COST_PERIOD_S, starting when the probes are attached.
PORT_TRACEPOINTS = ("tcp:tcp_send_reset", "icmp:icmp_send")  # closed ports (drops probe)
COST_WINDOW_S = 1.0
COST_PERIOD_S = 5.0
ETHERTYPES = {
    0x0800: "IPv4",
    0x86DD: "IPv6",
    0x0806: "ARP",
    0x8100: "802.1Q",
    0x88A8: "802.1ad",
    0x88CC: "LLDP",
    0x8847: "MPLS",
    0x0003: "all",  # ETH_P_ALL: packet sockets
    0x0000: "none",
}


# (key, [value per CPU]) rows, as BpfProgram.read_percpu gives them
_Rows = list[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]

# ------------------------------------------------------------------------------ samples


@dataclass(frozen=True)
class DropCount:
    """Packets the kernel dropped for one reason at one place, over a sample's interval."""

    reason: str  # the kernel's name (NO_SOCKET, TCP_LISTEN_OVERFLOW, ...); "" when unknown
    reason_code: Optional[int]  # the number on this kernel; None on kernels without reasons
    location: str  # `tcp_v4_rcv+0x91`, or the hex address without kallsyms
    function: str  # the function alone (`tcp_v4_rcv`), for grouping
    protocol: str  # the packet's ethertype: IPv4, IPv6, ARP, or 0x....
    count: int


@dataclass(frozen=True)
class PortCount:
    """Packets sent to one local port nothing listened on, over a sample's interval: TCP
    segments answered with a NO_SOCKET reset, UDP datagrams answered with ICMP port
    unreachable (IPv4 only: IPv6 has no such tracepoint)."""

    proto: str  # "tcp" | "udp"
    family: int  # 4 | 6
    addr: str  # the local address they were sent to
    port: int
    count: int


@dataclass(frozen=True)
class QueueCount:
    """Traffic of one queue of one interface over a sample's interval."""

    dev: str
    direction: str  # "rx" | "tx"
    queue: Optional[int]  # None: the kernel did not record which queue
    packets: int
    bytes: int
    sizes: Optional[tuple[int, ...]]  # skbs per SIZE_LABELS bucket (probe source only)
    source: str  # "probe", "ethtool" or "netlink qstats"


@dataclass(frozen=True)
class NapiCount:
    """NAPI polls of one instance on one CPU over a sample's interval."""

    dev: str  # the device, or "backlog" for the per-CPU backlog (RPS, netif_rx)
    instance: int  # this device's NAPI instances numbered by address, from 0
    napi: str  # the instance's kernel address (hex), stable while it exists
    queue: Optional[int]  # rx queue of the packets its polls delivered, when seen
    cpu: int
    polls: int
    work: int  # packets processed
    exhausted: int  # polls that used the whole budget (the softirq had to come back)
    idle: int  # polls that found nothing
    budget: int


@dataclass(frozen=True)
class ProbeCost:
    """What one probe cost the kernel, from BPF run-time statistics.

    Statistics are sampled (COST_WINDOW_S of every COST_PERIOD_S), so `events` and
    `run_time_ns` cover the `measured_seconds` of the interval they were on.
    """

    probe: str
    events: int
    run_time_ns: int
    ns_per_event: Optional[float]  # None: statistics unavailable, not sampled, or no events
    events_per_second: float  # events / measured_seconds
    measured_seconds: float


@dataclass(frozen=True)
class ProbeSample:
    """What the probes saw between two reads."""

    probes: tuple[str, ...]
    seconds: float
    drops: tuple[DropCount, ...]  # largest first
    drops_lost: int  # drops not attributed: the map of reasons/locations was full
    drops_scope: str  # "host": kfree_skb carries no device or namespace
    queues: tuple[QueueCount, ...]
    napi: tuple[NapiCount, ...]
    napi_lost: int
    costs: tuple[ProbeCost, ...]
    notes: tuple[str, ...] = ()
    ports: tuple[PortCount, ...] = ()  # closed ports (drops probe), largest first


# ------------------------------------------------------------------------------ session


def _sum_cpus(values: Sequence[tuple[Any, ...]]) -> tuple[int, ...]:
    if not values:
        return ()
    return tuple(sum(v[i] for v in values) for i in range(len(values[0])))


def _delta(now: tuple[int, ...], before: Optional[tuple[int, ...]]) -> tuple[int, ...]:
    if before is None:
        return now
    return tuple(a - b for a, b in zip(now, before))


def _merge_napi(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """One CPU's counts of one instance found in both tables: sums, and the later budget
    and label (those two are last-seen values, not counts)."""
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], b[4] or a[4], b[5] or a[5])


def protocol_name(ethertype: int) -> str:
    return ETHERTYPES.get(ethertype, f"0x{ethertype:04x}")


class ProbeSession:
    """Loaded, attached probes; `read()` gives deltas; `close()` detaches everything."""

    def __init__(
        self,
        host: Host,
        plan: ProbePlan,
        status: Optional[Status] = None,
        cost_window: float = COST_WINDOW_S,
    ) -> None:
        """`cost_window`: seconds of every COST_PERIOD_S with BPF statistics on (a longer
        one keeps them on, for a caller that must measure every event's cost)."""
        # Imported here: the monitor, the exporter and recordings import this module for
        # ProbeSample alone and never load a BPF program (ctypes, bcc).
        from lbtune.host.trace.bpf import BpfProgram, RunTimeStats

        self.host = host
        self._cost_window = cost_window
        self.plan = plan
        self._lock = threading.Lock()
        self._stats = RunTimeStats()
        self._notes = list(plan.notes)
        self._prev: dict[Any, tuple[int, ...]] = {}
        self._prev_costs: dict[str, tuple[int, int]] = {}
        self._counters_prev: dict[tuple[str, str, int], tuple[int, int]] = {}
        # per direct-mapped cache: (entries taken at the last read, the count stood still
        # over two reads, the slots in use)
        self._caches: dict[str, tuple[int, bool, list[int]]] = {}
        self._kallsyms: Optional[Kallsyms] = None
        self._by_id = {p.id: p for p in plan.ifaces}
        self._slot = {
            (p.base + q, d): (p, q)
            for p in plan.ifaces
            for d, n in (("rx", p.nrx), ("tx", p.ntx))
            if n
            for q in range(n + 1)
        }
        self._program: Any = None
        self._measured = self._measured_prev = 0.0  # seconds with statistics on
        self._on_since: Optional[float] = None
        self._stop = threading.Event()
        self._sampler: Optional[threading.Thread] = None
        try:
            if status:
                status("compiling and loading the probes (bcc)")
            self._program = BpfProgram(plan.text)
            for p in plan.ifaces:
                if p.nrx or p.ntx or "napi" in plan.probes:
                    idx = plan.names.slot(p.name)
                    value = (*name_words(p.name), p.base, p.nrx, p.ntx, p.rx_off, p.id, idx)
                    self._program.update("lbt_ifaces", (idx,), value)
            if status:
                status("attaching")
            self._stats_on()  # the first window opens with the probes, not with a thread
            for a in plan.source.attach:
                if a.btf_id is not None:
                    self._program.attach_btf(a.tracepoint, a.function, a.btf_id)
                else:
                    self._program.attach(a.tracepoint, a.function)
            self._sampler = threading.Thread(
                target=self._sample_costs, name="lbtune-probe-cost", daemon=True
            )
            self._sampler.start()
            if "drops" in plan.probes:
                self._kallsyms = read_kallsyms(host.fs)
                if not self._kallsyms.available:
                    self._notes.append("kernel symbols unreadable: locations shown as addresses")
            self._read_counters()  # the baseline of the counter sources
        except BaseException:
            self.close()
            raise
        self._opened = self._last = time.monotonic()

    @classmethod
    def open(
        cls,
        host: Host,
        probes: Sequence[str],
        ifaces: Optional[Sequence[str]] = None,
        status: Optional[Status] = None,
        cost_window: float = COST_WINDOW_S,
        typed: bool = True,
    ) -> ProbeSession:
        """Plan, compile once, load and attach `probes` (see `plan_probes`)."""
        plan = plan_probes(host, probes, ifaces, status, typed)
        return cls(host, plan, status, cost_window)

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._program is None

    def close(self) -> None:
        """Detach and unload every program, free the maps, switch statistics off."""
        self._stop.set()
        sampler = self._sampler
        if sampler is not None and sampler is not threading.current_thread():
            sampler.join(5.0)
        with self._lock:
            if self._program is not None:
                self._program.close()
                self._program = None
            self._stats_off()

    def _stats_off(self) -> None:
        if self._on_since is not None:
            self._measured += time.monotonic() - self._on_since
            self._on_since = None
        self._stats.close()

    def _stats_on(self) -> bool:
        if not self._stats.open():
            if self._stats.problem and self._stats.problem not in self._notes:
                self._notes.append(self._stats.problem)
            return False
        self._on_since = time.monotonic()
        return True

    def _sample_costs(self) -> None:
        """Statistics on for COST_WINDOW_S of every COST_PERIOD_S (the sampler thread; the
        first window was opened with the probes)."""
        while True:
            stopped = self._stop.wait(self._cost_window)
            with self._lock:
                self._stats_off()
            if stopped or self._stop.wait(max(COST_PERIOD_S - self._cost_window, 0.0)):
                return
            with self._lock:
                if self._program is None or self._stop.is_set() or not self._stats_on():
                    return

    def program_ids(self) -> list[int]:
        """Kernel ids of the loaded programs (what `bpftool prog` lists)."""
        with self._lock:
            return [s.prog_id for s in self._program.stats()] if self._program else []

    # -------------------------------------------------------------------------- reading

    def read(self) -> ProbeSample:
        """Everything counted since the previous read (the first: since opening)."""
        with self._lock:
            if self._program is None:
                raise RuntimeError("probe session is closed")
            now = time.monotonic()
            seconds, self._last = now - self._last, now
            plan = self.plan
            drops, drops_lost = self._drops() if "drops" in plan.probes else ((), 0)
            queues = self._queues() if "queues" in plan.probes else ()
            napi, napi_lost = self._napi() if "napi" in plan.probes else ((), 0)
            ports = self._ports() if "drops" in plan.probes else ()
            return ProbeSample(
                probes=plan.probes,
                seconds=seconds,
                drops=drops,
                drops_lost=drops_lost,
                drops_scope="host",
                queues=queues,
                napi=napi,
                napi_lost=napi_lost,
                costs=self._costs(now),
                notes=tuple(self._notes),
                ports=ports,
            )

    def _fresh(self, key: Any, total: tuple[int, ...]) -> tuple[int, ...]:
        d = _delta(total, self._prev.get(key))
        self._prev[key] = total
        return d

    def _lost(self, table: str) -> int:
        rows = self._program.read_percpu(table)
        return self._fresh(table, _sum_cpus(rows[0][1]))[0] if rows else 0

    def _cache(self, table: str, taken_table: str) -> _Rows:
        """The used entries of a direct-mapped cache (`skip_zero` rows).

        An entry, once taken, keeps its key, and the probe counts the entries taken
        (`taken_table`): while that count stands still, only the slots already known are
        copied, not the whole table (4,096 entries per CPU for drops, a millisecond of
        kernel time every read). The whole table is read again whenever the count moved,
        and once more on the read after, so an entry taken on another CPU just before a
        read, whose count was seen before its key, is still found a read later.
        """
        rows = self._program.read_percpu(taken_table)
        taken = _sum_cpus(rows[0][1])[0] if rows else -1
        before = self._caches.get(table)
        used: _Rows
        if before is not None and before[0] == taken and before[1]:
            used = self._program.read_percpu(table, skip_zero=True, slots=before[2])
            return used
        used = self._program.read_percpu(table, skip_zero=True)
        self._caches[table] = (taken, before is not None and before[0] == taken,
                               [key[0] for key, _ in used])  # fmt: skip
        return used

    def _drops(self) -> tuple[tuple[DropCount, ...], int]:
        reasons = self.plan.reasons
        syms = self._kallsyms or Kallsyms([])
        totals: dict[tuple[int, ...], int] = {}
        for _slot, per_cpu in self._cache("lbt_drops_cache", "lbt_drops_taken"):
            for *ckey, count in per_cpu:  # an entry's key may differ per CPU
                if count:
                    totals[tuple(ckey)] = totals.get(tuple(ckey), 0) + count
        for key, per_cpu in self._program.read_percpu("lbt_drops"):
            totals[key] = totals.get(key, 0) + _sum_cpus(per_cpu)[0]
        out = []
        for key, total in totals.items():
            location, reason, protocol, _pad = key
            (count,) = self._fresh(("drops", key), (total,))
            if count <= 0:
                continue
            hit = syms.lookup(location)
            out.append(
                DropCount(
                    reason=reasons.name(reason) if reasons is not None else "",
                    reason_code=reason if self.plan.has_reason else None,
                    location=syms.name(location),
                    function=hit[0].name if hit else f"0x{location:x}",
                    protocol=protocol_name(protocol),
                    count=count,
                )
            )
        out.sort(key=lambda d: (-d.count, d.reason, d.location))
        return tuple(out), self._lost("lbt_drops_lost")

    def _ports(self) -> tuple[PortCount, ...]:
        if not any(a.tracepoint in PORT_TRACEPOINTS for a in self.plan.source.attach):
            return ()
        totals: dict[tuple[int, ...], int] = {}
        for _slot, per_cpu in self._cache("lbt_ports_cache", "lbt_ports_taken"):
            for *ckey, count in per_cpu:  # an entry's key may differ per CPU
                if count:
                    totals[tuple(ckey)] = totals.get(tuple(ckey), 0) + count
        for key, per_cpu in self._program.read_percpu("lbt_ports"):
            totals[key] = totals.get(key, 0) + _sum_cpus(per_cpu)[0]
        out = []
        for key, total in totals.items():
            a0, a1, port, proto, family, _pad = key
            (count,) = self._fresh(("ports", key), (total,))
            if count <= 0:
                continue
            raw = a0.to_bytes(8, "little") + a1.to_bytes(8, "little")
            addr = ipaddress.ip_address(raw[:4] if family == 4 else raw)
            name = "tcp" if proto == 6 else "udp"
            out.append(PortCount(name, family, str(addr), port, count))
        lost = self._lost("lbt_ports_lost")
        if lost:
            self._notes.append(f"closed ports: {lost} events not counted (port map full)")
        out.sort(key=lambda p: (-p.count, p.proto, p.port, p.addr))
        return tuple(out)

    def _queues(self) -> tuple[QueueCount, ...]:
        out: list[QueueCount] = []
        for direction in ("rx", "tx"):
            for key, per_cpu in self._program.read_percpu(f"lbt_q_{direction}"):
                slot = self._slot.get((key[0], direction))
                if slot is None:
                    continue
                p, q = slot
                n = p.nrx if direction == "rx" else p.ntx
                packets, nbytes, *sizes = self._fresh((direction, key[0]), _sum_cpus(per_cpu))
                if q == n and packets == 0:
                    continue  # the "queue unknown" slot, unused
                queue = q if q < n else None
                out.append(
                    QueueCount(p.name, direction, queue, packets, nbytes, tuple(sizes), "probe")
                )
        out.extend(self._read_counters())
        out.sort(key=lambda c: (c.dev, c.direction, -1 if c.queue is None else c.queue))
        return tuple(out)

    def _read_counters(self) -> list[QueueCount]:
        """Deltas of the interfaces and directions whose own counters win over the probe."""
        wanted = {
            (p.name, d): src
            for p in self.plan.ifaces
            for d, src in (("rx", p.rx_source), ("tx", p.tx_source))
            if src and src != "probe"
        }
        if not wanted:
            return []
        # Only when a queue's counters come from the driver or netlink, not from the probe.
        from lbtune.host.net.qstats import queue_stats
        from lbtune.observe.nicstats import read_nic_counters

        now: dict[tuple[str, str, int], tuple[int, int]] = {}
        if "netlink qstats" in wanted.values():
            names = {p.ifindex: p.name for p in self.plan.ifaces}
            for s in queue_stats() or []:
                dev = names.get(s.ifindex)
                if dev is not None and wanted.get((dev, s.direction)) == "netlink qstats":
                    now[(dev, s.direction, s.queue)] = (s.packets or 0, s.bytes or 0)
        for dev in {d for (d, _), src in wanted.items() if src == "ethtool"}:
            for qc in read_nic_counters(self.host.fs, self.host.ethtool, dev).queues:
                if wanted.get((dev, qc.direction)) == "ethtool" and qc.packets is not None:
                    now[(dev, qc.direction, qc.queue)] = (qc.packets, qc.bytes or 0)
        out = []
        for key, (packets, nbytes) in sorted(now.items()):
            before = self._counters_prev.get(key, (packets, nbytes))
            dev, direction, queue = key
            source = wanted[(dev, direction)]
            d_packets, d_bytes = packets - before[0], nbytes - before[1]
            out.append(QueueCount(dev, direction, queue, d_packets, d_bytes, None, source))
        self._counters_prev = now
        return out

    def _napi(self) -> tuple[tuple[NapiCount, ...], int]:
        # (napi, iface) -> per CPU (polls, work, exhausted, idle, budget, label), from the
        # direct-mapped table (an entry's instance may differ per CPU) and the hash behind it.
        per: dict[tuple[int, int], dict[int, tuple[int, ...]]] = {}
        for _slot, per_cpu in self._cache("lbt_napi_cache", "lbt_napi_taken"):
            for cpu, (napi, iface, _pad, *value) in enumerate(per_cpu):
                if iface and value[0]:
                    per.setdefault((napi, iface), {})[cpu] = tuple(value)
        for (napi, iface, _pad), per_cpu in self._program.read_percpu("lbt_napi"):
            for cpu, value in enumerate(per_cpu):
                if value[0]:
                    old = per.setdefault((napi, iface), {}).get(cpu)
                    add = tuple(value) if old is None else _merge_napi(old, tuple(value))
                    per[(napi, iface)][cpu] = add
        instances: dict[int, list[int]] = {}
        for napi, iface in per:
            instances.setdefault(iface, []).append(napi)
        for addrs in instances.values():
            addrs.sort()
        out = []
        for (napi, iface), cpus in per.items():
            p = self._by_id.get(iface)
            if p is None:
                continue
            for cpu, counts in sorted(cpus.items()):
                polls, work, exhausted, idle, budget, label = counts
                d = self._fresh(("napi", napi, iface, cpu), (polls, work, exhausted, idle))
                if d[0] <= 0:
                    continue
                queue: Optional[int] = None
                if label and p.name != BACKLOG:
                    q = 0 if p.rx_queues == 1 else label - 1 - p.rx_off
                    queue = q if 0 <= q < p.rx_queues else None
                out.append(
                    NapiCount(
                        dev="backlog" if p.name == BACKLOG else p.name,
                        instance=instances[iface].index(napi),
                        napi=f"0x{napi:x}",
                        queue=queue,
                        cpu=cpu,
                        polls=d[0],
                        work=d[1],
                        exhausted=d[2],
                        idle=d[3],
                        budget=budget,
                    )
                )
        out.sort(key=lambda n: (n.dev, n.instance, n.cpu))
        return tuple(out), self._lost("lbt_napi_lost")

    def _costs(self, now: float) -> tuple[ProbeCost, ...]:
        """Run counts and times only grow while statistics are on: their deltas are the
        sampled windows' events and time, over the seconds statistics were on."""
        measured = self._measured + (now - self._on_since if self._on_since is not None else 0)
        seconds, self._measured_prev = measured - self._measured_prev, measured
        per_fn = {s.function: s for s in self._program.stats()}
        out = []
        for probe in self.plan.probes:
            fns = {a.function for a in self.plan.source.attach if a.probe == probe}
            cnt = sum(per_fn[f].run_cnt for f in fns if f in per_fn)
            ns = sum(per_fn[f].run_time_ns for f in fns if f in per_fn)
            before = self._prev_costs.get(probe, (0, 0))
            self._prev_costs[probe] = (cnt, ns)
            events, run_ns = cnt - before[0], ns - before[1]
            per_event = run_ns / events if events else None
            rate = events / seconds if seconds > 0 else 0.0
            out.append(ProbeCost(probe, events, run_ns, per_event, rate, round(seconds, 3)))
        return tuple(out)


def merge_samples(samples: Sequence[ProbeSample]) -> ProbeSample:
    """Consecutive samples of one session as one: counts summed per row, seconds added
    (the monitor keeps one sample per tick and reports over several)."""
    if not samples:
        raise ValueError("no probe samples to merge")
    queues: dict[QueueKey, list[Any]] = {}
    napi: dict[NapiKey, list[int]] = {}
    for s in samples:
        for q in s.queues:
            qv = queues.setdefault((q.dev, q.direction, q.queue, q.source), [0, 0, None])
            qv[0] += q.packets
            qv[1] += q.bytes
            if q.sizes is not None:
                qv[2] = [a + b for a, b in zip(qv[2] or [0] * len(q.sizes), q.sizes)]
        for n in s.napi:
            nv = napi.setdefault((n.dev, n.instance, n.napi, n.queue, n.cpu), [0, 0, 0, 0, 0])
            nv[0] += n.polls
            nv[1] += n.work
            nv[2] += n.exhausted
            nv[3] += n.idle
            nv[4] = n.budget
    return _merged(
        samples,
        tuple(QueueCount(dev, dr, q, v[0], v[1], None if v[2] is None else tuple(v[2]), src)
              for (dev, dr, q, src), v in queues.items()),
        tuple(NapiCount(dev, inst, addr, q, cpu, *v)
              for (dev, inst, addr, q, cpu), v in napi.items()),
    )  # fmt: skip


QueueKey = tuple[str, str, Optional[int], str]  # dev, direction, queue, source
NapiKey = tuple[str, int, str, Optional[int], int]  # dev, instance, napi, queue, cpu


def _merged(
    samples: Sequence[ProbeSample], queues: tuple[QueueCount, ...], napi: tuple[NapiCount, ...]
) -> ProbeSample:
    """merge_samples with the queues' and NAPI instances' rows already summed."""
    drops: dict[tuple[str, Optional[int], str, str, str], int] = {}
    costs: dict[str, list[float]] = {}
    notes: dict[str, None] = {}
    ports: dict[tuple[str, int, str, int], int] = {}
    for s in samples:
        for p in s.ports:
            pk = (p.proto, p.family, p.addr, p.port)
            ports[pk] = ports.get(pk, 0) + p.count
        for d in s.drops:
            k = (d.reason, d.reason_code, d.location, d.function, d.protocol)
            drops[k] = drops.get(k, 0) + d.count
        for c in s.costs:
            cv = costs.setdefault(c.probe, [0, 0, 0.0])
            cv[0] += c.events
            cv[1] += c.run_time_ns
            cv[2] += c.measured_seconds
        notes.update(dict.fromkeys(s.notes))
    last = samples[-1]
    return ProbeSample(
        probes=last.probes,
        seconds=sum(s.seconds for s in samples),
        drops=tuple(
            sorted(
                (DropCount(r, code, loc, fn, proto, n) for (r, code, loc, fn, proto), n in
                 drops.items()),
                key=lambda d: (-d.count, d.reason, d.location),
            )
        ),
        drops_lost=sum(s.drops_lost for s in samples),
        drops_scope=last.drops_scope,
        queues=queues,
        napi=napi,
        napi_lost=sum(s.napi_lost for s in samples),
        costs=tuple(
            ProbeCost(p, int(v[0]), int(v[1]), v[1] / v[0] if v[0] else None,
                      v[0] / v[2] if v[2] > 0 else 0.0, round(v[2], 3))
            for p, v in costs.items()
        ),
        notes=tuple(notes),
        ports=tuple(
            sorted(
                (PortCount(*k, n) for k, n in ports.items()),
                key=lambda p: (-p.count, p.proto, p.port, p.addr),
            )
        ),
    )


class SlidingMerge:
    """`merge_samples` of a window of consecutive samples that slides (the monitor's last
    10 s, each tick): samples join at its end and leave at its start, and the rows of the
    queues and NAPI instances (a row per queue, and per instance and CPU: most of a big
    host's sample) are added and taken away instead of summed again over the whole window.
    `merged(parts)` is `merge_samples(parts)`; parts that do not continue the last ones
    (another window) are summed anew."""

    def __init__(self) -> None:
        self._parts: list[ProbeSample] = []
        self._last: Optional[ProbeSample] = None
        # key -> [packets, bytes, sizes summed, samples with sizes, rows]
        self._queues: dict[QueueKey, list[Any]] = {}
        # key -> [polls, work, exhausted, idle, rows]; the budget of the newest row
        self._napi: dict[NapiKey, list[int]] = {}
        self._budget: dict[NapiKey, int] = {}
        # each part's row keys, in the parts' order (a sample may be there twice)
        self._keys: list[tuple[tuple[QueueKey, ...], tuple[NapiKey, ...]]] = []

    def merged(self, parts: Sequence[ProbeSample]) -> ProbeSample:
        if not parts:
            raise ValueError("no probe samples to merge")
        old = self._parts
        start = next((i for i, p in enumerate(old) if p is parts[0]), None)
        kept = len(old) - start if start is not None else 0
        if (
            start is None
            or kept > len(parts)
            or any(a is not b for a, b in zip(old[start:], parts))
        ):
            self._clear()
            start, kept = 0, 0
        elif start == 0 and kept == len(parts) and self._last is not None:
            return self._last
        try:
            for p, keys in zip(old[:start], self._keys[:start]):
                self._take(p, keys)
            del self._keys[:start]
            for p in parts[kept:]:
                self._add(p)
        except _Uneven:  # (histograms of other lengths: summed as merge_samples does)
            self._clear()
            return merge_samples(parts)
        self._parts = list(parts)
        self._last = _merged(parts, self._queue_rows(), self._napi_rows())
        return self._last

    def _clear(self) -> None:
        self._parts, self._last = [], None
        self._queues.clear()
        self._napi.clear()
        self._budget.clear()
        self._keys.clear()

    def _add(self, s: ProbeSample) -> None:
        qkeys = tuple((q.dev, q.direction, q.queue, q.source) for q in s.queues)
        nkeys = tuple((n.dev, n.instance, n.napi, n.queue, n.cpu) for n in s.napi)
        self._keys.append((qkeys, nkeys))
        for k, q in zip(qkeys, s.queues):
            qv = self._queues.get(k)
            if qv is None:
                qv = self._queues[k] = [0, 0, None, 0, 0]
            qv[0] += q.packets
            qv[1] += q.bytes
            qv[4] += 1
            if q.sizes is not None:
                if qv[2] is None:
                    qv[2] = list(q.sizes)
                elif len(qv[2]) != len(q.sizes):
                    raise _Uneven
                else:
                    qv[2] = [a + b for a, b in zip(qv[2], q.sizes)]
                qv[3] += 1
        for nk, n in zip(nkeys, s.napi):
            nv = self._napi.get(nk)
            if nv is None:
                nv = self._napi[nk] = [0, 0, 0, 0, 0]
            nv[0] += n.polls
            nv[1] += n.work
            nv[2] += n.exhausted
            nv[3] += n.idle
            nv[4] += 1
            self._budget[nk] = n.budget

    def _take(self, s: ProbeSample, keys: tuple[tuple[QueueKey, ...], tuple[NapiKey, ...]]) -> None:
        qkeys, nkeys = keys
        for k, q in zip(qkeys, s.queues):
            qv = self._queues[k]
            qv[0] -= q.packets
            qv[1] -= q.bytes
            qv[4] -= 1
            if q.sizes is not None:
                qv[3] -= 1
                qv[2] = [a - b for a, b in zip(qv[2], q.sizes)] if qv[3] else None
            if not qv[4]:
                del self._queues[k]
        for nk, n in zip(nkeys, s.napi):
            nv = self._napi[nk]
            nv[0] -= n.polls
            nv[1] -= n.work
            nv[2] -= n.exhausted
            nv[3] -= n.idle
            nv[4] -= 1
            if not nv[4]:
                del self._napi[nk]
                del self._budget[nk]

    def _order(self, which: int) -> dict[Any, None]:
        """The keys in the order merge_samples meets them (the first part's rows first)."""
        return dict.fromkeys(chain.from_iterable(keys[which] for keys in self._keys))

    def _queue_rows(self) -> tuple[QueueCount, ...]:
        rows = []
        for k in self._order(0):
            v = self._queues[k]
            dev, dr, q, src = k
            rows.append(QueueCount(dev, dr, q, v[0], v[1], None if v[2] is None else tuple(v[2]),
                                   src))  # fmt: skip
        return tuple(rows)

    def _napi_rows(self) -> tuple[NapiCount, ...]:
        budget = self._budget
        return tuple(
            NapiCount(k[0], k[1], k[2], k[3], k[4], v[0], v[1], v[2], v[3], budget[k])
            for k, v in ((k, self._napi[k]) for k in self._order(1))
        )


class _Uneven(Exception):
    """Size histograms of different lengths for one queue in a window."""
