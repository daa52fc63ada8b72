"""What a rule may look at: a window of samples, and the topology and NICs passed in.

Rules are pure functions of a `Context`: the configuration values they judge by (sysctls,
sysfs attributes) come from the samples (`Sample.config`, read at sampling time), never from
the host after the window closed. A rule declares the values it needs (`@rule(...,
sysctls=..., paths=...)`) so the sampler reads them; asking for an undeclared one is a bug
and raises `UndeclaredConfig`, which the unit tests catch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Mapping, Optional

from lbtune.diagnose.nicsettings import NicSettings
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.host.net.nic import Nic
from lbtune.observe.window import Window


class UndeclaredConfig(Exception):
    """A rule read a configuration value it did not declare (a bug in the rule)."""


@dataclass(frozen=True)
class Context:
    """Inputs of the rules. `nics`, `nic_settings` and `topology` may be empty/None (a
    namespace, a capture without sysfs): rules that need them stay quiet. `allowed` is the
    set of configuration paths the running rule declared (None: no check)."""

    window: Window
    topology: Optional[CpuTopology] = None
    nics: Mapping[str, Nic] = field(default_factory=dict)
    netns: Optional[str] = None
    allowed: Optional[AbstractSet[str]] = None
    # Each NIC's ethtool settings (coalescing, features, pause, RSS), read with the NICs;
    # empty where they were not read (the monitor, the exporter): the rules on them stay quiet.
    nic_settings: Mapping[str, NicSettings] = field(default_factory=dict)

    def allowing(self, allowed: Optional[AbstractSet[str]]) -> Context:
        """This context for a rule that declared `allowed`: `replace(self, allowed=...)`
        without its per-call field inspection (run for every rule of every monitor tick)."""
        new = object.__new__(Context)
        new.__dict__.update(self.__dict__)
        new.__dict__["allowed"] = allowed
        return new

    @property
    def config(self) -> Mapping[str, str]:
        """Configuration values of the latest sample: kernel path -> text."""
        return self.window.after.config

    def path_value(self, kpath: str) -> Optional[str]:
        """A configuration file's value as sampled (whitespace folded), None when absent."""
        if self.allowed is not None and not _declared(kpath, self.allowed):
            raise UndeclaredConfig(f"{kpath} is read by a rule that does not declare it")
        return self.config.get(kpath)

    def sysctl(self, key: str) -> Optional[str]:
        """A sysctl's text (`net.core.somaxconn` -> "4096"), None when absent."""
        return self.path_value(sysctl_path(key))

    def sysctl_int(self, key: str) -> Optional[int]:
        """The first integer of a sysctl, None when absent or not a number."""
        values = self.sysctl_ints(key)
        return values[0] if values else None

    def sysctl_ints(self, key: str) -> Optional[list[int]]:
        """All integers of a sysctl (`tcp_rmem` -> [4096, 131072, 6291456]), None when
        absent or not numbers."""
        text = self.sysctl(key)
        if text is None:
            return None
        try:
            return [int(x) for x in text.split()]
        except ValueError:
            return None

    def host_global(self, key: str) -> bool:
        """True when `key` cannot be set from the namespace being diagnosed: it is absent or
        read-only there (the host's own value). Always False outside a namespace."""
        if self.netns is None:
            return False
        path = sysctl_path(key)
        return path not in self.config or path in self.window.after.config_readonly

    def rate(self, value: int) -> Optional[float]:
        return self.window.rate(value)


def _declared(kpath: str, allowed: AbstractSet[str]) -> bool:
    if kpath in allowed:
        return True
    parts = kpath.split("/")
    return any(
        len(p) == len(parts) and all(a in ("*", b) for a, b in zip(p, parts))
        for p in (x.split("/") for x in allowed if "*" in x)
    )
