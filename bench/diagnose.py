"""Sampling-tick benchmark: CPU time of one lbtune sampler tick vs. the runbook a user runs today.

Usage: python bench/diagnose.py [--rounds N] [--ticks N] [--iface IF] [--out FILE]

Cases, measured in the same run with rounds interleaved, medians reported as ratios:
- `Sampler(host).take()` in-process (what `lbtune diagnose` and the monitor pay per tick once
  running) on this host (all NICs, and only IF), and on the 48-CPU fixture tree
  (tests/data/hosts/dell-r750-mlx5-ixgbe: recorded ethtool text parsed every tick).
  CPU time = time.process_time() of this process (user + system, netlink dumps included).
- the runbook, baseline: `nstat -az; ethtool -S IF; cat /proc/net/softnet_stat; ss -s` as
  subprocesses, CPU time = getrusage(RUSAGE_CHILDREN) user + system, process start included
  (that is what a user pays each time). nstat keeps its history in a temporary file
  (NSTAT_HISTORY) so the user's own is not touched.

Results go to bench/results/diagnose.json and .md; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/observe",
    "lbtune/host",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE_48 = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
RUNBOOK = "runbook: nstat -az; ethtool -S IF; cat softnet_stat; ss -s"
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


@dataclass
class Result:
    name: str
    baseline: str
    cpu_ms: float  # median CPU ms per tick
    wall_ms: float  # median wall ms per tick
    cpu_ratio: float
    wall_ratio: float
    note: str = ""


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def pick_iface() -> str:
    """The interface a user would look at: the first with a device and ethtool statistics."""
    from lbtune.host.net.ethtool import LiveEthtool

    eth = LiveEthtool()
    names = sorted(os.listdir("/sys/class/net"))
    with_device = [n for n in names if os.path.exists(f"/sys/class/net/{n}/device")]
    for n in with_device + names:
        if eth.stats(n):
            return n
    raise SystemExit("no interface with ethtool statistics on this host")


def runbook_tick(iface: str, env: dict[str, str]) -> Callable[[], None]:
    argvs = [
        ["nstat", "-az"],
        ["ethtool", "-S", iface],
        ["cat", "/proc/net/softnet_stat"],
        ["ss", "-s"],
    ]

    def tick() -> None:
        for argv in argvs:
            p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            if p.returncode != 0:
                raise SystemExit(f"{argv}: exit {p.returncode}: {p.stderr.decode()[:200]}")

    return tick


def sampler_tick(
    root: str, ifaces: Optional[list[str]] = None, rules_spec: bool = False
) -> tuple[Callable[[], None], str]:
    """A sampler tick; with `rules_spec`, what `lbtune diagnose` reads per sample (the
    configuration every rule declares and the TCP sockets under receive pressure)."""
    from lbtune.host.host import Host
    from lbtune.observe.sampler import Sampler, SampleSpec

    spec = SampleSpec()
    if rules_spec:
        from lbtune.diagnose.rules import RULES, sample_spec

        spec = sample_spec(RULES)
    sampler = Sampler(Host.open(root), ifaces, spec)
    sample = sampler.take()  # warm: imports, first netlink socket
    note = ""
    if sample.missing:
        note = "not in the tree: " + ", ".join(sorted(sample.missing))

    def tick() -> None:
        sampler.take()

    return tick, note


Case = tuple[Callable[[], None], bool, int]  # tick, measured as children?, ticks per round


def measure(cases: dict[str, Case], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Per case, (cpu ms, wall ms) per tick for each round; rounds interleave the cases."""
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (tick, children, n) in cases.items():
            clock = _children_cpu if children else time.process_time
            c0, w0 = clock(), time.perf_counter()
            for _ in range(n):
                tick()
            c1, w1 = clock(), time.perf_counter()
            out[name].append(((c1 - c0) * 1000 / n, (w1 - w0) * 1000 / n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)  # as bench/results/diagnose.*
    ap.add_argument("--ticks", type=int, default=20, help="ticks per round and case")
    ap.add_argument("--iface", help="interface for `ethtool -S` (default: first with stats)")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "diagnose.json")
    args = ap.parse_args()
    missing = [c for c in ("nstat", "ethtool", "ss", "cat") if shutil.which(c) is None]
    if missing:
        raise SystemExit(f"the runbook needs {', '.join(missing)} (iproute2, ethtool)")
    iface = args.iface or pick_iface()
    tmp = tempfile.mkdtemp(prefix="lbtune-bench-")
    env = dict(os.environ, NSTAT_HISTORY=os.path.join(tmp, "nstat.history"), LC_ALL="C")
    try:
        host_all, _ = sampler_tick("/")
        host_rules, _ = sampler_tick("/", rules_spec=True)
        host_one, _ = sampler_tick("/", [iface])
        fixture, fixture_note = sampler_tick(str(FIXTURE_48))
        cases: dict[str, Case] = {
            RUNBOOK: (runbook_tick(iface, env), True, max(1, args.ticks // 4)),
            "lbtune Sampler.take() this host, all NICs": (host_all, False, args.ticks),
            "lbtune diagnose sample (+ rules' config, TCP receivers)": (
                host_rules,
                False,
                args.ticks,
            ),
            f"lbtune Sampler.take() this host, --iface {iface}": (host_one, False, args.ticks),
            "lbtune Sampler.take() 48-CPU fixture": (fixture, False, args.ticks),
        }
        runbook_tick(iface, env)()  # warm the page cache
        times = measure(cases, args.rounds)
    finally:
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v))
           for k, v in times.items()}  # fmt: skip
    base_cpu, base_wall = med[RUNBOOK]
    results = []
    for name, (cpu, wall) in med.items():
        is_base = name == RUNBOOK
        results.append(
            Result(
                name=name,
                baseline="" if is_base else RUNBOOK,
                cpu_ms=round(cpu, 2),
                wall_ms=round(wall, 2),
                cpu_ratio=1.0 if is_base else round(cpu / base_cpu, 2),
                wall_ratio=1.0 if is_base else round(wall / base_wall, 2),
                note=fixture_note if "fixture" in name else "",
            )
        )
    meta = run_meta(
        args.rounds,
        ticks_per_round=args.ticks,
        runbook_ticks_per_round=max(1, args.ticks // 4),
        iface=iface,
    )
    write_json(args.out, meta, results)
    lines = [
        f"# sampling-tick benchmark ({meta['date']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds, iface {iface})",
        "",
        "CPU time per tick: lbtune in-process (`time.process_time`), the runbook as child "
        "processes (`RUSAGE_CHILDREN`, process start included). Median over rounds.",
        "",
        "| case | CPU ms/tick | wall ms/tick | CPU ratio | wall ratio | note |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        base = " (baseline)" if not r.baseline else ""
        lines.append(
            f"| {r.name} | {r.cpu_ms} | {r.wall_ms} | {r.cpu_ratio}{base} | {r.wall_ratio} "
            f"| {r.note} |"
        )
    md = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
