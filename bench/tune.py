"""Tuning benchmark: apply+rollback with lbtune vs. the runbook a user would run instead.

Usage: python bench/tune.py [--rounds N] [--out FILE]   (root; creates and deletes a netns)

Cases, each a fresh process per step, rounds interleaved, medians reported as ratios:
- fixture: `lbtune --root <copy of the 48-CPU fixture> plan lb-dr`, and `apply lb-dr` +
  `rollback`, against the `python3 -c pass` start-up floor (a fixture has no runbook
  equivalent); the issue's goal for lb-dr on this fixture is 150 ms (reported, not asserted).
- netns: `lbtune --netns NS apply web --yes` + `rollback` against the runbook that does the
  same work by hand: save the originals of the profile's per-namespace sysctls
  (`sysctl KEY...` into a file, which is `sysctl -p` format), `sysctl -p` the profile's
  values, and to roll back `sysctl -p` the saved file; each step a command in the namespace
  (`ip netns exec`), as lbtune enters it once per command. (`web` sets no RPS, so neither
  does the runbook; an earlier version of this bench looped over rps_cpus and saved the
  originals outside the timed steps.) `python3 -c pass` run twice, against the same
  runbook, shows how much of the 3x goal two Python processes leave.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Union

from results_io import run_meta

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tune",
    "profiles",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
NS = f"lbtune-bench-{os.getpid()}"
RUNBOOK = "runbook netns: save originals, sysctl -p, sysctl -p originals"
FLOOR = "python3 -c pass, twice (start-up floor of apply + rollback)"
WEB_NET = {
    "net.core.somaxconn": "8192",
    "net.ipv4.tcp_max_syn_backlog": "8192",
    "net.ipv4.tcp_slow_start_after_idle": "0",
    "net.ipv4.ip_local_port_range": "10000 65535",
    "net.ipv4.tcp_syncookies": "1",
    "net.ipv4.tcp_rmem": "4096 131072 16777216",
    "net.ipv4.tcp_wmem": "4096 16384 16777216",
}


def lbtune(*args: str) -> list[str]:
    exe = pathlib.Path(sys.executable).with_name("lbtune")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "lbtune", *args]


class Saved(list[str]):
    """A step whose standard output goes to a file (a shell's `> FILE`, without the shell)."""

    def __init__(self, argv: list[str], out: pathlib.Path) -> None:
        super().__init__(argv)
        self.out = out


def run(argv: list[str], env: dict[str, str] | None = None) -> str:
    """Run one step; its standard output (empty for a Saved step); SystemExit if it fails."""
    if isinstance(argv, Saved):
        with argv.out.open("w") as f:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, text=True, env=env,
                               check=False)  # fmt: skip
    else:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{argv}: exit {p.returncode}: {p.stderr[:300]}")
    return p.stdout or ""


# a step: an argv, or a function that builds it when the step runs (from what earlier ones wrote)
Step = Union[list[str], Callable[[], list[str]]]


def timed(steps: list[Step], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    for step in steps:
        run(step() if callable(step) else step, env)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)  # bench/results/tune.* were made with 15
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "tune.json")
    args = ap.parse_args()
    # What an installed package has: byte-compiled modules (PYTHONDONTWRITEBYTECODE may be set).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "lbtune")], check=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lbtune-bench-"))
    copy = tmp / "host"
    shutil.copytree(FIXTURE, copy, symlinks=True)
    env = dict(os.environ, LBTUNE_STATE_DIR=str(tmp / "state"))
    run(["ip", "netns", "add", NS])
    try:
        run(
            [
                "ip",
                "-n",
                NS,
                "link",
                "add",
                "v0",
                "numrxqueues",
                "4",
                "numtxqueues",
                "4",
                "type",
                "veth",
                "peer",
                "name",
                "v1",
            ]
        )
        conf = tmp / "runbook.conf"
        conf.write_text("".join(f"{k} = {v}\n" for k, v in WEB_NET.items()))
        saved = tmp / "originals.conf"
        ns = ["ip", "netns", "exec", NS]
        cases = {
            "python3 -c pass": ([[sys.executable, "-c", "pass"]], None),
            # The floor of any two-process Python CLI, against the runbook: what 3x leaves.
            FLOOR: ([[sys.executable, "-c", "pass"], [sys.executable, "-c", "pass"]], None),
            "lbtune fixture plan lb-dr": (
                [lbtune("--root", str(copy), "plan", "lb-dr", "--iface", "ens1f0np0")],
                env,
            ),
            "lbtune fixture apply lb-dr + rollback": (
                [
                    lbtune("--root", str(copy), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes"),
                    lbtune("--root", str(copy), "rollback"),
                ],
                env,
            ),
            "lbtune netns apply web + rollback": (
                [lbtune("--netns", NS, "apply", "web", "--yes"), lbtune("--netns", NS, "rollback")],
                env,
            ),
            RUNBOOK: (
                [
                    Saved([*ns, "sysctl", *WEB_NET], saved),  # originals, `sysctl -p` format
                    [*ns, "sysctl", "-q", "-p", str(conf)],
                    [*ns, "sysctl", "-q", "-p", str(saved)],  # the rollback
                ],
                None,
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for name, (steps, e) in cases.items():
                times[name].append(timed(steps, e))
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = {
        "lbtune fixture plan lb-dr": "python3 -c pass",
        "lbtune fixture apply lb-dr + rollback": "python3 -c pass",
        "lbtune netns apply web + rollback": RUNBOOK,
        FLOOR: RUNBOOK,
    }
    goals = {
        "lbtune fixture plan lb-dr": "≤ 150 ms",
        "lbtune fixture apply lb-dr + rollback": "≤ 150 ms per step",
        "lbtune netns apply web + rollback": "≤ 3.0x",
    }
    results = [
        {
            "case": k,
            "median_ms": round(m, 1),
            "baseline": base.get(k, ""),
            "ratio": round(m / med[base[k]], 2) if k in base else 1.0,
            "goal": goals.get(k, ""),
        }
        for k, m in med.items()
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = run_meta(args.rounds)
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = [
        f"# tune benchmark ({meta['date']}, Python {meta['python']}, {meta['cpus']} CPUs, "
        f"{args.rounds} rounds)",
        "",
        "| case | median ms | ratio | baseline | goal |",
        "|---|---:|---:|---|---|",
    ]
    lines += [
        f"| {r['case']} | {r['median_ms']} | {r['ratio']} | {r['baseline']} | {r['goal']} |"
        for r in results
    ]
    md = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
