"""CPU topology: online CPUs, SMT siblings, NUMA nodes, isolated and housekeeping CPUs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.kernel.cmdline import KernelCmdline

CPU_SYS = "/sys/devices/system/cpu"
NODE_SYS = "/sys/devices/system/node"


@dataclass(frozen=True)
class Cpu:
    """One logical CPU."""

    id: int
    online: bool
    node: int  # NUMA node; 0 when the host has no NUMA information
    package: Optional[int]  # physical socket
    core: Optional[int]  # core id within the package
    siblings: frozenset[int]  # SMT threads sharing the core, itself included
    isolated: bool

    @property
    def is_primary_thread(self) -> bool:
        """True for the lowest-numbered thread of its core (the one to keep when skipping SMT)."""
        return not self.siblings or self.id == min(self.siblings)


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: frozenset[int]


@dataclass(frozen=True)
class CpuTopology:
    """All CPUs of a host and how they group."""

    cpus: tuple[Cpu, ...]
    nodes: tuple[NumaNode, ...]
    possible: frozenset[int]
    isolated: frozenset[int]  # what the kernel isolates now (sysfs, else cmdline)
    nohz_full: frozenset[int]
    cmdline: KernelCmdline
    default_irq_affinity: Optional[frozenset[int]]

    @property
    def online(self) -> frozenset[int]:
        return frozenset(c.id for c in self.cpus if c.online)

    @property
    def housekeeping(self) -> frozenset[int]:
        """Online CPUs that are not isolated: where the kernel and daemons run."""
        return self.online - self.isolated

    @property
    def smt_active(self) -> bool:
        return any(len(c.siblings) > 1 for c in self.cpus)

    def cpu(self, cpu_id: int) -> Cpu:
        for c in self.cpus:
            if c.id == cpu_id:
                return c
        raise KeyError(cpu_id)

    def node_of(self, cpu_id: int) -> int:
        return self.cpu(cpu_id).node

    def node_cpus(self, node: int) -> frozenset[int]:
        for n in self.nodes:
            if n.id == node:
                return n.cpus
        return frozenset()


def _numbered(fs: HostFS, directory: str, prefix: str) -> list[int]:
    pat = re.compile(rf"{prefix}(\d+)$")
    out = []
    for name in fs.listdir(directory):
        m = pat.match(name)
        if m:
            out.append(int(m.group(1)))
    return sorted(out)


def discover_cpus(fs: HostFS) -> CpuTopology:
    """Read the CPU topology from sysfs (+ /proc/cmdline) below the host root."""
    cmdline = KernelCmdline.parse(fs.read("/proc/cmdline") or "")
    online = fs.read_cpulist(f"{CPU_SYS}/online")
    possible = fs.read_cpulist(f"{CPU_SYS}/possible")
    present_ids = _numbered(fs, CPU_SYS, "cpu")
    if online is None:
        if not present_ids:
            raise MalformedHostFile(fs.path(CPU_SYS), "no CPUs found (not a host tree?)")
        online = frozenset(present_ids)
    all_ids = sorted(set(present_ids) | online)
    if possible is None:
        possible = frozenset(all_ids)

    node_of: dict[int, int] = {}
    nodes: list[NumaNode] = []
    for node in _numbered(fs, NODE_SYS, "node"):
        members = fs.read_cpulist(f"{NODE_SYS}/node{node}/cpulist") or frozenset()
        nodes.append(NumaNode(node, members))
        for c in members:
            node_of[c] = node
    if not nodes:
        nodes = [NumaNode(0, frozenset(all_ids))]

    isolated = fs.read_cpulist(f"{CPU_SYS}/isolated")
    if isolated is None:
        isolated = cmdline.cpus("isolcpus") or frozenset()
    nohz = fs.read_cpulist(f"{CPU_SYS}/nohz_full")
    if nohz is None:
        nohz = cmdline.cpus("nohz_full") or frozenset()

    cpus = []
    for cid in all_ids:
        topo = f"{CPU_SYS}/cpu{cid}/topology"
        siblings = fs.read_cpulist(f"{topo}/thread_siblings_list")
        if siblings is None:
            siblings = fs.read_cpulist(f"{topo}/core_cpus_list")
        cpus.append(
            Cpu(
                id=cid,
                online=cid in online,
                node=node_of.get(cid, nodes[0].id),
                package=fs.read_int(f"{topo}/physical_package_id"),
                core=fs.read_int(f"{topo}/core_id"),
                siblings=siblings or frozenset({cid}),
                isolated=cid in isolated,
            )
        )
    return CpuTopology(
        cpus=tuple(cpus),
        nodes=tuple(nodes),
        possible=possible,
        isolated=isolated,
        nohz_full=nohz,
        cmdline=cmdline,
        default_irq_affinity=fs.read_cpumask("/proc/irq/default_smp_affinity"),
    )
