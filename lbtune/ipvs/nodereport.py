"""What a node agent reports about one real server, and the formats it speaks.

`AgentReport` is the document `lbtune ipvs agent` serves (JSON at `/`, Prometheus text at
`/metrics`) and `lbtune ipvs adapt` reads back (`parse_report`). It carries the raw
resource state (CPU utilisation and run queue, available memory, established connections
and the listener of the served port, egress rate against the link's shaping rate or speed)
and the agent's own judgement: `load`, the utilisation of its busiest resource among the
`signals` it was told to use; `pressure`, the highest of the signals that mean work waits or
is refused (run queue, memory, listen queue, connection limit); and `health`: down when
nothing listens on the port, overloaded on listen drops or pressure >= 95 %, unknown when
the listeners could not be read (a read error is not an outage: `errors` says what failed),
else ok. A CPU or a link at 100 % is busy, not overloaded. The same judgement feeds
keepalived's MISC_CHECK (`misc_exit_code`) and HAProxy's agent-check (`haproxy_line`).

Pure: no host reads here (the collector is `lbtune.ipvs.nodeagent`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Optional

from lbtune.errors import BadInput

VERSION = 1
SIGNALS = ("cpu", "runq", "mem", "listen", "egress", "conns")
# Signals of work waiting or refused (queues, memory, connection limit): at OVERLOAD the
# server is overloaded. CPU and egress at 100 % are a busy server doing its job, not one.
PRESSURE = ("runq", "mem", "listen", "conns")
HEALTH = ("ok", "overloaded", "down", "unknown")
OVERLOAD = 0.95  # the agent calls a server overloaded from this load on
RUNQ_FULL = 4.0  # runnable tasks per CPU that count as a full run queue
MISC_MAX_WEIGHT = 253  # keepalived misc_dynamic: exit 2..255 sets weight 0..253


@dataclass(frozen=True)
class AgentReport:
    """One sample of a real server's resource state (rates over the agent's last interval)."""

    node: str  # the agent's name for itself (hostname unless told)
    port: int  # the served port the listener/connection figures are about
    time: float  # unix time of the sample
    interval: float  # seconds the rates cover
    cpu_util: float  # 0..1, all CPUs
    cpus: int
    runq: int  # runnable tasks now (procs_running)
    mem_available: int  # bytes (MemAvailable)
    mem_total: int
    connections: int  # established TCP connections on the served port
    listening: bool  # something listens on the served port
    listen_queue: int  # accept-queue length now (largest listener of the port)
    listen_backlog: int  # its limit: min(application backlog, somaxconn), sock_diag's wqueue
    listen_drops: int  # cumulative SYN/handshake drops of the port's listeners
    listen_drops_delta: int  # drops in the last interval
    egress_dev: str  # the interface the replies leave from ("" when unknown)
    egress_bps: Optional[float]  # bits/s sent on it; None when it could not be read
    egress_capacity_bps: Optional[float]  # shaping rate (tbf) or link speed; None unknown
    max_conns: Optional[int]  # connections that count as full (given to the agent), or None
    signals: tuple[str, ...]  # resources `load` is taken from
    load: float  # 0..1: utilisation of the busiest resource among signals
    bottleneck: str  # which one
    pressure: float  # 0..1: the highest PRESSURE signal among signals
    health: str  # HEALTH
    reason: str  # why that health
    version: int = VERSION
    errors: tuple[str, ...] = ()  # "SOURCE: what failed" per source that could not be read
    # Where `connections` was counted: "sock_diag" (the kernel filters state and port),
    # "/proc/net/tcp" (the fallback when sock_diag refuses), "" when neither could be read
    # (then `errors` names "connections:" and the figure is not used).
    connections_source: str = ""
    # Seconds since `connections` was counted: 0 when counted for this sample; more when
    # the count is spaced out to stay within the agent's CPU budget (100,000 connections).
    connections_age: float = 0.0

    def utilisations(self) -> dict[str, Optional[float]]:
        return utilisations(self)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["signals"] = list(self.signals)
        out["errors"] = list(self.errors)
        out["utilisation"] = self.utilisations()
        return out


def _clip(x: float) -> float:
    return 0.0 if x != x else max(0.0, min(1.0, x))  # NaN -> 0


def utilisations(r: AgentReport) -> dict[str, Optional[float]]:
    """Each resource's utilisation 0..1 (None where it cannot be told)."""
    mem = 1.0 - r.mem_available / r.mem_total if r.mem_total > 0 else None
    listen = r.listen_queue / (r.listen_backlog + 1) if r.listening else None
    egress = (r.egress_bps / r.egress_capacity_bps
              if r.egress_capacity_bps and r.egress_bps is not None else None)  # fmt: skip
    conns = (r.connections / r.max_conns
             if r.max_conns and failed(r, CONNECTIONS) is None else None)  # fmt: skip
    raw: dict[str, Optional[float]] = {
        "cpu": r.cpu_util,
        "runq": r.runq / (RUNQ_FULL * max(1, r.cpus)),
        "mem": mem,
        "listen": listen,
        "egress": egress,
        "conns": conns,
    }
    return {k: (None if v is None else round(_clip(v), 4)) for k, v in raw.items()}


