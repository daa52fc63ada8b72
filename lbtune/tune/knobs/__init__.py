"""Every knob kind, one module per family (see docs/architecture.md "Where things go").

- `sysctl`: `/proc/sys` values (knobs/sysctl.py)
- NIC: ring sizes, channels, txqueuelen (knobs/nic.py); interrupt coalescing
  (knobs/coalesce.py), features/offloads (knobs/features.py), pause frames (knobs/pause.py)
- RSS: hash fields per flow type, indirection table, hash key (knobs/rss.py)
- flow steering: ntuple rules at the locations lbtune adds them (knobs/ntuple.py)
- IRQ and steering: IRQ affinity, RPS, XPS, irqbalance state, banned CPUs and
  banned IRQs (knobs/irq.py)
- boot: kernel command line, CPU governor (knobs/boot.py)
- IPVS: services, real servers, drains, timeouts, addresses (knobs/ipvs.py)

Every knob is built from its object string alone, so a journal entry `(kind, object)` turns
back into a knob through `lbtune.tune.registry`. The families are imported when first used
(`FAMILY_OF_KIND`): a `rollback` of sysctls needs the sysctl family only, and importing all
of them (the IPVS family brings netlink and address parsing) was a fifth of its start-up.
A new kind goes into `FAMILY_OF_KIND` and `ALL_KINDS` (a test keeps the two in step).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from lbtune.tune.knob import Knob
    from lbtune.tune.knobs.boot import CmdlineKnob, GovernorKnob
    from lbtune.tune.knobs.coalesce import CoalesceKnob
    from lbtune.tune.knobs.common import parse_cpuset
    from lbtune.tune.knobs.features import FeatureKnob
    from lbtune.tune.knobs.irq import (
        IrqAffinityKnob,
        IrqbalanceBanIrqKnob,
        IrqbalanceBanKnob,
        IrqbalanceKnob,
        RpsCpusKnob,
        RpsFlowCntKnob,
        XpsCpusKnob,
    )
    from lbtune.tune.knobs.nic import ChannelsKnob, RingKnob, TxqueuelenKnob
    from lbtune.tune.knobs.ntuple import NtupleKnob
    from lbtune.tune.knobs.pause import PauseKnob
    from lbtune.tune.knobs.rss import RssHashKnob, RssIndirKnob, RssKeyKnob
    from lbtune.tune.knobs.sysctl import SysctlKnob

    ALL_KINDS: tuple[type[Knob], ...]

# Knob kind -> the family module (below lbtune.tune.knobs) that defines it, in apply order.
FAMILY_OF_KIND: dict[str, str] = {
    "sysctl": "sysctl",
    "ring": "nic",
    "channels": "nic",
    "txqueuelen": "nic",
    "feature": "features",
    "coalesce": "coalesce",
    "pause": "pause",
    "rss_indir": "rss",
    "rss_key": "rss",
    "rss_hash": "rss",
    "ntuple": "ntuple",
    "irq_affinity": "irq",
    "rps_cpus": "irq",
    "rps_flow_cnt": "irq",
    "xps_cpus": "irq",
    "irqbalance": "irq",
    "irqbalance_ban": "irq",
    "irqbalance_banirq": "irq",
    "cmdline": "boot",
    "governor": "boot",
    "ipvs_service": "ipvs",
    "ipvs_dest": "ipvs",
    "ipvs_drain": "ipvs",
    "ipvs_timeout": "ipvs",
    "address": "ipvs",
}

# Names this package re-exports -> their family module.
_EXPORTS = {
    "SysctlKnob": "sysctl",
    "RingKnob": "nic",
    "ChannelsKnob": "nic",
    "TxqueuelenKnob": "nic",
    "CoalesceKnob": "coalesce",
    "FeatureKnob": "features",
    "PauseKnob": "pause",
    "RssHashKnob": "rss",
    "RssIndirKnob": "rss",
    "RssKeyKnob": "rss",
    "NtupleKnob": "ntuple",
    "IrqAffinityKnob": "irq",
    "RpsCpusKnob": "irq",
    "RpsFlowCntKnob": "irq",
    "XpsCpusKnob": "irq",
    "IrqbalanceKnob": "irq",
    "IrqbalanceBanKnob": "irq",
    "IrqbalanceBanIrqKnob": "irq",
    "CmdlineKnob": "boot",
    "GovernorKnob": "boot",
    "parse_cpuset": "common",
}

__all__ = [
    "ALL_KINDS",
    "FAMILY_OF_KIND",
    "ChannelsKnob",
    "CmdlineKnob",
    "CoalesceKnob",
    "FeatureKnob",
    "GovernorKnob",
    "IrqAffinityKnob",
    "IrqbalanceBanIrqKnob",
    "IrqbalanceBanKnob",
    "IrqbalanceKnob",
    "NtupleKnob",
    "PauseKnob",
    "RingKnob",
    "RpsCpusKnob",
    "RpsFlowCntKnob",
    "RssHashKnob",
    "RssIndirKnob",
    "RssKeyKnob",
    "SysctlKnob",
    "TxqueuelenKnob",
    "XpsCpusKnob",
    "kind_class",
    "parse_cpuset",
    "register_all",
]


def _family(name: str) -> Any:
    return importlib.import_module(f"{__name__}.{name}")


def kind_class(kind: str) -> type[Knob]:
    """The class of a knob kind, its family imported on first use; KeyError if unknown."""
    module = _family(FAMILY_OF_KIND[kind])
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "kind", None) == kind:
            return value
    raise KeyError(kind)


def all_kinds() -> tuple[type[Knob], ...]:
    """Every kind's class (imports every family)."""
    return tuple(kind_class(k) for k in FAMILY_OF_KIND)


def __getattr__(name: str) -> Any:  # PEP 562: the families load on first use
    if name == "ALL_KINDS":
        return all_kinds()
    family = _EXPORTS.get(name)
    if family is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_family(family), name)


def register_all(register: Callable[[str, Callable[[str], Knob]], None]) -> None:
    """Register every built-in kind with lbtune.tune.registry (imports every family)."""
    for cls in all_kinds():
        register(cls.kind, cls)
