"""The node agent: samples a real server's resources and serves the report read-only.

`Sampler.sample()` reads the host once (CPU times and memory through psutil, the run queue
from /proc/stat, established connections of the served port and its listeners from
sock_diag (the kernel filters the connections by state and port; /proc/net/tcp{,6} when
sock_diag refuses), the egress interface's counters from an rtnetlink dump and its
capacity from a shaping qdisc or the link speed) and turns the difference to the previous
sample into an `AgentReport` judged by `agentreport.judge`. `Agent` runs the sampler every
interval in a thread and answers `GET /` (JSON), `/metrics` (Prometheus text), `/haproxy`
(the agent-check line) and `/healthz`; an optional line port speaks HAProxy's agent-check.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence, Union

import psutil

from lbtune.errors import BadInput
from lbtune.host.endpoints.http import HttpEndpoint, LineEndpoint, Network, RefusalLog, Reply
from lbtune.host.host import Host
from lbtune.host.net import linkstats, qdisc, sockdiag
from lbtune.ipvs.nodereport import (
    CONNECTIONS,
    LINK_STATS,
    LISTENERS,
    SIGNALS,
    AgentReport,
    haproxy_line,
    judge,
    prometheus_text,
)

DEFAULT_PORT = 9177  # the agent's HTTP port (unassigned by IANA; beside node_exporter 9100)
DEFAULT_INTERVAL = 1.0
# The share of one core the connection count may take on average: after a count that took
# c seconds of CPU (the kernel's dump included) the next is due c / COUNT_BUDGET seconds
# later; samples in between carry the last count and its age. On a few thousand
# connections a count takes well under a ms (every sample counts); at 100,000 it is
# kernel-bound at ~0.25 s (bench/agent_scale.py), so the count is refreshed every ~5 s.
COUNT_BUDGET = 0.05
_monotonic = time.monotonic  # when a count is due (a test's clock)


@dataclass(frozen=True)
class AgentOptions:
    port: int = 80  # the served port the report is about
    egress: Optional[str] = None  # interface replies leave from; None: the default route's
    signals: tuple[str, ...] = SIGNALS
    max_conns: Optional[int] = None
    node: str = ""
    interval: float = DEFAULT_INTERVAL

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise BadInput(f"--port {self.port}: 1 to 65535")
        bad = [s for s in self.signals if s not in SIGNALS]
        if bad or not self.signals:
            raise BadInput(f"--signals {','.join(self.signals)!r}: a comma-separated list of "
                           f"{', '.join(SIGNALS)}")  # fmt: skip
        if not 0.1 <= self.interval <= 60:
            raise BadInput(f"--interval {self.interval:g}: 0.1 to 60 seconds")
        if self.max_conns is not None and self.max_conns < 1:
            raise BadInput("--max-conns must be at least 1")


def default_route_dev(host: Host) -> str:
    """The interface of the IPv4 default route ("" when there is none)."""
    for line in host.fs.read_lines("/proc/net/route")[1:]:
        f = line.split()
        if len(f) >= 2 and f[1] == "00000000":
            return f[0]
    return ""


SOCK_DIAG, PROC_TCP = "sock_diag", "/proc/net/tcp"  # AgentReport.connections_source


def established(host: Host, port: int) -> int:
    """Established TCP connections whose local port is `port`, from /proc/net/tcp and tcp6
    (the fallback when sock_diag refuses; OSError when they cannot be read)."""
    return sockdiag.count_established_proc([host.fs.path(p) for p in sockdiag.PROC_TCP], port)


def procs_running(host: Host) -> int:
    for line in host.fs.read_lines("/proc/stat"):
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return 0


def _capacity_bps(host: Host, dev: str) -> Optional[float]:
    """The egress limit of dev: a root shaping qdisc's rate, else the link speed."""
    if not dev:
        return None
    try:
        for q in qdisc.dump_qdiscs():
            if q.dev == dev and q.parent == "root" and q.rate_bps:
                return float(q.rate_bps)
    except OSError:
        pass
    speed = host.fs.read_int(f"/sys/class/net/{dev}/speed")
    return float(speed) * 1e6 if speed and speed > 0 else None


@dataclass(frozen=True)
class _Raw:
    t: float
    busy: float
    total: float
    tx_bytes: Optional[int]  # None: the link stats could not be read
    drops: Optional[int]  # None: the listeners could not be read


ListenerSource = Callable[[], Sequence[sockdiag.ListenSocket]]
ConnectionSource = Callable[[int], int]  # port -> established connections
LinkStatsSource = Callable[[], Mapping[str, Mapping[str, int]]]


def _reason(e: Exception) -> str:
    return (getattr(e, "strerror", None) or str(e) or type(e).__name__).strip()


