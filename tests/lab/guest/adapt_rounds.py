"""Runs inside the lab guest: what one `adapt` poll round costs the kernel, counted.

A table of SERVICES x REALS (real IPVS, applied by the reconcile), an `Adapter` whose agent
reports come from an injected fetch (every agent answers `ok` but one, which says `down`),
and the session's real netlink socket wrapped to count what goes through it: whole-table
reads (dumps of every service), per-service reads, change requests. Three rounds:

1. one server down: its weight goes to 0 (the one change: the others, idle, keep their
   configured weights at `Policy(scale=1)`);
2. the same reports: nothing changes;
3. the same again.

Also used by bench/ipvs.py (the adapt round at 1,000 x 10) for its timings.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from typing import Any

GET_SERVICE = 4  # IPVS_CMD_GET_SERVICE


def report(node: str, health: str) -> dict[str, Any]:
    from lbtune.ipvs.nodereport import AgentReport, judge

    down = health == "down"
    return judge(AgentReport(
        node=node, port=80, time=0.0, interval=1.0, cpu_util=0.1, cpus=1, runq=0,
        mem_available=1 << 30, mem_total=2 << 30, connections=3, listening=not down,
        listen_queue=0, listen_backlog=511, listen_drops=0, listen_drops_delta=0,
        egress_dev="eth0", egress_bps=25e6, egress_capacity_bps=100e6, max_conns=None,
        signals=("listen", "egress"), load=0.0, bottleneck="", pressure=0.0, health=health,
        reason="",
    )).to_json()  # fmt: skip


def config_text(services: int, reals: int) -> str:
    out = ["[director]\ndrain_timeout = 0\n"]
    for i in range(services):
        port = 1000 + i % 100
        vip = f"10.210.{i // 100 // 250}.{i // 100 % 250 + 1}"
        out.append(f'[[service]]\naddress = "{vip}"\nport = {port}\nscheduler = "wrr"\n')
        for r in range(reals):
            out.append(f'[[service.real_server]]\naddress = "10.211.{r}.{port % 250}"\n'
                       f'weight = {r + 1}\nagent = "http://10.211.{r}.{port % 250}:9177/"\n')
    return "".join(out)


class Counted:
    """The session's own netlink socket, its requests counted on their way through."""

    def __init__(self, session: Any) -> None:
        sock = session.socket()
        self.table_reads = self.service_reads = self.changes = self.change_batches = 0
        dump, request, execute = sock.dump, sock.request, sock.execute

        def counted_dump(cmd: int, attrs: bytes = b"") -> Any:
            if cmd == GET_SERVICE and not attrs:
                self.table_reads += 1
            return dump(cmd, attrs)

        def counted_request(cmd: int, attrs: bytes = b"") -> Any:
            if cmd == GET_SERVICE:
                self.service_reads += 1
            return request(cmd, attrs)

        def counted_execute(ops: Any) -> Any:
            self.changes += len(ops)
            self.change_batches += 1
            return execute(ops)

        sock.dump, sock.request, sock.execute = counted_dump, counted_request, counted_execute

    def take(self) -> dict[str, int]:
        out = {"table_reads": self.table_reads, "service_reads": self.service_reads,
               "changes": self.changes, "change_batches": self.change_batches}
        self.table_reads = self.service_reads = self.changes = self.change_batches = 0
        return out


def setup(services: int, reals: int) -> tuple[Any, Any, Any]:
    """IPVS loaded, the VIPs on a dummy interface, the table applied: (host, cfg, state)."""
    from lbtune.host.host import Host
    from lbtune.ipvs.config import parse_config_text
    from lbtune.ipvs.reconcile import apply_director
    from lbtune.tune.journal import StateDir

    for m in ("ip_vs", "ip_vs_wrr", "dummy"):
        subprocess.run(["modprobe", m], check=True)
    subprocess.run(["ip", "link", "add", "avip0", "type", "dummy"], check=True)
    subprocess.run(["ip", "link", "set", "avip0", "up"], check=True)
    vips = sorted({f"10.210.{i // 100 // 250}.{i // 100 % 250 + 1}" for i in range(services)})
    subprocess.run(["ip", "-batch", "-"], check=True, text=True,
                   input="".join(f"address add {v}/32 dev avip0\n" for v in vips))
    os.environ["LBTUNE_STATE_DIR"] = tempfile.mkdtemp(prefix="adapt-rounds-")
    host = Host.open()
    cfg = parse_config_text(config_text(services, reals), "adapt-rounds.toml")
    state = StateDir(host)
    apply_director(host, cfg, state)
    return host, cfg, state


def run(services: int = 3, reals: int = 3, rounds: int = 3) -> dict[str, Any]:
    from lbtune.host.ipvs.table import ipvs_of
    from lbtune.ipvs.adapt import Adapter, agent_url
    from lbtune.ipvs.weights import Policy

    host, cfg, state = setup(services, reals)
    down = agent_url(cfg, cfg.services[0].servers[0])

    def fetch(url: str, timeout: float) -> dict[str, Any]:
        return report(url, "down" if url == down else "ok")

    locks = []
    real_lock = state.lock

    def counted_lock() -> Any:
        locks.append(1)
        return real_lock()

    state.lock = counted_lock  # type: ignore[method-assign]
    # scale 1: an idle server's target is its configured weight, so the one server down is
    # the round's one change
    adapter = Adapter(host, cfg, state, policy=Policy(scale=1), fetch=fetch)
    session = ipvs_of(host)
    counted = Counted(session)
    out: dict[str, Any] = {"rounds": []}
    for _ in range(rounds):
        del locks[:]
        t0 = time.perf_counter()
        events = adapter.poll()
        ms = (time.perf_counter() - t0) * 1000
        out["rounds"].append({**counted.take(), "locks": len(locks), "ms": ms,
                              "weights": [e.weight for e in events if e.kind == "weight"]})
    session.invalidate()
    svc = session.table()[cfg.services[0].key]
    out["kernel_weight_of_down"] = svc.dest(cfg.services[0].servers[0].key).settings.weight
    out["objects"] = services * (1 + reals)
    return out
