"""The checklist's values and what every check may look at.

`CheckResult` is one line (a check's name, its `Level`: pass, warn, fail or skip, the reason
with the numbers, the fix); `Checklist` all of them for a role; `Ctx` the inputs the checks
share (host, inventory, resolved profile, load plans, listeners, live readings). The
thresholds are documented in docs/checklist.md.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from lbtune.diagnose.loadlint import LoadFacts, LoadIssue, LoadPlan, planned_connections
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.host.kernel.timesync import ClockState
from lbtune.host.net.nic import Nic
from lbtune.host.net.sockdiag import ListenSocket
from lbtune.tune.plan import Target
from lbtune.tune.profile import Profile
from lbtune.vocab import Level

ROLE_PROFILES = {
    "client": "loadgen",
    "lb-dr": "lb-dr",
    "lb-proxy": "lb-proxy",
    "web": "web",
    "realserver": "realserver-dr",
}
ROLES = tuple(ROLE_PROFILES)
ACCEPTING_ROLES = ("web", "lb-proxy", "realserver")  # roles whose host accepts the load
CONNECTING_ROLES = ("client", "lb-proxy")  # roles whose host opens connections

# Listen backlog: below BACKLOG_FAIL a connection burst of a typical load test (wrk -c 1000)
# overflows the accept queue whenever the server stalls for a moment; BACKLOG_WARN is the
# kernel's default somaxconn since 5.4 (and the base profile's).
BACKLOG_FAIL = 1024
BACKLOG_WARN = 4096
# Listeners that are not the service under test.
IGNORED_PORTS = {22: "sshd"}
WILDCARDS = ("0.0.0.0", "::")  # noqa: S104 (addresses listeners bind to, not ours)
# Share of a table/limit in use before the next run is at risk.
FULL = 0.8
LEFTOVER = 0.1
# Descriptors: the profiles raise fs.file-max to at least this for servers and clients.
FILE_MAX_WANT = 1048576
NR_OPEN_DEFAULT = 1048576  # the kernel's default (and maximum RLIMIT_NOFILE unless raised)
NOFILE_DEFAULT = 1024  # the soft RLIMIT_NOFILE most distributions start shells with
CONNTRACK_TW_TIMEOUT = 120  # nf_conntrack_tcp_timeout_time_wait default, seconds
IP_ADDR_RECORD = "/sos_commands/networking/ip_-o_addr"
# The levels a check can have (a check never says "info").
CHECK_LEVELS = (Level.PASS, Level.WARN, Level.FAIL, Level.SKIP)


@dataclass(frozen=True)
class CheckResult:
    """One checklist line: the check's stable name, its level (pass, warn, fail, skip), why,
    and how to fix it."""

    name: str  # documented in docs/checklist.md: "listen-backlog", "load:ab-no-concurrency"
    level: Level
    reason: str  # what was seen, with the numbers
    fix: str = ""  # profile key for `lbtune apply`, or a command


@dataclass(frozen=True)
class Checklist:
    role: str
    profile: str
    iface: Optional[str]  # the data interface the checks used
    checks: tuple[CheckResult, ...]
    iface_how: str = ""  # how the data interface was chosen: "given with --iface", ...

    @property
    def failed(self) -> bool:
        return any(c.level is Level.FAIL for c in self.checks)

    def summary(self) -> dict[str, int]:
        """Checks per level word: pass, warn, fail, skip."""
        return {lv.value: sum(1 for c in self.checks if c.level is lv) for lv in CHECK_LEVELS}


@dataclass(frozen=True)
class LiveReadings:
    """What only the running machine can say: this process's file limit and the clock.

    None for a value means it could not be read (and on a host tree, never is).
    """

    nofile: Optional[tuple[int, int]] = None  # RLIMIT_NOFILE (soft, hard) of this shell
    clock: Optional[ClockState] = None
    clock_error: str = ""


def result(name: str, level: Level, reason: str, fix: str = "") -> CheckResult:
    return CheckResult(name, level, reason, fix)


def worst(levels: Sequence[Level]) -> Level:
    return min(levels, key=lambda lv: lv.rank) if levels else Level.PASS


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "?"


def lowers(inv: HostInventory) -> set[str]:
    """Bond slaves: their traffic arrives on the bond."""
    out: set[str] = set()
    for n in inv.nics:
        if n.kind == "bond":
            out.update(n.lower)
    return out


def is_up(n: Nic) -> bool:
    return n.kind != "loopback" and (n.operstate or "unknown") in ("up", "unknown")


def sysctl_int(host: Host, key: str) -> Optional[int]:
    return host.fs.read_int(sysctl_path(key))


@dataclass(frozen=True)
class Ctx:
    host: Host
    role: str
    profile_name: str
    inv: HostInventory
    iface: Optional[str]
    profile: Optional[Profile]
    targets: Optional[list[Target]]
    targets_error: str  # why targets is None
    resolve_failed: bool  # the profile does not resolve here (vs. needs --iface)
    vip: Optional[Union[ipaddress.IPv4Address, ipaddress.IPv6Address]]
    plans: tuple[LoadPlan, ...]
    issues: tuple[LoadIssue, ...]
    facts: LoadFacts
    listeners: Optional[list[ListenSocket]]
    listeners_error: str
    readings: Optional[LiveReadings]

    @property
    def planned(self) -> Optional[int]:
        return planned_connections(self.plans) if self.plans else None

    @property
    def apply_cmd(self) -> str:
        iface = f" --iface {self.iface}" if self.iface and self.profile_needs_iface else ""
        netns = f"--netns {self.host.netns} " if self.host.netns else ""
        return f"lbtune {netns}apply {self.profile_name}{iface}"

    @property
    def profile_needs_iface(self) -> bool:
        return self.profile is not None and self.profile.needs_iface

    @property
    def where(self) -> str:
        return "in this namespace" if self.host.netns else "on this host"
