"""Guest-side steps of the VM fix loops (tests/vm/test_fix_loop_vm.py), run with VmGuest.call.

Each returns a dict of evidence read from the guest's kernel (not from lbtune): qdisc and NIC
counters, IRQ counts per CPU, effective affinities. Nothing here judges; the test asserts.
"""

from __future__ import annotations

import errno
import json
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

IP_RECVERR = 11
SO_SNDBUFFORCE = 32


def sh(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def setup_addr(dev: str, addr: str, peer: str, peer_mac: str) -> dict[str, Any]:
    """Address dev, bring it up, and a permanent neighbour for the host side (no ARP)."""
    sh("ip", "addr", "replace", addr, "dev", dev)
    sh("ip", "link", "set", dev, "up")
    sh("ip", "neigh", "replace", peer, "lladdr", peer_mac, "dev", dev, "nud", "permanent")
    mac = Path(f"/sys/class/net/{dev}/address").read_text().strip()
    return {"mac": mac}


def qdiscs(dev: str) -> dict[str, dict[str, int]]:
    """Every qdisc of dev: handle/parent -> its counters (tc -s -j)."""
    out: dict[str, dict[str, int]] = {}
    for q in json.loads(sh("tc", "-s", "-j", "qdisc", "show", "dev", dev) or "[]"):
        key = f"{q.get('kind')} {q.get('handle')} {q.get('parent', 'root')}"
        out[key] = {k: q[k] for k in ("packets", "drops", "qlen") if isinstance(q.get(k), int)}
    return out


def qdisc_drops(dev: str) -> int:
    """Drops of the leaf qdiscs (mq's own numbers sum its children)."""
    return sum(v.get("drops", 0) for k, v in qdiscs(dev).items() if not k.startswith("mq "))


def tx_pace(dev: str, bql_max: int, usecs_now: int) -> dict[str, Any]:
    """Make a single-queue NIC's transmit side slow to complete, so that a qdisc in front of
    it queues: BQL lets at most bql_max bytes wait for completion (the queue stops after each
    packet), and interrupt throttling (ethtool -C rx-usecs: the e1000e's one ITR) spaces the
    completions. Returns the settings as they were, for tx_pace_restore."""
    bql = Path(f"/sys/class/net/{dev}/queues/tx-0/byte_queue_limits/limit_max")
    usecs = re.search(r"^rx-usecs:\s*(\d+)", sh("ethtool", "-c", dev), re.M)
    assert usecs, f"ethtool -c {dev}: no rx-usecs"
    before = {"bql_max": int(bql.read_text()), "usecs": int(usecs.group(1))}
    bql.write_text(str(bql_max))
    sh("ethtool", "-C", dev, "rx-usecs", str(usecs_now))
    return before


def tx_pace_restore(dev: str, was: dict[str, Any]) -> None:
    Path(f"/sys/class/net/{dev}/queues/tx-0/byte_queue_limits/limit_max").write_text(
        str(was["bql_max"])
    )
    sh("ethtool", "-C", dev, "rx-usecs", str(was["usecs"]))


def set_txqueuelen(dev: str, n: int) -> dict[str, Any]:
    sh("ip", "link", "set", "dev", dev, "txqueuelen", str(n))
    return {"txqueuelen": int(Path(f"/sys/class/net/{dev}/tx_queue_len").read_text())}


def udp_flood(dev: str, dst: str, packets: int, size: int, flows: int) -> dict[str, Any]:
    """Send `packets` UDP datagrams to dst over `flows` sockets (one per transmit queue the
    flow hashes to). IP_RECVERR: each qdisc drop comes back as ENOBUFS, so the count of
    ENOBUFS is the exact number of qdisc drops. A large forced send buffer keeps the socket
    from blocking before the device queue fills."""
    before = qdisc_drops(dev)
    tx_before = int(Path(f"/sys/class/net/{dev}/statistics/tx_packets").read_text())
    socks = []
    for _ in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 64 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, dev.encode())
        socks.append(s)
    payload = b"q" * size
    enobufs = other = 0
    try:
        for i in range(packets):
            try:
                socks[i % flows].sendto(payload, (dst, 9))
            except OSError as e:
                if e.errno == errno.ENOBUFS:
                    enobufs += 1
                else:
                    other += 1
    finally:
        for s in socks:
            s.close()
    # what the qdisc still holds leaves at the NIC's pace: the count is read once it is empty
    deadline = time.monotonic() + 120
    while any(q.get("qlen") for q in qdiscs(dev).values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    tx_after = int(Path(f"/sys/class/net/{dev}/statistics/tx_packets").read_text())
    return {
        "sent": packets,
        "enobufs": enobufs,
        "other_errors": other,
        "qdisc_drops": qdisc_drops(dev) - before,
        "tx_packets": tx_after - tx_before,
        "qdiscs": qdiscs(dev),
    }


def queue_irqs(dev: str) -> dict[str, int]:
    """Queue name (virtioN-input.Q / eth1-rx-0 ...) -> IRQ number, from /proc/interrupts."""
    virtio = Path(f"/sys/class/net/{dev}/device").resolve().name
    out: dict[str, int] = {}
    for line in Path("/proc/interrupts").read_text().splitlines():
        parts = line.split()
        if not parts or not parts[0].rstrip(":").isdigit():
            continue
        name = parts[-1]
        if name.startswith(f"{virtio}-input.") or name.startswith(f"{dev}-"):
            out[name] = int(parts[0].rstrip(":"))
    return out


def irq_counts(irqs: list[int]) -> dict[str, list[int]]:
    """IRQ -> its count per CPU (/proc/interrupts)."""
    lines = Path("/proc/interrupts").read_text().splitlines()
    ncpu = len(lines[0].split())
    out: dict[str, list[int]] = {}
    for line in lines[1:]:
        parts = line.split()
        n = parts[0].rstrip(":")
        if n.isdigit() and int(n) in irqs:
            out[n] = [int(x) for x in parts[1 : 1 + ncpu]]
    return out


def net_rx_softirqs() -> list[int]:
    for line in Path("/proc/softirqs").read_text().splitlines():
        if line.split()[0] == "NET_RX:":
            return [int(x) for x in line.split()[1:]]
    raise RuntimeError("no NET_RX line in /proc/softirqs")


def pin_irqs(irqs: list[int], cpus: str) -> dict[str, str]:
    """Write cpus (a CPU list) as every IRQ's smp_affinity_list: the fault."""
    for irq in irqs:
        Path(f"/proc/irq/{irq}/smp_affinity_list").write_text(cpus)
    return affinities(irqs)


def affinities(irqs: list[int]) -> dict[str, str]:
    """IRQ -> its smp_affinity_list (what was asked for)."""
    return {
        str(irq): Path(f"/proc/irq/{irq}/smp_affinity_list").read_text().strip() for irq in irqs
    }


def effective(irqs: list[int]) -> dict[str, str]:
    """IRQ -> its effective_affinity_list: where the kernel delivers it now. On x86 an MSI
    moves at its next interrupt after smp_affinity changed, so this lags until traffic."""
    return {
        str(irq): Path(f"/proc/irq/{irq}/effective_affinity_list").read_text().strip()
        for irq in irqs
    }


def settled(irqs: list[int]) -> bool:
    """Every IRQ delivered within what was asked for (its move has happened)."""
    from lbtune.host.kernel.cpulist import parse_cpulist

    want, eff = affinities(irqs), effective(irqs)
    return all(parse_cpulist(eff[k]) <= parse_cpulist(want[k]) for k in want)


def rx_queue_packets(dev: str) -> dict[str, int]:
    """ethtool -S per-queue rx packet counters (virtio: rx_queue_N_packets)."""
    out: dict[str, int] = {}
    for line in sh("ethtool", "-S", dev).splitlines():
        m = re.match(r"\s*(rx_queue_\d+_packets|rx_queue_\d+_drops):\s*(\d+)", line)
        if m:
            out[m.group(1)] = int(m.group(2))
    return out


def nic_drop_counters(dev: str) -> dict[str, int]:
    """Every ethtool -S counter whose name says drop/miss/no_buffer/fifo/over, and the
    generic netdev counters the nic-rx-drop rule reads."""
    out: dict[str, int] = {}
    for line in sh("ethtool", "-S", dev).splitlines():
        m = re.match(r"\s*([\w.]+):\s*(\d+)", line)
        if m and re.search(r"drop|miss|no_buf|fifo|over|packets", m.group(1)):
            out[f"ethtool {m.group(1)}"] = int(m.group(2))
    for name in (
        "rx_missed_errors",
        "rx_fifo_errors",
        "rx_over_errors",
        "rx_dropped",
        "rx_packets",
    ):
        out[f"stat {name}"] = int(Path(f"/sys/class/net/{dev}/statistics/{name}").read_text())
    return out


def snapshot(dev: str) -> dict[str, Any]:
    """One reading of everything the IRQ loops compare: queue IRQs, their counts per CPU and
    effective affinity, NET_RX softirqs per CPU, per-queue rx packets, Udp.NoPorts."""
    irqs = queue_irqs(dev)
    nums = sorted(irqs.values())
    snmp = Path("/proc/net/snmp").read_text().splitlines()
    udp = [ln.split()[1:] for ln in snmp if ln.startswith("Udp:")]
    udp_counters = dict(zip(udp[0], (int(x) for x in udp[1])))
    return {
        "irqs": irqs,
        "counts": irq_counts(nums),
        "affinity": affinities(nums),
        "effective": effective(nums),
        "net_rx": net_rx_softirqs(),
        "rx_queues": rx_queue_packets(dev),
        "udp_noports": udp_counters.get("NoPorts", 0),
        "udp_in": udp_counters.get("InDatagrams", 0),
        "isolated": Path("/sys/devices/system/cpu/isolated").read_text().strip(),
        "numa_node": Path(f"/sys/class/net/{dev}/device/numa_node").read_text().strip()
        if Path(f"/sys/class/net/{dev}/device/numa_node").exists()
        else None,
    }


def diagnose_during(
    argv: list[str], load: str, load_args: list[Any], timeout: float = 600
) -> dict[str, Any]:
    """Run `lbtune diagnose` (argv after `lbtune`) and, once its window is open (its
    "sampling the counters" line on stderr), the load: `load` names a function of this module
    called with load_args. Returns the load's evidence and diagnose's exit code, JSON and
    stderr."""
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "lbtune", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    err: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError(f"diagnose ended before its window: {''.join(err)}")
            err.append(line)
            if "sampling the counters" in line:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("diagnose did not open its window")
        evidence = globals()[load](*load_args)
        out, rest = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return {
        "rc": proc.returncode,
        "json": json.loads(out) if out.strip() else None,
        "stderr": "".join(err) + rest,
        "load": evidence,
    }


def vmxnet3_up() -> dict[str, Any]:
    """Load the vmxnet3 driver (not loaded at boot) and name the interface it creates."""
    sh("modprobe", "vmxnet3")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for dev in sorted(p.name for p in Path("/sys/class/net").iterdir()):
            link = Path(f"/sys/class/net/{dev}/device/driver")
            if link.exists() and link.resolve().name == "vmxnet3":
                return {"dev": dev}
        time.sleep(0.5)
    raise RuntimeError("modprobe vmxnet3 made no interface")


def carrier_back(dev: str, timeout: float = 60) -> float:
    """Wait until `dev` has carrier again (a ring change resets the NIC: the e1000e's
    watchdog reports the link back only seconds later under TCG); the seconds it took."""
    start = time.monotonic()
    while True:
        try:
            carrier = Path(f"/sys/class/net/{dev}/carrier").read_text().strip()
        except OSError:  # EINVAL while the interface is down
            carrier = "0"
        if carrier == "1":
            return round(time.monotonic() - start, 2)
        if time.monotonic() - start > timeout:
            raise RuntimeError(f"{dev}: no carrier {timeout:g} s after the change")
        time.sleep(0.1)


def rx_ring_counters(dev: str) -> dict[str, int]:
    """The kernel's receive counters of dev: the netdev's rx_packets and rx_dropped, and the
    sum over its queues of vmxnet3's `pkts rx OOB` (a frame found the ring without a buffer),
    read from the `ethtool` binary's text, not through lbtune."""
    text = sh("ethtool", "-S", dev)
    stat = Path(f"/sys/class/net/{dev}/statistics")
    return {
        "rx_packets": int((stat / "rx_packets").read_text()),
        "rx_dropped": int((stat / "rx_dropped").read_text()),
        "oob": sum(int(n) for n in re.findall(r"pkts rx OOB:\s*(\d+)", text)),
        "ring": int(re.findall(r"^RX:\s*(\d+)", sh("ethtool", "-g", dev), re.M)[-1]),
    }
