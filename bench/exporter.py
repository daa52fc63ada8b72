"""Scrape cost and series count: `lbtune exporter` against Debian's prometheus-node-exporter.

node_exporter runs by hand (never as a service) on a loopback port with only the collectors
that cover lbtune's ground: netstat, softnet, ipvs and conntrack (`--collector.disable-
defaults`, and `--web.disable-exporter-metrics` so that neither side counts its own Go or
Python runtime series). lbtune runs with `--min-interval 0`, so every scrape samples the host
as node_exporter's does. Both are scraped in alternation over the same minute: wall time of
each GET (median, p90), CPU time each process spent per scrape, series and bytes per answer.

Two hosts: this machine (live), and the 48-CPU 2-NIC fixture
(tests/data/hosts/dell-r750-mlx5-ixgbe) read by both (`--root` / `--path.procfs` and
`--path.sysfs`), where the series count is the one a big LB host would show. On the fixture
a third process runs: lbtune's exporter with its sample taken once and handed back on every
scrape (`--serve-floor`, this script patching `Sampler.take` in that process, never in lbtune):
everything a scrape does but read and parse the host (rules, counter totals, series, text,
HTTP). Its CPU against node_exporter's is the floor that no faster reading of the host can go
below.

On both hosts node_exporter runs a second time with the collectors that read the kernel files
lbtune reads too where it has one that reads a tree (NODE_GROUND: the four above, and
interrupts, netclass and sockstat): a comparison on the same ground, beside the goal's (issue
33 names the four-collector baseline; this row is not a goal).

Run: `.venv/bin/python bench/exporter.py` (`make bench`); writes bench/results/exporter.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import psutil
from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/exporter",
    "lbtune/observe",
    "lbtune/diagnose",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "exporter.json"
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
NODE_EXPORTER = "prometheus-node-exporter"
NODE_COLLECTORS = ("netstat", "softnet", "ipvs", "conntrack")
# node_exporter reading the kernel files lbtune's exporter reads too, where it has a collector
# for them that reads a tree: its interrupts (the 48-CPU fixture's 90 kB), its network
# interfaces' sysfs attributes and sockstat. Not a goal's baseline (issue 33 names the four
# above); a comparison on the same ground. lbtune reads more still: ethtool statistics, qdiscs
# and sockets, which node_exporter reads by ioctl and netlink only (not from a tree) or not.
NODE_GROUND = (*NODE_COLLECTORS, "interrupts", "netclass", "sockstat")
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Result:
    host: str  # "live" | "fixture 48 CPUs"
    exporter: str
    series: int
    bytes: int
    scrape_ms_median: float
    scrape_ms_p90: float
    cpu_ms_per_scrape: float
    drop_cause_series: int  # lbtune_drops_total{cause}
    finding_series: int  # lbtune_finding
    ratio_series_to_node: float
    ratio_time_to_node: float
    ratio_cpu_to_node: float  # issue 33's goal: at most 2
    # against node_exporter on the same ground (NODE_GROUND), when it ran: not a goal
    ratio_cpu_to_ground: Optional[float] = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[float, bytes]:
    t = time.perf_counter()
    with DIRECT.open(url, timeout=30) as r:
        body = r.read()
    return time.perf_counter() - t, body


def wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: exporter exited ({proc.returncode})")
        try:
            get(url)
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url}: not up after 60 s")


def serve_floor(argv: list[str]) -> int:
    """lbtune's command line with `Sampler.take` giving its first sample again every time."""
    sys.path.insert(0, str(ROOT))
    from lbtune.cli.entry import main as lbtune_main
    from lbtune.observe.sampler import Sampler

    real = Sampler.take
    kept: dict[int, object] = {}

    def take(self: Sampler) -> object:
        if id(self) not in kept:
            kept[id(self)] = real(self)
        return kept[id(self)]

    Sampler.take = take  # type: ignore[method-assign,assignment]
    sys.argv = ["lbtune", *argv]
    lbtune_main()
    return 0


def start(kind: str, root: Optional[Path], port: int) -> subprocess.Popen[bytes]:
    if kind in ("node", "node-ground"):
        argv = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                "--collector.disable-defaults", "--web.disable-exporter-metrics",
                *(f"--collector.{c}"
                  for c in (NODE_COLLECTORS if kind == "node" else NODE_GROUND))]  # fmt: skip
        if root is not None:
            argv += [f"--path.procfs={root / 'proc'}", f"--path.sysfs={root / 'sys'}"]
    else:
        pre = ["--root", str(root)] if root is not None else []
        run = [sys.executable, "-m", "lbtune"]
        if kind == "floor":
            run = [sys.executable, str(Path(__file__).resolve()), "--serve-floor"]
        argv = [*run, *pre, "exporter",
                "--listen", f"127.0.0.1:{port}", "--min-interval", "0"]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpu(proc: subprocess.Popen[bytes]) -> float:
    t = psutil.Process(proc.pid).cpu_times()
    return float(t.user + t.system)


def count(body: bytes, prefix: str = "") -> int:
    lines = body.decode().splitlines()
    return sum(1 for s in lines if s and not s.startswith("#") and s.startswith(prefix))


LABELS = {
    "lbtune": "lbtune exporter",
    "floor": "lbtune exporter, its sample taken once (floor: all but reading the host)",
    "node": f"node_exporter ({','.join(NODE_COLLECTORS)})",
    "node-ground": f"node_exporter on the same ground ({','.join(NODE_GROUND)}; not the goal's)",
}


