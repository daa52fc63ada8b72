"""`lbtune lab run --adaptive`: static schedulers vs adaptive weights on unequal real servers.

The shape of the ALBM experiment (an adaptive LVS variant: node agents report resource
state, the director sets weights from it), scaled down to the one-CPU lab guest:

* three real servers of unequal capacity: each one's egress is limited by a tbf qdisc
  (`rates`, Mbit/s; in DR the replies leave from the real servers, so this is their
  capacity);
* a mixed workload: nginx serves `/tiny` (1 KiB), `/mid` (256 KiB) and `/big` (768 KiB),
  and wrk asks for them 50/40/10 in a fixed cycle, one request per connection (every
  request is scheduled by IPVS);
* the same topology, servers and load per scheme: `rr` and `wlc` with the configured
  weights (all 1), then `adapt` = `wlc` with `lbtune ipvs adapt` setting the weights from
  `lbtune ipvs agent` reports (egress use, listen queue, connections);
* measured per scheme: requests/s, latency percentiles and errors (wrk), requests per
  server (nginx logs), and per server every second: egress Mbit/s, established connections,
  load (the node agents) and the weight in the kernel (adapt's log).

The director is configured with `lbtune ipvs apply` (a TOML config, the real reconcile);
real servers as in the main scenario. Runs only inside the lab guest (`guest_run`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from lbtune.errors import BadInput
from lbtune.lab.inguest.balancer import configure_realserver, load_ipvs_modules
from lbtune.lab.inguest.entry import in_lab
from lbtune.lab.inguest.labnet import Topology, build_topology, plan_topology, teardown_topology
from lbtune.lab.inguest.load import LoadResult, parse_wrk
from lbtune.lab.inguest.servers import HTTP_PORT, WebServer, nginx_conf
from lbtune.lab.inguest.shell import STATE_DIR, LabStepFailed, Shell, lbtune_argv
from lbtune.lab.progress import (
    INFO,
    TICK,
    ProgressWriter,
    Steps,
)
from lbtune.lab.protocol import LabUnavailable

SCHEMES = ("rr", "wlc", "adapt")
RUN_DIR = "/run/lbtune-lab/adaptive"
AGENT_PORT = 9177
FILES = (("tiny", 1024), ("mid", 256 * 1024), ("big", 768 * 1024))
MIX = ("tiny", "mid", "tiny", "mid", "tiny", "mid", "tiny", "mid", "tiny", "big")  # 50/40/10
AGENT_SIGNALS = "listen,egress,conns"  # CPU and memory are the guest's, shared by all


@dataclass(frozen=True)
class AdaptiveConfig:
    rates: tuple[int, ...] = (60, 60, 15)  # Mbit/s egress per real server
    schemes: tuple[str, ...] = SCHEMES
    duration: float = 30.0  # seconds of load per scheme
    connections: int = 24
    interval: float = 1.0  # adapt poll interval

    def __post_init__(self) -> None:
        if not 2 <= len(self.rates) <= 8 or any(r <= 0 for r in self.rates):
            raise BadInput("--rates: 2 to 8 positive Mbit/s values, one per real server")
        bad = [s for s in self.schemes if s not in SCHEMES]
        if bad or not self.schemes:
            raise BadInput(f"--schemes: a comma-separated list of {', '.join(SCHEMES)}")
        if not 3 <= self.duration <= 300:
            raise BadInput(f"--duration {self.duration:g}: 3 to 300 seconds per scheme")
        if not 1 <= self.connections <= 1000:
            raise BadInput("--connections 1..1000")


@dataclass(frozen=True)
class Sample:
    """One second of one server, from its node agent (weight: what IPVS held then)."""

    t: float
    server: str
    egress_mbit: float
    connections: int
    load: float
    weight: int


@dataclass(frozen=True)
class SchemeResult:
    scheme: str
    load: Optional[LoadResult]
    requests: dict[str, Optional[int]]  # server -> requests nginx logged (None: no log)
    samples: tuple[Sample, ...] = ()
    events: tuple[dict[str, Any], ...] = ()  # adapt's log (JSON lines)
    error: str = ""
    weights_at_end: dict[str, int] = field(default_factory=dict)  # IPVS, as the load ended
    weights_after: dict[str, int] = field(default_factory=dict)  # IPVS, after adapt exited

    @property
    def failures(self) -> Optional[int]:
        return None if self.load is None else self.load.failures


@dataclass(frozen=True)
class AdaptiveResult:
    config: AdaptiveConfig
    servers: tuple[tuple[str, str, int], ...]  # (name, address, rate Mbit/s)
    schemes: tuple[SchemeResult, ...]
    kernel: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for s, raw in zip(self.schemes, out["schemes"]):
            raw["failures"] = s.failures
        return out


def adaptive_nginx_conf(name: str, run_dir: str, docroot: str) -> str:
    """nginx.conf serving the workload's files from docroot (sendfile, one log line each)."""
    http = "    sendfile on;\n    keepalive_timeout 5s;"
    server = (f"        root {docroot};\n"
              "        default_type application/octet-stream;\n"
              f"        location / {{ add_header X-Lab-Server {name} always; }}")  # fmt: skip
    return nginx_conf(f"lbtune lab adaptive real server {name}", run_dir, http, server)


