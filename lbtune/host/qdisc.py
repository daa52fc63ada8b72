"""Queueing-discipline statistics from netlink (live) or `tc -s qdisc show` output (recorded).

(Stub: the dataclass is final; the readers are being written.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QdiscStats:
    """One qdisc's statistics."""

    dev: str
    kind: str  # "tbf", "fq_codel", "mq", "pfifo_fast", "noqueue"
    handle: str  # "8001:"
    parent: str  # "root" or "8001:1"
    packets: int
    bytes: int
    drops: int
    overlimits: int
    requeues: int
    backlog_bytes: int
    backlog_packets: int
