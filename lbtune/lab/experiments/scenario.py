"""The lab scenario: build the lab, prepare every role, check, load, measure, tear down.

`run_scenario(config)` runs inside the lab guest (it refuses to run anywhere else: it builds
namespaces, loads IPVS and starts servers) and returns a `ScenarioResult`:

1. topology: client, director(s) and real servers as namespaces on a bridge;
2. profiles: `lbtune --netns NS apply PROFILE` per role (loadgen, lb-dr or lb-proxy,
   realserver-dr or web); host-global knobs are skipped in a namespace, and counted;
3. balancer: DR on the director and the real servers (lbtune.lab.inguest.balancer), or the VIP on
   the director for HAProxy in proxy mode;
4. servers: nginx on every real server (HAProxy on the director in proxy mode);
5. checklist: `lbtune --netns NS checklist --role ROLE` per node (the client's includes the
   planned wrk command); any failed check stops the run here, before any load;
6. self-test: requests on fresh connections from the client: every server must answer, and
   the client's ARP entry for the VIP must be the director's;
7. load: wrk (or ab) from the client for the duration, while `lbtune diagnose` samples the
   director;
8. collect: per-server requests (nginx logs), IPVS connections per server, the share of reply
   bytes that crossed the director; then everything is stopped and removed.

Progress goes to the call's progress file (lbtune.lab.progress) for the host; the host side
is lbtune.lab.launch.run_lab.
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from lbtune.errors import BadInput, LbtuneError
from lbtune.lab.experiments import labprofile
from lbtune.lab.inguest.balancer import (
    LabService,
    RealServer,
    break_realserver_arp,
    configure_director,
    configure_realserver,
    ipvs_connections,
)
from lbtune.lab.inguest.entry import in_lab
from lbtune.lab.inguest.labnet import (
    Node,
    Topology,
    build_topology,
    link_bytes,
    plan_topology,
    teardown_topology,
)
from lbtune.lab.inguest.load import LoadResult, load_argv, parse_load, pick_tool
from lbtune.lab.inguest.servers import HAPROXY_BALANCE, HTTP_PORT, Proxy, WebServer
from lbtune.lab.inguest.shell import RUN_DIR, LabStepFailed, Shell
from lbtune.lab.progress import FAIL, INFO, TICK, ProgressWriter, Steps, StepTime
from lbtune.lab.protocol import LabUnavailable

MODES = ("dr", "proxy")
FAULTS = ("wrong-arp",)
MAX_DURATION = 600.0
DIAGNOSE_LEAD = 1.5  # seconds the diagnose process needs to take its first sample
# Checklist failures the single-CPU guest causes by itself: (role, check) -> what must be in
# the reason for the failure to be this one, and the note shown with it.
LAB_EXPECTED_FAILS = {
    ("lb-dr", "profile-in-sync"): (
        "selects no CPU",
        "lb-dr needs more than one CPU for its data/control split; the lab applied lab-lb-dr",
    ),
}
# Schedulers whose request shares should follow the weights with equal servers.
WEIGHTED = ("rr", "wrr", "lc", "wlc", "sed", "nq")
UNWEIGHTED = ("rr", "lc")  # weights only switch a server on (> 0) or off


@dataclass(frozen=True)
class ScenarioConfig:
    """What `lbtune lab run` was asked to do."""

    mode: str = "dr"  # "dr": IPVS direct routing; "proxy": HAProxy in the director's place
    scheduler: str = "rr"
    servers: int = 3
    weights: tuple[int, ...] = ()  # one per real server; empty: all 1
    duration: float = 10.0  # seconds of load
    threads: int = 1  # load tool threads
    connections: int = 12  # concurrent keep-alive connections (12: divisible by 1-4 and 6)
    tool: str = "auto"  # wrk, ab or auto (wrk when installed)
    keepalive: bool = True  # False: a new connection per request (every request scheduled)
    fault: Optional[str] = None  # "wrong-arp": break the last real server's ARP settings
    diagnose: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise BadInput(f"--mode {self.mode!r}: one of {', '.join(MODES)}")
        if self.weights and len(self.weights) != self.servers:
            raise BadInput(
                f"--weights gives {len(self.weights)} weights for {self.servers} real servers"
            )
        if not 1 <= self.duration <= MAX_DURATION:
            raise BadInput(f"--duration {self.duration:g}: 1 to {MAX_DURATION:g} seconds")
        if not 1 <= self.threads <= 64 or not 1 <= self.connections <= 10000:
            raise BadInput("--threads 1..64 and --connections 1..10000")
        if self.connections < self.threads:
            raise BadInput("--connections must be at least --threads (wrk needs one per thread)")
        if self.fault is not None and self.fault not in FAULTS:
            raise BadInput(f"--fault {self.fault!r}: one of {', '.join(FAULTS)}")
        if self.fault == "wrong-arp" and self.mode != "dr":
            raise BadInput("--fault wrong-arp concerns DR real servers: use --mode dr")
        if self.mode == "proxy" and self.scheduler not in HAPROXY_BALANCE:
            raise BadInput(
                f"--mode proxy --scheduler {self.scheduler}: HAProxy stands in for "
                f"{', '.join(sorted(HAPROXY_BALANCE))} only"
            )
        # the DR service validates scheduler and weights
        self.service(plan_topology(self.servers))

    @property
    def server_weights(self) -> tuple[int, ...]:
        return self.weights or (1,) * self.servers

    def service(self, topo: Topology) -> LabService:
        return LabService(
            vip=topo.vip,
            port=HTTP_PORT,
            scheduler=self.scheduler,
            servers=tuple(
                RealServer(s.address, w) for s, w in zip(topo.servers, self.server_weights)
            ),
        )


@dataclass(frozen=True)
class ProfileApply:
    """`lbtune apply PROFILE` in one node's namespace."""

    node: str
    profile: str
    exit_code: int
    changed: int  # knobs changed in the namespace
    unchanged: int  # already at the profile's value
    skipped: int  # host-global knobs, never changed from a namespace
    error: str = ""