def wrk_script() -> str:
    """wrk Lua: the 50/40/10 cycle of paths, the same order for every run."""
    paths = ", ".join(f'"/{p}"' for p in MIX)
    return (f"local paths = {{{paths}}}\nlocal i = 0\n"
            "request = function()\n  i = i % #paths + 1\n"
            '  return wrk.format("GET", paths[i], {["Connection"] = "close"})\nend\n')  # fmt: skip


def director_toml(topo: Topology, scheduler: str) -> str:
    d = topo.directors[0]
    lines = ["[director]", "prune = \"all\"", f"agent_port = {AGENT_PORT}", "",
             "[sysctl]", "expire_nodest_conn = 1", "", "[[vip]]",
             f'address = "{topo.vip}"', f'dev = "{d.iface}"', "", "[[service]]",
             'protocol = "tcp"', f'address = "{topo.vip}"', f"port = {HTTP_PORT}",
             f'scheduler = "{scheduler}"']  # fmt: skip
    for s in topo.servers:
        lines += ["", "  [[service.real_server]]", f'  address = "{s.address}"', "  weight = 1"]
    return "\n".join(lines) + "\n"


class _Web(WebServer):
    def __init__(self, name: str, netns: str, run_dir: str, docroot: str, shell: Shell):
        super().__init__(name, netns, run_dir, shell)
        self.docroot = docroot

    def start(self) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write(adaptive_nginx_conf(self.name, self.run_dir, self.docroot))
        argv = ["nginx", "-p", self.run_dir, "-c", self.conf, "-e", self.error_log]
        self.shell.check(argv, self.netns)
        from lbtune.lab.inguest.servers import _wait_for_pidfile

        self.pid = _wait_for_pidfile(self.pid_file, f"nginx on {self.name}", self.error_log)

    def phase_requests(self) -> Optional[int]:
        """Requests logged since the last rotate (rotating again flushes and moves them);
        None when there is no log to count (unknown, never 0)."""
        self.rotate()
        try:
            with open(self.access_log + ".before", encoding="ascii", errors="replace") as fh:
                return sum(1 for line in fh if line.strip())
        except OSError:
            return None


_lbtune = lbtune_argv  # the name tests/lab/guest/adapt_e2e.py imports


class _Sampler(threading.Thread):
    """Reads every node agent once a second from the director's namespace."""

    def __init__(self, director_ns: str, servers: list[tuple[str, str]],
                 weights: dict[str, int]) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.ns, self.servers, self.weights = director_ns, servers, weights
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        from lbtune.host.endpoints.http import FetchError, fetch_json
        from lbtune.host.net.netns import NetnsThread

        with NetnsThread(self.ns) as peer:
            while not self.stop.wait(1.0):
                t = round(time.monotonic() - self.t0, 1)
                for name, addr in self.servers:
                    try:
                        doc = peer.call(fetch_json, f"http://{addr}:{AGENT_PORT}/", 1.5)
                    except FetchError:
                        continue
                    if doc.get("egress_bps") is None:
                        continue  # the node agent could not read its link counters this time
                    self.samples.append(Sample(
                        t, name, round(float(doc["egress_bps"]) / 1e6, 2),
                        int(doc["connections"]), float(doc["load"]),
                        self.weights.get(addr, 1)))  # fmt: skip


