"""Director failover in the lab: a keepalived pair, the master killed and brought back.

`run_failover(config)` runs inside the lab guest:

1. topology: a client, two directors (dir1, dir2) and real servers on the lab bridge;
2. servers: DR real servers (VIP on lo, ARP settings) with nginx;
3. keepalived: each director's keepalived.conf comes from `lbtune ipvs export --format
   keepalived --peer` (the user's command, run as a child process), dir1 as master, and
   Debian's keepalived runs it in the director's namespace in the foreground (`-n -l -D`,
   its own pid files under the run directory); dir1 wins the election and holds the VIP;
4. load: the failover client (lbtune.lab.inguest.failoverclient) in the client namespace: a
   fresh connection every 20 ms and a few keep-alive connections with a request every 100 ms;
5. kills, `kills` times: the master dies as a host dies (SIGKILL to its keepalived's
   process group, then its cable pulled: the bridge port down; a killed keepalived alone
   leaves the VIP up), dir2 takes over; then dir1 "reboots" (VIP, IPVS table and sync
   daemons cleared, cable back, keepalived started) and takes the VIP back (preemption);
6. the failover client's record is cut into one window per switch
   (lbtune.lab.experiments.failover_stats).

Progress goes to the call's progress file like `lab run`'s (lbtune.lab.progress). The host
side is lbtune.lab.launch.run_failover_lab. Its messages keep the word "prober" for the
failover client: they are output users and scripts already read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from lbtune.errors import BadInput, LbtuneError
from lbtune.host.deadline import wait_until
from lbtune.lab.experiments.client import ClientProcess
from lbtune.lab.experiments.failover_stats import (
    ClientRecord,
    Event,
    FailoverResult,
    switch_windows,
)
from lbtune.lab.inguest.balancer import configure_realserver, load_ipvs_modules
from lbtune.lab.inguest.entry import in_lab
from lbtune.lab.inguest.labnet import Node, build_topology, plan_topology, teardown_topology
from lbtune.lab.inguest.servers import HTTP_PORT, WebServer
from lbtune.lab.inguest.shell import LabStepFailed, Shell, netns_argv
from lbtune.lab.progress import (
    INFO,
    ProgressWriter,
    Steps,
)
from lbtune.lab.protocol import LabUnavailable

RUN_DIR = "/run/lbtune-lab/failover"
MAX_KILLS = 50
POLL = 0.1
# Before a kill with sync on, the longest wait for the backup to hold the keep-alive
# connections: the master's sync thread sends what it buffered at least every 2 s
# (IPVS_SYNC_FLUSH_TIME); a connection it never sent is lost in a real pair too, and the
# experiment measures what sync keeps, not that race (seen on a loaded 2-CPU host).
SYNC_WAIT = 10.0


def _wait(done: Callable[[], bool], timeout: float) -> Optional[float]:
    """Seconds until `done()` holds, polled every POLL (None: not within timeout)."""
    t0 = time.monotonic()
    return time.monotonic() - t0 if wait_until(done, timeout, POLL) else None


@dataclass(frozen=True)
class FailoverConfig:
    """What `lbtune lab failover` was asked to do."""

    kills: int = 5
    advert_int: float = 1.0  # VRRP advert interval, s (keepalived's default 1 s)
    sync: bool = True  # IPVS connection sync daemon (lvs_sync_daemon)
    servers: int = 2
    preempt_delay: float = 3.0  # a returning master syncs connections as backup this long
    keepalive: int = 4  # long-lived keep-alive connections of the failover client
    interval: float = 0.02  # seconds between fresh connections
    settle: float = 2.0  # seconds of steady traffic after each switch

    def __post_init__(self) -> None:
        if not 1 <= self.kills <= MAX_KILLS:
            raise BadInput(f"--kills {self.kills}: 1 to {MAX_KILLS}")
        if not 0.01 <= self.advert_int <= 10 or round(self.advert_int, 2) != self.advert_int:
            raise BadInput(f"--advert-int {self.advert_int:g}: 0.01 to 10 s, whole centiseconds")
        if not 1 <= self.servers <= 8:
            raise BadInput(f"--servers {self.servers}: 1 to 8")
        if not 0 <= self.preempt_delay <= 30:
            raise BadInput(f"--preempt-delay {self.preempt_delay:g}: 0 to 30 s")
        if not 0 <= self.keepalive <= 32:
            raise BadInput(f"--keepalive {self.keepalive}: 0 to 32 connections")
        if not 0.005 <= self.interval <= 1:
            raise BadInput(f"--interval {self.interval:g}: 0.005 to 1 s")
        if not 0.5 <= self.settle <= 30:
            raise BadInput(f"--settle {self.settle:g}: 0.5 to 30 s")

    def master_down(self) -> float:
        """The backup's wait without adverts (3 x advert + skew at priority 100), s."""
        return 3 * self.advert_int + (256 - 100) / 256 * self.advert_int

    def budget(self) -> float:
        """Generous seconds for the whole run in the guest (boot excluded)."""
        per_kill = 2 * (self.master_down() + self.settle) + self.preempt_delay + 15
        per_kill += SYNC_WAIT if self.sync else 0
        return 90 + self.kills * per_kill


