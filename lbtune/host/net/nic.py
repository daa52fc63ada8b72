"""Network interfaces: identity, PCI placement, queues, rings/channels and per-queue IRQs."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from lbtune.host.fs import HostFS
from lbtune.host.kernel.interrupts import IrqLine, read_irq_affinity
from lbtune.host.kernel.irqnames import match_queue_irq
from lbtune.host.net.ethtool import Channels, DriverInfo, EthtoolSource, RingSizes
from lbtune.host.net.rss import RssView, read_rss

NET_SYS = "/sys/class/net"
_PCI_ADDR = re.compile(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
ARPHRD_LOOPBACK = 772


@dataclass(frozen=True)
class QueueIrq:
    """The interrupt vector serving one NIC queue, and where it may and does run."""

    irq: int
    direction: str  # "combined", "rx" or "tx"
    queue: int
    name: str  # the action name in /proc/interrupts
    family: str  # naming family that matched (see irqnames.FAMILIES)
    affinity: Optional[frozenset[int]]
    effective: Optional[frozenset[int]]
    hint: Optional[frozenset[int]]
    node: Optional[int]
    count: int  # interrupts so far, all CPUs


@dataclass(frozen=True)
class RxQueue:
    index: int
    rps_cpus: Optional[frozenset[int]]
    rps_flow_cnt: Optional[int]


@dataclass(frozen=True)
class TxQueue:
    index: int
    xps_cpus: Optional[frozenset[int]]


@dataclass(frozen=True)
class Nic:
    """One network interface as the kernel shows it."""

    name: str
    ifindex: Optional[int]
    kind: str  # "physical", "loopback", "bond", "bridge", "vlan", "veth", or the driver
    driver: Optional[str]
    bus: Optional[str]  # PCI address when PCI-backed
    numa_node: Optional[int]  # -1: the platform does not say
    local_cpus: Optional[frozenset[int]]
    speed_mbps: Optional[int]
    mtu: Optional[int]
    operstate: Optional[str]
    address: Optional[str]
    txqueuelen: Optional[int]
    rx_queues: tuple[RxQueue, ...]
    tx_queues: tuple[TxQueue, ...]
    rings: Optional[RingSizes]
    channels: Optional[Channels]
    irqs: tuple[QueueIrq, ...]
    lower: tuple[str, ...]  # bond slaves / lower devices
    # Why ring sizes cannot be changed on this NIC (ring_fixed_reason), None when they can.
    rings_fixed: Optional[str] = None
    # RSS hash fields, indirection table and flow rules (None: the NIC has none of them)
    rss: Optional[RssView] = None


def _pci_parent(fs: HostFS, devpath: str) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(pci device kernel path, PCI address, virtio name) for a net device's `device` link."""
    real = fs.realpath(devpath)
    base = posixpath.basename(real)
    virtio = None
    if re.fullmatch(r"virtio\d+", base):
        virtio = base
        real = posixpath.dirname(real)
        base = posixpath.basename(real)
    if _PCI_ADDR.match(base):
        return real, base, virtio
    return None, None, virtio


def _msi_irqs(fs: HostFS, pcipath: Optional[str], devpath: str) -> list[int]:
    for path in (f"{devpath}/msi_irqs", f"{pcipath}/msi_irqs" if pcipath else None):
        if path:
            irqs = [int(n) for n in fs.listdir(path) if n.isdigit()]
            if irqs:
                return sorted(irqs)
    return []


def _queue_irqs(
    fs: HostFS,
    dev: str,
    bus: Optional[str],
    virtio: Optional[str],
    candidates: list[int],
    interrupts: Mapping[int, IrqLine],
) -> tuple[QueueIrq, ...]:
    found: list[QueueIrq] = []
    irqs = candidates or sorted(interrupts)
    for irq in irqs:
        line = interrupts.get(irq)
        actions = line.actions if line else ()
        if not actions:
            sys_actions = fs.read(f"/sys/kernel/irq/{irq}/actions")
            actions = tuple(a for a in (sys_actions or "").split(",") if a)
        for action in actions:
            m = match_queue_irq(action, dev, bus, virtio)
            if m is None:
                continue
            aff = read_irq_affinity(fs, irq)
            found.append(
                QueueIrq(
                    irq=irq,
                    direction=m.direction,
                    queue=m.queue,
                    name=action,
                    family=m.family,
                    affinity=aff.affinity,
                    effective=aff.effective,
                    hint=aff.hint,
                    node=aff.node,
                    count=line.total if line else 0,
                )
            )
            break
    order = {"combined": 0, "rx": 1, "tx": 2}
    return tuple(sorted(found, key=lambda q: (order[q.direction], q.queue, q.irq)))


def _kind(fs: HostFS, base: str, name: str, has_device: bool, driver: Optional[str]) -> str:
    if fs.read_int(f"{base}/type") == ARPHRD_LOOPBACK:
        return "loopback"
    for line in fs.read_lines(f"{base}/uevent"):
        if line.startswith("DEVTYPE="):
            return line.split("=", 1)[1]
    if fs.isdir(f"{base}/bonding"):
        return "bond"
    if fs.isdir(f"{base}/bridge"):
        return "bridge"
    if has_device:
        return "physical"
    return driver or "virtual"


