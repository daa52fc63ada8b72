"""VM lab soak: how often the guest kernel wedges with and without lbtune's changes.

Usage: python bench/vm_soak.py [--guests G] [--minutes M] [--load K] [--arms A,B]
       [--out FILE]   (root)

CI lost a vm run to a guest whose CPU 0 stopped taking interrupts during `lbtune apply
--persist` of test_vm_persist.py (docs/testing.md, "Rules"). To tell a product bug from an
emulator one, this soaks two arms in fresh guests (lbtune.lab.guests.vm.VmGuest), G guests in
all, the arms alternating guest by guest so both see the same host load:

- apply: `lbtune apply lb-dr-iso --iface eth0 --persist --yes` and `lbtune rollback` (which
  runs update-grub again), cycle after cycle: what the vm tier's heaviest step does;
- control: `lbtune plan lb-dr-iso --iface eth0` and `lbtune verify lb-dr-iso --iface eth0`,
  cycle after cycle: the same lbtune start-ups and reads of the same files, changing nothing
  (no sysctl, IRQ affinity, RPS, grub file or update-grub run).

Every guest is booted and prepared the same way (a Debian host with grub defaults and the
`update-grub` stand-in, as test_vm_persist.py makes it) and then runs its arm's cycles until M
minutes after its boot started (the cycle under way is finished), so both arms get the same
guest-minutes whatever their boots and requests cost. K busy
processes on the host stand in for the tiers that share the machine with the vm tier in
`make test`. A request the guest leaves unanswered 120 s after a kernel stall report is a
wedge (GuestWedged); the guest is then dropped and the next one booted. Results:
bench/results/vm_soak.{json,md}: per arm the guests, guest-minutes, cycles, wedges and wedges
per guest-hour, and each wedge's first report lines and the request it hit. Nothing asserts a
number.
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
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/lab",
    "lbtune/tune",
    "profiles",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from lbtune.lab.guests.vm import GuestWedged, VmGuest  # noqa: E402
from lbtune.lab.protocol import LabError  # noqa: E402

DATA = ROOT / "tests" / "vm" / "data"
PROFILE = str(DATA / "lb-dr-iso.toml")
IFACE = "eth0"
TIMEOUT = 600
FILES = (  # what test_vm_persist.py installs in the guest: (source, path, mode)
    (DATA / "grub", "/etc/default/grub", "644"),
    (DATA / "50-lab.cfg", "/etc/default/grub.d/50-lab.cfg", "644"),
    (DATA / "update-grub", "/usr/local/sbin/update-grub", "755"),
)
# arm -> one cycle: (step name, argv, exit codes that are success)
CYCLES: dict[str, list[tuple[str, list[str], tuple[int, ...]]]] = {
    "apply": [
        (
            "apply --persist",
            ["lbtune", "apply", PROFILE, "--iface", IFACE, "--persist", "--yes"],
            (0,),
        ),
        ("rollback", ["lbtune", "rollback"], (0,)),
    ],
    "control": [
        ("plan", ["lbtune", "plan", PROFILE, "--iface", IFACE], (0,)),
        ("verify", ["lbtune", "verify", PROFILE, "--iface", IFACE], (0, 1)),  # 1: drift
    ],
}


@dataclass
class GuestRun:
    arm: str
    load1: float  # host load average (1 min) at the boot
    boot_s: float = 0.0
    up_s: float = 0.0  # from the boot's start to the last answer (or the wedge): guest time
    cycles: int = 0  # cycles completed
    steps: dict[str, list[float]] = field(default_factory=dict)  # step -> seconds per run
    wedge: str = ""  # the first lines of the wedge report, or ""
    wedge_step: str = ""  # the step whose request the wedge left unanswered
    error: str = ""  # any other failure


def _ok(g: VmGuest, argv: list[str], ok: tuple[int, ...] = (0,)) -> float:
    t = time.monotonic()
    r = g.run(argv, timeout=TIMEOUT)
    if r.returncode not in ok:
        raise LabError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    return time.monotonic() - t


def _prepare(g: VmGuest) -> None:
    """The guest as test_vm_persist.py makes it: grub defaults and the update-grub stand-in."""
    for src, dst, mode in FILES:
        _ok(g, ["install", "-D", "-m", mode, str(src), dst])


def _wedge_lines(exc: GuestWedged) -> str:
    return "\n".join(str(exc).split("; ", 1)[0:1] + exc.report.splitlines()[:16])


def soak_guest(arm: str, minutes: float, describe: dict[str, object]) -> GuestRun:
    run = GuestRun(arm, os.getloadavg()[0])
    start = time.monotonic()
    step = "boot"
    try:
        with VmGuest.boot(timeout=TIMEOUT) as g:
            run.boot_s = g.boot_seconds
            describe.update(g.describe())
            try:
                step = "prepare"
                _prepare(g)
                while time.monotonic() < start + minutes * 60:
                    for step, argv, ok in CYCLES[arm]:
                        run.steps.setdefault(step, []).append(_ok(g, argv, ok))
                    run.cycles += 1
            finally:
                run.up_s = time.monotonic() - start
    except GuestWedged as exc:
        run.wedge, run.wedge_step = _wedge_lines(exc), step
    except LabError as exc:
        run.error = f"{step}: {str(exc)[:500]}"
    if not run.up_s:  # the boot itself failed
        run.up_s = time.monotonic() - start
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--guests", type=int, default=8, help="guests in all, the arms alternating")
    ap.add_argument("--minutes", type=float, default=6.0, help="time per guest, from its boot")
    ap.add_argument("--load", type=int, default=2, help="busy processes on the host")
    ap.add_argument("--arms", default="apply,control", help="the arms, in turn (apply, control)")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "vm_soak.json")
    args = ap.parse_args()
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in CYCLES]
    if unknown or args.guests < 1 or args.minutes <= 0 or args.load < 0:
        ap.error(f"bad settings (arms are {', '.join(CYCLES)}; guests >= 1, minutes > 0)")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.load)]  # fmt: skip
    runs: list[GuestRun] = []
    describe: dict[str, object] = {}
    started = time.monotonic()
    try:
        for i in range(args.guests):
            runs.append(soak_guest(arms[i % len(arms)], args.minutes, describe))
            r = runs[-1]
            print(
                f"guest {len(runs)} ({r.arm}): {r.cycles} cycles in {r.up_s / 60:.1f} min, "
                f"wedge: {r.wedge_step or '-'}, error: {r.error or '-'}",
                flush=True,
            )
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    wall = time.monotonic() - started
    meta = run_meta(
        args.guests,
        busy_processes=args.load,
        guests=args.guests,
        minutes=args.minutes,
        load=args.load,
        arms=args.arms,
        wall_minutes=round(wall / 60, 1),
        guest=describe,
    )
    summary: dict[str, dict[str, float]] = {}
    for arm in arms:
        mine = [r for r in runs if r.arm == arm]
        up = sum(r.up_s for r in mine)
        wedges = sum(1 for r in mine if r.wedge)
        summary[arm] = {
            "guests": len(mine), "guest_minutes": round(up / 60, 1),
            "cycles": sum(r.cycles for r in mine), "wedges": wedges,
            "errors": sum(1 for r in mine if r.error),
            "wedges_per_guest_hour": round(wedges / (up / 3600), 3) if up else 0.0,
        }  # fmt: skip
    meta["arms_summary"] = summary
    write_json(args.out, meta, runs)

    def med(values: list[float]) -> str:
        return f"{statistics.median(values):.1f}" if values else "-"

    heading = [
        "# VM lab soak: lbtune's apply against a control that changes nothing (bench/vm_soak.py)",
        "",
        f"{meta['date']} at {meta['commit']}, host kernel {meta['kernel']}, {meta['cpus']} host "
        f"CPUs, {args.load} busy host processes (other work on the machine besides: the host "
        f"load column); guest kernel {describe.get('kernel')}, {describe.get('cpus')} vCPUs, "
        f"{describe.get('accelerator')}. {args.guests} fresh guests, the arms ({args.arms}) "
        f"alternating, each cycling until {args.minutes:g} min after its boot started; "
        f"{wall / 60:.0f} min of wall time. apply: `lbtune apply lb-dr-iso --iface eth0 "
        "--persist --yes` + `lbtune rollback`; control: `lbtune plan` + `lbtune verify` of the "
        "same profile (read-only). Guest-minutes count from each boot's start to its last "
        "answer (or its wedge).",
        "",
        "| arm | guests | guest-minutes | cycles | wedges | wedges per guest-hour | "
        "other failures |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(f"| {arm} | {s['guests']} | {s['guest_minutes']:.1f} | {s['cycles']} | "
          f"{s['wedges']} | {s['wedges_per_guest_hour']:.2f} | {s['errors']} |"
          for arm, s in summary.items()),
        "",
        "Each guest (seconds: medians of its requests):",
    ]  # fmt: skip
    cols = [("guest", "r"), ("arm", "l"), ("host load", "r"), ("boot", "r"),
            ("minutes", "r"), ("cycles", "r"), ("step 1", "r"), ("step 2", "r"),
            ("wedged in", "l"), ("other failure", "l")]  # fmt: skip
    rows = []
    for i, r in enumerate(runs, 1):
        names = [name for name, _, _ in CYCLES[r.arm]]
        rows.append([str(i), r.arm, f"{r.load1:.1f}", f"{r.boot_s:.1f}", f"{r.up_s / 60:.1f}",
                     str(r.cycles), *(f"{n} {med(r.steps.get(n, []))}" for n in names),
                     r.wedge_step or "-", r.error or "-"])  # fmt: skip
    write_markdown(args.out, heading, cols, rows)
    md = args.out.with_suffix(".md")
    with md.open("a", encoding="utf-8") as fh:
        for i, r in enumerate(runs, 1):
            if r.wedge:
                fh.write(
                    f"\nGuest {i} ({r.arm}) wedged in {r.wedge_step}:\n\n```\n{r.wedge}\n```\n"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