@dataclass(frozen=True)
class CheckLine:
    name: str
    level: str  # lbtune.vocab.Level word
    reason: str
    fix: str = ""


@dataclass(frozen=True)
class NodeChecklist:
    """`lbtune checklist --role ROLE` in one node's namespace."""

    node: str
    role: str
    exit_code: int
    summary: Mapping[str, int]
    checks: tuple[CheckLine, ...]
    error: str = ""
    tolerated: Mapping[str, str] = field(default_factory=dict)  # check -> why (LAB_EXPECTED_FAILS)

    @property
    def failed(self) -> tuple[CheckLine, ...]:
        """Failed checks that stop the run (not the ones the lab itself causes)."""
        return tuple(c for c in self.checks if c.level == "fail" and c.name not in self.tolerated)


def _tolerated(role: str, checks: tuple[CheckLine, ...]) -> dict[str, str]:
    out = {}
    for c in checks:
        expected = LAB_EXPECTED_FAILS.get((role, c.name))
        if c.level == "fail" and expected is not None and expected[0] in c.reason:
            out[c.name] = expected[1]
    return out


def lab_checks(
    role: str, checks: tuple[CheckLine, ...], summary: Mapping[str, int]
) -> tuple[tuple[CheckLine, ...], dict[str, int], dict[str, str]]:
    """The checks as the lab reports them: a fail the lab itself causes (LAB_EXPECTED_FAILS:
    the one-CPU guest cannot take lb-dr's CPU split) becomes a `skip` whose reason says why,
    so that every `fail` in a lab report means something. Returns (checks, summary,
    tolerated: check -> why)."""
    tolerated = _tolerated(role, checks)
    if not tolerated:
        return checks, dict(summary), {}
    out = tuple(
        replace(c, level="skip", reason=f"lab: {tolerated[c.name]} ({c.reason})")
        if c.name in tolerated else c
        for c in checks
    )  # fmt: skip
    counts = dict(summary)
    counts["fail"] = counts.get("fail", 0) - len(tolerated)
    counts["skip"] = counts.get("skip", 0) + len(tolerated)
    return out, counts, tolerated