def judge(r: AgentReport) -> AgentReport:
    """r with load, bottleneck, health and reason filled in from its raw figures."""
    util = utilisations(r)
    used = {k: v for k, v in util.items() if k in r.signals and v is not None}
    bottleneck, load = max(used.items(), key=lambda kv: kv[1]) if used else ("", 0.0)
    queued = {k: v for k, v in used.items() if k in PRESSURE}
    worst, pressure = max(queued.items(), key=lambda kv: kv[1]) if queued else ("", 0.0)
    unread = failed(r, LISTENERS)
    if unread is not None:
        health, reason = "unknown", f"cannot tell: {unread}"
    elif not r.listening:
        health, reason = "down", f"nothing listens on port {r.port}"
    elif r.listen_drops_delta > 0:
        health = "overloaded"
        reason = f"{r.listen_drops_delta} listen drop(s) on port {r.port} in {r.interval:g} s"
    elif pressure >= OVERLOAD:
        health, reason = "overloaded", f"{worst} at {pressure:.0%}"
    else:
        health = "ok"
        reason = f"busiest: {bottleneck} at {load:.0%}" if bottleneck else "no signal"
    return _replace(r, load=round(load, 4), bottleneck=bottleneck, pressure=round(pressure, 4),
                    health=health, reason=reason)


LISTENERS, LINK_STATS = "listeners", "link_stats"  # sources that can fail to read
CONNECTIONS = "connections"  # also, when sock_diag and /proc/net/tcp both fail
SOURCES = (LISTENERS, LINK_STATS)


def failed(r: AgentReport, source: str) -> Optional[str]:
    """The error of `source` in r ("listeners: ..."), None when it was read."""
    return next((e for e in r.errors if e.startswith(f"{source}:")), None)


def _replace(r: AgentReport, **kw: Any) -> AgentReport:
    from dataclasses import replace

    return replace(r, **kw)


# ---------------------------------------------------------------------------- formats


def parse_report(data: Any, source: str = "agent") -> AgentReport:
    """An agent's JSON document as an AgentReport; BadInput naming the first problem."""
    if not isinstance(data, Mapping):
        raise BadInput(f"{source}: expected a JSON object")
    if data.get("version") != VERSION:
        raise BadInput(f"{source}: report version {data.get('version')!r}, expected {VERSION}")
    kw: dict[str, Any] = {}
    for name, tp in _FIELDS.items():
        if name in ("errors", "connections_source", "connections_age") and name not in data:
            continue  # older agents do not send them
        if name not in data:
            raise BadInput(f"{source}: {name} missing")
        v = data[name]
        if v is None and tp.endswith("?"):
            kw[name] = None
            continue
        ok = _typed(v, tp.rstrip("?"))
        if ok is None:
            raise BadInput(f"{source}: {name} = {v!r}: expected {_WORDS[tp.rstrip('?')]}")
        kw[name] = ok
    if kw["health"] not in HEALTH:
        raise BadInput(f"{source}: health = {kw['health']!r}: one of {', '.join(HEALTH)}")
    for k in ("load", "pressure"):
        if not 0.0 <= kw[k] <= 1.0:
            raise BadInput(f"{source}: {k} = {kw[k]!r}: expected 0..1")
    return AgentReport(**kw)


_FIELDS = {
    "node": "str", "port": "int", "time": "float", "interval": "float", "cpu_util": "float",
    "cpus": "int", "runq": "int", "mem_available": "int", "mem_total": "int",
    "connections": "int", "listening": "bool", "listen_queue": "int", "listen_backlog": "int",
    "listen_drops": "int", "listen_drops_delta": "int", "egress_dev": "str",
    "egress_bps": "float?", "egress_capacity_bps": "float?", "max_conns": "int?",
    "signals": "strs", "load": "float", "bottleneck": "str", "pressure": "float",
    "health": "str", "reason": "str",
    "version": "int", "errors": "strs", "connections_source": "str",
    "connections_age": "float",
}  # fmt: skip


_WORDS = {"int": "a whole number", "float": "a number", "str": "a string",
          "bool": "true or false", "strs": "a list of strings"}  # fmt: skip


