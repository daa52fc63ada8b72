"""The kernel command line and the CPU-isolation parameters in it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lbtune.host.kernel.cpulist import CpuListError, parse_cpulist

# isolcpus= flags that may precede the CPU list (Documentation/admin-guide/kernel-parameters).
ISOLCPUS_FLAGS = frozenset({"nohz", "domain", "managed_irq"})
# The CPU-isolation parameters lbtune reads and (through the bootloader) sets.
CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")


@dataclass(frozen=True)
class KernelCmdline:
    """Parsed /proc/cmdline: every `key=value` (last one wins) and bare flag."""

    raw: str
    params: tuple[tuple[str, Optional[str]], ...]

    @classmethod
    def parse(cls, raw: str) -> KernelCmdline:
        try:
            import shlex  # here: every `apply` imports this module for CMDLINE_KEYS alone

            words = shlex.split(raw)
        except ValueError:
            words = raw.split()
        params: list[tuple[str, Optional[str]]] = []
        for w in words:
            if w == "--":  # the rest belongs to init
                break
            key, eq, value = w.partition("=")
            params.append((key, value if eq else None))
        return cls(raw=raw, params=tuple(params))

    def get(self, key: str) -> Optional[str]:
        """Value of the last `key=` on the line; None when absent (or a bare flag)."""
        found: Optional[str] = None
        for k, v in self.params:
            if k == key:
                found = v
        return found

    def has(self, key: str) -> bool:
        return any(k == key for k, _ in self.params)

    def cpus(self, key: str) -> Optional[frozenset[int]]:
        """CPU list of `isolcpus=`, `nohz_full=`, `rcu_nocbs=`, `irqaffinity=`; None if absent.

        `isolcpus=` may carry flags (`isolcpus=managed_irq,domain,2-5`); they are skipped.
        Unparseable values read as None: the kernel ignores them too.
        """
        value = self.get(key)
        if value is None:
            return None
        if key == "isolcpus":
            parts = value.split(",")
            while parts and parts[0] in ISOLCPUS_FLAGS:
                parts.pop(0)
            value = ",".join(parts)
        try:
            return parse_cpulist(value)
        except CpuListError:
            return None

    def isolcpus_flags(self) -> tuple[str, ...]:
        value = self.get("isolcpus") or ""
        flags: list[str] = []
        for p in value.split(","):
            if p in ISOLCPUS_FLAGS:
                flags.append(p)
            else:
                break
        return tuple(flags)