def _queues(fs: HostFS, base: str) -> tuple[tuple[RxQueue, ...], tuple[TxQueue, ...]]:
    rx: list[RxQueue] = []
    tx: list[TxQueue] = []
    for q in fs.listdir(f"{base}/queues"):
        kind, _, idx = q.partition("-")
        if not idx.isdigit():
            continue
        qpath = f"{base}/queues/{q}"
        if kind == "rx":
            rx.append(
                RxQueue(
                    int(idx),
                    fs.read_cpumask(f"{qpath}/rps_cpus"),
                    fs.read_int(f"{qpath}/rps_flow_cnt"),
                )
            )
        elif kind == "tx":
            tx.append(TxQueue(int(idx), fs.read_cpumask(f"{qpath}/xps_cpus")))
    return tuple(sorted(rx, key=lambda r: r.index)), tuple(sorted(tx, key=lambda t: t.index))


def discover_nic(
    fs: HostFS, name: str, ethtool: EthtoolSource, interrupts: Mapping[int, IrqLine]
) -> Nic:
    """Everything lbtune knows about one interface."""
    base = f"{NET_SYS}/{name}"
    devpath = f"{base}/device"
    has_device = fs.exists(devpath)
    pcipath, bus, virtio = _pci_parent(fs, devpath) if has_device else (None, None, None)
    driver = fs.readlink_name(f"{devpath}/driver") if has_device else None
    info: Optional[DriverInfo] = None
    if driver is None or bus is None:
        info = ethtool.driver_info(name)
        if info is not None:
            driver = driver or info.driver or None
            if bus is None and info.bus_info and _PCI_ADDR.match(info.bus_info):
                bus = info.bus_info
    numa_src = pcipath or devpath
    numa = fs.read_int(f"{numa_src}/numa_node") if has_device else None
    local = fs.read_cpulist(f"{numa_src}/local_cpulist") if has_device else None
    if local is None and has_device:
        local = fs.read_cpumask(f"{numa_src}/local_cpus")
    speed = fs.read_int(f"{base}/speed")
    rx, tx = _queues(fs, base)
    rings = ethtool.rings(name)
    candidates = _msi_irqs(fs, pcipath, devpath) if has_device else []
    irqs = _queue_irqs(fs, name, bus, virtio, candidates, interrupts) if has_device or bus else ()
    lower = tuple(
        sorted(
            {n[len("lower_") :] for n in fs.listdir(base) if n.startswith("lower_")}
            | set((fs.read(f"{base}/bonding/slaves") or "").split())
        )
    )
    return Nic(
        name=name,
        ifindex=fs.read_int(f"{base}/ifindex"),
        kind=_kind(fs, base, name, has_device, driver),
        driver=driver,
        bus=bus,
        numa_node=numa,
        local_cpus=local,
        speed_mbps=speed if speed is not None and speed > 0 else None,
        mtu=fs.read_int(f"{base}/mtu"),
        operstate=fs.read(f"{base}/operstate"),
        address=fs.read(f"{base}/address"),
        txqueuelen=fs.read_int(f"{base}/tx_queue_len"),
        rx_queues=rx,
        tx_queues=tx,
        rings=rings,
        channels=ethtool.channels(name),
        irqs=irqs,
        lower=lower,
        rings_fixed=ring_fixed_reason(fs, name, rings, driver),
        rss=read_rss(ethtool, name) if has_device else None,
    )


VIRTIO_F_RING_RESET = 40  # include/uapi/linux/virtio_config.h


def ring_fixed_reason(
    fs: HostFS, name: str, rings: Optional[RingSizes], driver: Optional[str]
) -> Optional[str]:
    """Why `ethtool -G` cannot change NIC `name`'s rings, or None when it may.

    - the driver reports no ring sizes (`ethtool -g` unsupported: veth, lo, tun...);
    - virtio_net without VIRTIO_F_RING_RESET among the device's negotiated features (the
      virtio device's `features` file, one '0'/'1' per bit from bit 0): its rings are the
      virtqueues the hypervisor sized, and the kernel resizes them only by a queue reset
      (6.0+ and a device that offers it; Debian 12's 6.1 on QEMU 7.2 has none: `-G` fails).
    """
    if rings is None or (rings.rx is None and rings.rx_max is None):
        return "the driver reports no ring sizes (ethtool -g is not supported)"
    if driver == "virtio_net":
        bits = (fs.read(f"{NET_SYS}/{name}/device/features") or "").strip()
        if len(bits) > VIRTIO_F_RING_RESET and bits[VIRTIO_F_RING_RESET] == "0":
            return "virtio_net without VIRTIO_F_RING_RESET: the hypervisor sized the rings"
    return None


def nic_names(fs: HostFS) -> list[str]:
    return [n for n in fs.listdir(NET_SYS) if fs.isdir(f"{NET_SYS}/{n}")]
