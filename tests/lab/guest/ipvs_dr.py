"""Runs inside the lab guest: IPVS DR end to end with `lbtune ipvs`, one boot, many checks.

Phases (each returns plain data; tests/lab/test_ipvs_lab.py asserts on them):
wrong ARP on one real server caught before any load, reconcile idempotence and drift
repair, rr and wrr distribution with replies bypassing the director, weight change / new
server / drain-and-remove under continuous load, an IPv6 service, and rollback of an apply
that fails half way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from tests.lab.guest.dr_lab import VIP, VIP6, Bed, cli, config, rs_addr, sh, write

HERE = os.path.dirname(os.path.abspath(__file__))


def rx_packets(ns: str) -> int:
    return int(sh("ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/statistics/rx_packets"))


def table(ns: str = "dir") -> list[dict[str, Any]]:
    r = cli("ipvs", "status", "--json", netns=ns)
    assert r["code"] == 0, r["stderr"]
    return [{"service": s["service"], "scheduler": s["scheduler"], "flags": s["flags"],
             "persistence": s["persistence"], "netmask": s["netmask"],
             "real": [(x["address"], x["forward"], x["weight"], x["upper"], x["lower"])
                      for x in s["real_servers"]]} for s in r["json"]["services"]]


def selftest(cfg: str, n: int) -> dict[str, Any]:
    before = rx_packets("dir")
    r = cli("ipvs", "selftest", cfg, "--from-netns", "cl", "-n", str(n), "--json", netns="dir")
    return {"code": r["code"], "stderr": r["stderr"], "json": r["json"],
            "dir_rx": rx_packets("dir") - before}


def realservers(n: int, vip: str = VIP, skip: tuple[int, ...] = ()) -> list[int]:
    codes = []
    for i in range(1, n + 1):
        if i not in skip:
            codes.append(cli("ipvs", "realserver", "apply", "--vip", vip, "--iface", "eth0",
                             netns=f"rs{i}")["code"])
    return codes


def phase_wrong_arp(bed: Bed, cfg: str) -> dict[str, Any]:
    """rs3 gets the VIP on lo by hand but keeps the kernel's ARP defaults."""
    out: dict[str, Any] = {"director": cli("ipvs", "apply", cfg, "--json", netns="dir")}
    out["rs_apply"] = realservers(3, skip=(3,))
    sh("ip", "-n", "rs3", "addr", "add", f"{VIP}/32", "dev", "lo")
    verify = ("ipvs", "realserver", "verify", "--vip", VIP, "--iface", "eth0", "--arp-from",
              "cl", "--json")
    out["verify_bad"] = cli(*verify, netns="rs3")
    out["verify_good"] = cli(*verify, netns="rs1")
    out["macs"] = {f"rs{i}": sh("ip", "-n", f"rs{i}", "-br", "link", "show", "eth0").split()[2]
                   for i in (1, 2, 3)}
    out["dir_mac"] = sh("ip", "-n", "dir", "-br", "link", "show", "eth0").split()[2]
    out["selftest_bad"] = selftest(cfg, 6)
    # the fix: lbtune's own real-server apply, then the client forgets what it learnt
    out["rs3_fix"] = cli("ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0",
                         "--json", netns="rs3")
    out["verify_fixed"] = cli(*verify, netns="rs3")
    sh("ip", "-n", "cl", "neigh", "flush", "all")
    out["selftest_fixed"] = selftest(cfg, 9)
    return out


