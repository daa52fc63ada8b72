"""The load linter's values: what a load command plans (`LoadPlan`), the host's limits it runs
into (`LoadFacts`), one problem found (`LoadIssue`), and the constants the rules use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from lbtune.vocab import Level

# The kernel keeps a closed connection in TIME_WAIT for TCP_TIMEWAIT_LEN, fixed at 60 s
# (tcp_fin_timeout is a different timer: FIN-WAIT-2 of orphaned sockets).
TIME_WAIT_SECONDS = 60
# httperf without --hog leaves port choice to its own loop over 1024-5000 (its man page).
HTTPERF_PORTS = 5000 - 1024 + 1
# Descriptors a generator needs besides its sockets: stdio, epoll, timers, files, logs.
FD_OVERHEAD = 16
# vegeta: sockets in flight = rate x response time. The fail threshold assumes a saturated
# server answering in 250 ms; the warning one a server stalling for a second.
SLOW_RESPONSE = 0.25
STALLED_RESPONSE = 1.0
# A plan using more than this share of a limit leaves no room for anything else.
NEAR = 0.8
# ab's compiled-in MAX_CONCURRENCY.
AB_MAX_CONCURRENCY = 20000

KNOWN_TOOLS = ("ab", "wrk", "wrk2", "httperf", "vegeta", "hey", "h2load", "oha")
CLIENT_ROLES = ("client",)
SERVER_ROLES = ("web", "lb-proxy", "realserver")


@dataclass(frozen=True)
class LoadFacts:
    """The host's limits a load command runs into. Unknown values are None.

    `backlogs` maps a local listening TCP port to its effective accept backlog
    (min(application backlog, somaxconn), as the kernel reports it per listener).
    """

    port_range: Optional[tuple[int, int]] = None  # net.ipv4.ip_local_port_range
    reserved_ports: int = 0  # ports of ip_local_reserved_ports inside the range
    tw_reuse: Optional[int] = None  # net.ipv4.tcp_tw_reuse
    max_tw_buckets: Optional[int] = None  # net.ipv4.tcp_max_tw_buckets
    somaxconn: Optional[int] = None  # net.core.somaxconn
    backlogs: Mapping[int, int] = field(default_factory=dict)
    nofile_soft: Optional[int] = None  # RLIMIT_NOFILE of the shell that runs the command
    nofile_hard: Optional[int] = None

    @property
    def ephemeral_ports(self) -> Optional[int]:
        """Source ports connect() can use towards one destination address and port."""
        if self.port_range is None:
            return None
        lo, hi = self.port_range
        return max(0, hi - lo + 1 - self.reserved_ports)


@dataclass(frozen=True)
class LoadPlan:
    """What one load command will do, as far as its arguments say."""

    tool: str  # "ab", "wrk", ...
    argv: tuple[str, ...]
    connections: Optional[int]  # connections open at once (None: unbounded or unknown)
    keepalive: bool  # requests reuse connections
    rate: Optional[float] = None  # fixed requests per second, None when "as fast as possible"
    conn_rate: Optional[float] = None  # fixed new connections per second (closed ones too)
    requests: Optional[int] = None  # total requests when fixed
    new_connections: Optional[int] = None  # connections opened over the run, when fixed
    threads: Optional[int] = None
    port: Optional[int] = None  # destination TCP port, when the target is on the line
    nofile_soft: Optional[int] = None  # `ulimit -n N` earlier on the same line
    own_ports: bool = False  # picks source ports itself (httperf without --hog), not the kernel


@dataclass(frozen=True)
class LoadIssue:
    """One problem of a load command."""

    rule: str  # stable id, documented in docs/checklist.md: "ab-no-concurrency"
    level: Level  # FAIL (the run will not measure the server) or WARN
    tool: str
    reason: str  # what is wrong, with the numbers
    why: str  # why it matters, in plain words
    fix: str  # the option or knob to change


def fmt_number(n: float) -> str:
    """`2` for 2.0, `2.5` for 2.5: a rate or count as a person writes it."""
    return f"{int(n)}" if n == int(n) else f"{n:g}"
