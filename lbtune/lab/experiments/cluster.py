r"""A scale-out director cluster in the lab: directors behind ECMP, killed, added, drained.

`run_cluster(config)` runs inside the lab guest:

```
 client 10.78.0.2 --- eth1 router 10.77.0.1 eth0 --- bridge lab-br0 --- dir1..dir4 10.77.0.2-5
   (lab-client)         (lab-router: BIRD, ECMP,                   \-- rs1, rs2 10.77.0.11- (DR)
                         L4 multipath hash)
```

1. topology: the router namespace (forwarding, `fib_multipath_hash_policy = 1`), the client
   behind it on its own link, the directors and the DR real servers (nginx) on the lab bridge;
2. the cluster config (`[cluster]`, the VIP on lo, one service with the asked scheduler,
   `sloppy_tcp` as asked) is the user's: every director runs `lbtune ipvs apply` of it, BIRD
   with the config `lbtune ipvs export --format bird --director NAME` wrote, and `lbtune ipvs
   gate`, which announces the VIP once the director can serve it; the router's BIRD peers
   with every director (BGP, BFD as asked) and merges the equal routes into one multipath
   route in its kernel table;
3. load: the failover client (lbtune.lab.inguest.failoverclient) in the client namespace: a
   fresh connection every 20 ms and keep-alive connections with a request every 300 ms;
4. events: `kills` times a director (dir1, dir2, dir3 in turn) dies like a host (BIRD and the
   gate SIGKILLed, its cable pulled) and comes back (IPVS table cleared as after a reboot,
   cable in, apply, BIRD, gate); then dir4 is added (3 -> 4) and the director carrying the
   most keep-alive connections drained (its gate stopped: it withdraws the VIP, and the
   director stays up). Before each event and after
   it settled, the router's `ip route get` of every keep-alive connection's ports says
   which director it goes to.

The record is cut into one row per event (lbtune.lab.experiments.cluster_stats). The host
side is lbtune.lab.launch.run_cluster_lab.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional

from lbtune.errors import BadInput, LbtuneError
from lbtune.host.deadline import wait_until
from lbtune.lab.experiments.client import ClientProcess
from lbtune.lab.experiments.cluster_stats import (
    ClientLog,
    ClusterEvent,
    ClusterResult,
    event_rows,
)
from lbtune.lab.inguest.balancer import configure_realserver, load_ipvs_modules
from lbtune.lab.inguest.entry import in_lab
from lbtune.lab.inguest.labnet import (
    Node,
    Topology,
    build_topology,
    plan_topology,
    teardown_topology,
)
from lbtune.lab.inguest.load import load_argv, parse_wrk, pick_tool
from lbtune.lab.inguest.servers import HTTP_PORT, WebServer
from lbtune.lab.inguest.shell import LabStepFailed, Shell, lbtune_argv, lbtune_env, netns_argv
from lbtune.lab.progress import INFO, ProgressWriter, Steps
from lbtune.lab.protocol import LabUnavailable

RUN_DIR = "/run/lbtune-lab/cluster"
ROUTER_NS, ROUTER_ADDR, ROUTER_MAC = "lab-router", "10.77.0.1", "02:4c:42:00:00:01"
CLIENT_NS, CLIENT_ADDR, ROUTER_CLIENT_ADDR = "lab-client", "10.78.0.2", "10.78.0.1"
ROUTER_PORT = "lbp-router"
DIRECTOR_ASN, ROUTER_ASN = 65001, 65000
SCHEDULERS = ("mh", "wlc")
MAX_KILLS = 9
POLL = 0.05
# BFD: a lost director is down after 500 ms. 100 ms x 3 flapped healthy sessions in the
# one-CPU guest on a loaded host (the guest stalls for a few hundred ms at times).
BFD_INTERVAL, BFD_MULTIPLIER = 100, 5
HOLD_TIME = 3  # s, the cluster's BGP hold time: what detects a dead director without BFD


def _wait(done: Callable[[], bool], timeout: float) -> Optional[float]:
    t0 = time.monotonic()
    return time.monotonic() - t0 if wait_until(done, timeout, POLL) else None


@dataclass(frozen=True)
class ClusterLabConfig:
    """What `lbtune lab cluster` was asked to do."""

    directors: int = 3
    kills: int = 3
    scheduler: str = "mh"
    sloppy: bool = True
    sync: bool = False
    bfd: bool = True
    add_drain: bool = True  # then dir N+1 added and the busiest director drained
    keepalive: int = 12
    ka_interval: float = 0.3
    interval: float = 0.02
    settle: float = 2.0
    servers: int = 2
    throughput: float = 5.0  # s of wrk through all directors, then through one (0: none)

    def __post_init__(self) -> None:
        if not 2 <= self.directors <= 3:
            raise BadInput(f"--directors {self.directors}: 2 or 3 (the lab has 4 director "
                           "namespaces; one more is added)")  # fmt: skip
        if not 0 <= self.kills <= MAX_KILLS:
            raise BadInput(f"--kills {self.kills}: 0 to {MAX_KILLS}")
        if self.scheduler not in SCHEDULERS:
            raise BadInput(f"--scheduler {self.scheduler}: one of {', '.join(SCHEDULERS)}")
        if not 1 <= self.servers <= 8:
            raise BadInput(f"--servers {self.servers}: 1 to 8")
        if not 1 <= self.keepalive <= 32:
            raise BadInput(f"--keepalive {self.keepalive}: 1 to 32 connections")
        if not 0.05 <= self.ka_interval <= 2:
            raise BadInput(f"--ka-interval {self.ka_interval:g}: 0.05 to 2 s")
        if not 0.005 <= self.interval <= 1:
            raise BadInput(f"--interval {self.interval:g}: 0.005 to 1 s")
        if not 0.5 <= self.settle <= 30:
            raise BadInput(f"--settle {self.settle:g}: 0.5 to 30 s")
        if not (self.throughput == 0 or 1 <= self.throughput <= 60):
            raise BadInput(f"--throughput {self.throughput:g}: 0 (none) or 1 to 60 s")
        if self.kills == 0 and not self.add_drain:
            raise BadInput("nothing to do: --kills 0 and --no-add-drain")

    def budget(self) -> float:
        """Generous seconds for the whole run in the guest (boot excluded)."""
        per_event = 2 * self.settle + 3 * HOLD_TIME + 60
        return 150 + (2 * self.kills + 2) * per_event + 2 * self.throughput + 30


def cluster_toml(cfg: ClusterLabConfig, topo: Topology) -> str:
    """The lab's cluster: one file for every director (the user's config)."""
    flags = '\nflags = ["mh-fallback", "mh-port"]' if cfg.scheduler == "mh" else ""
    out = [f"[sysctl]\nsloppy_tcp = {int(cfg.sloppy)}\nexpire_nodest_conn = 1\n",
           f'[[vip]]\naddress = "{topo.vip}"\ndev = "lo"\n',
           f'[[service]]\naddress = "{topo.vip}"\nport = {HTTP_PORT}\n'
           f'scheduler = "{cfg.scheduler}"{flags}']  # fmt: skip
    out += [f'  [[service.real_server]]\n  address = "{s.address}"' for s in topo.servers]
    out.append(f"\n[cluster]\nasn = {DIRECTOR_ASN}\nhold_time = {HOLD_TIME}\n"
               f"sync = {'true' if cfg.sync else 'false'}\n")
    for d in topo.directors:
        out.append(f'[[cluster.director]]\nname = "{d.name}"\naddress = "{d.address}"\n')
    out.append(f'[[cluster.router]]\naddress = "{ROUTER_ADDR}"\nasn = {ROUTER_ASN}\n')
    out.append(f"[cluster.bfd]\nenabled = {'true' if cfg.bfd else 'false'}\n"
               f"interval = {BFD_INTERVAL}\nmultiplier = {BFD_MULTIPLIER}\n")
    out.append("[cluster.gate]\ninterval = 1\nrise = 2\nfall = 2\ntimeout = 0.5\n")
    return "\n".join(out)


def router_conf(cfg: ClusterLabConfig, topo: Topology) -> str:
    """The router's BIRD: a session per director, equal routes merged into one multipath
    kernel route. Short restart timers: a director that comes back is peered within seconds
    (BIRD's defaults wait 60 s and more after a session error)."""
    bfd = ('protocol bfd {\n    interface "*" {\n'
           f'        min rx interval {BFD_INTERVAL} ms;\n'
           f'        min tx interval {BFD_INTERVAL} ms;\n'
           f'        multiplier {BFD_MULTIPLIER};\n    }};\n}}\n'
           if cfg.bfd else "")  # fmt: skip
    out = [f"# the lab router: BGP with every director, ECMP into the kernel\n"
           "log stderr all;\ndebug protocols { states };\n"
           f"router id {ROUTER_ADDR};\n\nprotocol device {{\n}}\n\n"
           "protocol kernel {\n    merge paths on;\n    ipv4 {\n        import none;\n"
           "        export all;\n    };\n}\n\n" + bfd]  # fmt: skip
    for d in topo.directors:
        out.append(
            f"protocol bgp {d.name} {{\n    local {ROUTER_ADDR} as {ROUTER_ASN};\n"
            f"    neighbor {d.address} as {DIRECTOR_ASN};\n"
            f"    bfd {'on' if cfg.bfd else 'off'};\n    hold time {HOLD_TIME};\n"
            "    connect delay time 1;\n    connect retry time 2;\n"
            "    error wait time 1, 3;\n"
            "    ipv4 {\n        import all;\n        export none;\n    };\n}\n")
    return "\n".join(out)


class _Proc:
    """A background process in a namespace, in its own process group, logging to a file."""

    def __init__(self, name: str, log: str) -> None:
        self.name, self.log = name, log
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self, argv: list[str], env: Optional[Mapping[str, str]] = None) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         env=dict(env) if env is not None else None)

    def signal(self, sig: int, wait: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as fh:
                lines = [line.strip() for line in fh if line.strip()]
        except OSError:
            return ""
        return lines[-1] if lines else ""


class _Director:
    def __init__(self, node: Node) -> None:
        self.node = node
        self.dir = os.path.join(RUN_DIR, node.name)
        self.conf = os.path.join(self.dir, "bird.conf")
        self.sock = os.path.join(self.dir, "bird.ctl")
        self.bird = _Proc(f"{node.name} bird", os.path.join(self.dir, "bird.log"))
        self.gate = _Proc(f"{node.name} gate", os.path.join(self.dir, "gate.log"))


class _Cluster:
    def __init__(self, config: ClusterLabConfig, progress: ProgressWriter) -> None:
        self.config, self.progress = config, progress
        self.step = Steps(progress).step
        self.shell = Shell()
        # every director namespace the run may use: the cluster plus the one added later
        self.topo = plan_topology(config.servers, directors=config.directors + 1)
        self.dirs = [_Director(n) for n in self.topo.directors]
        self.toml = os.path.join(RUN_DIR, "cluster.toml")
        self.router = _Proc("router bird", os.path.join(RUN_DIR, "router.log"))
        self.router_conf = os.path.join(RUN_DIR, "router.conf")
        self.router_sock = os.path.join(RUN_DIR, "router.ctl")
        self.web: list[WebServer] = []
        self.client = ClientProcess("client")
        self.ports_file = os.path.join(RUN_DIR, "client.ports")
        self.by_addr = {d.node.address: d.node.name for d in self.dirs}

    # -- topology ---------------------------------------------------------------------
    def build(self) -> None:
        """The lab bridge with the directors and real servers (labnet), then the router on
        the bridge and the client behind the router."""
        self._remove_extra()
        build_topology(self.topo, self.shell)
        sh = self.shell
        # the client moves from the bridge to its own link behind the router
        sh.ip_batch([["link", "del", self.topo.client.bridge_port], ["netns", "add", ROUTER_NS],
                     ["link", "add", ROUTER_PORT, "type", "veth", "peer", "name", "eth0",
                      "netns", ROUTER_NS],
                     ["link", "set", ROUTER_PORT, "master", self.topo.bridge, "up"]])  # fmt: skip
        sh.ip_batch([["link", "add", "eth1", "type", "veth", "peer", "name", "eth0", "netns",
                      CLIENT_NS],
                     ["link", "set", "lo", "up"],
                     ["link", "set", "eth0", "addrgenmode", "none"],
                     ["link", "set", "eth1", "addrgenmode", "none"],
                     ["link", "set", "eth0", "address", ROUTER_MAC],
                     ["addr", "add", f"{ROUTER_ADDR}/{self.topo.prefix}", "dev", "eth0"],
                     ["addr", "add", f"{ROUTER_CLIENT_ADDR}/24", "dev", "eth1"],
                     ["link", "set", "eth0", "up"], ["link", "set", "eth1", "up"]],
                    ROUTER_NS)  # fmt: skip
        sh.ip_batch([["link", "set", "lo", "up"], ["link", "set", "eth0", "addrgenmode", "none"],
                     ["addr", "add", f"{CLIENT_ADDR}/24", "dev", "eth0"],
                     ["link", "set", "eth0", "up"],
                     ["route", "add", "default", "via", ROUTER_CLIENT_ADDR]],
                    CLIENT_NS)  # fmt: skip
        # The multipath hash over the 5-tuple. Policy 1 (L4) would do on a real router, but
        # it takes a packet's hash when one came with it, and a veth hands over the client
        # socket's own random hash (sk_txhash, redrawn at every retransmission timeout): the
        # flows would be spread by that, not by their ports, and a retransmitted one could
        # jump director. Policy 3 with the L4 fields hashes the packet itself, as policy 1
        # does a packet from a wire, and `ip route get` with the ports says the same.
        for key, value in (("net.ipv4.ip_forward", 1), ("net.ipv4.fib_multipath_hash_policy", 3),
                           ("net.ipv4.fib_multipath_hash_fields", "0x0037"),
                           ("net.ipv4.conf.all.rp_filter", 0),
                           ("net.ipv4.conf.eth0.rp_filter", 0)):  # fmt: skip
            sh.sysctl(ROUTER_NS, key, value)
        # replies (DR: from the real servers) and BGP go through the router
        for n in (*self.topo.directors, *self.topo.servers):
            sh.ip_batch([["route", "add", "default", "via", ROUTER_ADDR]], n.netns)

    def _remove_extra(self) -> None:
        present = set(self.shell.run(["ip", "netns", "list"]).stdout.split())
        lines = [["netns", "del", ROUTER_NS]] if ROUTER_NS in present else []
        if os.path.exists(f"/sys/class/net/{ROUTER_PORT}"):
            lines.append(["link", "del", ROUTER_PORT])
        if lines:
            self.shell.ip_batch(lines, force=True)

    # -- the directors -------------------------------------------------------------------
    def write_configs(self) -> dict[str, str]:
        os.makedirs(RUN_DIR, exist_ok=True)
        with open(self.toml, "w", encoding="utf-8") as fh:
            fh.write(cluster_toml(self.config, self.topo))
        configs = {}
        for d in self.dirs:
            os.makedirs(d.dir, exist_ok=True)
            res = self.shell.lbtune(None, "ipvs", "export", self.toml, "--format", "bird",
                                    "--director", d.node.name, timeout=60)  # fmt: skip
            if res.returncode != 0:
                raise LabStepFailed(f"lbtune ipvs export --format bird --director "
                                    f"{d.node.name}: {res.stderr.strip()}")  # fmt: skip
            with open(d.conf, "w", encoding="utf-8") as fh:
                fh.write(res.stdout)
            configs[d.node.name] = res.stdout
        text = router_conf(self.config, self.topo)
        with open(self.router_conf, "w", encoding="utf-8") as fh:
            fh.write(text)
        configs["router"] = text
        return configs

    def start_bird(self, proc: _Proc, netns: str, conf: str, sock: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(sock)
        # niced up: BFD's 100 ms packets must not wait behind the lab's Python processes
        # (ipvs apply, the gates) on the guest's one CPU, or sessions flap
        proc.start(netns_argv(netns, ["nice", "-n", "-15", "bird", "-f", "-c", conf, "-s",
                                      sock, "-P", sock + ".pid"]))  # fmt: skip
        if _wait(lambda: os.path.exists(sock), 20) is None:
            raise LabStepFailed(f"{proc.name} did not start: {proc.tail()}")

    def start_director(self, d: _Director) -> None:
        """What a director's boot runs: `ipvs apply`, BIRD with the export, the gate."""
        ns = d.node.netns
        self.shell.check_lbtune(ns, "ipvs", "apply", self.toml)
        if self.config.sync:
            for state in ("master", "backup"):
                self.shell.check(["ipvsadm", "--start-daemon", state, "--mcast-interface",
                                  d.node.iface, "--syncid", "1"], ns)  # fmt: skip
        self.start_bird(d.bird, ns, d.conf, d.sock)
        # the gate is the user's command, in the director's namespace
        d.gate.start(netns_argv(ns, lbtune_argv(None, "ipvs", "gate", self.toml, "--director",
                                                d.node.name, "--socket", d.sock)),
                     env=lbtune_env())  # fmt: skip

    def die(self, d: _Director) -> None:
        """Like a dead host: cable pulled first (a killed BIRD's socket would still say
        goodbye: the kernel closes its BGP connection with a FIN), then SIGKILL to BIRD and
        the gate."""
        self.shell.check(["ip", "link", "set", d.node.bridge_port, "down"])
        d.gate.signal(signal.SIGKILL)
        d.bird.signal(signal.SIGKILL)

    def reboot(self, d: _Director) -> None:
        """A rebooted director: no IPVS table, no sync daemon, no VIP; cable in; then boot."""
        ns = d.node.netns
        for state in ("master", "backup"):
            self.shell.run(["ipvsadm", "--stop-daemon", state], ns)
        self.shell.run(["ipvsadm", "-C"], ns)
        self.shell.run(["ip", "addr", "del", f"{self.topo.vip}/32", "dev", "lo"], ns)
        self.shell.check(["ip", "link", "set", d.node.bridge_port, "up"])
        self.start_director(d)

    # -- the router ------------------------------------------------------------------------
    def paths(self) -> set[str]:
        """The directors the router's kernel route for the VIP goes to."""
        out = self.shell.run(["ip", "-4", "route", "show", f"{self.topo.vip}/32"], ROUTER_NS)
        return {self.by_addr.get(a, a) for a in re.findall(r"via (\S+)", out.stdout)}

    def wait_paths(self, done: Callable[[set[str]], bool], timeout: float) -> Optional[float]:
        return _wait(lambda: done(self.paths()), timeout)

    def carriers(self, ports: Optional[Iterable[int]] = None) -> dict[int, str]:
        """client port -> the director the router sends that keep-alive connection to (the
        router's own lookup, with the ports, under its L4 hash); ports: the serving
        keep-alive connections' when not given."""
        ports = sorted(self.ka_ports() if ports is None else ports)
        if not ports:
            return {}
        fd, path = tempfile.mkstemp(prefix="lbtune-lab-route-", suffix=".batch")
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            for p in ports:
                fh.write(f"route get {self.topo.vip} from {CLIENT_ADDR} iif eth1 ipproto tcp "
                         f"sport {p} dport {HTTP_PORT}\n")
        try:
            out = self.shell.run(["ip", "-n", ROUTER_NS, "-force", "-batch", path]).stdout
        finally:
            os.unlink(path)
        vias = [m.group(1) for m in re.finditer(r"^\S+ from \S+ (?:via (\S+))?.*$", out,
                                                re.MULTILINE)]  # fmt: skip
        if len(vias) != len(ports):
            return {}
        return {p: self.by_addr.get(v, "") for p, v in zip(ports, vias)}

    def router_log(self) -> list[str]:
        """The router BIRD's lines about its sessions (state changes, BFD), at most 60."""
        try:
            with open(self.router.log, encoding="utf-8", errors="replace") as fh:
                noise = re.compile(r"Bad packet|to (stop|flush|start)$")
                lines = [x.rstrip() for x in fh if not noise.search(x)]
        except OSError:
            return []
        return lines[-80:]

    def ka_ports(self) -> frozenset[int]:
        try:
            with open(self.ports_file, encoding="utf-8") as fh:
                return frozenset(int(p) for p in json.load(fh)["ports"])
        except (OSError, ValueError, KeyError, TypeError):
            return frozenset()

    # -- the client --------------------------------------------------------------------------
    def start_client(self, stop: str, out: str) -> None:
        self.client.start(CLIENT_NS, vip=self.topo.vip, port=HTTP_PORT,
                          interval=self.config.interval, keepalive=self.config.keepalive,
                          stop=stop, out=out, ports_file=self.ports_file,
                          extra=("--ka-interval", f"{self.config.ka_interval:g}"))

    def wrk(self, seconds: float) -> float:
        """Requests/s of wrk from the client, a new connection per request (each one hashed
        by the router on its own ports)."""
        url = f"http://{self.topo.vip}:{HTTP_PORT}/"
        argv = load_argv(pick_tool("wrk"), url, seconds, 1, 32, keepalive=False)
        out = self.shell.check(argv, CLIENT_NS, timeout=seconds + 30)
        res = parse_wrk(out, tuple(argv))
        if res.failures:
            raise LabStepFailed(f"wrk: {res.failures} failed request(s) {dict(res.errors)}")
        return round(res.rps, 1)

    def teardown(self) -> None:
        self.client.kill()
        for d in self.dirs:
            d.gate.signal(signal.SIGTERM)
            d.bird.signal(signal.SIGTERM)
            for state in ("master", "backup"):
                self.shell.run(["ipvsadm", "--stop-daemon", state], d.node.netns)
            self.shell.run(["ipvsadm", "-C"], d.node.netns)
        self.router.signal(signal.SIGTERM)
        for w in self.web:
            w.stop()
        with contextlib.suppress(LbtuneError):
            self._remove_extra()
            teardown_topology(self.topo, self.shell)


def run_cluster(config: ClusterLabConfig,
                progress: Optional[ProgressWriter] = None) -> ClusterResult:  # fmt: skip
    """The whole experiment in this (lab guest) kernel; see the module docstring."""
    if not in_lab():
        raise LabUnavailable("the cluster lab runs BIRD and IPVS: only inside the lab kernel "
                             "(lbtune lab cluster)")  # fmt: skip
    run = _Cluster(config, progress or ProgressWriter())
    n = config.directors
    cluster, extra = run.dirs[:n], run.dirs[n]
    events: list[ClusterEvent] = []
    throughput: dict[str, float] = {}
    configs: dict[str, str] = {}
    log: Optional[ClientLog] = None
    reason = ""
    end = 0.0
    stop, out = os.path.join(RUN_DIR, "client.stop"), os.path.join(RUN_DIR, "client.json")
    detect = (1.0 if config.bfd else HOLD_TIME) + 10
    join = 60.0  # apply, BIRD's connect, the gate's rise
    try:
        with run.step("topology", f"router, client, {n}+1 directors, "
                      f"{len(run.topo.servers)} real servers"):  # fmt: skip
            run.build()
        with run.step("servers", f"DR real servers, nginx x{len(run.topo.servers)}"):
            load_ipvs_modules(config.scheduler, run.shell)
            for s in run.topo.servers:
                configure_realserver(s.netns, run.topo.vip, s.iface)
                web = WebServer(s.name, s.netns, f"{RUN_DIR}/{s.name}", run.shell)
                web.start()
                run.web.append(web)
        bfd = (f"BFD {BFD_INTERVAL} ms x {BFD_MULTIPLIER}" if config.bfd
               else f"no BFD, hold time {HOLD_TIME} s")  # fmt: skip
        with run.step("cluster", f"{n} directors: ipvs apply, BIRD, gate; {bfd}"):
            for path in (stop, out, run.ports_file):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            configs = run.write_configs()
            run.start_bird(run.router, ROUTER_NS, run.router_conf, run.router_sock)
            for d in cluster:
                run.start_director(d)
            names = {d.node.name for d in cluster}
            if run.wait_paths(lambda p: p == names, join + 30) is None:
                raise LabStepFailed(f"the router never had all {n} directors (has "
                                    f"{sorted(run.paths())}): {cluster[0].gate.tail()}")
        with run.step("load", "client: fresh connections and keep-alive connections"):
            run.start_client(stop, out)
            ok = _wait(lambda: len(run.ka_ports()) >= config.keepalive, 30)
            time.sleep(config.settle)
            if ok is None or not run.client.alive():
                raise LabStepFailed("the client's keep-alive connections never all served")

        up = {d.node.name for d in cluster}

        def event(kind: str, d: _Director) -> bool:
            """One event on director d: act, wait for the router's table, settle, record."""
            nonlocal reason
            name = d.node.name
            before, paths = run.carriers(), len(run.paths())
            gone = kind in ("kill", "drain")
            if gone:
                up.discard(name)
            else:
                up.add(name)
            t = time.monotonic()
            if kind == "kill":
                run.die(d)
            elif kind == "return":
                run.reboot(d)
            elif kind == "add":
                run.start_director(d)
            else:  # drain: the gate stops and withdraws the VIP; the director stays up
                d.gate.signal(signal.SIGTERM)
            took = run.wait_paths(lambda p: (name not in p) if gone else (name in p),
                                  detect if gone else join)  # fmt: skip
            time.sleep(config.settle)
            after = run.carriers(before)  # the same flows, broken or not: where they go now
            now = run.paths()
            events.append(ClusterEvent(t, kind, name, took, before, after, paths, len(now)))
            moved = sum(1 for p, who in after.items() if before.get(p) not in (None, who))
            said = "never" if took is None else f"after {took:.2f} s"
            run.progress(kind, INFO, f"{kind} {name}: the router's table changed {said} (now "
                         f"{','.join(sorted(now))}); {moved} keep-alive connection(s) "
                         "moved")  # fmt: skip
            if took is None:
                what = {"kill": f"the router kept sending to {name}",
                        "return": f"{name} never came back: {d.gate.tail()}",
                        "add": f"{name} was never added: {d.gate.tail()}",
                        "drain": f"{name} was never drained"}[kind]  # fmt: skip
                reason = f"{kind} {name}: {what}"
            elif now != up:
                # a session of a director nobody touched went down: the guest starved BIRD
                reason = (f"{kind} {name}: the router lost a healthy director (it has "
                          f"{','.join(sorted(now)) or 'none'}, not {','.join(sorted(up))}): "
                          "a BGP/BFD session flapped (the guest was starved of CPU?)")
            return not reason

        for k in range(config.kills):
            d = cluster[k % n]
            if not (event("kill", d) and event("return", d)):
                break
        if not reason and config.add_drain and event("add", extra):
            # the director of the cluster carrying the most keep-alive connections
            carried = list(run.carriers().values())
            event("drain", max(cluster, key=lambda d: carried.count(d.node.name)))
        end = time.monotonic()
        with run.step("collect"):
            log = ClientLog.from_json(run.client.stop(stop, out))
        if config.throughput and not reason:
            active = sorted(up, key=lambda x: int(x[3:]))
            with run.step("throughput", f"wrk {config.throughput:g} s through "
                          f"{len(active)} directors, then through {active[0]} alone"):
                throughput["directors"] = len(active)
                throughput["rps"] = run.wrk(config.throughput)
                # what an active/backup pair has: one director carrying everything
                for d in run.dirs:
                    if d.node.name in active[1:]:
                        d.gate.signal(signal.SIGTERM)
                if run.wait_paths(lambda p: p == {active[0]}, detect) is None:
                    raise LabStepFailed(f"the router kept more than {active[0]}")
                throughput["one_rps"] = run.wrk(config.throughput)
    except LabStepFailed as e:
        reason = reason or str(e)
    finally:
        with run.step("teardown"):
            run.teardown()
    rows = event_rows(log, events, end) if log is not None else ()
    return ClusterResult.build(config=dataclasses.asdict(config), rows=rows, reason=reason,
                               configs=configs, kernel=os.uname().release,
                               router_log=run.router_log(),
                               throughput=throughput)  # fmt: skip


def guest_run(config: Mapping[str, Any], progress: Optional[ProgressWriter] = None) -> Any:
    """The guest target (lbtune.lab.launch.run_cluster_lab)."""
    try:
        cfg = ClusterLabConfig(**dict(config))
    except TypeError as e:
        raise BadInput(f"lab cluster configuration: {e}") from None
    return run_cluster(cfg, progress).to_json()