@dataclass(frozen=True)
class SelfTest:
    """Requests on fresh connections from the client before the load."""

    requests: int
    answers: Mapping[str, int]  # server name -> requests it answered
    failures: int
    errors: tuple[str, ...]
    vip_mac: str  # the client's neighbour entry for the VIP
    vip_owner: str  # the node that MAC belongs to ("dir1" is right, a real server is not)
    silent: tuple[str, ...]  # real servers with weight > 0 that answered nothing
    ok: bool


@dataclass(frozen=True)
class ServerShare:
    """One real server's part of the load."""

    name: str
    address: str
    weight: int
    requests: int  # requests it logged during the load
    share: float  # of all requests the servers logged
    # weight / total weight (schedulers in WEIGHTED), else None. With keep-alive the balancer
    # schedules connections and requests follow each connection's speed: on the one-CPU guest
    # every busy nginx gets the same CPU time, so request shares drift towards equal.
    expected: Optional[float]
    connections: Optional[int]  # connections IPVS scheduled to it (DR only)
    non_200: int


@dataclass(frozen=True)
class Bypass:
    """How many reply bytes crossed the director: DR replies go straight to the client."""

    client_sent: int
    client_received: int
    director_received: int

    @property
    def through_director(self) -> float:
        """Share of the client's received bytes that the director received first, at most
        1: the director also receives the headers, handshakes and ACKs of its own
        connections to the servers (`overhead`), which the client never sees."""
        if self.client_received <= 0:
            return 0.0
        extra = max(0, self.director_received - self.client_sent)
        return round(min(1.0, extra / self.client_received), 3)

    @property
    def overhead(self) -> float:
        """What the director received beyond all the client's reply bytes, as a share of
        them (proxy: its server-side connections' headers and handshakes, both ways)."""
        if self.client_received <= 0:
            return 0.0
        extra = self.director_received - self.client_sent - self.client_received
        return round(max(0.0, extra / self.client_received), 3)


@dataclass(frozen=True)
class FindingLine:
    rule: str
    level: str  # lbtune.vocab.Level word
    title: str
    object: str


@dataclass(frozen=True)
class DirectorDiagnosis:
    """`lbtune --netns DIRECTOR diagnose --duration D --json` over the load."""

    node: str
    exit_code: int
    duration: float
    findings: tuple[FindingLine, ...]
    error: str = ""


@dataclass(frozen=True)
class ScenarioResult:
    config: ScenarioConfig
    ok: bool  # every server served, no load error, no failed check
    stopped: Optional[str]  # the step the run stopped at, None when it ran to the end
    reason: str  # why not ok ("" when ok)
    vip: str
    kernel: str
    steps: tuple[StepTime, ...] = ()
    profiles: tuple[ProfileApply, ...] = ()
    checklists: tuple[NodeChecklist, ...] = ()
    selftest: Optional[SelfTest] = None
    load: Optional[LoadResult] = None
    servers: tuple[ServerShare, ...] = ()
    bypass: Optional[Bypass] = None
    diagnosis: Optional[DirectorDiagnosis] = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def max_deviation(self) -> Optional[float]:
        """Largest |share - expected| over the servers (None without expectations)."""
        devs = [abs(s.share - s.expected) for s in self.servers if s.expected is not None]
        return round(max(devs), 3) if devs else None

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["max_deviation"] = self.max_deviation
        if self.bypass is not None:
            out["bypass"]["through_director"] = self.bypass.through_director
            out["bypass"]["overhead"] = self.bypass.overhead
        out["serving"] = sum(1 for s in self.servers if s.requests > 0)
        out["failures"] = self.load.failures if self.load is not None else None
        return out


# --------------------------------------------------------------------------- JSON round trip