def measure(host: str, root: Optional[Path], rounds: int, pause: float,
            kinds: tuple[str, ...] = ("lbtune", "node")) -> list[Result]:  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}
    urls: dict[str, str] = {}
    try:
        for kind in kinds:
            port = free_port()
            procs[kind] = start(kind, root, port)
            urls[kind] = f"http://127.0.0.1:{port}/metrics"
        for kind in procs:
            wait_up(urls[kind], procs[kind])
            for _ in range(3):  # warm-up: first scrapes, caches
                get(urls[kind])
        times: dict[str, list[float]] = {k: [] for k in procs}
        cpu0 = {k: cpu(p) for k, p in procs.items()}
        bodies: dict[str, bytes] = {}
        for _ in range(rounds):
            for kind in procs:  # alternate: both see the same minute
                seconds, bodies[kind] = get(urls[kind])
                times[kind].append(seconds)
            time.sleep(pause)
        cpu_used = {k: cpu(p) - cpu0[k] for k, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    node_series = count(bodies["node"])
    node_ms = statistics.median(times["node"]) * 1000
    node_cpu = cpu_used["node"] / rounds * 1000
    ground_cpu = cpu_used["node-ground"] / rounds * 1000 if "node-ground" in cpu_used else None
    out = []
    for kind in kinds:
        t = sorted(times[kind])
        med = statistics.median(t) * 1000
        out.append(Result(
            host=host,
            exporter=LABELS[kind],
            series=count(bodies[kind]),
            bytes=len(bodies[kind]),
            scrape_ms_median=round(med, 2),
            scrape_ms_p90=round(t[int(0.9 * (len(t) - 1))] * 1000, 2),
            cpu_ms_per_scrape=round(cpu_used[kind] / rounds * 1000, 2),
            drop_cause_series=count(bodies[kind], "lbtune_drops_total{"),
            finding_series=count(bodies[kind], "lbtune_finding{"),
            ratio_series_to_node=round(count(bodies[kind]) / node_series, 2),
            ratio_time_to_node=round(med / node_ms, 2),
            ratio_cpu_to_node=round(cpu_used[kind] / rounds * 1000 / node_cpu, 2),
            ratio_cpu_to_ground=None if not ground_cpu else round(
                cpu_used[kind] / rounds * 1000 / ground_cpu, 2),
        ))  # fmt: skip
    return out


def main() -> int:
    if sys.argv[1:2] == ["--serve-floor"]:
        return serve_floor(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 120: CPU time is read in 10 ms ticks, so 40 rounds resolved a scrape's CPU to 0.25 ms only
    ap.add_argument("--rounds", type=int, default=120, help="scrapes of each exporter per host")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between rounds")
    args = ap.parse_args()
    if shutil.which(NODE_EXPORTER) is None:
        print(f"bench/exporter.py: {NODE_EXPORTER} missing (make setup installs it)",
              file=sys.stderr)  # fmt: skip
        return 3
    version = subprocess.run([NODE_EXPORTER, "--version"], capture_output=True, text=True,
                             check=False).stdout.splitlines()[0]  # fmt: skip
    load_before = os.getloadavg()[0]
    results = measure("live", None, args.rounds, args.pause, ("lbtune", "node", "node-ground"))
    results += measure("fixture 48 CPUs, 2 NICs", FIXTURE, args.rounds, args.pause,
                       ("lbtune", "floor", "node", "node-ground"))  # fmt: skip
    load = (round(load_before, 2), round(os.getloadavg()[0], 2))  # a shared machine: say so
    write_json(OUT, run_meta(args.rounds, pause=args.pause, node_exporter=version,
                             loadavg_1min_before_after=load), results)  # fmt: skip
    write_markdown(
        OUT,
        ["# lbtune exporter vs node_exporter: scrape time and series",
         "",
         f"{args.rounds} scrapes of each, alternating, {args.pause} s apart, same minute; "
         f"{version}; node_exporter with only its {', '.join(NODE_COLLECTORS)} collectors and "
         "no exporter-runtime series; lbtune with --min-interval 0 (it samples on every "
         "scrape). CPU ms per scrape = the process's user+system CPU over the rounds / "
         "rounds; CPU / node is that against node_exporter's (goal: at most 2). The fixture "
         "is read by both (--root; --path.procfs/--path.sysfs). The floor row is lbtune's "
         "exporter with its sample taken once and given again on every scrape: the CPU of "
         "all a scrape does but read the host. The same-ground row is node_exporter with "
         f"the collectors that read files lbtune reads too ({', '.join(NODE_GROUND)}); "
         "CPU / ground is against it (not a goal). "
         f"1-minute load average {load[0]} before, {load[1]} after. `bench/exporter.py`."],
        [("host", "l"), ("exporter", "l"), ("series", "r"), ("bytes", "r"),
         ("scrape ms (median)", "r"), ("p90", "r"), ("CPU ms/scrape", "r"),
         ("drop-cause series", "r"), ("finding series", "r"),
         ("series / node", "r"), ("time / node", "r"), ("CPU / node", "r"),
         ("CPU / ground", "r")],
        [[r.host, r.exporter, str(r.series), str(r.bytes), f"{r.scrape_ms_median:.2f}",
          f"{r.scrape_ms_p90:.2f}", f"{r.cpu_ms_per_scrape:.2f}", str(r.drop_cause_series),
          str(r.finding_series), f"{r.ratio_series_to_node:.2f}",
          f"{r.ratio_time_to_node:.2f}", f"{r.ratio_cpu_to_node:.2f}",
          "" if r.ratio_cpu_to_ground is None else f"{r.ratio_cpu_to_ground:.2f}"]
         for r in results],
    )  # fmt: skip
    print(json.dumps({"written": str(OUT)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
