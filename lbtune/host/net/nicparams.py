"""NIC parameters behind ethtool beyond rings and channels: interrupt coalescing (`ethtool
-c/-C`), features or offloads (`-k/-K`) and pause frames (`-a/-A`), as values by the
kernel's and ethtool's own names. The sources (`LiveEthtool`, `RecordedEthtool` in
`host/net/ethtool.py`) return these; None from a source means the driver does not support
the family."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Mapping, Optional, Sequence

from lbtune.errors import MalformedHostFile

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


# ------------------------------------------------------------------ names

# Every coalescing parameter by ethtool's name -> its ETHTOOL_A_COALESCE_* netlink attribute
# (include/uapi/linux/ethtool_netlink.h) and whether it is a u8 flag (on/off). The tx-aggr-*
# three came with 6.2; a 6.1 kernel never reports them.
COALESCE_ATTRS: dict[str, tuple[int, bool]] = {
    "rx-usecs": (2, False), "rx-frames": (3, False),
    "rx-usecs-irq": (4, False), "rx-frames-irq": (5, False),
    "tx-usecs": (6, False), "tx-frames": (7, False),
    "tx-usecs-irq": (8, False), "tx-frames-irq": (9, False),
    "stats-block-usecs": (10, False),
    "adaptive-rx": (11, True), "adaptive-tx": (12, True),
    "pkt-rate-low": (13, False),
    "rx-usecs-low": (14, False), "rx-frames-low": (15, False),
    "tx-usecs-low": (16, False), "tx-frames-low": (17, False),
    "pkt-rate-high": (18, False),
    "rx-usecs-high": (19, False), "rx-frames-high": (20, False),
    "tx-usecs-high": (21, False), "tx-frames-high": (22, False),
    "sample-interval": (23, False),
    "cqe-mode-tx": (24, True), "cqe-mode-rx": (25, True),
    "tx-aggr-max-bytes": (26, False), "tx-aggr-max-frames": (27, False),
    "tx-aggr-time-usecs": (28, False),
}  # fmt: skip
COALESCE_FLAGS = frozenset(n for n, (_, flag) in COALESCE_ATTRS.items() if flag)
# The order parameters are shown in: ethtool's, then the later ones.
COALESCE_ORDER = COALESCE_PARAMS + tuple(n for n in COALESCE_ATTRS if n not in COALESCE_PARAMS)
U32_MAX = 0xFFFFFFFF

# ethtool's legacy feature flags (ethtool.c off_flag_def): the short name `ethtool -K` takes,
# the long name `ethtool -k` prints, and the kernel feature names they stand for (fnmatch).
OFF_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("rx", "rx-checksumming", "rx-checksum"),
    ("tx", "tx-checksumming", "tx-checksum-*"),
    ("sg", "scatter-gather", "tx-scatter-gather*"),
    ("tso", "tcp-segmentation-offload", "tx-tcp*-segmentation"),
    ("ufo", "udp-fragmentation-offload", "tx-udp-fragmentation"),
    ("gso", "generic-segmentation-offload", "tx-generic-segmentation"),
    ("gro", "generic-receive-offload", "rx-gro"),
    ("lro", "large-receive-offload", "rx-lro"),
    ("rxvlan", "rx-vlan-offload", "rx-vlan-hw-parse"),
    ("txvlan", "tx-vlan-offload", "tx-vlan-hw-insert"),
    ("ntuple", "ntuple-filters", "rx-ntuple-filter"),
    ("rxhash", "receive-hashing", "rx-hashing"),
)
# A long name printed alone (its group has one member on this device): the member it means.
_LONE_LONG = {
    "rx-checksumming": "rx-checksum",
    "scatter-gather": "tx-scatter-gather",
    "tcp-segmentation-offload": "tx-tcp-segmentation",
    "udp-fragmentation-offload": "tx-udp-fragmentation",
    "generic-segmentation-offload": "tx-generic-segmentation",
    "generic-receive-offload": "rx-gro",
    "large-receive-offload": "rx-lro",
    "rx-vlan-offload": "rx-vlan-hw-parse",
    "tx-vlan-offload": "tx-vlan-hw-insert",
    "ntuple-filters": "rx-ntuple-filter",
    "receive-hashing": "rx-hashing",
}
_LONG_NAMES = frozenset(long for _, long, _ in OFF_FLAGS)
_FEATURE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")


def is_feature_name(name: str) -> bool:
    """A name that can be a feature, an ethtool alias or a long name (syntax only)."""
    return bool(_FEATURE_NAME.fullmatch(name))


def feature_members(name: str, available: Sequence[str]) -> tuple[str, ...]:
    """The kernel features `name` stands for among `available` (the device's names):
    itself when the kernel has a feature by that name, else the members of ethtool's alias
    (`gro` -> rx-gro; `tso` -> tx-tcp-segmentation, tx-tcp6-segmentation, ...), else ()."""
    if name in available:
        return (name,)
    for short, long, pattern in OFF_FLAGS:
        if name in (short, long):
            return tuple(n for n in available if fnmatchcase(n, pattern))
    return ()


def canonical_feature(name: str) -> str:
    """The kernel name of an ethtool alias that stands for exactly one feature (`gro` ->
    `rx-gro`, `large-receive-offload` -> `rx-lro`); any other name as it is."""
    for short, long, pattern in OFF_FLAGS:
        if name in (short, long) and not any(c in pattern for c in "*?["):
            return pattern
    return name


def alias_of(name: str) -> Optional[str]:
    """The short ethtool alias whose group holds kernel feature `name`, if any."""
    for short, _, pattern in OFF_FLAGS:
        if fnmatchcase(name, pattern):
            return short
    return None


def on_off(value: bool) -> str:
    return "on" if value else "off"


def parse_on_off(text: str) -> Optional[bool]:
    t = text.strip().lower()
    if t in ("on", "1", "true", "yes"):
        return True
    if t in ("off", "0", "false", "no"):
        return False
    return None


# ------------------------------------------------------------------ ethtool -c

_C_LABELS = {  # the labels ethtool prints -> our names (netlink `rx-frame-low` included)
    **{n: n for n in COALESCE_ATTRS},
    "rx-frame-low": "rx-frames-low", "tx-frame-low": "tx-frames-low",
    "rx-frame-high": "rx-frames-high", "tx-frame-high": "tx-frames-high",
}  # fmt: skip
_C_LINE = re.compile(r"([a-z][a-z-]*):[ \t]*(\S+)[ \t]*")
_C_PAIR = re.compile(r"(Adaptive|CQE mode) RX:[ \t]*(\S+)[ \t]+TX:[ \t]*(\S+)[ \t]*")


def _c_value(raw: str, name: str, source: str) -> Optional[int]:
    if raw == "n/a":
        return None
    if name in COALESCE_FLAGS:
        flag = {"on": 1, "off": 0}.get(raw)
        if flag is None:
            raise MalformedHostFile(source, f"{name}: not on/off: {raw!r}")
        return flag
    if not raw.isdigit() or not raw.isascii() or int(raw) > U32_MAX:
        raise MalformedHostFile(source, f"{name}: not a 32-bit count: {raw!r}")
    return int(raw)


def parse_ethtool_c(text: str, source: str = "ethtool -c") -> Coalesce:
    """`ethtool -c` text (netlink or ioctl ethtool): the parameters with a value, in
    COALESCE_ATTRS order; `n/a` (the kernel did not report it: unsupported) is left out."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Coalesce parameters for"):
        raise MalformedHostFile(source, "does not start with 'Coalesce parameters for'")
    got: dict[str, int] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        pairs: tuple[tuple[str, str], ...]
        m = _C_PAIR.fullmatch(line)
        if m:
            prefix = "adaptive" if m[1] == "Adaptive" else "cqe-mode"
            pairs = ((f"{prefix}-rx", m[2]), (f"{prefix}-tx", m[3]))
        else:
            m = _C_LINE.fullmatch(line)
            if not m or m[1] not in _C_LABELS:
                raise MalformedHostFile(source, f"unexpected line {line!r}")
            pairs = ((_C_LABELS[m[1]], m[2]),)
        for name, raw in pairs:
            if name in got:
                raise MalformedHostFile(source, f"{name} given twice")
            value = _c_value(raw, name, source)
            if value is not None:
                got[name] = value
    return Coalesce(tuple((n, got[n]) for n in COALESCE_ORDER if n in got))


