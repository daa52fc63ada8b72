"""The whole picture `lbtune show` prints: CPUs, NICs with queue IRQs, irqbalance.

`HostInventory` is everything, read at once (show, capture). `LazyInventory` reads only what
is asked for, when it is asked: planning a sysctl-only profile reads no NIC and no IRQ, and a
profile for one interface discovers that one (the `Inventory` protocol is what both offer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from lbtune.host.host import Host

if TYPE_CHECKING:  # imported where used: planning a sysctl-only profile reads no NIC
    from lbtune.host.kernel.cputopology import CpuTopology
    from lbtune.host.kernel.interrupts import IrqLine
    from lbtune.host.kernel.irqbalance import IrqbalanceState
    from lbtune.host.net.ethtool import EthtoolSource
    from lbtune.host.net.nic import Nic


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
    from lbtune.host.kernel.cputopology import discover_cpus
    from lbtune.host.kernel.interrupts import read_interrupts
    from lbtune.host.kernel.irqbalance import discover_irqbalance
    from lbtune.host.net.nic import discover_nic, nic_names

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


class Inventory(Protocol):
    """What planning reads about a host: its CPUs and its NICs (one by name, or all)."""

    @property
    def cpus(self) -> CpuTopology: ...

    @property
    def nics(self) -> tuple[Nic, ...]: ...

    def nic(self, name: str) -> Nic: ...


class LazyInventory:
    """An `Inventory` that discovers each part on first use and keeps it."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._cpus: Optional[CpuTopology] = None
        self._nics: dict[str, Nic] = {}
        self._all: Optional[tuple[Nic, ...]] = None
        self._interrupts: Optional[dict[int, IrqLine]] = None

    @property
    def ethtool(self) -> EthtoolSource:
        """The NICs' ethtool settings: RSS tables and flow rules are planned against them
        (an inventory without this attribute plans as if no NIC had them)."""
        return self.host.ethtool

    @property
    def cpus(self) -> CpuTopology:
        if self._cpus is None:
            from lbtune.host.kernel.cputopology import discover_cpus

            self._cpus = discover_cpus(self.host.fs)
        return self._cpus

    def _irqs(self) -> dict[int, IrqLine]:
        if self._interrupts is None:
            from lbtune.host.kernel.interrupts import read_interrupts

            self._interrupts = read_interrupts(self.host.fs)
        return self._interrupts

    def nic(self, name: str) -> Nic:
        from lbtune.host.net.nic import discover_nic, nic_names

        if name not in self._nics:
            if name not in nic_names(self.host.fs):
                raise KeyError(name)
            self._nics[name] = discover_nic(self.host.fs, name, self.host.ethtool, self._irqs())
        return self._nics[name]

    @property
    def nics(self) -> tuple[Nic, ...]:
        if self._all is None:
            from lbtune.host.net.nic import nic_names

            self._all = tuple(self.nic(n) for n in nic_names(self.host.fs))
        return self._all