def _decode(tp: Any, data: Any) -> Any:
    """data (JSON) as an instance of type tp: dataclasses, tuples, Optional, Mapping, scalars."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if data is None:
        return None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        hints = typing.get_type_hints(tp)
        kwargs = {
            f.name: _decode(hints[f.name], data[f.name])
            for f in dataclasses.fields(tp)
            if f.init and f.name in data
        }
        return tp(**kwargs)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], data)
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(_decode(item, x) for x in data)
    if origin in (dict, collections.abc.Mapping):
        return {str(k): _decode(args[1], v) for k, v in data.items()}
    if tp is float:
        return float(data)
    return data


def result_from_json(data: Mapping[str, Any]) -> ScenarioResult:
    """The ScenarioResult that `to_json` produced (the guest returns JSON to the host)."""
    try:
        result = _decode(ScenarioResult, data)
    except (KeyError, TypeError, ValueError) as e:
        raise LabStepFailed(f"lab guest returned a malformed result: {e}") from None
    assert isinstance(result, ScenarioResult)
    return result


# --------------------------------------------------------------------------- the run


class _Run:
    """State of one scenario run: what is up, so that teardown removes exactly that."""

    def __init__(self, config: ScenarioConfig, progress: ProgressWriter) -> None:
        self.config = config
        self.progress = progress
        self.steps = Steps(progress)
        self.step = self.steps.step
        self.shell = Shell()
        self.topo = plan_topology(config.servers)
        self.service = config.service(self.topo)
        self.director = self.topo.directors[0]
        self.web: list[WebServer] = []
        self.proxy: Optional[Proxy] = None
        self.background: list[subprocess.Popen[str]] = []
        self.conns_before: dict[str, int] = {}

    # ---- roles

    def roles(self) -> list[tuple[Node, str, str]]:
        """(node, profile, checklist role) for every node in this mode."""
        proxy = self.config.mode == "proxy"
        out = [(self.topo.client, "loadgen", "client")]
        out += [(d, "lb-proxy" if proxy else "lb-dr", "lb-proxy" if proxy else "lb-dr")
                for d in self.topo.directors]  # fmt: skip
        out += [(s, "web" if proxy else "realserver-dr", "web" if proxy else "realserver")
                for s in self.topo.servers]  # fmt: skip
        return out

    def profile_arg(self, profile: str) -> str:
        """What `lbtune apply` gets for profile: its name, or the lab overlay's path."""
        if profile != "lb-dr":
            return profile
        path = f"{RUN_DIR}/profiles/{labprofile.NAME}.toml"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(labprofile.lab_director_profile())
        return path

    def apply_profiles(self) -> list[ProfileApply]:
        out = []
        for node, name, _ in self.roles():
            arg = self.profile_arg(name)
            profile = labprofile.NAME if arg != name else name
            res = self.shell.lbtune(
                node.netns, "apply", arg, "--iface", node.iface, "--yes", "--json"
            )
            code, stdout, stderr = res.returncode, res.stdout, res.stderr
            counts = {"change": 0, "ok": 0, "skipped": 0}
            if code == 0:
                for row in json.loads(stdout).get("changes", []):
                    action = str(row.get("action", ""))
                    counts[action] = counts.get(action, 0) + 1
            error = "" if code == 0 else _first_line(stderr)
            out.append(ProfileApply(node.name, profile, code, counts["change"], counts["ok"],
                                    counts["skipped"], error))  # fmt: skip
            self.progress("profiles", INFO, f"{node.name}: {profile} exit {code}")
        bad = [p for p in out if p.exit_code != 0]
        if bad:
            raise LabStepFailed(f"lbtune apply {bad[0].profile} on {bad[0].node}: {bad[0].error}")
        return out

    def configure(self) -> None:
        if self.config.mode == "dr":
            for d in self.topo.directors[:1]:  # one active director holds the VIP
                configure_director(d.netns, self.service, d.iface, self.shell)
            for s in self.topo.servers:
                configure_realserver(s.netns, self.topo.vip, s.iface)
            if self.config.fault == "wrong-arp":
                victim = self.topo.servers[-1]
                break_realserver_arp(victim.netns, victim.iface, self.shell)
                self.progress("balancer", INFO, f"fault: ARP settings of {victim.name} reset")
        else:
            d = self.director
            self.shell.check(["ip", "addr", "replace", f"{self.topo.vip}/32", "dev", d.iface],
                             d.netns)  # fmt: skip

    def start_servers(self) -> None:
        for s in self.topo.servers:
            web = WebServer(s.name, s.netns, f"{RUN_DIR}/{s.name}", self.shell)
            self.web.append(web)
            web.start()
        if self.config.mode == "proxy":
            self.proxy = Proxy(self.director.netns, f"{RUN_DIR}/haproxy", self.shell)
            backends = [(s.name, s.address, w)
                        for s, w in zip(self.topo.servers, self.config.server_weights)]  # fmt: skip
            self.proxy.start(self.topo.vip, backends, self.config.scheduler)

    def checklists(self, load_cmd: str) -> list[NodeChecklist]:
        out = []
        for node, _, role in self.roles():
            args = ["checklist", "--role", role, "--iface", node.iface, "--json"]
            if role in ("realserver", "lb-dr"):
                args += ["--vip", self.topo.vip]
            if role == "client":
                args += ["--load", load_cmd]
            res = self.shell.lbtune(node.netns, *args)
            code, stdout, stderr = res.returncode, res.stdout, res.stderr
            try:
                data = json.loads(stdout)
                checks = tuple(
                    CheckLine(str(c["name"]), str(c["level"]), str(c["reason"]),
                              str(c.get("fix", "")))
                    for c in data["checks"]
                )  # fmt: skip
                summary = {str(k): int(v) for k, v in data["summary"].items()}
                error = ""
            except (ValueError, KeyError, TypeError):
                checks, summary, error = (), {}, _first_line(stderr) or "no JSON output"
            checks, summary, tolerated = lab_checks(role, checks, summary)
            out.append(NodeChecklist(node.name, role, code, summary, checks, error, tolerated))
            said = f"{node.name}: {role} exit {code}"
            if tolerated:
                said += f" (the lab's own fail, reported as skip: {', '.join(tolerated)})"
            self.progress("checklist", INFO, said)
        return out

    def selftest(self) -> SelfTest:
        count = 2 * len(self.topo.servers)
        argv = [sys.executable, "-m", "lbtune.lab.inguest.vipcheck", self.topo.vip, str(HTTP_PORT),
                str(count)]  # fmt: skip
        data = json.loads(self.shell.check(argv, self.topo.client.netns))
        mac = ""
        neigh = self.shell.run(["ip", "-j", "neigh", "show", self.topo.vip],
                               self.topo.client.netns).stdout  # fmt: skip
        with contextlib.suppress(ValueError):
            for entry in json.loads(neigh or "[]"):
                mac = str(entry.get("lladdr", "")) or mac
        owner = next((n.name for n in self.topo.nodes if n.mac == mac), "unknown")
        answers = {str(k): int(v) for k, v in data["answers"].items()}
        silent = tuple(
            s.name for s, w in zip(self.topo.servers, self.config.server_weights)
            if w > 0 and answers.get(s.name, 0) == 0
        )  # fmt: skip
        sched_spreads = self.config.scheduler in WEIGHTED
        ok = (
            int(data["failures"]) == 0
            and owner == self.director.name
            and (not silent or not sched_spreads)
        )
        return SelfTest(count, answers, int(data["failures"]), tuple(data["errors"]), mac, owner,
                        silent, ok)  # fmt: skip

    def rotate_logs(self) -> None:
        """Start the load's access logs afresh (the self-test's requests are not load)."""
        for web in self.web:
            web.rotate()

    def load(self, tool: str, argv: list[str]) -> tuple[LoadResult, Optional[DirectorDiagnosis],
                                                         Bypass]:
        cfg = self.config
        diag: Optional[subprocess.Popen[str]] = None
        diag_duration = cfg.duration + DIAGNOSE_LEAD
        if cfg.diagnose:
            diag = self.shell.spawn_lbtune(
                self.director.netns, "diagnose", "--duration", f"{diag_duration:g}", "--json",
                # counters only: a probe compile would take the guest's one CPU from the load
                # it measures
                "--no-probes",
            )  # fmt: skip
            self.background.append(diag)
            time.sleep(DIAGNOSE_LEAD)
        if cfg.mode == "dr":
            self.conns_before = ipvs_connections(self.director.netns, self.service, self.shell)
        client_before = link_bytes(self.topo, self.topo.client)
        director_before = link_bytes(self.topo, self.director)
        proc = self.shell.spawn(argv, self.topo.client.netns)
        self.background.append(proc)
        t0 = time.monotonic()
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
            self.progress("load", TICK, tool, done=min(cfg.duration, time.monotonic() - t0),
                          total=cfg.duration)  # fmt: skip
        stdout, stderr = proc.communicate()
        client_after = link_bytes(self.topo, self.topo.client)
        director_after = link_bytes(self.topo, self.director)
        if proc.returncode != 0:
            raise LabStepFailed(f"{tool} exited {proc.returncode}: {_first_line(stderr)}")
        result = parse_load(tool, stdout, tuple(argv))
        bypass = Bypass(
            client_sent=client_after[0] - client_before[0],
            client_received=client_after[1] - client_before[1],
            director_received=director_after[1] - director_before[1],
        )
        diagnosis = self._collect_diagnosis(diag, diag_duration) if diag is not None else None
        return result, diagnosis, bypass

    def _collect_diagnosis(
        self, proc: subprocess.Popen[str], duration: float
    ) -> DirectorDiagnosis:
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return DirectorDiagnosis(self.director.name, 124, duration, (), "timed out")
        try:
            findings = tuple(
                FindingLine(str(f.get("rule", "")), str(f.get("level", "")),
                            str(f.get("title", "")), str(f.get("object", "")))
                for f in json.loads(stdout).get("findings", [])
            )  # fmt: skip
            error = ""
        except (ValueError, AttributeError):
            findings, error = (), _first_line(stderr) or "no JSON output"
        return DirectorDiagnosis(self.director.name, proc.returncode, duration, findings, error)

    def shares(self) -> list[ServerShare]:
        served = {w.name: w.served() for w in self.web}
        conns: dict[str, int] = {}
        if self.config.mode == "dr":
            after = ipvs_connections(self.director.netns, self.service, self.shell)
            conns = {a: n - self.conns_before.get(a, 0) for a, n in after.items()}
        total = sum(s.requests for s in served.values())
        weights = self.config.server_weights
        out = []
        for i, s in enumerate(self.topo.servers):
            got = served[s.name]
            share = round(got.requests / total, 4) if total else 0.0
            conn = conns.get(s.address) if self.config.mode == "dr" else None
            expected = expected_share(self.config.scheduler, weights, i)
            out.append(ServerShare(s.name, s.address, weights[i], got.requests, share, expected,
                                   conn, got.non_200))  # fmt: skip
        return out

    def stop_all(self) -> None:
        for proc in self.background:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(Exception):
                proc.communicate(timeout=5)
        self.background.clear()
        if self.proxy is not None:
            self.proxy.stop()
        for web in self.web:
            web.stop()

    def teardown(self) -> None:
        self.stop_all()
        with contextlib.suppress(LbtuneError):
            teardown_topology(self.topo, self.shell)