def format_ethtool_c(c: Coalesce, dev: str) -> str:
    """`ethtool -c` text in ethtool 6.1's netlink layout (unsupported parameters `n/a`)."""
    v = dict(c.values)

    def one(name: str) -> str:
        x = v.get(name)
        if x is None:
            return "n/a"
        return on_off(bool(x)) if name in COALESCE_FLAGS else str(x)

    def row(label: str, name: str) -> str:
        return f"{label}: {one(name)}"

    out = [f"Coalesce parameters for {dev}:",
           f"Adaptive RX: {one('adaptive-rx')}  TX: {one('adaptive-tx')}"]  # fmt: skip
    out += [row(n, n) for n in ("stats-block-usecs", "sample-interval", "pkt-rate-low",
                                "pkt-rate-high")]  # fmt: skip
    for d in ("rx", "tx"):
        out.append("")
        out += [row(f"{d}-{k}", f"{d}-{k}") for k in ("usecs", "frames", "usecs-irq",
                                                      "frames-irq")]  # fmt: skip
    for level in ("low", "high"):
        out.append("")
        for d in ("rx", "tx"):
            out += [row(f"{d}-usecs-{level}", f"{d}-usecs-{level}"),
                    row(f"{d}-frame-{level}", f"{d}-frames-{level}")]  # fmt: skip
    out += ["", f"CQE mode RX: {one('cqe-mode-rx')}  TX: {one('cqe-mode-tx')}", ""]
    extra = [n for n in ("tx-aggr-max-bytes", "tx-aggr-max-frames", "tx-aggr-time-usecs")
             if n in v]  # fmt: skip
    out += [row(n, n) for n in extra]
    return "\n".join(out) + "\n"


