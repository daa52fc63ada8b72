"""`lbtune lab up --vm` as a user runs it: up (progress on stderr), status, status --json, a
racing `lab up`, `lab run --vm`, down, and what is left afterwards; commands, output and exit
codes as they ran.

Usage: python bench/lab_up_vm.py [--out FILE]     (root; make setup prepared the VM image)

The lab's run directory and TMPDIR are throwaway directories, so nothing of another lab is
touched. Results go to bench/results/lab_up_vm.json and .md (the session transcript, with the
host's load when it started: under TCG the boot time follows the load). Nothing here asserts
a number.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent


@dataclass
class Step:
    command: str
    exit_code: int
    seconds: float
    output: str  # stdout then stderr, as printed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "lab_up_vm.json")
    args = ap.parse_args()
    base = pathlib.Path(tempfile.mkdtemp(prefix="lbtune-bench-labup."))
    (base / "tmp").mkdir()
    env = {**os.environ, "LBTUNE_LAB_RUN_DIR": str(base / "run"), "TMPDIR": str(base / "tmp"),
           "PYTHONPATH": str(HERE.parent)}  # fmt: skip
    load1 = os.getloadavg()[0]
    steps: list[Step] = []

    def lbtune(*argv: str) -> Step:
        t = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "lbtune", *argv], env=env, text=True,
                           capture_output=True, check=False, timeout=1800)  # fmt: skip
        step = Step("lbtune " + " ".join(argv), p.returncode, time.monotonic() - t,
                    p.stdout + p.stderr)  # fmt: skip
        steps.append(step)
        print(f"$ {step.command}  (exit {step.exit_code}, {step.seconds:.1f} s)\n{step.output}",
              flush=True)  # fmt: skip
        return step

    try:
        lbtune("lab", "up", "--vm")
        lbtune("lab", "status")
        lbtune("lab", "status", "--json")
        lbtune("lab", "up")
        lbtune("lab", "run", "--vm")
        lbtune("lab", "down")
        lbtune("lab", "status")
        left = sorted(p.name for p in (base / "tmp").iterdir())
    finally:
        subprocess.run([sys.executable, "-m", "lbtune", "lab", "down"], env=env,
                       capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)
    meta = run_meta(1, load1=load1, left_in_tmpdir=left)
    write_json(args.out, meta, steps)
    lines = [
        "# `lbtune lab up --vm` session (bench/lab_up_vm.py)",
        "",
        f"{meta['date']}, host kernel {meta['kernel']}, {meta['cpus']} host CPUs, host load "
        f"{load1:.1f} at the start. Left in the lab's TMPDIR after `lab down`: "
        f"{', '.join(left) or 'nothing'}.",
        "",
        "```",
    ]
    for s in steps:
        lines += [f"$ {s.command}", *s.output.rstrip("\n").splitlines(),
                  f"(exit {s.exit_code}, {s.seconds:.1f} s)"]  # fmt: skip
    lines.append("```")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
