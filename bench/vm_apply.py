"""Record a real `lbtune apply lb-dr` session in the VM lab guest for docs/tuning.md.

Boots the VM lab (lbtune.lab.guests.vm: Debian's 6.1 kernel, 4 CPUs on 2 nodes, eth0 a 4-queue
virtio-net, eth1 an e1000e), then runs in the guest: `lbtune apply lb-dr --iface eth0 -v`,
traffic into eth0 from the host side of its tap so every remaining queue IRQ fires (x86 moves
an IRQ at its next interrupt), the queue IRQ table, `lbtune verify`, a second apply,
`lbtune rollback`, and the e1000e rings profile of tests/vm. Writes the commands and their
output, as they ran, to bench/results/vm_apply.md, and each command's exit status and the
run's meta (bench/results_io.py) to vm_apply.json. Needs root (the VM lab does).

    .venv/bin/python bench/vm_apply.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.vm, as the guest has it

from bench.results_io import run_meta
from lbtune.lab.guests.vm import VmGuest
from tests.vm.test_vm_apply import (
    GUEST_ADDR,
    HOST_ADDR,
    PROFILES,
    fire_queue_irqs,
)

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tune",
    "lbtune/lab",
    "profiles",
    "tests/vm",
)

OUT = Path(__file__).resolve().parent / "results" / "vm_apply.md"


def main() -> int:
    lines: list[str] = []
    steps: list[dict[str, object]] = []
    start = time.monotonic()
    # no_timer_check: an overloaded host can make TCG miss the IO-APIC timer check (a panic)
    with VmGuest.boot(cmdline_extra=("no_timer_check",), timeout=1200) as vm:
        d = vm.describe()
        lines += [
            "# `lbtune apply lb-dr` in the VM lab guest (bench/vm_apply.py, as it ran)",
            "",
            f"Guest: kernel {d['kernel']}, {d['cpus']} CPUs, nodes {d['nodes']}, "
            f"NICs {d['nics']}, accelerator {d['accelerator']}.",
            "",
        ]
        vm.call("tests.vm.apply_guest:link_up", ["eth0", GUEST_ADDR])
        subprocess.run(["ip", "-n", vm.netns, "addr", "replace", HOST_ADDR, "dev", "tap0"],
                       check=True, capture_output=True)  # fmt: skip

        def run(argv: list[str]) -> None:
            r = vm.run(argv, timeout=1200)
            steps.append({"argv": argv, "exit": r.returncode})
            lines.extend(["```", f"# {' '.join(argv)}   (exit {r.returncode})"])
            lines.extend((r.stdout + r.stderr).rstrip().splitlines())
            lines.extend(["```", ""])

        run(["lbtune", "apply", "lb-dr", "--iface", "eth0", "-v"])
        irqs = fire_queue_irqs(vm, 2)
        lines += ["```", "# queue IRQs after traffic: IRQ queue dir count smp eff"]
        for irq, q in sorted(irqs.items(), key=lambda kv: int(kv[0])):
            lines.append(f"{irq} {q['queue']} {q['direction']} {q['count']} "
                         f"{q['smp_affinity_list']} {q['effective_affinity_list']}")  # fmt: skip
        lines += ["```", ""]
        run(["lbtune", "verify"])
        run(["lbtune", "apply", "lb-dr", "--iface", "eth0"])
        run(["lbtune", "rollback"])
        rings = str(PROFILES / "rings-e1000e-max.toml")
        run(["lbtune", "apply", rings])
        run(["ethtool", "-g", "eth1"])
        run(["lbtune", "rollback"])
        run(["lbtune", "plan", str(PROFILES / "rings-virtio-512.toml")])
    session = round(time.monotonic() - start)
    lines.append(f"Session: {session} s wall clock including the boot.")
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = run_meta(1, guest=d, session_seconds=session)
    doc = {"meta": meta, "results": steps}
    OUT.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
