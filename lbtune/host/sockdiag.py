"""Listening TCP sockets with their accept queues, from sock_diag (live) or `ss` output (recorded).

(Stub: the dataclass is final; the readers are being written.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ListenSocket:
    """A listening TCP socket: accept queue now vs its limit, and drops."""

    family: int  # 4 or 6
    addr: str  # "0.0.0.0", "::", "10.0.0.1"
    port: int
    queue: int  # current accept-queue length (idiag_rqueue; ss Recv-Q)
    backlog: int  # sk_max_ack_backlog = min(app backlog, somaxconn) (idiag_wqueue; ss Send-Q)
    drops: Optional[int] = None  # sk_drops (SK_MEMINFO_DROPS; ss skmem d), None if not reported
    inode: int = 0


@dataclass(frozen=True)
class UdpSocket:
    """A bound UDP socket: receive queue vs buffer, and drops (receive-buffer errors)."""

    family: int  # 4 or 6
    addr: str
    port: int
    queue: int  # bytes waiting in the receive queue (idiag_rqueue; ss Recv-Q)
    rcvbuf: Optional[int] = None  # SK_MEMINFO_RCVBUF (ss skmem rb), None if not reported
    drops: Optional[int] = None  # sk_drops (SK_MEMINFO_DROPS; ss skmem d)
    inode: int = 0
