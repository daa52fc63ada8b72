"""NIC parameters behind ethtool beyond rings and channels: interrupt coalescing (`ethtool
-c/-C`), features or offloads (`-k/-K`) and pause frames (`-a/-A`), as values by the
kernel's and ethtool's own names. The sources (`LiveEthtool`, `RecordedEthtool` in
`host/net/ethtool.py`) return these; None from a source means the driver does not support
the family."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# ethtool 6.1's names for struct ethtool_coalesce's fields (and the netlink attributes),
# in the order `ethtool -c` prints them; adaptive-rx/-tx are 0/1.
COALESCE_PARAMS: tuple[str, ...] = (
    "adaptive-rx", "adaptive-tx", "stats-block-usecs", "sample-interval",
    "pkt-rate-low", "pkt-rate-high",
    "rx-usecs", "rx-frames", "rx-usecs-irq", "rx-frames-irq",
    "tx-usecs", "tx-frames", "tx-usecs-irq", "tx-frames-irq",
    "rx-usecs-low", "rx-frames-low", "tx-usecs-low", "tx-frames-low",
    "rx-usecs-high", "rx-frames-high", "tx-usecs-high", "tx-frames-high",
    "cqe-mode-rx", "cqe-mode-tx",
)  # fmt: skip


@dataclass(frozen=True)
class Coalesce:
    """The parameters the driver supports, with their values (unsupported ones absent)."""

    values: tuple[tuple[str, int], ...]

    def get(self, name: str) -> Optional[int]:
        return dict(self.values).get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.values)


@dataclass(frozen=True)
class Feature:
    """One netdev feature by the kernel's name (`rx-gro`, `rx-lro`, `tx-tcp-segmentation`,
    ... as in net/ethtool/common.c netdev_features_strings)."""

    name: str
    active: bool
    fixed: bool  # not in the driver's changeable set: `ethtool -k` says "[fixed]"
    requested: Optional[bool] = None  # wanted by the user, None when not known (recordings)


@dataclass(frozen=True)
class Features:
    entries: tuple[Feature, ...]

    def get(self, name: str) -> Optional[Feature]:
        for f in self.entries:
            if f.name == name:
                return f
        return None


@dataclass(frozen=True)
class Pause:
    """`ethtool -a`: pause-frame autonegotiation and the two directions."""

    autoneg: bool
    rx: bool
    tx: bool
