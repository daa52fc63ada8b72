"""VM lab benchmark: how long the VM guest takes to boot, to start Python, to run
`lbtune show`, and to reboot; with the guest's own `lbtune show` as it printed it.

Usage: python bench/vm.py [--rounds N] [--out FILE]     (root; make setup prepared the image)

Each round boots a fresh guest (lbtune.lab.guests.vm.VmGuest), times `python3 -c pass`,
`lbtune show --json`, a test helper call (`VmGuest.call`, median of 5 interleaved pairs: forked
from the guest agent's fork server (`VmGuest.fork_calls(True)`), and `fresh=True`, a new
`python -m lbtune.lab.inguest.entry`)
and a reboot, then powers it off. The host's load at the start of each
round is recorded beside it: under TCG on a shared 2-core machine the times follow the load,
so read them as "what this machine gave at that moment", not as a property of the VM.

Results go to bench/results/vm.json and .md (with the last round's `lbtune show` text);
nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time
from dataclasses import dataclass

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from lbtune.lab.guests.vm import VmGuest  # noqa: E402


@dataclass
class Round:
    load1: float  # host load average (1 min) when the round started
    accelerator: str
    boot_s: float  # qemu start -> guest agent ready
    python_s: float  # `python3 -c pass` in the guest, host-measured round trip
    show_s: float  # `lbtune show --json` in the guest
    call_forked_s: float  # VmGuest.call of a trivial target, forked (median of CALLS)
    call_fresh_s: float  # the same call in a new interpreter (fresh=True)
    reboot_s: float  # guest reboot -> agent ready again


CALLS = 5
TARGET = "tests.vm.loop_targets:queue_irqs"  # a real test helper: eth0's queue IRQs from /proc


def _timed(g: VmGuest, argv: list[str]) -> tuple[float, str]:
    t = time.monotonic()
    r = g.run(argv, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{argv[0]} failed in the guest: {r.stderr.strip()}")
    return time.monotonic() - t, r.stdout


def _calls(g: VmGuest) -> tuple[float, float]:
    """Median seconds of a helper call forked and fresh, CALLS interleaved pairs."""
    g.fork_calls(True)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(CALLS):
        for fresh in (False, True):
            t = time.monotonic()
            g.call(TARGET, ["eth0"], fresh=fresh)
            times[fresh].append(time.monotonic() - t)
    return statistics.median(times[False]), statistics.median(times[True])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "vm.json")
    args = ap.parse_args()
    rounds: list[Round] = []
    show_text = ""
    describe: dict[str, object] = {}
    for _ in range(args.rounds):
        load1 = os.getloadavg()[0]
        with VmGuest.boot() as g:
            boot_s = g.boot_seconds
            python_s, _ = _timed(g, ["python3", "-c", "pass"])
            show_s, _ = _timed(g, ["lbtune", "show", "--json"])
            _, show_text = _timed(g, ["env", "COLUMNS=100", "lbtune", "show"])
            forked_s, fresh_s = _calls(g)
            describe = g.describe()
            g.reboot()
            rounds.append(Round(load1, g.accel, boot_s, python_s, show_s, forked_s, fresh_s,
                                g.boot_seconds))
        print(rounds[-1], flush=True)
    meta = run_meta(args.rounds, guest=describe)
    write_json(args.out, meta, rounds)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}"

    rows = [[f"{r.load1:.1f}", r.accelerator, f"{r.boot_s:.1f}", f"{r.python_s:.1f}",
             f"{r.show_s:.1f}", f"{r.call_forked_s:.2f}", f"{r.call_fresh_s:.2f}",
             f"{r.reboot_s:.1f}"] for r in rounds]  # fmt: skip
    rows.append(["median", "", med([r.boot_s for r in rounds]),
                 med([r.python_s for r in rounds]), med([r.show_s for r in rounds]),
                 f"{statistics.median([r.call_forked_s for r in rounds]):.2f}",
                 f"{statistics.median([r.call_fresh_s for r in rounds]):.2f}",
                 med([r.reboot_s for r in rounds])])  # fmt: skip
    heading = [
        "# VM lab: boot and command times (bench/vm.py)",
        "",
        f"{meta['date']}, host kernel {meta['kernel']}, {meta['cpus']} host CPUs; guest kernel "
        f"{describe.get('kernel')}, {describe.get('cpus')} vCPUs, accelerator "
        f"{describe.get('accelerator')} ({describe.get('accelerator_reason')}). Seconds.",
    ]
    cols = [("host load", "r"), ("accel", "l"), ("boot", "r"), ("python -c pass", "r"),
            ("lbtune show --json", "r"), ("call, forked", "r"), ("call, fresh", "r"),
            ("reboot", "r")]  # fmt: skip
    write_markdown(args.out, heading, cols, rows)
    md = args.out.with_suffix(".md")
    with md.open("a", encoding="utf-8") as fh:
        fh.write("\n`lbtune show` in the guest (last round):\n\n```\n" + show_text + "```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
