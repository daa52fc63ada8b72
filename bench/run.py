"""lbtune benchmarks: wall time of commands as ratios to named baselines measured in the same run.

Usage: python bench/run.py [--rounds N] [--out FILE]

Each case is run as a fresh process (what a user pays), rounds are interleaved so that machine
noise hits every case alike, and the median is reported. lbtune is this checkout's (PYTHONPATH),
started by the venv's console script as a user starts it. Results go to bench/results/ as JSON
and a Markdown table, with the load average before and after; no test asserts a time. A case
with a target ratio (`lbtune --help`: at most 4x `python3 -c pass`, issue 31) above it makes
this script exit 1, after writing the results.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE_48 = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"


@dataclass
class Case:
    name: str
    argv: list[str]
    baseline: str  # name of the case this one is compared with ("" for a baseline)
    target_ratio: float = 0.0  # the target: above it this script exits 1


@dataclass
class Result:
    name: str
    baseline: str
    median_ms: float
    min_ms: float
    ratio: float
    target_ratio: float


def lbtune_argv(*args: str) -> list[str]:
    exe = pathlib.Path(sys.executable).with_name("lbtune")
    if exe.exists():
        return [str(exe), *args]
    return [sys.executable, "-m", "lbtune", *args]


def cases() -> list[Case]:
    out = [
        Case("python3 -c pass", [sys.executable, "-c", "pass"], ""),
        Case("lbtune --help", lbtune_argv("--help"), "python3 -c pass", 4.0),
        # click and lbtune.cli.main load (--help is answered before them: lbtune.cli.tophelp)
        Case("lbtune --version (the click group)", lbtune_argv("--version"), "python3 -c pass"),
        Case("lbtune show --json (this host)", lbtune_argv("show", "--json"), "python3 -c pass"),
    ]
    if FIXTURE_48.is_dir():
        out.append(
            Case(
                "lbtune show --json (48-CPU fixture)",
                lbtune_argv("--root", str(FIXTURE_48), "show", "--json"),
                "python3 -c pass",
            )
        )
    return out


def measure(all_cases: list[Case], rounds: int) -> dict[str, list[float]]:
    # What an installed package has: byte-compiled modules (PYTHONDONTWRITEBYTECODE may be set).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "lbtune")], check=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}  # this checkout's lbtune
    times: dict[str, list[float]] = {c.name: [] for c in all_cases}
    for c in all_cases:  # warm the page cache once
        subprocess.run(c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                       check=False)  # fmt: skip
    for _ in range(rounds):
        for c in all_cases:
            t0 = time.perf_counter()
            p = subprocess.run(
                c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False
            )
            times[c.name].append((time.perf_counter() - t0) * 1000)
            if p.returncode != 0:
                raise SystemExit(f"{c.name}: exit {p.returncode}: {p.stderr.decode()[:200]}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "startup.json")
    args = ap.parse_args()
    all_cases = cases()
    load_before = os.getloadavg()
    times = measure(all_cases, args.rounds)
    load_after = os.getloadavg()
    med = {name: statistics.median(v) for name, v in times.items()}
    results = [
        Result(
            c.name,
            c.baseline,
            round(med[c.name], 2),
            round(min(times[c.name]), 2),
            round(med[c.name] / med[c.baseline], 2) if c.baseline else 1.0,
            c.target_ratio,
        )
        for c in all_cases
    ]
    meta = run_meta(
        args.rounds,
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in load_after],
    )
    write_json(args.out, meta, results)
    lines = [
        f"# startup benchmark ({meta['date']} at {meta['commit']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after)",
        "",
        "| case | median ms | min ms | ratio to baseline | target |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        base = f" x `{r.baseline}`" if r.baseline else " (baseline)"
        target = f"≤ {r.target_ratio}x" if r.target_ratio else ""
        lines.append(f"| {r.name} | {r.median_ms} | {r.min_ms} | {r.ratio}{base} | {target} |")
    over = [r for r in results if r.target_ratio and r.ratio > r.target_ratio]
    lines += [""] + [
        f"**{r.name}: {r.ratio}x `{r.baseline}`, above its target of {r.target_ratio}x.**"
        for r in over
    ]
    md = "\n".join(lines).rstrip() + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
