"""What a profile is once validated: `Setting`, `Profile` (includes merged) and `ProfileInfo`,
the section and key names of the format, and the value renderings used in messages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from lbtune.host.kernel.cmdline import CMDLINE_KEYS
from lbtune.tune.plan import Mode

SECTIONS = ("profile", "sysctl", "nic", "cpu", "irqbalance", "cmdline", "governor")
PROFILE_KEYS = ("name", "description", "include", "role", "notes", "iface")
IFACE_MODES = ("required", "optional")  # [profile] iface: must [nic."data"] have --iface
ROLES = ("generic", "web", "realserver", "lb-dr", "lb-proxy", "loadgen", "reference")
LB_ROLES = frozenset({"lb-dr", "lb-proxy"})
NIC_KEYS = (
    "txqueuelen", "channels", "rings", "irq_affinity", "rps", "xps",
    "coalesce", "features", "pause",
    "rss_hash", "rss_indir", "rss_key", "flow_rules",
)  # fmt: skip
# NIC keys that are tables of named values, each with its own reason (`features.lro = {
# value = "off", reason = "..." }`); a section holds them as "features.lro".
NIC_GROUPS = ("coalesce", "features", "pause")
PAUSE_FIELDS = ("autoneg", "rx", "tx")
NIC_ROLES = ("data",)  # selectors that name a role, bound on the command line (--iface)
GOVERNORS = ("performance", "powersave", "schedutil", "ondemand", "conservative", "userspace")
STRATEGIES = ("local", "list", "isolated")

DATA = "{data}"  # stands for the data interface (--iface) in sysctl keys

__all__ = ["CMDLINE_KEYS"]


def show_value(v: object) -> str:
    """A short, one-line, always-printable rendering of any user value for messages."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30:
        return "a huge number"
    try:
        text = repr(v)
    except Exception:
        text = f"<{type(v).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def key_text(k: object) -> str:
    """A table key for messages: as written when plain, quoted otherwise."""
    if isinstance(k, str) and 0 < len(k) <= 60 and re.fullmatch(r"[A-Za-z0-9_.{}\-]+", k):
        return k
    return show_value(k)


def plain_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
    return value


def one_line(text: str) -> bool:
    return text.isprintable() and bool(text.strip())


@dataclass(frozen=True)
class Setting:
    """One profile value with its reason; `value` is already validated and normalised."""

    value: Any
    reason: str
    mode: Mode = Mode.SET
    source: str = ""  # the file that set it (last one, after includes)


@dataclass(frozen=True)
class Profile:
    """A validated profile, its includes merged (included files first, later values win)."""

    name: str
    description: str = ""
    path: str = ""
    role: Optional[str] = None
    include: tuple[str, ...] = ()  # as written in this file
    chain: tuple[str, ...] = ()  # every file merged, in merge order (this one last)
    notes: tuple[str, ...] = ()
    sysctl: Mapping[str, Setting] = field(default_factory=dict)
    nic: Mapping[str, Mapping[str, Setting]] = field(default_factory=dict)  # "" = defaults
    cpu: Mapping[str, Setting] = field(default_factory=dict)
    irqbalance: Mapping[str, Setting] = field(default_factory=dict)
    cmdline: Mapping[str, Setting] = field(default_factory=dict)
    governor: Mapping[str, Setting] = field(default_factory=dict)
    # [profile] iface = "optional": the [nic."data"] sections apply when --iface names the data
    # interface and are left out without it (None: not said, "required")
    iface_optional: Optional[bool] = None

    @property
    def has_data_sections(self) -> bool:
        return any(sel in NIC_ROLES for sel in self.nic)

    @property
    def needs_iface(self) -> bool:
        """True when resolving needs `--iface` (a `[nic."data"]` section, unless the profile
        says `iface = "optional"`, or a `{data}` key)."""
        return (self.has_data_sections and not self.iface_optional) or any(
            DATA in k for k in self.sysctl
        )

    def settings(self) -> list[tuple[str, Setting]]:
        """Every value as (profile key path, setting), in file order by section."""
        out: list[tuple[str, Setting]] = []
        out += [(f"cpu.{k}", s) for k, s in self.cpu.items()]
        out += [(f"sysctl.{k}", s) for k, s in self.sysctl.items()]
        out += [(f"governor.{k}", s) for k, s in self.governor.items()]
        out += [(f"irqbalance.{k}", s) for k, s in self.irqbalance.items()]
        for sel, sec in self.nic.items():
            prefix = "nic" if sel == "" else f"nic.{sel}"
            out += [(f"{prefix}.{k}", s) for k, s in sec.items()]
        out += [(f"cmdline.{k}", s) for k, s in self.cmdline.items()]
        return out

    def as_dict(self) -> dict[str, Any]:
        """The merged profile as plain data (for --json)."""
        return {
            "name": self.name,
            "description": self.description,
            "path": self.path,
            "role": self.role,
            "include": list(self.include),
            "chain": list(self.chain),
            "needs_iface": self.needs_iface,
            "iface": "optional" if self.iface_optional else "required",
            "notes": list(self.notes),
            "settings": [
                {
                    "key": key,
                    "value": plain_value(s.value),
                    "mode": s.mode.value,
                    "reason": s.reason,
                    "source": s.source,
                }
                for key, s in self.settings()
            ],
        }

    def to_text(self) -> str:
        """The merged profile for humans: one line per value with its mode, reason and file."""
        lines = [self.name + (f": {self.description}" if self.description else "")]
        if self.role:
            lines.append(f"  role: {self.role}")
        if len(self.chain) > 1:
            lines.append(f"  merged: {' <- '.join(self.chain)}")
        lines += [f"  note: {n}" for n in self.notes]
        for key, s in self.settings():
            value = plain_value(s.value)
            if isinstance(value, dict):
                value = ", ".join(f"{k}={v}" for k, v in value.items())
            mode = "" if s.mode is Mode.SET else f" ({s.mode.value})"
            origin = f" [{Path(s.source).name}]" if s.source and s.source != self.path else ""
            lines.append(f"{key} = {value}{mode}")
            if s.reason:
                lines.append(f"    # {s.reason}{origin}")
        return "\n".join(lines)


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    path: str
    description: str = ""
    role: Optional[str] = None
    include: tuple[str, ...] = ()
    error: Optional[str] = None  # the one-line BadInput message when the profile is broken
