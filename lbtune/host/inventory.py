"""The whole picture `lbtune show` prints: CPUs, NICs with queue IRQs, irqbalance."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lbtune.host.host import Host
from lbtune.host.interrupts import read_interrupts
from lbtune.host.irqbalance import IrqbalanceState, discover_irqbalance
from lbtune.host.nic import Nic, discover_nic, nic_names
from lbtune.host.topology import CpuTopology, discover_cpus


@dataclass(frozen=True)
class HostInventory:
    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    cpus: CpuTopology
    nics: tuple[Nic, ...]
    irqbalance: IrqbalanceState

    def nic(self, name: str) -> Nic:
        for n in self.nics:
            if n.name == name:
                return n
        raise KeyError(name)


def discover_host(host: Host, only: Optional[list[str]] = None) -> HostInventory:
    """Read everything about `host`; `only` limits the NICs to these names."""
    fs = host.fs
    interrupts = read_interrupts(fs)
    names = nic_names(fs)
    if only:
        names = [n for n in names if n in only]
    return HostInventory(
        hostname=fs.read("/proc/sys/kernel/hostname"),
        kernel=fs.read("/proc/sys/kernel/osrelease"),
        netns=host.netns,
        cpus=discover_cpus(fs),
        nics=tuple(discover_nic(fs, n, host.ethtool, interrupts) for n in names),
        irqbalance=discover_irqbalance(fs),
    )
