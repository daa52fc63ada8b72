"""The VM lab's receive side under host traffic: the numbers behind the VM fix loops' settings.

Boots the VM lab (lbtune.lab.guests.vm) once and measures, with traffic from the host side of the
guest's taps (tests/vm/host_traffic.py: FLOWS sockets sent back to back, paced per second):

- NET_RX softirqs per second on the CPU that takes every virtio rx queue IRQ, at 200, 2000
  and 8000 datagrams/s (why tests/vm/test_fix_loop_vm.py's IRQ loops send 8000/s in 20 s
  windows: the rule's floor is 2000 NET_RX in the window);
- the vmxnet3 with its rx ring at 32 and at 4096, in bursts of 64 and of 1: frames received,
  frames its queues counted as `pkts rx OOB` (no free buffer), and how the netdev's
  `rx_dropped` moved (why the nic-rx-drop loop uses ring 32 and bursts of 64).

Each reading is one 10 s window; the counters are the guest kernel's, read with `ethtool -S`,
/proc/softirqs and sysfs, not through lbtune. Writes bench/results/vm_rx.{json,md}.

    .venv/bin/python bench/vm_rx.py
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.vm, as the guest has it

from results_io import run_meta, write_json, write_markdown

from lbtune.lab.guests.vm import VmGuest
from tests.vm.test_fix_loop_vm import GUEST0, GUEST2, HOST0, HOST2, T, host_flood, host_ip, host_mac

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/lab",
    "tests/vm/host_traffic.py",
)

HERE = Path(__file__).resolve().parent
WINDOW = 10.0


@dataclass
class Reading:
    nic: str
    ring: int  # rx ring size (0: left as the driver set it)
    flows: int  # datagrams sent back to back per burst
    rate: int  # datagrams/s
    sent: int
    received: int  # the guest NIC's rx_packets
    oob: int  # vmxnet3 `pkts rx OOB`, summed over its queues (0 for virtio)
    rx_dropped: int
    net_rx_per_s: float  # NET_RX softirqs per second on the busiest CPU


def address(vm: VmGuest, dev: str, tap: str, mine: str, peer: str) -> None:
    got = vm.call(T + "setup_addr", [dev, f"{mine}/24", peer, host_mac(vm, tap)])
    host_ip(vm, "addr", "replace", f"{peer}/24", "dev", tap)
    host_ip(vm, "neigh", "replace", mine, "lladdr", got["mac"], "dev", tap, "nud", "permanent")


def window(vm: VmGuest, nic: str, dev: str, dst: str, ring: int, flows: int, rate: int) -> Reading:
    b, sb = vm.call(T + "rx_ring_counters", [dev]), vm.call(T + "net_rx_softirqs", [])
    with host_flood(vm, dst, flows=flows, rate=rate) as sent:
        time.sleep(WINDOW)
    a, sa = vm.call(T + "rx_ring_counters", [dev]), vm.call(T + "net_rx_softirqs", [])
    busiest = max(x - y for x, y in zip(sa, sb))
    return Reading(nic, ring, flows, rate, int(sent["sent"]), a["rx_packets"] - b["rx_packets"],
                   a["oob"] - b["oob"], a["rx_dropped"] - b["rx_dropped"],
                   round(busiest / WINDOW, 1))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "results" / "vm_rx.json")
    args = ap.parse_args()
    readings: list[Reading] = []
    with VmGuest.boot(timeout=1200) as vm:
        address(vm, "eth0", "tap0", GUEST0, HOST0)
        irqs = sorted(vm.call(T + "queue_irqs", ["eth0"]).values())
        vm.call(T + "pin_irqs", [irqs, "1"])
        for rate in (200, 2000, 8000):
            readings.append(window(vm, "virtio-net", "eth0", GUEST0, 0, 64, rate))
            print(readings[-1], flush=True)
        dev = vm.call(T + "vmxnet3_up", [])["dev"]
        address(vm, dev, "tap2", GUEST2, HOST2)
        for ring in (32, 4096):
            assert vm.run(["ethtool", "-G", dev, "rx", str(ring)]).returncode == 0
            for flows, rate in ((64, 1000), (1, 1000), (64, 8000)):
                readings.append(window(vm, "vmxnet3", dev, GUEST2, ring, flows, rate))
                print(readings[-1], flush=True)
        guest = vm.describe()
    meta = run_meta(1, guest=guest, window_seconds=WINDOW)
    write_json(args.out, meta, readings)
    write_markdown(
        args.out,
        [
            "# VM lab receive side under host traffic (bench/vm_rx.py)",
            "",
            f"{meta['date']}, guest kernel {guest['kernel']}, {guest['cpus']} vCPUs, "
            f"accelerator {guest['accelerator']}; one {WINDOW:g} s window per row; "
            "the guest kernel's counters. virtio-net rows: every rx queue IRQ on CPU 1. "
            "A burst is `flows` datagrams sent back to back.",
        ],
        [
            ("NIC", "l"),
            ("rx ring", "r"),
            ("burst", "r"),
            ("datagrams/s", "r"),
            ("sent", "r"),
            ("received", "r"),
            ("pkts rx OOB", "r"),
            ("rx_dropped", "r"),
            ("NET_RX/s busiest CPU", "r"),
        ],
        [
            [
                r.nic,
                str(r.ring or "default"),
                str(r.flows),
                str(r.rate),
                str(r.sent),
                str(r.received),
                str(r.oob),
                str(r.rx_dropped),
                f"{r.net_rx_per_s:g}",
            ]
            for r in readings
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