def _typed(v: Any, tp: str) -> Any:
    """v as type tp, None when it is not one."""
    if tp == "bool":
        return v if isinstance(v, bool) else None
    if isinstance(v, bool):
        return None
    if tp == "int":
        return v if isinstance(v, int) else None
    if tp == "float":
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    if tp == "str":
        return v if isinstance(v, str) else None
    if tp == "strs":
        ok = isinstance(v, list) and all(isinstance(x, str) for x in v)
        return tuple(v) if ok else None
    return None


def prometheus_text(r: AgentReport) -> str:
    """The report in the Prometheus text exposition format (version 0.0.4)."""
    lbl = f'node="{_esc(r.node)}",port="{r.port}"'
    out: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float, extra: str = "") -> None:
        full = f"lbtune_agent_{name}"
        if not any(line.startswith(f"# TYPE {full} ") for line in out):
            out.append(f"# HELP {full} {help_}")
            out.append(f"# TYPE {full} {kind}")
        labels = lbl + (f",{extra}" if extra else "")
        out.append(f"{full}{{{labels}}} {_num(value)}")

    metric("cpu_utilisation", "gauge", "CPU busy share 0..1 over the last interval", r.cpu_util)
    metric("cpus", "gauge", "Online CPUs", r.cpus)
    metric("run_queue", "gauge", "Runnable tasks (procs_running)", r.runq)
    metric("memory_available_bytes", "gauge", "MemAvailable", r.mem_available)
    metric("memory_total_bytes", "gauge", "MemTotal", r.mem_total)
    if failed(r, CONNECTIONS) is None:  # unknown: no sample (the errors say why)
        metric("connections", "gauge", "Established TCP connections on the port",
               r.connections)  # fmt: skip
    metric("listening", "gauge", "1 when something listens on the port", int(r.listening))
    metric("listen_queue", "gauge", "Accept-queue length", r.listen_queue)
    metric("listen_backlog", "gauge", "Accept-queue limit", r.listen_backlog)
    metric("listen_drops_total", "counter", "SYN/handshake drops of the port's listeners",
           r.listen_drops)  # fmt: skip
    dev = f'dev="{_esc(r.egress_dev)}"'
    # Prometheus base units: bytes, not bits (promtool check metrics)
    if r.egress_bps is not None:
        metric("egress_bytes_per_second", "gauge", "Bytes/s sent on the egress interface",
               r.egress_bps / 8, dev)  # fmt: skip
    if r.egress_capacity_bps is not None:
        metric("egress_capacity_bytes_per_second", "gauge",
               "Shaping rate or link speed of the egress interface, bytes/s",
               r.egress_capacity_bps / 8, dev)  # fmt: skip
    for src in SOURCES:
        metric("source_ok", "gauge", "1 when the agent could read this source, 0 on an error",
               int(failed(r, src) is None), f'source="{src}"')  # fmt: skip
    for res, u in r.utilisations().items():
        if u is not None:
            metric("utilisation", "gauge", "Utilisation 0..1 per resource", u,
                   f'resource="{res}"')  # fmt: skip
    metric("load", "gauge", "Utilisation of the busiest resource in use (0..1)", r.load)
    metric("pressure", "gauge", "Highest queue/limit signal in use (0..1)", r.pressure)
    for h in HEALTH:
        metric("health", "gauge", "1 for the current health verdict", int(r.health == h),
               f'state="{h}"')  # fmt: skip
    return "\n".join(out) + "\n"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6g}"


def headroom_share(r: AgentReport) -> float:
    """The single-server view: share of full weight this server should get (0 when not ok)."""
    if r.health != "ok":
        return 0.0
    return 1.0 - r.load


def haproxy_line(r: AgentReport) -> str:
    """HAProxy agent-check reply: `down` when nothing listens, `drain` when overloaded, else
    `up N%` (HAProxy scales the server's configured weight by N%); "" when the agent cannot
    tell (its listeners could not be read): the agent then closes without a word and
    HAProxy keeps the server's state."""
    if r.health == "unknown":
        return ""
    if r.health == "down":
        return f"down #{r.reason}\n"
    if r.health == "overloaded":
        return f"drain #{r.reason}\n"
    pct = max(1, round(100 * headroom_share(r)))
    return f"up {pct}%\n"


def misc_exit_code(r: Optional[AgentReport]) -> int:
    """keepalived MISC_CHECK with misc_dynamic: 1 fails the server (unreachable agent, down,
    overloaded), 2 + w sets weight w (1..253, in proportion to headroom), 0 keeps the weight
    keepalived has (the agent cannot read its listeners: a read error is not an outage)."""
    if r is not None and r.health == "unknown":
        return 0
    if r is None or r.health != "ok":
        return 1
    return 2 + max(1, round(MISC_MAX_WEIGHT * headroom_share(r)))