def expected_share(scheduler: str, weights: tuple[int, ...], i: int) -> Optional[float]:
    """Server i's expected share of scheduling decisions, with equal servers.

    rr and lc treat every server of weight > 0 alike; wrr, wlc, sed and nq follow the
    weights; the others (hashing, locality) have no share to expect from one client.
    """
    if scheduler not in WEIGHTED or weights[i] == 0:
        return None if scheduler not in WEIGHTED else 0.0
    if scheduler in UNWEIGHTED:
        return round(1 / sum(1 for w in weights if w > 0), 4)
    return round(weights[i] / sum(weights), 4)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def run_scenario(
    config: ScenarioConfig, progress: Optional[ProgressWriter] = None
) -> ScenarioResult:
    """Run the whole scenario in this (lab guest) kernel; see the module docstring."""
    if not in_lab():
        raise LabUnavailable(
            "the lab scenario builds namespaces, loads IPVS and starts servers: it runs only "
            "inside the lab kernel (lbtune lab run)"
        )
    run = _Run(config, progress or ProgressWriter())
    tool = pick_tool(config.tool)
    url = f"http://{run.topo.vip}/"
    argv = load_argv(
        tool, url, config.duration, config.threads, config.connections, config.keepalive
    )
    partial: dict[str, Any] = {"vip": run.topo.vip, "kernel": os.uname().release}
    stopped: Optional[str] = None
    reason = ""
    try:
        with run.step("topology", f"{len(run.topo.nodes)} namespaces on {run.topo.bridge}"):
            build_topology(run.topo, run.shell)
        with run.step("profiles"):
            partial["profiles"] = tuple(run.apply_profiles())
        what = "IPVS DR" if config.mode == "dr" else "VIP for HAProxy"
        with run.step("balancer", f"{what}, {config.scheduler}"):
            run.configure()
        with run.step("servers", f"nginx x{len(run.topo.servers)}"
                      + (" + haproxy" if config.mode == "proxy" else "")):  # fmt: skip
            run.start_servers()
        with run.step("checklist"):
            lists = run.checklists(shlex.join(argv))
            partial["checklists"] = tuple(lists)
        failed = [(c.node, f.name) for c in lists for f in c.failed]
        broken = [c.node for c in lists if c.error]
        if failed or broken:
            stopped = "checklist"
            reason = (
                "failed checks before load: " + ", ".join(f"{n} {f}" for n, f in failed)
                if failed else f"checklist did not run on {', '.join(broken)}"
            )  # fmt: skip
            run.progress("checklist", FAIL, reason)
        if stopped is None:
            with run.step("selftest"):
                st = run.selftest()
                partial["selftest"] = st
            if not st.ok:
                stopped = "selftest"
                reason = _selftest_reason(st, run.director.name)
                run.progress("selftest", FAIL, reason)
        if stopped is None:
            run.rotate_logs()
            with run.step("load", f"{' '.join(argv)}"):
                load, diagnosis, bypass = run.load(tool, argv)
                partial.update(load=load, diagnosis=diagnosis, bypass=bypass)
            with run.step("collect"):
                run.stop_all()  # nginx flushes its buffered log on a graceful stop
                partial["servers"] = tuple(run.shares())
    except LabStepFailed as e:
        stopped = stopped or (run.steps.times[-1].name if run.steps.times else "start")
        reason = str(e)
    finally:
        with run.step("teardown"):
            run.teardown()
    servers: tuple[ServerShare, ...] = partial.get("servers", ())
    load_result: Optional[LoadResult] = partial.get("load")
    if stopped is None:
        silent = [s.name for s in servers if s.weight > 0 and s.requests == 0
                  and config.scheduler in WEIGHTED]  # fmt: skip
        if load_result is not None and load_result.failures:
            reason = f"{load_result.failures} failed requests"
        elif silent:
            reason = f"real servers that served nothing: {', '.join(silent)}"
    notes = [
        "host-global knobs of the profiles are skipped inside a namespace "
        "(the guest kernel's globals stay at their defaults)",
        "the lab guest has one CPU: client, director and servers share it",
    ]
    return ScenarioResult(
        config=config,
        ok=stopped is None and not reason,
        stopped=stopped,
        reason=reason,
        steps=tuple(run.steps.times),
        notes=tuple(notes),
        **partial,
    )


def _selftest_reason(st: SelfTest, director: str) -> str:
    parts = []
    if st.vip_owner != director:
        parts.append(f"the client's ARP entry for the VIP is {st.vip_mac or 'missing'} "
                     f"({st.vip_owner}), not the director {director}")  # fmt: skip
    if st.failures:
        parts.append(f"{st.failures} of {st.requests} requests failed"
                     + (f" ({st.errors[0]})" if st.errors else ""))  # fmt: skip
    if st.silent:
        parts.append(f"no answer from {', '.join(st.silent)}")
    return "; ".join(parts) or "self-test failed"


def guest_run(
    config: Mapping[str, Any], progress: Optional[ProgressWriter] = None
) -> dict[str, Any]:
    """The guest target (lbtune.lab.launch.run_lab): the scenario for a JSON config, its
    result as JSON."""
    try:
        cfg = _decode(ScenarioConfig, dict(config))
    except (KeyError, TypeError) as e:
        raise BadInput(f"lab scenario configuration: {e}") from None
    assert isinstance(cfg, ScenarioConfig)
    return run_scenario(cfg, progress).to_json()
