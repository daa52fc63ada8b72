"""Guest-side targets of tests/vm/test_vm_apply.py (VmGuest.call): read what the kernel and the
drivers hold, independently of lbtune's own readers, so the test compares lbtune with the
machine and not with itself."""

from __future__ import annotations

import glob
import os
import re
import subprocess
from typing import Any

# The values lb-dr (with base) and the rings test touch, as files: sysctls, per-queue steering,
# txqueuelen, IRQ affinity, the irqbalance configuration. Globs are expanded when read, so
# a queue that a channel change removed or created shows up as a difference.
SNAPSHOT_GLOBS = (
    "/proc/sys/net/core/*",
    "/proc/sys/net/ipv4/tcp_*mem",
    "/proc/sys/net/ipv4/tcp_max_syn_backlog",
    "/proc/sys/net/ipv4/tcp_syncookies",
    "/proc/sys/net/ipv4/conf/*/rp_filter",
    "/proc/sys/net/ipv4/conf/*/arp_ignore",
    "/proc/sys/net/ipv4/conf/*/arp_announce",
    "/proc/sys/net/ipv4/conf/*/send_redirects",
    "/proc/sys/kernel/timer_migration",
    "/proc/sys/vm/swappiness",
    "/sys/class/net/eth*/tx_queue_len",
    "/sys/class/net/eth*/queues/rx-*/rps_cpus",
    "/sys/class/net/eth*/queues/rx-*/rps_flow_cnt",
    "/sys/class/net/eth*/queues/tx-*/xps_cpus",
    "/proc/irq/*/smp_affinity",
    "/proc/irq/*/smp_affinity_list",
    "/etc/default/irqbalance",
)
# Not byte-compared: counters and state the kernel changes by itself.
NOT_VALUES = ("/proc/sys/net/core/netdev_rss_key",)


def _read(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read().decode("latin-1")


def _ethtool(*args: str) -> str:
    proc = subprocess.run(["ethtool", *args], capture_output=True, text=True, check=False)
    return f"rc={proc.returncode}\n{proc.stdout}{proc.stderr}"


def snapshot() -> dict[str, str]:
    """Every value file above (path -> exact content) and `ethtool -l/-g/-x` and the RSS hash
    fields (`-n rx-flow-hash`) of both NICs."""
    out: dict[str, str] = {}
    for pattern in SNAPSHOT_GLOBS:
        for path in sorted(glob.glob(pattern)):
            if path in NOT_VALUES:
                continue
            try:
                out[path] = _read(path)
            except PermissionError:
                continue  # write-only entries (net.core... flush-like files)
            except OSError as exc:
                out[path] = f"<{type(exc).__name__}: {exc.strerror}>"
    for nic in ("eth0", "eth1"):
        out[f"ethtool -l {nic}"] = _ethtool("-l", nic)
        out[f"ethtool -g {nic}"] = _ethtool("-g", nic)
        out[f"ethtool -x {nic}"] = _ethtool("-x", nic)
        for flow in ("tcp4", "udp4", "tcp6", "udp6"):
            out[f"ethtool -n {nic} rx-flow-hash {flow}"] = _ethtool(
                "-n", nic, "rx-flow-hash", flow
            )
    return out


def ethtool(*args: str) -> str:
    """`ethtool ARGS` in the guest: rc, stdout and stderr (the test reads the kernel's view)."""
    return _ethtool(*args)


def rx_queue_packets(iface: str) -> dict[int, int]:
    """virtio_net's per-queue receive counters (`ethtool -S`: rx_queue_N_packets)."""
    out: dict[int, int] = {}
    for line in _ethtool("-S", iface).splitlines():
        name, _, value = line.strip().partition(": ")
        if name.startswith("rx_queue_") and name.endswith("_packets"):
            out[int(name[len("rx_queue_") : -len("_packets")])] = int(value)
    return out


def queue_irqs(iface: str) -> dict[str, dict[str, Any]]:
    """IRQ -> queue index, direction, smp/effective affinity lists and interrupt count, for
    every queue interrupt of a virtio NIC, found by name in /proc/interrupts."""
    virtio = os.path.basename(os.readlink(f"/sys/class/net/{iface}/device"))
    name = re.compile(rf"^{re.escape(virtio)}-(input|output)\.(\d+)$")
    out: dict[str, dict[str, Any]] = {}
    lines = _read("/proc/interrupts").splitlines()
    ncpu = len(lines[0].split())
    for line in lines[1:]:
        fields = line.split()
        m = name.match(fields[-1]) if fields else None
        if not m or not fields[0].rstrip(":").isdigit():
            continue
        irq = fields[0].rstrip(":")
        out[irq] = {
            "direction": "rx" if m.group(1) == "input" else "tx",
            "queue": int(m.group(2)),
            "count": sum(int(c) for c in fields[1 : 1 + ncpu]),
            "smp_affinity_list": _read(f"/proc/irq/{irq}/smp_affinity_list").strip(),
            "effective_affinity_list": _read(f"/proc/irq/{irq}/effective_affinity_list").strip(),
        }
    return out


def link_up(iface: str, address: str) -> dict[str, Any]:
    """Bring iface up with address (CIDR); the address list after."""
    for argv in (
        ["ip", "addr", "replace", address, "dev", iface],
        ["ip", "link", "set", iface, "up"],
    ):
        subprocess.run(argv, check=True, capture_output=True)
    proc = subprocess.run(["ip", "-o", "addr", "show", "dev", iface], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return {"addr": proc.stdout}


def link_down(iface: str, address: str) -> None:
    subprocess.run(["ip", "addr", "del", address, "dev", iface], check=False, capture_output=True)
    subprocess.run(["ip", "link", "set", iface, "down"], check=True, capture_output=True)


def topology(iface: str) -> dict[str, Any]:
    """What the planner's CPU sets come from, read from sysfs: the NIC's PCI function's NUMA
    node and local CPUs, the CPUs of every node, isolated and nohz_full CPUs."""
    pci = os.path.realpath(f"/sys/class/net/{iface}/device/..")
    nodes = {
        os.path.basename(d)[4:]: _read(f"{d}/cpulist").strip()
        for d in sorted(glob.glob("/sys/devices/system/node/node[0-9]*"))
    }
    cpu = "/sys/devices/system/cpu"
    return {
        "numa_node": int(_read(f"{pci}/numa_node")),
        "local_cpulist": _read(f"{pci}/local_cpulist").strip(),
        "nodes": nodes,
        "online": _read(f"{cpu}/online").strip(),
        "isolated": _read(f"{cpu}/isolated").strip(),
        "nohz_full": _read(f"{cpu}/nohz_full").strip(),
        "cmdline": _read("/proc/cmdline").strip(),
    }