def phase_idempotence(cfg: str) -> dict[str, Any]:
    out: dict[str, Any] = {"plan": cli("ipvs", "plan", cfg, "--json", netns="dir"),
                           "apply": cli("ipvs", "apply", cfg, "--json", netns="dir")}
    # manual drift: a weight edited and a foreign real server added with ipvsadm
    sh("ip", "netns", "exec", "dir", "ipvsadm", "-e", "-t", f"{VIP}:80", "-r",
       f"{rs_addr(1)}:80", "-g", "-w", "7")
    sh("ip", "netns", "exec", "dir", "ipvsadm", "-a", "-t", f"{VIP}:80", "-r",
       "10.0.0.99:80", "-g", "-w", "1")
    out["drift_status"] = cli("ipvs", "status", cfg, "--json", netns="dir")
    out["drift_plan"] = cli("ipvs", "plan", cfg, "--json", netns="dir")
    out["repair"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
    out["after_repair"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
    out["status"] = cli("ipvs", "status", cfg, "--json", netns="dir")
    return out


NODEST = "\n[sysctl]\nexpire_nodest_conn = 1\n"  # docs/ipvs.md: removing real servers


def phase_distribution() -> dict[str, Any]:
    rr = write("/tmp/rr.toml", config("rr", extra=NODEST))
    wrr = write("/tmp/wrr.toml", config("wrr", {1: 1, 2: 3}, extra=NODEST))
    out: dict[str, Any] = {"rr_apply": cli("ipvs", "apply", rr, "--json", netns="dir"),
                           "rr": selftest(rr, 30)}
    out["wrr_apply"] = cli("ipvs", "apply", wrr, "--json", netns="dir")
    out["wrr"] = selftest(wrr, 40)
    out["table"] = table()
    return out


# requests the load answers before the first change and after each one (from 0.5 s after
# it, as tests/lab/test_ipvs_lab.py counts): enough for its shares, at any guest speed
PER_STEP = 200


def _served(result: str) -> int:
    try:
        with open(result + ".count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def _await_requests(result: str, n: int) -> None:
    """Until the load has answered n more requests (loadloop.py counts; a 60 s bound)."""
    goal, deadline = _served(result) + n, time.monotonic() + 60
    while _served(result) < goal and time.monotonic() < deadline:
        time.sleep(0.1)


def phase_under_load() -> dict[str, Any]:
    """Weight change, a new real server, and drain + remove while a client keeps going."""
    steps = [("start", {1: 1, 2: 1}), ("weight", {1: 3, 2: 1}), ("add", {1: 3, 2: 1, 3: 1}),
             ("remove", {1: 3, 3: 1})]
    out: dict[str, Any] = {}
    extra = NODEST
    cfg = write("/tmp/load.toml", config("wrr", steps[0][1], drain_timeout=15, extra=extra))
    out["start"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
    stop, result = "/tmp/load.stop", "/tmp/load.json"
    for stale in (stop, result, result + ".start", result + ".count"):
        if os.path.exists(stale):
            os.unlink(stale)
    load = subprocess.Popen(["ip", "netns", "exec", "cl", sys.executable,
                             os.path.join(HERE, "loadloop.py"), VIP, "80", "4", stop, result])
    marks = {}
    try:
        for _ in range(600):  # until the load runs: its events are timed from its own start
            if os.path.exists(result + ".start"):
                break
            time.sleep(0.1)
        with open(result + ".start") as f:
            t0 = float(f.read())
        _await_requests(result, PER_STEP)
        for name, weights in steps[1:]:
            write(cfg, config("wrr", weights, drain_timeout=15, extra=extra))
            marks[name + "_start"] = time.monotonic() - t0
            out[name] = cli("ipvs", "apply", cfg, "--json", netns="dir")
            marks[name + "_done"] = time.monotonic() - t0
            time.sleep(0.5)
            _await_requests(result, PER_STEP)
    finally:
        write(stop, "")
        load.wait(timeout=60)
    with open(result) as f:
        res = json.load(f)
    out["load"] = {"total": res["total"], "errors": res["errors"][:20],
                   "n_errors": len(res["errors"]), "events": res["events"]}
    out["marks"] = marks
    out["table"] = table()
    return out


def phase_ipv6() -> dict[str, Any]:
    cfg = write("/tmp/v6.toml", config("rr", v6=True))
    out: dict[str, Any] = {"apply": cli("ipvs", "apply", cfg, "--json", netns="dir"),
                           "rs": realservers(3, vip=VIP6)}
    out["verify"] = cli("ipvs", "realserver", "verify", "--vip", VIP6, "--iface", "eth0",
                        "--json", netns="rs1")
    out["selftest"] = selftest(cfg, 12)
    out["table"] = table()
    out["again"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
    return out


def _apply_with_fault(cfg_path: str, at: int) -> dict[str, Any]:
    from lbtune.errors import LbtuneError
    from lbtune.host.host import Host
    from lbtune.host.net.netns import enter_netns
    from lbtune.ipvs.config import load_config
    from lbtune.ipvs.reconcile import apply_director
    from lbtune.tune.journal import StateDir

    enter_netns("dir")

    def fault(i: int, knob: object) -> None:
        if i == at:
            raise OSError(5, f"injected failure before change {i}")

    host = Host.open("/", netns="dir")
    try:
        apply_director(host, load_config(cfg_path), StateDir(host), fault=fault)
    except LbtuneError as e:
        return {"error": str(e), "type": type(e).__name__, "code": int(e.exit_code)}
    return {"error": None}


def phase_rollback() -> dict[str, Any]:
    from tests.conftest import fork_call

    before = table()
    # a bigger config: new scheduler, weights, a second service; fails at its 4th change
    cfg = write("/tmp/fail.toml", config("wlc", {1: 5, 2: 2, 3: 1}) + (
        '\n[[service]]\nprotocol = "udp"\naddress = "10.0.0.100"\nport = 53\n'
        'scheduler = "sh"\nflags = ["sh-port"]\n'
        '[[service.real_server]]\naddress = "10.0.0.11"\n'))
    out: dict[str, Any] = {"before": before, "failed": fork_call(_apply_with_fault, cfg, 3)}
    out["after"] = table()
    out["history"] = cli("history", "--json", netns="dir")
    # a good apply, then `lbtune rollback` puts the previous table back
    out["apply"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
    out["applied"] = table()
    out["rollback"] = cli("rollback", netns="dir")
    out["rolled_back"] = table()
    return out


def run() -> dict[str, Any]:
    bed = Bed(3)
    out: dict[str, Any] = {}
    try:
        cfg = write("/tmp/dr.toml", config("rr"))
        phases = [("wrong_arp", lambda: phase_wrong_arp(bed, cfg)),
                  ("idempotence", lambda: phase_idempotence(cfg)),
                  ("distribution", phase_distribution), ("load", phase_under_load),
                  ("ipv6", phase_ipv6), ("rollback", phase_rollback)]
        out["seconds"] = {}
        for name, fn in phases:
            t = time.monotonic()
            out[name] = fn()
            out["seconds"][name] = round(time.monotonic() - t, 1)
    finally:
        bed.close()
    return out