def _lab_config(vip: str, servers: tuple[Node, ...]) -> str:
    """The lab's DR service as an `lbtune ipvs` TOML config (the export's input)."""
    out = [f'[[service]]\naddress = "{vip}"\nport = {HTTP_PORT}\nscheduler = "rr"\n']
    out += [f'  [[service.real_server]]\n  address = "{s.address}"\n' for s in servers]
    return "\n".join(out)


class _Director:
    """keepalived of one director, in its namespace, with its files under RUN_DIR/NAME."""

    def __init__(self, node: Node, shell: Shell) -> None:
        self.node, self.shell = node, shell
        self.dir = os.path.join(RUN_DIR, node.name)
        self.conf = os.path.join(self.dir, "keepalived.conf")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        argv = netns_argv(self.node.netns, [
            "keepalived", "-n", "-l", "-D", "-f", self.conf, "-p", f"{self.dir}/keepalived.pid",
            "-r", f"{self.dir}/vrrp.pid", "-c", f"{self.dir}/checkers.pid"])  # fmt: skip
        with open(os.path.join(self.dir, f"keepalived-{self.starts}.log"), "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL to keepalived's whole process group: no goodbye advert, VIP left up."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def log_tail(self) -> str:
        path = os.path.join(self.dir, f"keepalived-{self.starts}.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                lines = [line.strip() for line in fh if line.strip()]
        except OSError:
            return ""
        return lines[-1] if lines else ""


class _Failover:
    def __init__(self, config: FailoverConfig, progress: ProgressWriter) -> None:
        self.config, self.progress = config, progress
        self.step = Steps(progress).step
        self.shell = Shell()
        self.topo = plan_topology(config.servers, directors=2)
        self.dirs = [_Director(n, self.shell) for n in self.topo.directors]
        self.web: list[WebServer] = []
        self.client = ClientProcess("prober")
        self.ports_file = os.path.join(RUN_DIR, "client.ports")

    def export(self, me: Node, peer: Node, role: str, toml: str) -> str:
        args = ["ipvs", "export", toml, "--format", "keepalived", "--peer", peer.address,
                "--src", me.address, "--role", role, "--interface", me.iface,
                "--advert-int", f"{self.config.advert_int:g}",
                "--preempt-delay", f"{self.config.preempt_delay:g}"]  # fmt: skip
        if not self.config.sync:
            args.append("--no-sync")
        res = self.shell.lbtune(None, *args, timeout=60)  # no --netns: it only prints
        if res.returncode != 0:
            raise LabStepFailed(f"lbtune ipvs export for {me.name}: {res.stderr.strip()}")
        return res.stdout

    def configure(self) -> dict[str, str]:
        os.makedirs(RUN_DIR, exist_ok=True)
        toml = os.path.join(RUN_DIR, "dr.toml")
        with open(toml, "w", encoding="utf-8") as fh:
            fh.write(_lab_config(self.topo.vip, self.topo.servers))
        d1, d2 = self.topo.directors
        configs = {}
        for d, me, peer, role in ((self.dirs[0], d1, d2, "master"),
                                  (self.dirs[1], d2, d1, "backup")):  # fmt: skip
            os.makedirs(d.dir, exist_ok=True)
            text = self.export(me, peer, role, toml)
            with open(d.conf, "w", encoding="utf-8") as fh:
                fh.write(text)
            configs[me.name] = text
        return configs

    def has_vip(self, node: Node) -> bool:
        out = self.shell.run(["ip", "-o", "-4", "addr", "show", "dev", node.iface], node.netns)
        return f" {self.topo.vip}/32 " in out.stdout

    def wait_vip(self, node: Node, timeout: float) -> Optional[float]:
        """Seconds until node holds the VIP (None: not within timeout)."""
        return _wait(lambda: self.has_vip(node), timeout)

    def vip_owner(self) -> str:
        """Who the client's ARP entry for the VIP names (a director's fixed MAC)."""
        out = self.shell.run(["ip", "neigh", "show", self.topo.vip], self.topo.client.netns)
        macs = {n.mac: n.name for n in self.topo.nodes}
        for word in out.stdout.split():
            if word in macs:
                return macs[word]
        return ""

    def ka_ports(self) -> frozenset[int]:
        """The client ports of the failover client's serving keep-alive connections (its
        --ports)."""
        try:
            with open(self.ports_file, encoding="utf-8") as fh:
                return frozenset(int(p) for p in json.load(fh)["ports"])
        except (OSError, ValueError, KeyError, TypeError):
            return frozenset()

    def held(self, node: Node) -> tuple[int, int]:
        """(held, serving): how many of the serving keep-alive connections node's IPVS
        table holds as ESTABLISHED. Only those: a fresh connection is established for a few
        ms and would make a table that lacks a keep-alive connection look complete."""
        ports = self.ka_ports()
        out = self.shell.run(["ipvsadm", "-L", "-n", "-c"], node.netns)
        vip = f"{self.topo.vip}:{HTTP_PORT}"
        client = f"{self.topo.client.address}:"
        got = set()
        # pro expire state source virtual destination
        for f in (line.split() for line in out.stdout.splitlines()):
            if len(f) >= 5 and f[2] == "ESTABLISHED" and f[4] == vip and f[3].startswith(client):
                with contextlib.suppress(ValueError):
                    got.add(int(f[3][len(client):]))
        return len(ports & got), len(ports)

    def wait_synced(self, node: Node, want: int,
                    timeout: float) -> tuple[Optional[float], int, int]:  # fmt: skip
        """Wait until node holds all `want` keep-alive connections: (seconds it took, None
        when not in time; and the last reading, held and serving)."""
        last = (0, 0)

        def done() -> bool:
            nonlocal last
            last = self.held(node)
            return last[1] >= want and last[0] == last[1]

        took = _wait(done, timeout)
        return took, last[0], last[1]

    def wait_back(self, node: Node, timeout: float,
                  watch_sync: bool) -> tuple[Optional[float], Optional[float]]:  # fmt: skip
        """Wait for the returning master to hold the VIP: (seconds until it did, seconds
        until it, still backup, first held every keep-alive connection), each None when it
        did not happen (the second only watched with sync). Both count from the call."""
        full: Optional[float] = None
        t0 = time.monotonic()

        def back() -> bool:
            nonlocal full
            if watch_sync and full is None:
                held, serving = self.held(node)
                if serving and held == serving:
                    full = time.monotonic() - t0
            return self.has_vip(node)

        took = _wait(back, timeout)
        return took, full

    def die(self, d: _Director) -> None:
        d.kill()
        self.shell.check(["ip", "link", "set", d.node.bridge_port, "down"])

    def reboot(self, d: _Director) -> None:
        """What a rebooted director has: no VIP, no IPVS table, no sync daemon; cable in."""
        ns = d.node.netns
        for state in ("master", "backup"):
            self.shell.run(["ipvsadm", "--stop-daemon", state], ns)
        self.shell.run(["ipvsadm", "-C"], ns)
        self.shell.run(["ip", "addr", "del", f"{self.topo.vip}/32", "dev", d.node.iface], ns)
        self.shell.check(["ip", "link", "set", d.node.bridge_port, "up"])
        d.start()

    def start_client(self, stop: str, out: str) -> None:
        self.client.start(self.topo.client.netns, vip=self.topo.vip, port=HTTP_PORT,
                          interval=self.config.interval, keepalive=self.config.keepalive,
                          stop=stop, out=out, ports_file=self.ports_file)

    def teardown(self) -> None:
        self.client.kill()
        for d in self.dirs:
            d.stop()
        for w in self.web:
            w.stop()
        for d in self.dirs:
            for state in ("master", "backup"):
                self.shell.run(["ipvsadm", "--stop-daemon", state], d.node.netns)
        with contextlib.suppress(LbtuneError):
            teardown_topology(self.topo, self.shell)


def run_failover(
    config: FailoverConfig, progress: Optional[ProgressWriter] = None
) -> FailoverResult:
    """The whole experiment in this (lab guest) kernel; see the module docstring."""
    if not in_lab():
        raise LabUnavailable("the failover lab runs keepalived and IPVS: only inside the lab "
                             "kernel (lbtune lab failover)")  # fmt: skip
    run = _Failover(config, progress or ProgressWriter())
    d1, d2 = run.dirs
    events: list[Event] = []
    configs: dict[str, str] = {}
    record: Optional[ClientRecord] = None
    reason = ""
    end = 0.0
    stop, out = os.path.join(RUN_DIR, "client.stop"), os.path.join(RUN_DIR, "client.json")
    timeout = 5 * config.master_down() + config.preempt_delay + 10
    try:
        with run.step("topology", f"{len(run.topo.nodes)} namespaces, 2 directors"):
            build_topology(run.topo, run.shell)
        with run.step("servers", f"DR real servers, nginx x{len(run.topo.servers)}"):
            load_ipvs_modules("rr", run.shell)
            for s in run.topo.servers:
                configure_realserver(s.netns, run.topo.vip, s.iface)
                web = WebServer(s.name, s.netns, f"{RUN_DIR}/{s.name}", run.shell)
                web.start()
                run.web.append(web)
        sync = "sync on" if config.sync else "sync off"
        with run.step("keepalived", f"advert_int {config.advert_int:g} s, {sync}"):
            for path in (stop, out, run.ports_file):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            configs = run.configure()
            d1.start()
            d2.start()
            if run.wait_vip(d1.node, timeout + 5) is None:
                raise LabStepFailed(f"dir1 never took the VIP: {d1.log_tail()}")
        with run.step("load", "prober: fresh connections and keep-alive connections"):
            run.start_client(stop, out)
            time.sleep(config.settle + 1.0)  # the failover client's start-up, then steady traffic
            run.client.check()
        watch_sync = config.sync and config.keepalive > 0
        for k in range(1, config.kills + 1):
            held: Optional[int] = None
            if watch_sync:
                took, held, serving = run.wait_synced(d2.node, config.keepalive, SYNC_WAIT)
                run.progress("sync", INFO,
                             f"dir2 holds the {serving} keep-alive connection(s) "
                             f"after {took:.1f} s" if took is not None else
                             f"dir2 holds {held} of the {serving} keep-alive "
                             f"connection(s) after {SYNC_WAIT:g} s; killing dir1")  # fmt: skip
            run.die(d1)
            t = time.monotonic()  # the cable is out: the outage starts here
            took = run.wait_vip(d2.node, timeout)
            events.append(Event(t, "failover", "dir2", took, held=held))
            if took is None:
                reason = f"kill {k}: dir2 did not take the VIP within {timeout:g} s"
                break
            time.sleep(config.settle)
            owner = run.vip_owner()
            run.progress("kill", INFO, f"{k}/{config.kills}: dir1 killed, dir2 took the VIP "
                         f"after {took:.2f} s; client ARP -> {owner or '?'}")  # fmt: skip
            events[-1] = dataclasses.replace(events[-1], arp=owner)
            t = time.monotonic()
            run.reboot(d1)
            took, full = run.wait_back(d1.node, timeout + 5, watch_sync)
            # what sync had carried to dir1 by the time it preempted (its table is read
            # within a poll of the takeover; a connection it lacked is reset, never added)
            held, serving = run.held(d1.node) if watch_sync and took is not None else (None, 0)
            events.append(Event(t, "failback", "dir1", took, held=held))
            if took is None:
                reason = f"kill {k}: dir1 did not take the VIP back: {d1.log_tail()}"
                break
            time.sleep(config.settle)
            owner = run.vip_owner()
            events[-1] = dataclasses.replace(events[-1], arp=owner)
            synced = "" if held is None else (
                f", holding {held} of {serving} keep-alive conn(s)"
                + (f" (all since {full:.1f} s)" if full is not None else ""))
            run.progress("kill", INFO, f"{k}/{config.kills}: dir1 back, took the VIP after "
                         f"{took:.2f} s{synced}; client ARP -> {owner or '?'}")  # fmt: skip
        end = time.monotonic()
        with run.step("collect"):
            record = ClientRecord.from_json(run.client.stop(stop, out))
    except LabStepFailed as e:
        reason = reason or str(e)
    finally:
        with run.step("teardown"):
            run.teardown()
    windows = switch_windows(record, events, end) if record is not None else ()
    return FailoverResult.build(config=dataclasses.asdict(config), windows=windows,
                                reason=reason, configs=configs,
                                kernel=os.uname().release)  # fmt: skip


def guest_run(config: Mapping[str, Any], progress: Optional[ProgressWriter] = None) -> Any:
    """The guest target (lbtune.lab.launch.run_failover_lab): the experiment for a JSON
    config, its result as JSON."""
    try:
        cfg = FailoverConfig(**dict(config))
    except TypeError as e:
        raise BadInput(f"lab failover configuration: {e}") from None
    return run_failover(cfg, progress).to_json()