class _Experiment:
    def __init__(self, cfg: AdaptiveConfig, progress: ProgressWriter) -> None:
        self.cfg, self.progress = cfg, progress
        self.step = Steps(progress).step
        self.shell = Shell()
        self.topo = plan_topology(len(cfg.rates), rates=list(cfg.rates))
        self.director = self.topo.directors[0]
        self.web: list[_Web] = []
        self.node_agents: list[subprocess.Popen[str]] = []
        self.node_agent_argv: list[list[str]] = []  # each node agent's [NETNS, lbtune ARGS...]
        self.config_path = f"{RUN_DIR}/director.toml"

    def build(self) -> None:
        with self.step("topology", f"rates {','.join(map(str, self.cfg.rates))} Mbit/s"):
            build_topology(self.topo, self.shell)
        docroot = f"{RUN_DIR}/www"
        os.makedirs(docroot, exist_ok=True)
        for fname, size in FILES:
            with open(f"{docroot}/{fname}", "wb") as fh:
                fh.write(os.urandom(size))
        with self.step("servers", f"nginx + agent x{len(self.topo.servers)}"):
            for s in self.topo.servers:
                configure_realserver(s.netns, self.topo.vip, s.iface)
                web = _Web(s.name, s.netns, f"{RUN_DIR}/{s.name}", docroot, self.shell)
                web.start()
                self.web.append(web)
                args = [s.netns, "ipvs", "agent", "--agent-port", str(AGENT_PORT),
                        "--port", str(HTTP_PORT), "--egress", s.iface, "--signals",
                        AGENT_SIGNALS, "--json", "--interval", "1"]  # fmt: skip
                self.node_agent_argv.append(args)  # to start one again (tests kill node agents)
                self.node_agents.append(self.start_node_agent(args, s.name))
        load_ipvs_modules("wlc", self.shell)
        load_ipvs_modules("rr", self.shell)

    def start_node_agent(self, argv: list[str], name: str) -> subprocess.Popen[str]:
        """`lbtune --netns NETNS ARGS` for argv = [NETNS, ARGS...]; once it listens."""
        proc = self.shell.spawn_lbtune(argv[0], *argv[1:])
        line = proc.stdout.readline() if proc.stdout else ""
        if "listening" not in line:
            raise LabStepFailed(f"agent on {name} did not start: "
                                f"{proc.stderr.read() if proc.stderr else ''}")  # fmt: skip
        return proc

    def kernel_weights(self) -> dict[str, int]:
        """Real server address -> weight, as IPVS in the director holds it now."""
        out = self.shell.check(["ipvsadm", "-L", "-n"], self.director.netns)
        weights = {}
        for line in out.splitlines():
            w = line.split()
            if len(w) >= 4 and w[0] == "->" and w[3].isdigit() and ":" in w[1]:
                weights[w[1].rsplit(":", 1)[0]] = int(w[3])
        return weights

    def apply(self, scheduler: str) -> None:
        with open(self.config_path, "w", encoding="utf-8") as fh:
            fh.write(director_toml(self.topo, scheduler))
        res = self.shell.lbtune(self.director.netns, "ipvs", "apply", self.config_path)
        if res.returncode != 0:
            raise LabStepFailed(f"lbtune ipvs apply ({scheduler}): {res.stderr.strip()}")

    def phase(self, scheme: str) -> SchemeResult:
        self.apply("wlc" if scheme == "adapt" else scheme)
        for w in self.web:
            w.rotate()
        adapt: Optional[subprocess.Popen[str]] = None
        weights = {s.address: 1 for s in self.topo.servers}
        events: list[dict[str, Any]] = []
        reader: Optional[threading.Thread] = None
        if scheme == "adapt":
            adapt = self.shell.spawn_lbtune(
                self.director.netns, "ipvs", "adapt", self.config_path, "--json",
                "--interval", f"{self.cfg.interval:g}", "--timeout", "2")  # fmt: skip

            def read() -> None:
                assert adapt is not None and adapt.stdout is not None
                for line in adapt.stdout:
                    with contextlib.suppress(ValueError):
                        e = json.loads(line)
                        e["t"] = round(time.monotonic() - sampler.t0, 1)
                        events.append(e)
                        if e.get("kind") == "weight" and e.get("applied"):
                            weights[str(e["server"])] = int(e["weight"])

            reader = threading.Thread(target=read, daemon=True)
        sampler = _Sampler(self.director.netns,
                           [(s.name, s.address) for s in self.topo.servers], weights)  # fmt: skip
        sampler.start()
        if reader is not None:
            reader.start()
            time.sleep(2 * self.cfg.interval)  # adapt's first polls see an idle cluster
        script = f"{RUN_DIR}/mix.lua"
        with open(script, "w", encoding="utf-8") as fh:
            fh.write(wrk_script())
        secs = max(1, round(self.cfg.duration))
        argv = ["wrk", "-t", "1", "-c", str(self.cfg.connections), "-d", f"{secs}s",
                "-s", script, "--latency", "--timeout", "10s", f"http://{self.topo.vip}/"]
        proc = self.shell.spawn(argv, self.topo.client.netns)
        t0 = time.monotonic()
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
            self.progress("load", TICK, scheme, done=min(secs, time.monotonic() - t0),
                          total=secs)  # fmt: skip
        out, err = proc.communicate()
        at_end = self.kernel_weights()
        sampler.stop.set()
        sampler.join(timeout=5)
        if adapt is not None:
            adapt.terminate()  # SIGTERM: adapt restores the configured weights
            with contextlib.suppress(subprocess.TimeoutExpired):
                adapt.wait(timeout=15)
            if reader is not None:
                reader.join(timeout=5)
        requests = {w.name: w.phase_requests() for w in self.web}
        load = parse_wrk(out, tuple(argv)) if proc.returncode == 0 else None
        error = "" if load is not None else f"wrk exited {proc.returncode}: {err.strip()[-200:]}"
        unknown = sorted(n for n, c in requests.items() if c is None)
        if unknown:
            error = "; ".join(filter(None, [error, "requests per server unknown: no access "
                                            f"log from {', '.join(unknown)}"]))  # fmt: skip
        return SchemeResult(scheme, load, requests, tuple(sampler.samples), tuple(events),
                            error, at_end, self.kernel_weights())  # fmt: skip

    def teardown(self) -> None:
        for p in self.node_agents:
            p.terminate()
            with contextlib.suppress(Exception):
                p.communicate(timeout=5)
        for w in self.web:
            w.stop()
        with contextlib.suppress(Exception):
            teardown_topology(self.topo, self.shell)


