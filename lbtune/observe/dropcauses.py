"""Drops by cause: which kernel counters say a packet died, and why, over a `Window`.

One table for every consumer: the monitor's drops panel (`lbtune.tui.frame`) and the
Prometheus exporter (`lbtune.exporter.series`, `lbtune_drops_total{cause}`) sum the same
counters, so a number on screen and a number in Prometheus mean the same thing. Each cause
has a stable `slug` (the exporter's label value), a display name and the counters it sums;
its `count(window)` is None when the source is not readable here (then nothing is claimed,
never a zero).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from lbtune.observe.window import Window

Counter = Callable[[Window], Optional[int]]


@dataclass(frozen=True)
class SnmpSum:
    """The sum of protocol counters (keys as observe/procnet names them: `Udp6.NoPorts`)."""

    keys: tuple[str, ...]

    def __call__(self, w: Window) -> Optional[int]:
        if not any(w.has_snmp(k) for k in self.keys):
            return None
        return sum(w.snmp(k) for k in self.keys)


def nic_hw(w: Window) -> Optional[int]:
    """The drivers' own drop counters (ring empty, FIFO, port buffer), else per-queue rx
    drops, summed over the NICs sampled."""
    if not w.after.nics:
        return None
    total = 0
    for d in w.nics():
        if d.nic_drops:
            total += sum(d.nic_drops.values())
        else:
            total += sum(q.drops or 0 for q in d.queues if q.direction == "rx")
    return total


def softnet_dropped(w: Window) -> Optional[int]:
    return sum(d.dropped for d in w.softnet()) if w.after.softnet else None


def qdisc_dropped(w: Window) -> Optional[int]:
    if "qdisc" in w.after.missing:
        return None
    return sum(d.drops for d in w.qdiscs() if d.qdisc.parent == "root")


def conntrack_dropped(w: Window) -> Optional[int]:
    if w.after.conntrack is None:
        return None
    return sum(w.conntrack(c) for c in ("drop", "early_drop", "insert_failed"))


@dataclass(frozen=True)
class DropCause:
    slug: str  # stable label value: `lbtune_drops_total{cause="accept_queue"}`
    name: str  # what the monitor shows
    counters: str  # what it sums, for the help and docs
    count: Counter


DROP_CAUSES: tuple[DropCause, ...] = (
    DropCause("nic_ring", "NIC ring/FIFO",
              "driver drop counters (ethtool -S), else per-queue rx drops", nic_hw),
    DropCause("cpu_backlog", "CPU backlog", "softnet_stat dropped (netdev_max_backlog)",
              softnet_dropped),
    DropCause("accept_queue", "accept queue", "TcpExt.ListenOverflows",
              SnmpSum(("TcpExt.ListenOverflows",))),
    DropCause("syn_queue", "SYN queue", "TcpExt.TCPReqQFullDrop",
              SnmpSum(("TcpExt.TCPReqQFullDrop",))),
    DropCause("tcp_backlog", "TCP backlog", "TcpExt.TCPBacklogDrop",
              SnmpSum(("TcpExt.TCPBacklogDrop",))),
    DropCause("tcp_rcvbuf_prune", "TCP rcvbuf prune", "TcpExt.RcvPruned",
              SnmpSum(("TcpExt.RcvPruned",))),
    DropCause("udp_rcvbuf", "UDP rcvbuf", "Udp(6).RcvbufErrors",
              SnmpSum(("Udp.RcvbufErrors", "Udp6.RcvbufErrors"))),
    DropCause("udp_no_port", "UDP no port", "Udp(6).NoPorts",
              SnmpSum(("Udp.NoPorts", "Udp6.NoPorts"))),
    DropCause("rp_filter", "rp_filter", "TcpExt.IPReversePathFilter",
              SnmpSum(("TcpExt.IPReversePathFilter",))),
    DropCause("ip_discards", "IP discards", "Ip.InDiscards", SnmpSum(("Ip.InDiscards",))),
    DropCause("qdisc", "qdisc", "root qdisc drops (tc -s qdisc)", qdisc_dropped),
    DropCause("conntrack", "conntrack", "nf_conntrack drop + early_drop + insert_failed",
              conntrack_dropped),
)  # fmt: skip