class Sampler:
    """Reads the host each call; rates are over the time since the previous call.

    A source that cannot be read (sock_diag for the listeners, the rtnetlink link stats) is
    named in the report's `errors`, never turned into "nothing listens" or "0 bytes sent":
    its figures are unknown for that sample (health `unknown` for the listeners, no egress
    rate). `listeners` and `link_stats` are the sources (the kernel's by default).

    Connections are counted by sock_diag (`connections`, the kernel's by default), else
    from /proc/net/tcp{,6}; the report's `connections_source` says which. When neither can
    be read the count is unknown (an error, no `conns` utilisation), never 0. A count costly
    enough to pass COUNT_BUDGET is not repeated every sample: `connections_age` says how
    old the count is."""

    def __init__(self, host: Host, opts: AgentOptions,
                 listeners: Optional[ListenerSource] = None,
                 link_stats: Optional[LinkStatsSource] = None,
                 connections: Optional[ConnectionSource] = None) -> None:  # fmt: skip
        self.host, self.opts = host, opts
        self.dev = opts.egress if opts.egress is not None else default_route_dev(host)
        self.node = opts.node or os.uname().nodename
        self._prev: Optional[_Raw] = None
        # Only the served port's listeners, without their SYN queue (not reported): the
        # kernel then walks its listening sockets only, not every connection.
        self._dump_listeners = listeners or (lambda: sockdiag.dump_listen_sockets(opts.port,
                                                                                  False))
        self._dump_link_stats = link_stats or linkstats.dump_link_stats
        self._count_established = connections or sockdiag.count_established
        self._last_count: Optional[tuple[int, str, str, float]] = None
        self._count_due = 0.0

    def _connections_due(self) -> tuple[int, str, str, float]:
        """(count, source, error, age in s): counted now when due (see COUNT_BUDGET), else
        the last count."""
        now = _monotonic()
        last = self._last_count
        if last is not None and now < self._count_due:
            count, source, err, at = last
            return count, source, err, now - at
        c0 = time.thread_time()
        count, source, err = self._connections()
        self._count_due = now + (time.thread_time() - c0) / COUNT_BUDGET
        self._last_count = (count, source, err, now)
        return count, source, err, 0.0

    def _connections(self) -> tuple[int, str, str]:
        """(count, source, error): sock_diag, else /proc/net/tcp{,6}, else unknown."""
        try:
            return self._count_established(self.opts.port), SOCK_DIAG, ""
        except (OSError, ValueError) as e:
            why = f"sock_diag: {_reason(e)}"
        try:
            return established(self.host, self.opts.port), PROC_TCP, ""
        except OSError as e:
            return 0, "", f"{CONNECTIONS}: {why}; {PROC_TCP}: {_reason(e)}"

    def _listeners(self) -> tuple[Optional[list[sockdiag.ListenSocket]], str]:
        try:
            return [s for s in self._dump_listeners() if s.port == self.opts.port], ""
        except (OSError, ValueError) as e:  # ValueError: a malformed netlink answer
            return None, f"{LISTENERS}: sock_diag: {_reason(e)}"

    def _tx_bytes(self) -> tuple[Optional[int], str]:
        if not self.dev:
            return None, ""
        try:
            stats = self._dump_link_stats()
        except (OSError, ValueError) as e:
            return None, f"{LINK_STATS}: rtnetlink: {_reason(e)}"
        dev = stats.get(self.dev)
        if dev is None or "tx_bytes" not in dev:
            return None, f"{LINK_STATS}: no interface {self.dev}"
        return int(dev["tx_bytes"]), ""

    def sample(self) -> AgentReport:
        t = time.time()
        ct = psutil.cpu_times()
        total = float(sum(ct))
        busy = total - ct.idle - getattr(ct, "iowait", 0.0)
        listeners, l_err = self._listeners()
        tx, t_err = self._tx_bytes()
        conns, conns_source, c_err, conns_age = self._connections_due()
        drops = None if listeners is None else sum(s.drops or 0 for s in listeners)
        raw = _Raw(t, busy, total, tx, drops)
        prev = self._prev or raw
        self._prev = raw
        dt = max(raw.t - prev.t, 1e-6)
        dtotal = raw.total - prev.total
        cpu = (raw.busy - prev.busy) / dtotal if dtotal > 0 else 0.0
        mem = psutil.virtual_memory()
        found = listeners or []
        top = max(found, key=lambda s: s.queue / (s.backlog + 1), default=None)
        egress: Optional[float] = None
        if raw is prev:
            egress = 0.0 if raw.tx_bytes is not None else None
        elif raw.tx_bytes is not None and prev.tx_bytes is not None:
            egress = round(8 * max(0, raw.tx_bytes - prev.tx_bytes) / dt, 1)
        known_drops = drops if drops is not None else (prev.drops or 0)
        delta = (max(0, drops - prev.drops)
                 if drops is not None and prev.drops is not None else 0)  # fmt: skip
        report = AgentReport(
            node=self.node, port=self.opts.port, time=round(t, 3),
            interval=round(raw.t - prev.t, 3), cpu_util=round(max(0.0, min(1.0, cpu)), 4),
            cpus=psutil.cpu_count() or 1, runq=procs_running(self.host),
            mem_available=int(mem.available), mem_total=int(mem.total),
            connections=conns, connections_source=conns_source,
            connections_age=round(conns_age, 3), listening=bool(found),
            listen_queue=top.queue if top else 0, listen_backlog=top.backlog if top else 0,
            listen_drops=known_drops, listen_drops_delta=delta,
            egress_dev=self.dev, egress_bps=egress if self.dev else None,
            egress_capacity_bps=_capacity_bps(self.host, self.dev),
            max_conns=self.opts.max_conns, signals=tuple(self.opts.signals),
            load=0.0, bottleneck="", pressure=0.0, health="ok", reason="",
            errors=tuple(e for e in (l_err, t_err, c_err) if e),
        )  # fmt: skip
        return judge(report)