def rewrite_ethtool_c(text: str, changes: Mapping[str, int]) -> str:
    """`text` (ethtool -c) with the values of `changes` replaced in place, every other byte
    kept (a recording's setter, so that a rollback gives the file back byte for byte)."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        end = line[len(body) :]
        m = _C_PAIR.fullmatch(body)
        if m:
            prefix = "adaptive" if m[1] == "Adaptive" else "cqe-mode"
            for i, d in ((3, "tx"), (2, "rx")):  # right to left: spans stay valid
                name = f"{prefix}-{d}"
                if name in changes:
                    new = on_off(bool(changes[name]))
                    body = body[: m.start(i)] + new + body[m.end(i) :]
        else:
            m = _C_LINE.fullmatch(body)
            if m and _C_LABELS.get(m[1]) in changes:
                body = body[: m.start(2)] + str(changes[_C_LABELS[m[1]]]) + body[m.end(2) :]
        out.append(body + end)
    return "".join(out)


# ------------------------------------------------------------------ ethtool -k

_K_LINE = re.compile(
    r"(\t| +)?([A-Za-z0-9_-]+): (on|off)(?: ?\[(fixed|requested on|requested off)\])?[ \t]*"
)


def parse_ethtool_k(text: str, source: str = "ethtool -k") -> Features:
    """`ethtool -k` text: every feature by the kernel's name. The long names ethtool
    prints for its legacy flags (`generic-receive-offload`) are mapped to the feature they
    stand for (`rx-gro`); a group's own line (`tcp-segmentation-offload`, followed by its
    indented members) is derived by ethtool and skipped."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("Features for"):
        raise MalformedHostFile(source, "does not start with 'Features for'")
    parsed = []
    for line in lines[1:]:
        m = _K_LINE.fullmatch(line)
        if not m:
            raise MalformedHostFile(source, f"unexpected line {line!r}")
        parsed.append((bool(m[1]), m[2], m[3] == "on", m[4]))
    entries: list[Feature] = []
    seen: set[str] = set()
    for i, (indented, name, active, mark) in enumerate(parsed):
        if not indented and name in _LONG_NAMES:
            if i + 1 < len(parsed) and parsed[i + 1][0]:
                continue  # a group header: its members follow, indented
            member = _LONE_LONG.get(name)
            if member is None:
                continue  # tx-checksumming alone: which member is not said
            name = member
        if name in seen:
            raise MalformedHostFile(source, f"feature {name} given twice")
        seen.add(name)
        fixed = mark == "fixed"
        if mark in ("requested on", "requested off"):
            requested: Optional[bool] = mark == "requested on"
        else:
            requested = None if fixed else active
        entries.append(Feature(name, active, fixed, requested))
    return Features(tuple(entries))


def _k_suffix(f: Feature) -> str:
    if f.fixed:
        return " [fixed]"
    if f.requested is not None and f.requested != f.active:
        return " [requested on]" if f.requested else " [requested off]"
    return ""


