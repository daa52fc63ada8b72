"""A finding: where packets die, how many, why, and which knob fixes it.

Rules (`lbtune.diagnose.rules`) turn a `Window` of samples into findings; renderers print
them. Everything here is a plain frozen value so JSON output is a direct mapping
(`dataclasses.asdict`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional


class Severity(str, enum.Enum):
    CRITICAL = "critical"  # packets or connections are being lost now
    WARNING = "warning"  # loss is likely under load, or a degraded mode is active
    INFO = "info"  # worth knowing, not a loss

    @property
    def rank(self) -> int:
        return {"critical": 0, "warning": 1, "info": 2}[self.value]


@dataclass(frozen=True)
class Evidence:
    """One counter behind a finding: its movement over the window and per second."""

    counter: str  # "TcpExt.ListenOverflows", "softnet[cpu3].dropped", "ethtool rx_out_of_buffer"
    value: int  # delta over the window (or since boot for a single capture)
    rate: Optional[float]  # per second; None when the window has no duration
    source: str  # file or interface it came from: "/proc/net/netstat", "sock_diag"


@dataclass(frozen=True)
class Fix:
    """What to change: the knob, its current and needed value, and how to get there."""

    knob: str  # "sysctl net.core.somaxconn", "ring ens1f0np0 rx", "application listen backlog"
    current: Optional[str]
    needed: Optional[str]
    profile_key: Optional[str] = None  # '[sysctl] "net.core.somaxconn" = 4096' for lbtune apply
    command: Optional[str] = None  # the equivalent one-off command, shown to the user only
    note: str = ""


@dataclass(frozen=True)
class Finding:
    rule: str  # stable id, documented in docs/diagnose.md: "accept-queue-overflow"
    title: str  # one line: "Accept queue overflow on tcp port 8080"
    severity: Severity
    object: str  # "tcp 0.0.0.0:8080", "cpu 3", "ens1f0np0 rx-queue 5", "ens3"
    cause: str  # why, in a sentence or two, with the numbers that prove it
    count: int  # packets/connections lost (or events) in the window
    rate: Optional[float]  # count per second
    evidence: tuple[Evidence, ...]
    fixes: tuple[Fix, ...]

    @property
    def sort_key(self) -> tuple[int, float, str]:
        return (self.severity.rank, -float(self.count), self.object)


def rank(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then the biggest loss."""
    return sorted(findings, key=lambda f: f.sort_key)