JSON_TYPE = "application/json"
PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"


class Agent:
    """The sampler in a thread and the read-only endpoints serving its latest report."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sampler.sample()  # the first call only primes the counters
        time.sleep(min(0.2, sampler.opts.interval))
        self._report = sampler.sample()
        self._endpoints: list[Union[HttpEndpoint, LineEndpoint]] = []

    @property
    def report(self) -> AgentReport:
        with self._lock:
            return self._report

    def route(self, path: str) -> Reply:
        r = self.report
        if path in ("/", "/report", "/report.json"):
            return Reply(200, JSON_TYPE, json.dumps(r.to_json(), indent=1) + "\n")
        if path == "/metrics":
            return Reply(200, PROM_TYPE, prometheus_text(r))
        if path == "/haproxy":
            line = haproxy_line(r)
            return Reply(200 if line else 503, TEXT_TYPE, line or f"{r.health}: {r.reason}\n")
        if path == "/healthz":
            return Reply(200 if r.health == "ok" else 503, TEXT_TYPE, f"{r.health}\n")
        return Reply(404, TEXT_TYPE, "not found: / /metrics /haproxy /healthz\n")

    def serve(self, host: str, port: int, haproxy_port: Optional[int] = None,
              allow: Optional[Sequence[Network]] = None,
              log: Optional[Callable[[str], None]] = None) -> list[int]:  # fmt: skip
        """Start the endpoints; the ports they listen on (0 asks the kernel for one). Peers
        outside `allow` (None: every peer) are refused; refusals and bad requests go to
        `log`, one line each, rate-limited."""
        if haproxy_port is not None and haproxy_port == port and port != 0:
            raise BadInput(f"--haproxy-port {haproxy_port} is the --agent-port: give it a "
                           "port of its own")  # fmt: skip
        refusals = RefusalLog(log)
        where = port
        try:
            self._endpoints.append(HttpEndpoint(host, port, self.route, allow, refusals))
            if haproxy_port is not None:
                where = haproxy_port
                self._endpoints.append(LineEndpoint(host, haproxy_port,
                                                    lambda: haproxy_line(self.report),
                                                    allow, refusals))  # fmt: skip
        except OSError as e:
            self.close()
            raise BadInput(f"agent cannot listen on {_hostport(host, where)}: "
                           f"{e.strerror or e}") from None  # fmt: skip
        for ep in self._endpoints:
            ep.start()
        return [ep.port for ep in self._endpoints]

    def run(self, until: Optional[float] = None) -> None:
        """Sample every interval until close() (or `until`, a time.monotonic() deadline)."""
        while not self._stop.wait(self.sampler.opts.interval):
            r = self.sampler.sample()
            with self._lock:
                self._report = r
            if until is not None and time.monotonic() >= until:
                break

    def close(self) -> None:
        self._stop.set()
        for ep in self._endpoints:
            ep.close()
        self._endpoints.clear()


def default_listen(host: Host, dev: str) -> str:
    """Where the agent listens unless told: the first address of the interface the replies
    leave from (the director polls the real server's own address on that segment; DR puts
    the director there). Not 0.0.0.0: that would also answer on the VIPs of lo and on
    every other network of the host."""
    from lbtune.host.net.addr import addresses

    found = [a for a in addresses(host) if a.ifname == dev] if dev else []
    v4 = [a.addr for a in found if a.family == 4]
    v6 = [a.addr for a in found if a.family == 6 and not a.addr.lower().startswith("fe80")]
    if v4 or v6:
        return (v4 or v6)[0]
    where = f"interface {dev} has no address" if dev else "no default route"
    raise BadInput(f"cannot tell which address the agent should listen on ({where}): "
                   "give --listen ADDR")  # fmt: skip


def default_allow(host: Host) -> tuple[Network, ...]:
    """Who may ask unless told: loopback and the networks this host is directly connected
    to (every interface's prefixes). A DR director shares a segment with its real servers,
    so its address is in one of them; anything routed from further away is refused."""
    import ipaddress

    from lbtune.host.net.addr import addresses

    nets: list[Network] = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
    for a in addresses(host):
        if a.family == 6 and a.addr.lower().startswith("fe80"):
            continue
        net = ipaddress.ip_network(f"{a.addr.split('%', 1)[0]}/{a.prefixlen}", strict=False)
        if net not in nets:
            nets.append(net)
    return tuple(nets)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_signals(text: Optional[str]) -> Sequence[str]:
    if not text:
        return SIGNALS
    return tuple(s.strip() for s in text.split(",") if s.strip())