def run_adaptive(cfg: AdaptiveConfig, progress: Optional[ProgressWriter] = None
                 ) -> AdaptiveResult:  # fmt: skip
    """The whole experiment in this (lab guest) kernel; see the module docstring."""
    if not in_lab():
        raise LabUnavailable("the adaptive experiment runs only inside the lab kernel")
    os.makedirs(STATE_DIR, exist_ok=True)
    os.makedirs(RUN_DIR, exist_ok=True)
    exp = _Experiment(cfg, progress or ProgressWriter())
    results = []
    try:
        exp.build()
        for scheme in cfg.schemes:
            with exp.step("scheme", scheme):
                r = exp.phase(scheme)
            results.append(r)
            rps = f"{r.load.rps:.1f} req/s" if r.load else r.error
            exp.progress("scheme", INFO, f"{scheme}: {rps}")
    finally:
        exp.teardown()
    servers = tuple((s.name, s.address, int(s.rate_mbit or 0)) for s in exp.topo.servers)
    notes = (
        "real servers differ only in their egress limit (tbf): in DR the replies leave "
        "from them, so it is their capacity",
        f"agents use {AGENT_SIGNALS}: the guest's one CPU and its memory are shared by "
        "every namespace and say nothing about one server",
        "one request per connection (Connection: close): IPVS schedules every request",
    )
    return AdaptiveResult(cfg, servers, tuple(results), os.uname().release, notes)


def guest_run(config: dict[str, Any], progress: Optional[ProgressWriter] = None
              ) -> dict[str, Any]:  # fmt: skip
    """The guest target (lbtune.lab.launch.run_adaptive_lab): the experiment for a JSON
    config, its result as JSON."""
    try:
        cfg = AdaptiveConfig(rates=tuple(int(r) for r in config["rates"]),
                             schemes=tuple(config["schemes"]),
                             duration=float(config["duration"]),
                             connections=int(config["connections"]),
                             interval=float(config["interval"]))  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"adaptive configuration: {e}") from None
    return run_adaptive(cfg, progress).to_json()


@dataclass(frozen=True)
class Row:
    """One scheme's line of the comparison table."""

    scheme: str
    rps: Optional[float]
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    errors: Optional[int]
    shares: dict[str, Optional[float]]  # server -> share of requests (None: a count unknown)
    weight_changes: int


def rows(doc: dict[str, Any]) -> list[Row]:
    """The comparison table from a result document (`AdaptiveResult.to_json()`)."""
    out = []
    for s in doc["schemes"]:
        load = s.get("load") or {}
        lat = load.get("latency_ms") or {}
        counts: dict[str, Optional[int]] = s["requests"]
        shares: dict[str, Optional[float]]
        if any(v is None for v in counts.values()):  # one unknown count: every share unknown
            shares = {k: None for k in counts}
        else:
            total = sum(v for v in counts.values() if v is not None)
            shares = {k: round(v / total, 3) if total and v is not None else 0.0
                      for k, v in counts.items()}  # fmt: skip
        changes = sum(1 for e in s.get("events", ()) if e.get("kind") == "weight")
        out.append(Row(s["scheme"], load.get("rps"), lat.get("p50"), lat.get("p99"),
                       s.get("failures"), shares, changes))  # fmt: skip
    return out
