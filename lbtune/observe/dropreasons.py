"""Names of the kernel's packet drop reasons (`enum skb_drop_reason`), from the running kernel.

The number a `skb:kfree_skb` event carries means different things on different kernels (4 is
PKT_TOO_SMALL on 6.5 and SOCKET_CLOSE on 6.18), so lbtune never ships a table. Sources, in
order:

1. the tracepoint's print format: `__print_symbolic(REC->reason, {2, "NOT_SPECIFIED"}, ...)`
   (Linux 6.0+; core reasons only, without NOT_DROPPED_YET and CONSUMED);
2. BTF `enum skb_drop_reason` (5.17+ with CONFIG_DEBUG_INFO_BTF): every core reason,
   including the non-drops, prefix `SKB_DROP_REASON_`/`SKB_` stripped;
3. subsystem reasons (`reason >> 16` != 0, 6.4+): the subsystem from BTF
   `enum skb_drop_reason_subsys`, the name from the enum (vmlinux or module BTF) that holds
   both the subsystem's base value (`subsys << 16`) and the reason's value.

Unknown numbers are shown as `reason 123` rather than guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from lbtune.host.trace.btf import BtfEnum

NOT_DROPPED_YET = "NOT_DROPPED_YET"
CONSUMED = "CONSUMED"
_PREFIXES = ("SKB_DROP_REASON_SUBSYS_", "SKB_DROP_REASON_", "SKB_")


def _short(name: str) -> str:
    for p in _PREFIXES:
        if name.startswith(p):
            return name[len(p) :]
    return name


@dataclass(frozen=True)
class DropReasons:
    """value -> name for this kernel's drop reasons, and where the names came from."""

    names: Mapping[int, str]
    source: str  # "tracepoint format", "BTF", "tracepoint format + BTF", or "none"
    subsys_shift: int = 16
    subsystems: Mapping[int, str] = field(default_factory=dict)  # 1 -> "MAC80211_UNUSABLE"

    def name(self, value: int) -> str:
        known = self.names.get(value)
        if known is not None:
            return known
        sub = value >> self.subsys_shift
        if sub and sub in self.subsystems:
            return f"{self.subsystems[sub]}:reason {value & ((1 << self.subsys_shift) - 1)}"
        return f"reason {value}"

    def value(self, name: str) -> Optional[int]:
        """The number of a reason name (`CONSUMED`), None when this kernel has no such reason."""
        for v, n in self.names.items():
            if n == name:
                return v
        return None


def resolve_drop_reasons(
    table: Mapping[int, str], enums: Sequence[BtfEnum]
) -> DropReasons:
    """Combine a tracepoint `__print_symbolic` table and the kernel's BTF enums."""
    names: dict[int, str] = {v: _short(n) for v, n in table.items()}
    core = next((e for e in enums if e.name == "skb_drop_reason"), None)
    subsys_enum = next((e for e in enums if e.name == "skb_drop_reason_subsys"), None)
    shift = 16
    if core is not None:
        for member, value in core.members:
            if member.endswith("_MAX") or member.endswith("_MASK"):
                if member.endswith("SUBSYS_MASK") and value:
                    shift = (value & -value).bit_length() - 1
                continue
            names.setdefault(value, _short(member))
    subsystems: dict[int, str] = {}
    if subsys_enum is not None:
        for member, value in subsys_enum.members:
            if value and not member.endswith("_NUM"):
                subsystems[value] = _short(member)
    for sub, sub_name in subsystems.items():
        base = sub << shift
        for e in enums:
            values = {v for _, v in e.members}
            if base not in values or e is subsys_enum:
                continue
            for member, value in e.members:
                if value >> shift == sub and value != base and not member.startswith("__"):
                    names.setdefault(value, f"{sub_name}:{member}")
    if table and core is not None:
        source = "tracepoint format + BTF"
    elif table:
        source = "tracepoint format"
    elif core is not None:
        source = "BTF"
    else:
        source = "none"
    return DropReasons(names, source, shift, subsystems)
