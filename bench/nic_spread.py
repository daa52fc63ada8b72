"""UDP flow spread over the receive queues in the VM lab guest, before and after lb-dr.

Boots the VM lab (lbtune.lab.guests.vm: Debian's 6.1 kernel, eth0 a 4-queue virtio-net with
`rss=on,hash=on`), makes the classic fault of a NIC that hashes UDP on the addresses only
(`ethtool -N eth0 rx-flow-hash udp4 sd`, ixgbe's default; with `rxhash` on, without which
virtio_net does not pass new hash fields to the device), sends FLOWS UDP flows of one client
to one port (each from its own source port) from the host side of the tap, and reads the
per-queue receive counters (`ethtool -S eth0`: rx_queue_N_packets). Then `lbtune apply lb-dr
--iface eth0` (udp4 hashed on the 4-tuple, the table over the data queues), the same flows,
the counters again, and `lbtune rollback` (the fault restored byte for byte is the VM test's
job; here only the exit status is kept). Per round: each queue's packets, and the largest and
smallest share of the queues the RSS table feeds.

    .venv/bin/python bench/nic_spread.py [--rounds N] [--flows N]      (root)

Results: bench/results/nic_spread.json and .md; nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.vm, as the guest has it

from bench.results_io import run_meta
from lbtune.host.net.netns import NetnsThread
from lbtune.lab.guests.vm import VmGuest
from tests.vm.test_vm_apply import GUEST_ADDR, HOST_ADDR, HOST_IP, _udp_flows, x_table

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tune",
    "lbtune/host/net",
    "lbtune/lab",
    "profiles/lb-dr.toml",
    "tests/vm",
)

HERE = Path(__file__).resolve().parent
G = "tests.vm.apply_guest"


def spread(vm: VmGuest, flows: int) -> dict[int, int]:
    before = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    with NetnsThread(vm.netns) as ns:
        ns.call(_udp_flows, HOST_IP, 5353, flows)
    time.sleep(1)
    after = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    return {int(q): after[q] - before[q] for q in sorted(after, key=int)}


def shares(counts: dict[int, int], fed: set[int]) -> dict[str, float]:
    """Largest and smallest share of the packets among the queues the table feeds."""
    total = sum(counts.values()) or 1
    got = [counts.get(q, 0) / total for q in sorted(fed)]
    return {"max_share": round(max(got), 3), "min_share": round(min(got), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--flows", type=int, default=400)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "nic_spread.json")
    args = ap.parse_args()
    rounds = []
    start = time.monotonic()
    with VmGuest.boot(cmdline_extra=("no_timer_check",), timeout=1200) as vm:
        d = vm.describe()
        vm.call(f"{G}:link_up", ["eth0", GUEST_ADDR])
        subprocess.run(["ip", "-n", vm.netns, "addr", "replace", HOST_ADDR, "dev", "tap0"],
                       check=True, capture_output=True)  # fmt: skip
        # virtio_net sends hash fields to the device only with rxhash on (tests/vm/test_vm_apply.py)
        vm.call(f"{G}:ethtool", ["-K", "eth0", "rxhash", "on"])
        for _ in range(args.rounds):
            vm.call(f"{G}:ethtool", ["-N", "eth0", "rx-flow-hash", "udp4", "sd"])
            fed0 = set(x_table(vm.call(f"{G}:ethtool", ["-x", "eth0"])))
            before = spread(vm, args.flows)
            applied = vm.run(["lbtune", "apply", "lb-dr", "--iface", "eth0"], timeout=1200)
            fed1 = set(x_table(vm.call(f"{G}:ethtool", ["-x", "eth0"])))
            after = spread(vm, args.flows)
            back = vm.run(["lbtune", "rollback"], timeout=1200)
            vm.call(f"{G}:ethtool", ["-N", "eth0", "rx-flow-hash", "udp4", "sdfn"])
            rounds.append({
                "before": {"udp4": "sd", "queues_fed": sorted(fed0), "packets": before,
                           **shares(before, fed0)},
                "after": {"queues_fed": sorted(fed1), "packets": after, **shares(after, fed1)},
                "apply_exit": applied.returncode, "rollback_exit": back.returncode,
            })  # fmt: skip
    session = round(time.monotonic() - start)
    meta = run_meta(args.rounds, flows=args.flows, guest=d, session_seconds=session)
    args.out.write_text(json.dumps({"meta": meta, "results": rounds}, indent=2) + "\n")
    lines = [
        "# UDP flow spread in the VM lab guest, before and after lb-dr (bench/nic_spread.py)",
        "",
        f"Commit {meta.get('commit')}; guest kernel {d['kernel']}, {d['cpus']} CPUs, "
        f"accelerator {d['accelerator']}; {args.flows} UDP flows of one client to one port "
        "per measurement (each its own source port).",
        "",
        "| round | before: queues fed | packets per queue | max/min share | after lb-dr: "
        "queues fed | packets per queue | max/min share |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rounds, 1):
        b, a = r["before"], r["after"]
        lines.append(
            f"| {i} | {b['queues_fed']} | {b['packets']} | {b['max_share']}/{b['min_share']} "
            f"| {a['queues_fed']} | {a['packets']} | {a['max_share']}/{a['min_share']} |"
        )
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
