"""VM lab soak: how often the guest kernel wedges under the vm tier's heaviest step.

Usage: python bench/vm_soak.py [--guests G] [--cycles N] [--load K] [--out FILE]   (root)

CI lost a vm run to a guest whose CPU 0 stopped taking interrupts during `lbtune apply
--persist` of test_vm_persist.py (docs/testing.md, "Rules"). This repeats that step: each of G
fresh guests (lbtune.lab.guests.vm.VmGuest) is made a Debian host with grub defaults and the
`update-grub` stand-in as that test does, then runs N cycles of `lbtune apply lb-dr-iso --iface
eth0 --persist --yes` and `lbtune rollback` (which runs update-grub again). K busy processes
on the host stand in for the tiers that share the machine with the vm tier in `make test`. A
request the guest leaves unanswered after a kernel stall report is a wedge (GuestWedged); the
guest is then dropped and the next one booted. Results: bench/results/vm_soak.{json,md}, with
each wedge's first report lines. Nothing asserts a number.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/__init__.py",
    "lbtune/__main__.py",
    "lbtune/cli",
    "lbtune/environ.py",
    "lbtune/errors.py",
    "lbtune/host",
    "lbtune/vocab.py",
    "lbtune/lab",
    "lbtune/tune",
    "profiles",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from lbtune.lab.guests.uml import LabError  # noqa: E402
from lbtune.lab.guests.vm import GuestWedged, VmGuest  # noqa: E402

DATA = ROOT / "tests" / "vm" / "data"
PROFILE = str(DATA / "lb-dr-iso.toml")
TIMEOUT = 600
FILES = (  # what test_vm_persist.py installs in the guest: (source, path, mode)
    (DATA / "grub", "/etc/default/grub", "644"),
    (DATA / "50-lab.cfg", "/etc/default/grub.d/50-lab.cfg", "644"),
    (DATA / "update-grub", "/usr/local/sbin/update-grub", "755"),
)


@dataclass
class GuestRun:
    load1: float  # host load average (1 min) at the boot
    boot_s: float
    cycles: int  # apply + rollback cycles completed
    apply_s: list[float] = field(default_factory=list)
    rollback_s: list[float] = field(default_factory=list)
    wedge: str = ""  # the first lines of the wedge report, or ""
    error: str = ""  # any other failure


def _ok(g: VmGuest, argv: list[str]) -> float:
    t = time.monotonic()
    r = g.run(argv, timeout=TIMEOUT)
    if r.returncode != 0:
        raise LabError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return time.monotonic() - t


def _prepare(g: VmGuest) -> None:
    """The guest as test_vm_persist.py makes it: grub defaults and the update-grub stand-in."""
    for src, dst, mode in FILES:
        _ok(g, ["install", "-D", "-m", mode, str(src), dst])


def soak_guest(cycles: int, describe: dict[str, object]) -> GuestRun:
    load1 = os.getloadavg()[0]
    run = GuestRun(load1, 0.0, 0)
    with VmGuest.boot(timeout=TIMEOUT) as g:
        run.boot_s = g.boot_seconds
        describe.update(g.describe())
        try:
            _prepare(g)
            for _ in range(cycles):
                run.apply_s.append(
                    _ok(g, ["lbtune", "apply", PROFILE, "--iface", "eth0", "--persist", "--yes"])
                )
                run.rollback_s.append(_ok(g, ["lbtune", "rollback"]))
                run.cycles += 1
        except GuestWedged as exc:
            run.wedge = "\n".join(str(exc).split("; ", 1)[0:1] + exc.report.splitlines()[:12])
        except LabError as exc:
            run.error = str(exc)[:500]
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guests", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=10, help="apply+rollback cycles per guest")
    ap.add_argument("--load", type=int, default=2, help="busy processes on the host")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "vm_soak.json")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.load)]  # fmt: skip
    runs: list[GuestRun] = []
    describe: dict[str, object] = {}
    try:
        for _ in range(args.guests):
            runs.append(soak_guest(args.cycles, describe))
            r = runs[-1]
            print(f"guest {len(runs)}: {r.cycles} cycles, wedge: {bool(r.wedge)}, "
                  f"error: {r.error or '-'}", flush=True)  # fmt: skip
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    meta = run_meta(args.guests, busy_processes=args.load, cycles=args.cycles, load=args.load,
                    guest=describe)
    write_json(args.out, meta, runs)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}" if values else "-"

    rows = [[str(i), f"{r.load1:.1f}", f"{r.boot_s:.1f}", str(r.cycles), med(r.apply_s),
             med(r.rollback_s), "yes" if r.wedge else "no", r.error or "-"]
            for i, r in enumerate(runs, 1)]  # fmt: skip
    cycles = sum(r.cycles for r in runs)
    wedges = sum(1 for r in runs if r.wedge)
    heading = [
        "# VM lab soak: apply --persist and rollback cycles (bench/vm_soak.py)",
        "",
        f"{meta['date']}, host kernel {meta['kernel']}, {meta['cpus']} host CPUs, "
        f"{args.load} busy host processes; guest kernel {describe.get('kernel')}, "
        f"{describe.get('cpus')} vCPUs, {describe.get('accelerator')}; "
        f"{args.guests} guests x up to {args.cycles} cycles. "
        f"**{cycles} cycles, {wedges} wedged guests.** Seconds (medians per guest).",
    ]
    cols = [("guest", "r"), ("host load", "r"), ("boot", "r"), ("cycles", "r"),
            ("apply --persist", "r"), ("rollback", "r"), ("wedged", "l"),
            ("other failure", "l")]  # fmt: skip
    write_markdown(args.out, heading, cols, rows)
    md = args.out.with_suffix(".md")
    with md.open("a", encoding="utf-8") as fh:
        for i, r in enumerate(runs, 1):
            if r.wedge:
                fh.write(f"\nGuest {i}'s wedge:\n\n```\n{r.wedge}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
