"""Tab completion's cost: one `lbtune` process per Tab, as the shells' scripts start it.

Usage: python bench/completion.py [--rounds N] [--out FILE]

Each case asks for the candidates at the end of a command line through click's protocol
(`_LBTUNE_COMPLETE=bash_complete`, COMP_WORDS, COMP_CWORD, set by `env` as the bash script
sets them), beside `python3 -c pass` and `lbtune --version` (the click group's own start),
measured the way bench/run.py measures the start-up (its `measure`: fresh processes, rounds
interleaved, medians). Results: bench/results/completion.json and .md; no target, no test
asserts a time.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys

from results_io import run_meta, write_json
from run import Case, Result, lbtune_argv, measure

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every completion starts (bench/check.py GROUPS)
    "profiles",  # the shipped profiles a profile name is completed from
)

HERE = pathlib.Path(__file__).resolve().parent
BASE = "python3 -c pass"
COMPLETIONS = (
    ("a subcommand (`lbtune ipvs a`)", "lbtune ipvs a"),
    ("a profile name (`lbtune apply `)", "lbtune apply "),
    ("an interface (`lbtune show --iface `)", "lbtune show --iface "),
)


def completion_argv(line: str) -> list[str]:
    """lbtune asked for the candidates at the end of `line`, as bash's script asks."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    return ["env", "_LBTUNE_COMPLETE=bash_complete", f"COMP_WORDS={line}",
            f"COMP_CWORD={cword}", *lbtune_argv()]  # fmt: skip


def cases() -> list[Case]:
    return [
        Case(BASE, [sys.executable, "-c", "pass"], ""),
        Case("lbtune --version (the click group)", lbtune_argv("--version"), BASE),
        *(Case(f"Tab completion: {what}", completion_argv(line), BASE)
          for what, line in COMPLETIONS),
    ]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "completion.json")
    args = ap.parse_args()
    all_cases = cases()
    load_before = os.getloadavg()
    times = measure(all_cases, args.rounds)
    load_after = os.getloadavg()
    med = {name: statistics.median(v) for name, v in times.items()}
    results = [
        Result(c.name, c.baseline, round(med[c.name], 2), round(min(times[c.name]), 2),
               round(med[c.name] / med[c.baseline], 2) if c.baseline else 1.0, 0.0)
        for c in all_cases
    ]  # fmt: skip
    meta = run_meta(args.rounds, load_before=[round(x, 2) for x in load_before],
                    load_after=[round(x, 2) for x in load_after])  # fmt: skip
    write_json(args.out, meta, results)
    lines = [
        f"# Tab completion ({meta['date']} at {meta['commit']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds; load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{' '.join(f'{x:.2f}' for x in load_after)} after)",
        "",
        "| case | median ms | min ms | ratio to baseline |",
        "|---|---:|---:|---:|",
    ]
    for r in results:
        base = f" x `{r.baseline}`" if r.baseline else " (baseline)"
        lines.append(f"| {r.name} | {r.median_ms} | {r.min_ms} | {r.ratio}{base} |")
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
