"""Typed samples of the kernel's network counters: what one sampling tick reads.

Every collector in `lbtune.observe` returns one of these frozen values. A `Sample` bundles
one tick of all of them; `lbtune.observe.window.Window` compares two samples (or one sample
against boot, for captures) and gives deltas and rates. Both the diagnose rules and the TUI
consume these types, never the files behind them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from lbtune.host.kernel.interrupts import IrqLine
from lbtune.host.net.qdisc import QdiscStats
from lbtune.host.net.sockdiag import ListenSocket, TcpReceiver, UdpSocket


@dataclass(frozen=True)
class SnmpCounters:
    """/proc/net/netstat + /proc/net/snmp (+ snmp6): `{"TcpExt.ListenOverflows": 12, ...}`.

    Keys are `Group.Name` exactly as the kernel prints them (`TcpExt`, `IpExt`, `Ip`, `Icmp`,
    `Tcp`, `Udp`, `UdpLite`, `MPTcpExt`, `Ip6`, `Udp6`...). Counters that are really gauges
    (`Tcp.CurrEstab`, `Tcp.MaxConn`=-1) are kept as read.
    """

    values: Mapping[str, int]

    def get(self, key: str, default: int = 0) -> int:
        return self.values.get(key, default)


@dataclass(frozen=True)
class SoftnetCpu:
    """One row of /proc/net/softnet_stat (hex). `cpu` comes from column 13 when present."""

    cpu: int
    processed: int  # col 1: packets taken off this CPU's backlog/NAPI
    dropped: int  # col 2: backlog full -> net.core.netdev_max_backlog
    time_squeeze: int  # col 3: NAPI round ran out of budget/time -> netdev_budget(_usecs)
    received_rps: int  # col 10: IPIs received for RPS/RFS
    flow_limit: int  # col 11: flow limit drops
    backlog_len: Optional[int] = None  # col 12 (5.10+): current input_pkt_queue+process_queue


@dataclass(frozen=True)
class Softirqs:
    """/proc/softirqs: per-CPU counts per softirq type (`NET_RX`, `NET_TX`, `TIMER`...)."""

    cpus: tuple[int, ...]  # CPU ids of the columns (header row)
    counts: Mapping[str, Mapping[int, int]]  # "NET_RX" -> {cpu: count}


@dataclass(frozen=True)
class QueueCounters:
    """Per-queue counters of one NIC queue, mapped from driver-specific ethtool names."""

    direction: str  # "rx" | "tx"
    queue: int
    packets: Optional[int] = None
    bytes: Optional[int] = None
    drops: Optional[int] = None  # driver's per-queue drop/discard counter, if it has one
    extra: Mapping[str, int] = field(default_factory=dict)  # other per-queue counters, by kind


@dataclass(frozen=True)
class NicCounters:
    """Counters of one network device: /sys statistics, ethtool -S mapped per queue."""

    dev: str
    driver: Optional[str]
    stats: Mapping[str, int]  # /sys/class/net/DEV/statistics/* (rx_dropped, rx_missed_errors...)
    queues: tuple[QueueCounters, ...]  # per-queue counters in (direction, queue) order
    # Device-level drop counters named by the driver map, e.g. {"rx_out_of_buffer": 10}
    # (mlx5: receive ring empty), {"rx_missed_errors": 3} (ixgbe: FIFO overflow). Values are
    # the raw driver counters; the key's meaning is documented in the driver map.
    nic_drops: Mapping[str, int]
    ethtool: Mapping[str, int]  # raw `ethtool -S`, empty when unavailable


@dataclass(frozen=True)
class SockStat:
    """/proc/net/sockstat(6): socket counts by state and memory, in pages where the kernel says."""

    sockets_used: int
    tcp_inuse: int
    tcp_orphan: int
    tcp_tw: int
    tcp_alloc: int
    tcp_mem_pages: int
    udp_inuse: int
    udp_mem_pages: int
    tcp6_inuse: int = 0
    udp6_inuse: int = 0


@dataclass(frozen=True)
class ConntrackStats:
    """Conntrack table fill and the per-CPU /proc/net/stat/nf_conntrack columns, summed."""

    count: int
    max: Optional[int]  # None when not readable
    totals: Mapping[str, int]  # column name (from the header row) -> sum over CPUs
    per_cpu: tuple[Mapping[str, int], ...]  # rows in file order


@dataclass(frozen=True)
class IpvsStats:
    """/proc/net/ip_vs_stats totals (hex): connections and packets since load."""

    conns: int
    in_packets: int
    out_packets: int
    in_bytes: int
    out_bytes: int


@dataclass(frozen=True)
class Sample:
    """One sampling tick. Sources that could not be read are None/empty and named in `missing`.

    `monotonic` orders live samples; `uptime` (from /proc/uptime) lets a single capture be read
    as "counters since boot".
    """

    monotonic: float
    wallclock: float
    uptime: Optional[float]
    snmp: SnmpCounters
    softnet: tuple[SoftnetCpu, ...]
    softirqs: Optional[Softirqs]
    interrupts: Mapping[int, IrqLine]
    nics: Mapping[str, NicCounters]
    listen: tuple[ListenSocket, ...]
    udp: tuple[UdpSocket, ...]
    sockstat: Optional[SockStat]
    conntrack: Optional[ConntrackStats]
    qdiscs: tuple[QdiscStats, ...]
    ipvs: Optional[IpvsStats]
    missing: Mapping[str, str]  # source name -> why it is missing
    # TCP sockets holding a port of ip_local_port_range; counted (sock_diag) only when
    # sockstat says the range may be nearly full, None otherwise or on recorded trees.
    ephemeral_in_use: Optional[int] = None
    # Configuration the sampler was asked for (observe/config.py): kernel path -> value, and
    # the paths that are read-only here (host-global sysctls seen from a namespace).
    config: Mapping[str, str] = field(default_factory=dict)
    config_readonly: frozenset[str] = frozenset()
    # Connected TCP sockets under receive pressure, when the sampler was asked for them
    # (None: not asked, or no source).
    tcp_receivers: Optional[tuple[TcpReceiver, ...]] = None


__all__ = [
    "ConntrackStats",
    "IpvsStats",
    "ListenSocket",
    "NicCounters",
    "QdiscStats",
    "QueueCounters",
    "Sample",
    "SnmpCounters",
    "SockStat",
    "Softirqs",
    "SoftnetCpu",
    "TcpReceiver",
    "UdpSocket",
]
