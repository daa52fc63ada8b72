"""How long `make test` takes: a fresh clone of HEAD, `CI=true make test`, each tier's time.

Usage: python bench/suite.py [--out FILE] [--keep]

The clone is what CI checks out (committed files only); `make test` in it runs `make setup`
(idempotent: on this machine the packages and the VM image are there already, so the set-up
time here is not a fresh machine's) and then the tox tiers two at a time (tox.ini). The tiers'
times are tox's own summary lines; the run's wall time is measured here. Results go to
bench/results/suite.{json,md}; the clone and its full log stay when `make test` fails (and with
--keep), and the script says where. Nothing asserts a
time: the ~30 minute budget is the brief's, and the table says where the time goes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune",
    "probes",
    "profiles",
    "tests",
    "ansible",
    "scripts",
    "tox.ini",
    "Makefile",
    "pyproject.toml",
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# tox's summary: "  vm: OK (1687.59=setup[16.80]+cmd[1670.79] seconds)"
TIER = re.compile(r"^\s+(\w+): (OK|FAIL)[^(]*\(([\d.]+)=setup\[([\d.]+)\]\+cmd\[([\d., ]+)\]")
TOTAL = re.compile(r"(congratulations :\)|evaluation failed :\() \(([\d.]+) seconds\)")
PYTEST = re.compile(r"=+ (.*) in ([\d.]+)s")


@dataclass
class Tier:
    name: str
    result: str
    seconds: float
    setup_seconds: float


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "suite.json")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its log")
    args = ap.parse_args()

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    load_before = os.getloadavg()[0]
    # not under /tmp: the VM guest mounts its own /tmp, so a venv there is invisible to it
    work = Path(tempfile.mkdtemp(prefix="lbtune-suite-", dir="/var/tmp"))
    clone = work / "lbtune"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    log = work / "make-test.log"
    print(f"suite: make test in a fresh clone of {head} ({clone}); log {log}", flush=True)
    start = time.monotonic()
    pytest_lines: list[str] = []
    with open(log, "w", encoding="utf-8", buffering=1) as fh:  # line by line: readable mid-run
        env = {**os.environ, "CI": "true"}
        proc = subprocess.Popen(["make", "test"], cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        assert proc.stdout is not None
        tiers: list[Tier] = []
        total = 0.0
        for line in proc.stdout:
            fh.write(line)
            if (p := PYTEST.search(line)) and (" passed" in line or " failed" in line):
                pytest_lines.append(p.group(1))
            if m := TIER.match(line):
                tiers.append(Tier(m[1], m[2], float(m[3]), float(m[4])))
            elif m := TOTAL.search(line):
                total = float(m[2])
            if re.match(r"\w+: (OK|FAIL)", line) or (p and " failed" in line):
                print("  " + line.rstrip()[:160], flush=True)
        code = proc.wait()
    wall = time.monotonic() - start
    meta = run_meta(1, commit=head, load_before=round(load_before, 2), exit_code=code,
                    wall_seconds=round(wall, 1), tox_seconds=total)  # fmt: skip
    write_json(args.out, meta, tiers)
    rows = [[t.name, t.result, f"{t.seconds / 60:.1f}", f"{t.seconds:.0f}"] for t in tiers]
    rows.append(["tox (tiers two at a time)", "OK" if code == 0 else "FAIL",
                 f"{total / 60:.1f}", f"{total:.0f}"])  # fmt: skip
    rows.append(["make test (set-up included)", "", f"{wall / 60:.1f}", f"{wall:.0f}"])
    write_markdown(
        args.out,
        [
            "# make test: the whole suite (bench/suite.py)",
            "",
            f"{meta['date']}, commit {head}, {meta['cpus']} CPUs, kernel {meta['kernel']}, "
            f"load average {load_before:.2f} before the run; `CI=true make test` in a fresh "
            f"clone, exit code {code}. The tiers run two at a time (vm beside py, then lab; "
            "lint last), so the tiers' times add up to more than the whole.",
            "",
            "pytest's last lines, in the order the tiers ended: " + "; ".join(pytest_lines),
        ],
        [("tier", "l"), ("result", "l"), ("minutes", "r"), ("seconds", "r")],
        rows,
    )
    if args.keep or code != 0:
        print(f"suite: kept {clone} and its log {log}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
