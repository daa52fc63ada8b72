"""A finding: where packets die, how many, why, and what fixes it (and who makes the fix).

Rules (`lbtune.diagnose.rules`) turn a `Window` of samples into findings; the view model
(`lbtune.diagnose.view`) lays them out for every renderer. Everything here is a plain frozen
value, so the JSON document is a direct mapping of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lbtune.diagnose import tomltext
from lbtune.observe.counters import CounterRef
from lbtune.vocab import Level

# Who makes a fix (`Fix.scope`). Only PROFILE fixes can be made with `lbtune apply`.
PROFILE = "profile"  # a knob lbtune sets here: `lbtune apply` with the profile line
HOST = "host"  # a host-global setting a namespace cannot change: set it on the host
APPLICATION = "application"  # the application's code or configuration (SO_RCVBUF, backlog)
PLATFORM = "platform"  # the cloud platform or instance type: no setting on this host
MANUAL = "manual"  # a change the operator makes by hand (tc, flow control, resolver)
SCOPES = (PROFILE, HOST, APPLICATION, PLATFORM, MANUAL)


@dataclass(frozen=True)
class ProfileSetting:
    """One profile value a fix sets, written the way a profile file writes it.

    `table` is where it goes: ("sysctl",), ("nic", DEVICE) or ("irqbalance",); `name` is the
    key in that table; `fields` are the value's fields in profile order (("value", 4096),
    ("mode", "raise")) or (("strategy", "local"),); `reason` is the one line every profile
    value needs: the finding's, filled in when the finding is made (`with_reason`).
    """

    table: tuple[str, ...]
    name: str
    fields: tuple[tuple[str, tomltext.Scalar], ...]
    reason: str = ""

    @property
    def path(self) -> str:
        """The profile key path, as plan and lint name it: "sysctl.net.core.somaxconn"."""
        return ".".join((*self.table, self.name))

    @property
    def mode(self) -> str:
        """The profile's `mode` ("set", "raise" or "lower"); "set" when not written."""
        return str(dict(self.fields).get("mode", "set"))

    def with_reason(self, reason: str) -> ProfileSetting:
        return ProfileSetting(self.table, self.name, self.fields, reason)

    def inline(self) -> str:
        """The value as a TOML inline table, reason included."""
        pairs = list(self.fields)
        if self.reason:
            pairs.append(("reason", self.reason))
        return tomltext.inline_table(pairs)

    def line(self) -> str:
        """One self-contained TOML line a profile accepts as written (before any [table]
        header): `sysctl."net.core.somaxconn" = { value = 4096, mode = "raise", ... }`."""
        # A device name (the table's second part) is always quoted (it is data); a sysctl
        # name is because of its dots; a NIC group (`pause`, `coalesce`) is a bare key.
        parts = [tomltext.key(t, quote=i == 1) for i, t in enumerate(self.table)]
        head = ".".join((*parts, tomltext.key(self.name)))
        return f"{head} = {self.inline()}"


@dataclass(frozen=True)
class Evidence:
    """One counter behind a finding: its movement over the window and per second.

    For a gauge (a value now, such as sockets in use) `value` is the reading and `rate` is
    None: a snapshot has no per-second rate.
    """

    counter: str  # "TcpExt.ListenOverflows", "softnet[cpu3].dropped", "ethtool rx_out_of_buffer"
    value: int  # delta over the window (or since boot for a single capture), or the reading
    rate: Optional[float]  # per second; None for gauges and windows without a duration
    source: str  # file or interface it came from: "/proc/net/netstat", "sock_diag"
    # Which counter it is, so a report can read it again tick by tick (per-second series)
    # or before and between two captures. None when it cannot be read again.
    ref: Optional[CounterRef] = None


@dataclass(frozen=True)
class Fix:
    """What to change: the knob, its current and desired value, and how to get there.

    `scope` says who makes the change (PROFILE, HOST, APPLICATION, PLATFORM, MANUAL): a fix
    in the application is never dressed up as a sysctl.
    """

    knob: str  # "sysctl net.core.somaxconn", "ring ens1f0np0 rx", "application listen backlog"
    current: Optional[str]  # the value now, None when unknown
    desired: Optional[str]  # the value that fixes it, None when there is no single value
    # What `lbtune apply` sets to make this fix (usually one value; a conntrack table also
    # needs its hash size): lines of a profile.
    settings: tuple[ProfileSetting, ...] = ()
    command: Optional[str] = None  # the equivalent one-off command, shown to the user only
    note: str = ""
    scope: str = PROFILE

    @property
    def key(self) -> Optional[str]:
        """The profile key path of the (first) value this fix sets, None without one."""
        return self.settings[0].path if self.settings else None

    @property
    def profile_lines(self) -> tuple[str, ...]:
        """The TOML lines to paste into a profile."""
        return tuple(s.line() for s in self.settings)


@dataclass(frozen=True)
class Finding:
    """One problem: `count` says how many of `unit` the window lost or reached.

    `unit` names what is counted ("SYNs", "packets", "sockets in use"); `rate` is None when
    the count is a snapshot (`gauge`) rather than events in the window.
    """

    rule: str  # stable id, documented in docs/diagnose.md: "accept-queue-overflow"
    title: str  # one line: "Accept queue overflow on tcp port 8080"
    level: Level  # FAIL (lost now), WARN (limit reached, degraded), INFO
    object: str  # "tcp 0.0.0.0:8080", "cpu 3", "ens1f0np0 rx-queue 5", "ens3"
    cause: str  # why, in a sentence or two, with the numbers that prove it
    count: int  # events (or, for a gauge, the reading) in the window
    unit: str  # what `count` counts: "SYNs", "packets", "segments", "sockets in use"
    rate: Optional[float]  # count per second; None for a gauge
    evidence: tuple[Evidence, ...]
    fixes: tuple[Fix, ...]
    gauge: bool = False

    @property
    def sort_key(self) -> tuple[int, float, str]:
        return (self.level.rank, -float(self.count), self.object)


def rank(findings: list[Finding]) -> list[Finding]:
    """Most severe first, then the biggest loss."""
    return sorted(findings, key=lambda f: f.sort_key)
