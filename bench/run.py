"""lbtune benchmarks: wall time of commands as ratios to named baselines measured in the same run.

Usage: python bench/run.py [--rounds N] [--out FILE]

Each case is run as a fresh process (what a user pays), rounds are interleaved so that machine
noise hits every case alike, and the median is reported. Results go to bench/results/ as JSON
and a Markdown table; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/__init__.py",
    "lbtune/__main__.py",
    "lbtune/cli",
    "lbtune/environ.py",
    "lbtune/errors.py",
    "lbtune/host",
    "lbtune/vocab.py",
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
    target_ratio: float = 0.0  # the target, reported, never asserted


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
    times: dict[str, list[float]] = {c.name: [] for c in all_cases}
    for c in all_cases:  # warm the page cache once
        subprocess.run(c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    for _ in range(rounds):
        for c in all_cases:
            t0 = time.perf_counter()
            p = subprocess.run(
                c.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
            )
            times[c.name].append((time.perf_counter() - t0) * 1000)
            if p.returncode != 0:
                raise SystemExit(f"{c.name}: exit {p.returncode}: {p.stderr.decode()[:200]}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "startup.json")
    args = ap.parse_args()
    all_cases = cases()
    times = measure(all_cases, args.rounds)
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
    meta = run_meta(args.rounds)
    write_json(args.out, meta, results)
    lines = [
        f"# startup benchmark ({meta['date']}, Python {meta['python']}, {meta['cpus']} CPUs, "
        f"{args.rounds} rounds)",
        "",
        "| case | median ms | min ms | ratio to baseline | target |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in results:
        base = f" x `{r.baseline}`" if r.baseline else " (baseline)"
        target = f"≤ {r.target_ratio}x" if r.target_ratio else ""
        lines.append(f"| {r.name} | {r.median_ms} | {r.min_ms} | {r.ratio}{base} | {target} |")
    md = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
