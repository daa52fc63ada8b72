"""What a rule may look at: the window of samples, the host's configuration and topology."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from lbtune.host.fs import HostFS
from lbtune.host.nic import Nic
from lbtune.host.topology import CpuTopology
from lbtune.observe.window import Window
from lbtune.tune.sysctl import sysctl_path


@dataclass
class Context:
    """Inputs of the rules. `nics` and `topology` may be empty/None (a namespace, a capture
    without sysfs): rules that need them stay quiet."""

    window: Window
    fs: HostFS
    topology: Optional[CpuTopology] = None
    nics: Mapping[str, Nic] = field(default_factory=dict)
    netns: Optional[str] = None
    _cache: dict[str, Optional[str]] = field(default_factory=dict)

    def sysctl(self, key: str) -> Optional[str]:
        """A sysctl's text (`net.core.somaxconn` -> "4096"), None when absent."""
        if key not in self._cache:
            text = self.fs.read(sysctl_path(key))
            self._cache[key] = None if text is None else " ".join(text.split())
        return self._cache[key]

    def sysctl_int(self, key: str) -> Optional[int]:
        text = self.sysctl(key)
        if text is None:
            return None
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            return None

    def sysctl_ints(self, key: str) -> Optional[list[int]]:
        text = self.sysctl(key)
        if text is None:
            return None
        try:
            return [int(x) for x in text.split()]
        except ValueError:
            return None

    def rate(self, value: int) -> Optional[float]:
        return self.window.rate(value)