def format_ethtool_k(feats: Features, dev: str) -> str:
    """`ethtool -k` text as ethtool 6.1 prints it: the legacy groups first (a group of one
    under its long name, a larger one as its line and its members indented), then every
    other feature in the given (the kernel's) order."""
    out = [f"Features for {dev}:"]
    grouped: set[str] = set()
    for _, long, pattern in OFF_FLAGS:
        members = [f for f in feats.entries if fnmatchcase(f.name, pattern)]
        if not members:
            continue
        grouped.update(f.name for f in members)
        if len(members) == 1:
            f = members[0]
            out.append(f"{long}: {on_off(f.active)}{_k_suffix(f)}")
            continue
        out.append(f"{long}: {on_off(any(f.active for f in members))}")
        out += [f"\t{f.name}: {on_off(f.active)}{_k_suffix(f)}" for f in members]
    out += [f"{f.name}: {on_off(f.active)}{_k_suffix(f)}" for f in feats.entries
            if f.name not in grouped]  # fmt: skip
    return "\n".join(out) + "\n"


def rewrite_ethtool_k(text: str, changes: Mapping[str, bool]) -> str:
    """`text` (ethtool -k) with the features in `changes` (kernel names) set: their lines
    (under a long name where ethtool prints one) say the new state with no `[requested]`
    mark, and a group line says whether any member is on; every other byte is kept."""
    feats = {f.name: f for f in parse_ethtool_k(text).entries}
    state = {n: changes.get(n, f.active) for n, f in feats.items()}
    lines = text.splitlines(keepends=True)
    bodies = [ln.rstrip("\r\n") for ln in lines]
    out: list[str] = []
    for i, line in enumerate(lines):
        body = bodies[i]
        m = _K_LINE.fullmatch(body)
        if m:
            indented, name = bool(m[1]), m[2]
            nxt = _K_LINE.fullmatch(bodies[i + 1]) if i + 1 < len(bodies) else None
            if not indented and name in _LONG_NAMES and nxt is not None and nxt[1]:
                pattern = next(p for _, lg, p in OFF_FLAGS if lg == name)
                any_on = any(v for n, v in state.items() if fnmatchcase(n, pattern))
                body = body[: m.start(3)] + on_off(any_on) + body[m.end(3) :]
            else:
                kname = _LONE_LONG.get(name, name) if not indented else name
                if kname in changes:
                    body = body[: m.start(3)] + on_off(changes[kname])
                    if m[4] == "fixed":
                        body += " [fixed]"
        out.append(body + line[len(bodies[i]) :])
    return "".join(out)


# ------------------------------------------------------------------ ethtool -a

_A_LINE = re.compile(r"(Autonegotiate|RX|TX|RX negotiated|TX negotiated):[ \t]*(\S+)[ \t]*")


def parse_ethtool_a(text: str, source: str = "ethtool -a") -> Pause:
    lines = text.splitlines()
    if not lines or not lines[0].startswith("Pause parameters for"):
        raise MalformedHostFile(source, "does not start with 'Pause parameters for'")
    got: dict[str, bool] = {}
    for line in lines[1:]:
        if not line.strip():
            continue
        if line.startswith("Statistics:") or line.startswith("  "):
            continue  # `ethtool -I -a`: the pause frame counters
        m = _A_LINE.fullmatch(line)
        if not m:
            raise MalformedHostFile(source, f"unexpected line {line!r}")
        value = {"on": True, "off": False}.get(m[2])
        if value is None:
            raise MalformedHostFile(source, f"{m[1]}: not on/off: {m[2]!r}")
        got[m[1]] = value
    missing = [k for k in ("Autonegotiate", "RX", "TX") if k not in got]
    if missing:
        raise MalformedHostFile(source, f"no {missing[0]!r} line")
    return Pause(got["Autonegotiate"], got["RX"], got["TX"])


def format_ethtool_a(p: Pause, dev: str) -> str:
    """`ethtool -a` text in ethtool 6.1's layout (without the negotiated lines)."""
    return (
        f"Pause parameters for {dev}:\nAutonegotiate:\t{on_off(p.autoneg)}\n"
        f"RX:\t\t{on_off(p.rx)}\nTX:\t\t{on_off(p.tx)}\n"
    )


def rewrite_ethtool_a(text: str, changes: Mapping[str, bool]) -> str:
    """`text` (ethtool -a) with `changes` ("autoneg", "rx", "tx") set in place."""
    label = {"Autonegotiate": "autoneg", "RX": "rx", "TX": "tx"}
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        m = _A_LINE.fullmatch(body)
        if m and label.get(m[1]) in changes:
            body = body[: m.start(2)] + on_off(changes[label[m[1]]]) + body[m.end(2) :]
        out.append(body + line[len(line.rstrip("\r\n")) :])
    return "".join(out)
