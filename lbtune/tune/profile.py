"""Tuning profiles: TOML files saying what a host role wants, resolved against its topology.

A profile is parsed and validated completely before anything reads the host (`load_profile`),
merged with the profiles it includes (included first, later values override), and turned into
knob targets for one host by `resolve`, where the values computed from topology (CPU sets,
"max" ring sizes, "one channel per data CPU") get their numbers. The format is documented in
docs/tuning.md; every value carries a one-line reason.

Nothing here writes to the host, and nothing here evaluates profile text as code: CPU-set
expressions use a tiny grammar of names, CPU lists and `+ - &` (see `parse_cpu_expr`).
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import lbtune
from lbtune.errors import BadInput
from lbtune.host.cmdline import ISOLCPUS_FLAGS
from lbtune.host.cpulist import CpuListError, format_cpulist, parse_cpulist
from lbtune.host.inventory import HostInventory
from lbtune.host.nic import Nic
from lbtune.tune.plan import Mode, Target
from lbtune.tune.sysctl import SysctlKnob, sysctl_path

_toml: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

SECTIONS = ("profile", "sysctl", "nic", "cpu", "irqbalance", "cmdline", "governor")
PROFILE_KEYS = ("name", "description", "include", "role", "notes")
ROLES = ("generic", "web", "realserver", "lb-dr", "lb-proxy", "loadgen", "reference")
LB_ROLES = frozenset({"lb-dr", "lb-proxy"})
NIC_KEYS = ("txqueuelen", "channels", "rings", "irq_affinity", "rps", "xps")
NIC_ROLES = ("data",)  # selectors that name a role, bound on the command line (--iface)
CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")
GOVERNORS = ("performance", "powersave", "schedutil", "ondemand", "conservative", "userspace")
STRATEGIES = ("local", "list", "isolated")

MAX_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16
MAX_REASON = 200
MAX_EXPR = 512

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")
_CPUNAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_DATA = "{data}"
_DATA_PLACEHOLDER = "lbtunedata0"  # stands in for {data} when a key is checked at load time

# Sysctls that make the kernel run a program or are otherwise a foothold: no profile sets them.
_FORBIDDEN_SYSCTLS = frozenset(
    {
        "kernel.core_pattern",
        "kernel.modprobe",
        "kernel.hotplug",
        "kernel.poweroff_cmd",
        "kernel.usermodehelper.bset",
        "kernel.usermodehelper.inheritable",
        "kernel.kptr_restrict",
        "kernel.yama.ptrace_scope",
        "kernel.unprivileged_bpf_disabled",
        "kernel.modules_disabled",
    }
)
# Values that would turn forwarding off: refused for the LB roles.
_FORWARDING = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv6.conf.all.forwarding",
)

# Per-key value ranges (inclusive), by full key or, for net.*.conf.<if>.X, by "conf.X".
_INT_MAX = 2**31 - 1
_RANGES: dict[str, tuple[int, int]] = {
    "net.core.somaxconn": (1, _INT_MAX),
    "net.ipv4.tcp_max_syn_backlog": (1, _INT_MAX),
    "net.core.netdev_max_backlog": (1, _INT_MAX),
    "net.core.netdev_budget": (1, _INT_MAX),
    "net.core.netdev_budget_usecs": (1, _INT_MAX),
    "net.core.dev_weight": (1, _INT_MAX),
    "net.core.rps_sock_flow_entries": (0, 1 << 29),
    "net.ipv4.ip_forward": (0, 1),
    "net.ipv4.ip_nonlocal_bind": (0, 1),
    "net.ipv4.tcp_syncookies": (0, 2),
    "net.ipv4.tcp_tw_reuse": (0, 2),
    "net.ipv4.tcp_fin_timeout": (1, 3600),
    "net.ipv4.tcp_slow_start_after_idle": (0, 1),
    "net.ipv4.tcp_max_tw_buckets": (0, _INT_MAX),
    "kernel.timer_migration": (0, 1),
    "vm.swappiness": (0, 200),
    "fs.file-max": (1024, 2**63 - 1),
    "fs.nr_open": (1024, 1073741816),
    "conf.rp_filter": (0, 2),
    "conf.arp_ignore": (0, 8),
    "conf.arp_announce": (0, 2),
    "conf.arp_filter": (0, 1),
    "conf.send_redirects": (0, 1),
    "conf.accept_redirects": (0, 1),
    "conf.forwarding": (0, 1),
    "conf.disable_ipv6": (0, 1),
}
# Multi-field values: (fields, low, high, must not decrease).
_FIELDS: dict[str, tuple[int, int, int, bool]] = {
    "net.ipv4.ip_local_port_range": (2, 1, 65535, True),
    "net.ipv4.tcp_rmem": (3, 1, _INT_MAX, True),
    "net.ipv4.tcp_wmem": (3, 1, _INT_MAX, True),
    "net.ipv4.tcp_mem": (3, 1, 2**63 - 1, True),
    "net.ipv4.udp_mem": (3, 1, 2**63 - 1, True),
}
_ANY_INT = (-(2**63), 2**64 - 1)


def _show(v: object) -> str:
    """A short, one-line, always-printable rendering of any user value for messages."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30:
        return "a huge number"
    try:
        text = repr(v)
    except Exception:
        text = f"<{type(v).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _key(k: object) -> str:
    """A table key for messages: as written when plain, quoted otherwise."""
    if isinstance(k, str) and 0 < len(k) <= 60 and re.fullmatch(r"[A-Za-z0-9_.{}\-]+", k):
        return k
    return _show(k)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
    return value


def _one_line(text: str) -> bool:
    return text.isprintable() and bool(text.strip())


# ----------------------------------------------------------------------- CPU expressions


@dataclass(frozen=True)
class CpuName:
    name: str


@dataclass(frozen=True)
class CpuLit:
    cpus: frozenset[int]


@dataclass(frozen=True)
class CpuOp:
    op: str  # "+" union, "-" difference, "&" intersection
    left: CpuExpr
    right: CpuExpr


CpuExpr = Union[CpuName, CpuLit, CpuOp]

BUILTIN_CPU_NAMES = ("online", "all", "isolated", "housekeeping", "nic-local")
_NODE_NAME = re.compile(r"^node(\d{1,4})$")
_TOKEN = re.compile(
    r"\s*(?:(?P<op>[-+&()])|(?P<list>[0-9][0-9,:/-]*)|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_MAX_DEPTH = 32


def parse_cpu_expr(text: object) -> CpuExpr:
    """Parse a CPU-set expression; BadInput (one line) for anything else.

    Grammar: `expr := term (('+'|'-') term)*`, `term := atom ('&' atom)*`,
    `atom := NAME | CPULIST | '(' expr ')'`. Names: `online` (= `all`), `isolated`,
    `housekeeping`, `nic-local`, `nodeN` and the profile's own `[cpu]` names. Put spaces around
    `-` where it could be read as part of a name or a range (`nic-local - housekeeping`).
    """
    if not isinstance(text, str):
        raise BadInput(f"CPU expression must be a string, got {_show(text)}")
    if len(text) > MAX_EXPR:
        raise BadInput("CPU expression too long")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise BadInput(
                f"CPU expression {_show(text)}: unexpected {_show(text[pos:].strip()[:10])}"
            )
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        raise BadInput("CPU expression is empty")
    parser = _ExprParser(text, tokens)
    expr = parser.expr(0)
    if parser.i != len(tokens):
        raise BadInput(f"CPU expression {_show(text)}: unexpected {_show(tokens[parser.i][1])}")
    return expr


class _ExprParser:
    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0

    def _fail(self, what: str) -> BadInput:
        return BadInput(f"CPU expression {_show(self.text)}: {what}")

    def _peek(self) -> Optional[tuple[str, str]]:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def expr(self, depth: int) -> CpuExpr:
        if depth > _MAX_DEPTH:
            raise self._fail("nested too deeply")
        left = self.term(depth)
        while (tok := self._peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            left = CpuOp(tok[1], left, self.term(depth))
        return left

    def term(self, depth: int) -> CpuExpr:
        left = self.atom(depth)
        while (tok := self._peek()) is not None and tok[1] == "&":
            self.i += 1
            left = CpuOp("&", left, self.atom(depth))
        return left

    def atom(self, depth: int) -> CpuExpr:
        tok = self._peek()
        if tok is None:
            raise self._fail("ends where a CPU set was expected")
        kind, value = tok
        self.i += 1
        if kind == "name":
            return CpuName(value)
        if kind == "list":
            try:
                return CpuLit(parse_cpulist(value))
            except CpuListError as e:
                raise self._fail(str(e)) from None
        if value == "(":
            inner = self.expr(depth + 1)
            close = self._peek()
            if close is None or close[1] != ")":
                raise self._fail("missing ')'")
            self.i += 1
            return inner
        raise self._fail(f"unexpected {value!r}")


def cpu_expr_names(expr: CpuExpr) -> set[str]:
    """Every name an expression refers to."""
    out: set[str] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, CpuName):
            out.add(e.name)
        elif isinstance(e, CpuOp):
            stack += [e.left, e.right]
    return out


def eval_cpu_expr(expr: CpuExpr, lookup: Callable[[str], frozenset[int]]) -> frozenset[int]:
    """Evaluate an expression; `lookup` gives each name's set (and raises BadInput if unknown)."""
    if isinstance(expr, CpuName):
        return lookup(expr.name)
    if isinstance(expr, CpuLit):
        return expr.cpus
    left, right = eval_cpu_expr(expr.left, lookup), eval_cpu_expr(expr.right, lookup)
    if expr.op == "+":
        return left | right
    if expr.op == "-":
        return left - right
    return left & right


def _is_builtin_cpu_name(name: str) -> bool:
    return name in BUILTIN_CPU_NAMES or bool(_NODE_NAME.match(name))


# ----------------------------------------------------------------------------- profiles


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

    @property
    def needs_iface(self) -> bool:
        """True when resolving needs `--iface` (a `[nic."data"]` section or a `{data}` key)."""
        return any(sel in NIC_ROLES for sel in self.nic) or any(_DATA in k for k in self.sysctl)

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
            "notes": list(self.notes),
            "settings": [
                {
                    "key": key,
                    "value": _plain(s.value),
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
            value = _plain(s.value)
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


# ------------------------------------------------------------------------ validation


class _Where:
    """Prefix for messages: `file: key: problem`."""

    def __init__(self, source: str) -> None:
        self.source = source

    def bad(self, key: str, problem: str) -> BadInput:
        return BadInput(f"{self.source}: {key}: {problem}")


def _table(v: object, where: _Where, key: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise where.bad(key, f"expected a table, got {_show(v)}")
    for k in v:
        if not isinstance(k, str):
            raise where.bad(key, f"keys must be strings, got {_key(k)}")
    return v


def _int(v: object, where: _Where, key: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise where.bad(key, f"expected an integer, got {_show(v)}")
    if not lo <= v <= hi:
        raise where.bad(key, f"{_show(v)} out of range {lo}..{hi}")
    return v


def _bool(v: object, where: _Where, key: str) -> bool:
    if not isinstance(v, bool):
        raise where.bad(key, f"expected true or false, got {_show(v)}")
    return v


def _str(v: object, where: _Where, key: str, limit: int = 256) -> str:
    if not isinstance(v, str):
        raise where.bad(key, f"expected a string, got {_show(v)}")
    if len(v) > limit or not _one_line(v):
        raise where.bad(key, f"expected one printable line of at most {limit} characters")
    return v


def _choice(v: object, where: _Where, key: str, choices: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in choices:
        raise where.bad(key, f"{_show(v)} is not one of {', '.join(choices)}")
    return v


def _expr_text(v: object, where: _Where, key: str) -> str:
    text = _str(v, where, key, MAX_EXPR)
    try:
        parse_cpu_expr(text)
    except BadInput as e:
        raise where.bad(key, str(e)) from None
    return text


def _setting(
    raw: object,
    where: _Where,
    key: str,
    fields: Sequence[str] = ("value",),
    modes: bool = False,
) -> tuple[dict[str, Any], str, Mode]:
    """Split `{ value = ..., reason = "...", mode = "raise" }` into (fields, reason, mode)."""
    if not isinstance(raw, Mapping):
        example = '{ value = ..., reason = "why" }' if "value" in fields else "{ ..., reason }"
        raise where.bad(key, f"write {example}: every value needs a one-line reason")
    tbl = _table(raw, where, key)
    allowed = set(fields) | {"reason"} | ({"mode"} if modes else set())
    unknown = sorted(k for k in tbl if k not in allowed)
    if unknown:
        raise where.bad(
            key, f"unknown field {_show(unknown[0])} (allowed: {', '.join(sorted(allowed))})"
        )
    if "reason" not in tbl:
        raise where.bad(key, "missing reason: every value needs a one-line reason")
    reason = _str(tbl["reason"], where, f"{key}.reason", MAX_REASON)
    mode = Mode.SET
    if "mode" in tbl:
        mode = Mode(_choice(tbl["mode"], where, f"{key}.mode", [m.value for m in Mode]))
    values = {k: v for k, v in tbl.items() if k not in ("reason", "mode")}
    if "value" in fields and "value" not in values:
        raise where.bad(key, "missing value")
    return values, reason, mode


def _sysctl_value(key: str, raw: object, mode: Mode, where: _Where, wkey: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        raise where.bad(wkey, f"expected an integer or a string, got {_show(raw)}")
    parts = key.split(".")
    conf_key = f"conf.{parts[-1]}" if len(parts) >= 5 and parts[2] in ("conf", "neigh") else ""
    if isinstance(raw, int):
        lo, hi = _RANGES.get(key) or _RANGES.get(conf_key) or _ANY_INT
        return str(_int(raw, where, wkey, lo, hi))
    text = _str(raw, where, wkey)
    fields = text.split()
    spec = _FIELDS.get(key)
    numeric = all(re.fullmatch(r"-?[0-9]{1,20}", f) for f in fields)
    if spec is not None:
        n, lo, hi, ordered = spec
        if len(fields) != n or not numeric:
            raise where.bad(wkey, f"{_show(text)}: expected {n} integers")
        nums = [int(f) for f in fields]
        if any(not lo <= x <= hi for x in nums):
            raise where.bad(wkey, f"{_show(text)}: fields out of range {lo}..{hi}")
        if ordered and nums != sorted(nums):
            raise where.bad(wkey, f"{_show(text)}: fields must not decrease")
    elif len(fields) == 1 and numeric:
        lo, hi = _RANGES.get(key) or _RANGES.get(conf_key) or _ANY_INT
        _int(int(fields[0]), where, wkey, lo, hi)
    if mode is not Mode.SET and not numeric:
        raise where.bad(wkey, f"mode {mode.value!r} needs numbers, got {_show(text)}")
    return " ".join(fields)


def _check_sysctl_key(key: str, where: _Where) -> None:
    wkey = f"sysctl.{_key(key)}"
    probe = key.replace(_DATA, _DATA_PLACEHOLDER)
    if "{" in probe or "}" in probe:
        raise where.bad(wkey, "the only placeholder is {data} (the data interface)")
    if _DATA in key:
        parts = key.split(".")
        if not (len(parts) >= 5 and parts[0] == "net" and parts[2] in ("conf", "neigh")) or (
            parts[3] != _DATA or key.count(_DATA) != 1
        ):
            raise where.bad(wkey, "{data} may only stand for the interface in net.*.conf.*")
    try:
        sysctl_path(probe)
    except BadInput as e:
        raise where.bad(wkey, str(e)) from None
    if key in _FORBIDDEN_SYSCTLS or key.startswith("kernel.usermodehelper."):
        raise where.bad(
            wkey, "lbtune never sets this sysctl (it runs programs or weakens security)"
        )


def _flatten(
    tbl: Mapping[str, Any], prefix: str, where: _Where, out: dict[str, Any], depth: int
) -> None:
    """`[sysctl.net.core] somaxconn = {...}` and `"net.core.somaxconn" = {...}` are the same."""
    if depth > 8:
        raise where.bad(f"sysctl.{_key(prefix)}", "nested too deeply")
    for k, v in tbl.items():
        if not isinstance(k, str):
            raise where.bad("sysctl", f"keys must be strings, got {_key(k)}")
        full = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping) and not any(f in v for f in ("value", "reason", "mode")):
            if not v:
                raise where.bad(
                    f"sysctl.{_key(full)}", 'empty table: write { value = ..., reason = "why" }'
                )
            _flatten(v, full, where, out, depth + 1)
        else:
            if full in out:
                raise where.bad(f"sysctl.{_key(full)}", "set twice")
            out[full] = v


def _parse_sysctl(raw: object, where: _Where) -> dict[str, Setting]:
    flat: dict[str, Any] = {}
    _flatten(_table(raw, where, "sysctl"), "", where, flat, 0)
    out: dict[str, Setting] = {}
    for key, v in flat.items():
        _check_sysctl_key(key, where)
        wkey = f"sysctl.{_key(key)}"
        values, reason, mode = _setting(v, where, wkey, modes=True)
        out[key] = Setting(
            _sysctl_value(key, values["value"], mode, where, wkey), reason, mode, where.source
        )
    return out


def _parse_nic_key(key: str, raw: object, where: _Where, wkey: str) -> Setting:
    if key in ("txqueuelen", "channels", "rings"):
        values, reason, mode = _setting(raw, where, wkey, modes=True)
        v = values["value"]
        special = {"channels": "cpus", "rings": "max"}.get(key)
        if special is not None and v == special:
            if mode is not Mode.SET and key == "channels":
                raise where.bad(wkey, f"mode {mode.value!r} needs a number")
            return Setting(v, reason, mode, where.source)
        hi = {"txqueuelen": 1_000_000, "channels": 4096, "rings": 65536}[key]
        if isinstance(v, str) and special is not None:
            raise where.bad(wkey, f"expected a number or {special!r}, got {_show(v)}")
        return Setting(_int(v, where, wkey, 1, hi), reason, mode, where.source)
    if key == "irq_affinity":
        values, reason, _ = _setting(raw, where, wkey, ("strategy", "cpus", "skip_smt", "use_hint"))
        if "strategy" not in values:
            raise where.bad(wkey, f"missing strategy ({', '.join(STRATEGIES)})")
        spec: dict[str, Any] = {
            "strategy": _choice(values["strategy"], where, f"{wkey}.strategy", STRATEGIES)
        }
        if "cpus" in values:
            spec["cpus"] = _expr_text(values["cpus"], where, f"{wkey}.cpus")
        elif spec["strategy"] == "list":
            raise where.bad(wkey, "strategy 'list' needs cpus")
        spec["skip_smt"] = _bool(values.get("skip_smt", False), where, f"{wkey}.skip_smt")
        spec["use_hint"] = _bool(values.get("use_hint", False), where, f"{wkey}.use_hint")
        return Setting(spec, reason, Mode.SET, where.source)
    if key == "rps":
        values, reason, _ = _setting(raw, where, wkey, ("cpus", "flow_cnt"))
        if not values:
            raise where.bad(wkey, "set cpus and/or flow_cnt")
        rps: dict[str, Any] = {}
        if "cpus" in values:
            cpus = values["cpus"]
            if cpus in ("same", "local", "none"):
                rps["cpus"] = cpus
            else:
                rps["cpus"] = _expr_text(cpus, where, f"{wkey}.cpus")
        if "flow_cnt" in values:
            n = _int(values["flow_cnt"], where, f"{wkey}.flow_cnt", 0, 1 << 20)
            if n & (n - 1):
                raise where.bad(f"{wkey}.flow_cnt", f"{n} is not 0 or a power of two")
            rps["flow_cnt"] = n
        return Setting(rps, reason, Mode.SET, where.source)
    values, reason, _ = _setting(raw, where, wkey)  # xps
    return Setting(
        _choice(values["value"], where, wkey, ("match-irqs", "none")),
        reason,
        Mode.SET,
        where.source,
    )


def _parse_nic(raw: object, where: _Where) -> dict[str, dict[str, Setting]]:
    out: dict[str, dict[str, Setting]] = {}
    defaults: dict[str, Setting] = {}
    for k, v in _table(raw, where, "nic").items():
        if k in NIC_KEYS:
            defaults[k] = _parse_nic_key(k, v, where, f"nic.{k}")
            continue
        if k not in NIC_ROLES and not _IFNAME.match(k):
            raise where.bad(
                f"nic.{_key(k)}",
                f"not a knob ({', '.join(NIC_KEYS)}), a role "
                f"({', '.join(NIC_ROLES)}) or an interface name",
            )
        section: dict[str, Setting] = {}
        for nk, nv in _table(v, where, f"nic.{k}").items():
            if nk not in NIC_KEYS:
                raise where.bad(
                    f"nic.{k}.{_key(nk)}", f"unknown key (allowed: {', '.join(NIC_KEYS)})"
                )
            section[nk] = _parse_nic_key(nk, nv, where, f"nic.{k}.{nk}")
        out[k] = section
    if defaults:
        out = {"": defaults, **out}
    return out


def _parse_cpu(raw: object, where: _Where) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for k, v in _table(raw, where, "cpu").items():
        wkey = f"cpu.{_key(k)}"
        if not _CPUNAME.match(k):
            raise where.bad(wkey, "CPU set names are lower case letters, digits and _")
        if _is_builtin_cpu_name(k) and k != "housekeeping":
            raise where.bad(wkey, "is a built-in name (only housekeeping may be redefined)")
        if isinstance(v, str):
            out[k] = Setting(_expr_text(v, where, wkey), "", Mode.SET, where.source)
        else:
            values, reason, _ = _setting(v, where, wkey)
            out[k] = Setting(
                _expr_text(values["value"], where, wkey), reason, Mode.SET, where.source
            )
    return out


def _parse_irqbalance(raw: object, where: _Where) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for k, v in _table(raw, where, "irqbalance").items():
        wkey = f"irqbalance.{_key(k)}"
        if k == "state":
            values, reason, _ = _setting(v, where, wkey)
            out[k] = Setting(
                _choice(values["value"], where, wkey, ("running", "stopped")),
                reason,
                Mode.SET,
                where.source,
            )
        elif k == "ban":
            values, reason, _ = _setting(v, where, wkey)
            out[k] = Setting(
                _expr_text(values["value"], where, wkey), reason, Mode.SET, where.source
            )
        else:
            raise where.bad(wkey, "unknown key (allowed: state, ban)")
    if out.get("state") is not None and out["state"].value == "stopped" and "ban" in out:
        raise where.bad("irqbalance", "ban has no effect when state is stopped; keep one")
    return out


def _parse_cmdline(raw: object, where: _Where) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for k, v in _table(raw, where, "cmdline").items():
        wkey = f"cmdline.{_key(k)}"
        if k not in CMDLINE_KEYS:
            raise where.bad(wkey, f"unknown key (allowed: {', '.join(CMDLINE_KEYS)})")
        values, reason, _ = _setting(
            v, where, wkey, ("value", "flags") if k == "isolcpus" else ("value",)
        )
        spec: dict[str, Any] = {"cpus": _expr_text(values["value"], where, wkey)}
        if "flags" in values:
            flags = values["flags"]
            if not isinstance(flags, list) or not all(
                isinstance(f, str) and f in ISOLCPUS_FLAGS for f in flags
            ):
                raise where.bad(
                    f"{wkey}.flags", f"expected a list of {', '.join(sorted(ISOLCPUS_FLAGS))}"
                )
            spec["flags"] = tuple(dict.fromkeys(flags))
        out[k] = Setting(spec, reason, Mode.SET, where.source)
    return out


def _parse_governor(raw: object, where: _Where) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for k, v in _table(raw, where, "governor").items():
        wkey = f"governor.{_key(k)}"
        _expr_text(k, where, wkey)
        values, reason, _ = _setting(v, where, wkey)
        out[k] = Setting(
            _choice(values["value"], where, wkey, GOVERNORS), reason, Mode.SET, where.source
        )
    return out


def parse_profile_data(
    data: object, source: str = "<profile>", name: Optional[str] = None
) -> Profile:
    """Validate one profile document (the TOML as a dict), includes not yet merged.

    Raises BadInput, naming the file and the key, for anything it does not understand.
    """
    where = _Where(source)
    if not isinstance(data, Mapping):
        raise BadInput(f"{source}: a profile is a TOML table, got {_show(data)}")
    for k in data:
        if not isinstance(k, str) or k not in SECTIONS:
            raise BadInput(
                f"{source}: unknown section [{_key(k)}] (allowed: {', '.join(SECTIONS)})"
            )
    meta = _table(data.get("profile", {}), where, "profile")
    for k in meta:
        if k not in PROFILE_KEYS:
            raise where.bad(
                f"profile.{_key(k)}", f"unknown key (allowed: {', '.join(PROFILE_KEYS)})"
            )
    pname = name
    if "name" in meta:
        declared = _str(meta["name"], where, "profile.name", 64)
        if not _NAME.match(declared):
            raise where.bad("profile.name", f"{_show(declared)} is not a profile name")
        if name is not None and declared != name:
            raise where.bad("profile.name", f"{declared!r} does not match the file name {name!r}")
        pname = declared
    if pname is None:
        raise BadInput(f'{source}: profile has no name (add [profile] name = "...")')
    include = meta.get("include", [])
    if not isinstance(include, list) or not all(
        isinstance(i, str) and _NAME.match(i) for i in include
    ):
        raise where.bad("profile.include", "expected a list of profile names (no paths)")
    notes = meta.get("notes", [])
    if not isinstance(notes, list):
        raise where.bad("profile.notes", "expected a list of one-line strings")
    for n in notes:
        _str(n, where, "profile.notes", 300)
    role = None
    if "role" in meta:
        role = _choice(meta["role"], where, "profile.role", ROLES)
    return Profile(
        name=pname,
        description=_str(meta["description"], where, "profile.description", 300)
        if "description" in meta
        else "",
        path=source,
        role=role,
        include=tuple(include),
        chain=(pname,),
        notes=tuple(notes),
        sysctl=_parse_sysctl(data["sysctl"], where) if "sysctl" in data else {},
        nic=_parse_nic(data["nic"], where) if "nic" in data else {},
        cpu=_parse_cpu(data["cpu"], where) if "cpu" in data else {},
        irqbalance=_parse_irqbalance(data["irqbalance"], where) if "irqbalance" in data else {},
        cmdline=_parse_cmdline(data["cmdline"], where) if "cmdline" in data else {},
        governor=_parse_governor(data["governor"], where) if "governor" in data else {},
    )


_TOML_POS = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def parse_profile_text(text: str, source: str = "<profile>", name: Optional[str] = None) -> Profile:
    """Parse TOML text and validate it; malformed TOML names the file and line."""
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        msg = str(e).splitlines()[0] if str(e) else "invalid TOML"
        m = _TOML_POS.search(msg)
        if m:
            raise BadInput(f"{source}:{m.group(1)}: invalid TOML: {msg[: m.start()]}") from None
        raise BadInput(f"{source}: invalid TOML: {msg}") from None
    return parse_profile_data(data, source, name)


# -------------------------------------------------------------------------- loading


def shipped_profiles_dir() -> Optional[Path]:
    """The profiles shipped with lbtune: wheel package data, else the source tree's profiles/."""
    pkg = Path(lbtune.__file__).resolve().parent
    wheel = pkg / "_data" / "profiles"
    if wheel.is_dir():
        return wheel
    source = pkg.parent / "profiles"
    if source.is_dir() and (pkg.parent / "pyproject.toml").is_file():
        return source
    return None


def profile_dirs(root: str = "/") -> list[Path]:
    """Where profile names are looked up: the host's /etc/lbtune/profiles, then the shipped ones."""
    dirs = [Path(root) / "etc" / "lbtune" / "profiles"]
    shipped = shipped_profiles_dir()
    if shipped is not None:
        dirs.append(shipped)
    return dirs


def _is_path(name_or_path: str) -> bool:
    return "/" in name_or_path or name_or_path.endswith(".toml")


def _locate(name: str, dirs: Sequence[Path]) -> Path:
    if not _NAME.match(name):
        raise BadInput(f"profile {_show(name)}: not a profile name or a path to a .toml file")
    for d in dirs:
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    where = ", ".join(str(d) for d in dirs) or "nowhere"
    raise BadInput(f"profile {name!r} not found (looked in {where})")


def _read(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise BadInput(f"{path}: cannot read profile: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadInput(f"{path}: profile larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: profile is not UTF-8 text") from None


def _load_file(path: Path) -> Profile:
    name = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
    return parse_profile_text(_read(path), str(path), name if _NAME.match(name) else None)


def _merge(docs: Sequence[Profile]) -> Profile:
    top = docs[-1]
    sysctl: dict[str, Setting] = {}
    nic: dict[str, dict[str, Setting]] = {}
    cpu: dict[str, Setting] = {}
    irqb: dict[str, Setting] = {}
    cmdline: dict[str, Setting] = {}
    governor: dict[str, Setting] = {}
    role: Optional[str] = None
    notes: list[str] = []
    for d in docs:
        sysctl.update(d.sysctl)
        for sel, sec in d.nic.items():
            nic.setdefault(sel, {}).update(sec)
        cpu.update(d.cpu)
        if "state" in d.irqbalance or "ban" in d.irqbalance:
            irqb = dict(
                d.irqbalance
            )  # state and ban exclude each other: a later file replaces both
        cmdline.update(d.cmdline)
        governor.update(d.governor)
        role = d.role or role
        notes += [n for n in d.notes if n not in notes]
    return replace(
        top,
        role=role,
        chain=tuple(d.name for d in docs),
        notes=tuple(notes),
        sysctl=sysctl,
        nic=nic,
        cpu=cpu,
        irqbalance=irqb,
        cmdline=cmdline,
        governor=governor,
    )


def _check_names(p: Profile) -> None:
    """Every name used in a CPU expression exists, and [cpu] definitions do not loop."""
    defined = set(p.cpu)

    def check(key: str, text: str) -> None:
        for n in cpu_expr_names(parse_cpu_expr(text)):
            if not _is_builtin_cpu_name(n) and n not in defined:
                raise BadInput(f"{p.path}: {key}: unknown CPU set {n!r} (define it in [cpu])")

    for k, s in p.cpu.items():
        check(f"cpu.{k}", s.value)
    for k, s in p.irqbalance.items():
        if k == "ban":
            check(f"irqbalance.{k}", s.value)
    for k, s in p.cmdline.items():
        check(f"cmdline.{k}", s.value["cpus"])
    for k in p.governor:
        check(f"governor.{k}", k)
    for sel, sec in p.nic.items():
        for k, s in sec.items():
            cpus = s.value.get("cpus") if isinstance(s.value, dict) else None
            if isinstance(cpus, str) and cpus not in ("same", "local", "none"):
                check(f"nic.{sel}.{k}.cpus" if sel else f"nic.{k}.cpus", cpus)
    # definition cycles (housekeeping may use the built-in housekeeping)
    for start in p.cpu:
        stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
        while stack:
            name, path = stack.pop()
            for n in cpu_expr_names(parse_cpu_expr(p.cpu[name].value)):
                if n == name and n == "housekeeping":
                    continue
                if n in p.cpu:
                    if n in path:
                        loop = " -> ".join((*path, n))
                        raise BadInput(f"{p.path}: cpu: definitions loop: {loop}")
                    stack.append((n, (*path, n)))


def load_profile(
    name_or_path: str, search: Optional[Sequence[Union[str, Path]]] = None, root: str = "/"
) -> Profile:
    """Load, validate and merge a profile by name (searched in `search`, default
    `profile_dirs(root)`) or by path (contains '/' or ends in .toml)."""
    if not isinstance(name_or_path, str) or not name_or_path:
        raise BadInput("profile: expected a name or a path")
    dirs = [Path(d) for d in search] if search is not None else profile_dirs(root)
    if _is_path(name_or_path):
        path = Path(name_or_path)
        if not path.is_file():
            raise BadInput(f"profile {name_or_path}: no such file")
    else:
        path = _locate(name_or_path, dirs)

    docs: list[Profile] = []
    done: set[Path] = set()

    def visit(p: Path, stack: tuple[Path, ...]) -> None:
        real = p.resolve()
        if real in stack:
            names = " -> ".join(s.stem for s in (*stack[stack.index(real) :], real))
            raise BadInput(f"{p}: include cycle: {names}")
        if real in done:
            return
        if len(stack) >= MAX_INCLUDE_DEPTH:
            raise BadInput(f"{p}: includes nested deeper than {MAX_INCLUDE_DEPTH}")
        doc = _load_file(p)
        for inc in doc.include:
            visit(_locate(inc, [p.parent, *dirs]), (*stack, real))
        docs.append(doc)
        done.add(real)

    visit(path, ())
    merged = _merge(docs)
    _check_names(merged)
    return merged


def list_profiles(
    search: Optional[Sequence[Union[str, Path]]] = None, root: str = "/"
) -> list[ProfileInfo]:
    """Every profile found (earlier directories shadow later ones), broken ones with `error`."""
    dirs = [Path(d) for d in search] if search is not None else profile_dirs(root)
    seen: dict[str, ProfileInfo] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for p in sorted(d.glob("*.toml")):
            name = p.name[: -len(".toml")]
            if name in seen or not _NAME.match(name):
                continue
            try:
                prof = load_profile(str(p), search=dirs)
                seen[name] = ProfileInfo(name, str(p), prof.description, prof.role, prof.include)
            except BadInput as e:
                seen[name] = ProfileInfo(name, str(p), error=str(e))
    return sorted(seen.values(), key=lambda i: i.name)


# -------------------------------------------------------------------------- resolving


class _Resolver:
    def __init__(self, profile: Profile, inv: HostInventory, iface: Optional[str]) -> None:
        self.p = profile
        self.inv = inv
        self.topo = inv.cpus
        self.online = inv.cpus.online
        self.data: Optional[Nic] = None
        if iface is not None:
            self.data = self._nic(iface, "--iface")
        elif profile.needs_iface:
            raise BadInput(
                f'profile {profile.name} has settings for the data interface ([nic."data"] or '
                "{data}): pass --iface IF"
            )
        self.targets: list[Target] = []

    # -- helpers
    def _nic(self, name: str, what: str) -> Nic:
        if not isinstance(name, str) or not _IFNAME.match(name):
            raise BadInput(f"{what} {_show(name)}: not an interface name")
        try:
            return self.inv.nic(name)
        except KeyError:
            have = ", ".join(n.name for n in self.inv.nics) or "none"
            raise BadInput(
                f"{what} {name}: no such interface on this host (have: {have})"
            ) from None

    def _nic_local(self, nic: Optional[Nic]) -> frozenset[int]:
        if nic is None:
            raise BadInput(
                f"profile {self.p.name}: nic-local needs the data interface: pass --iface IF"
            )
        if nic.local_cpus:
            local = nic.local_cpus & self.online
        elif nic.numa_node is not None and nic.numa_node >= 0:
            local = self.topo.node_cpus(nic.numa_node) & self.online
        else:
            local = self.online
        return local or self.online

    def cpus(
        self, text: str, key: str, nic: Optional[Nic], allow_empty: bool = False
    ) -> frozenset[int]:
        """Evaluate a CPU expression for `key`; refuse empty sets and offline CPUs."""
        active: list[str] = []

        def lookup(name: str) -> frozenset[int]:
            if name in self.p.cpu and name not in active:
                active.append(name)
                try:
                    return eval_cpu_expr(parse_cpu_expr(self.p.cpu[name].value), lookup)
                finally:
                    active.pop()
            if name in ("online", "all"):
                return self.online
            if name == "isolated":
                return self.topo.isolated
            if name == "housekeeping":
                return self.topo.housekeeping
            if name == "nic-local":
                return self._nic_local(nic)
            m = _NODE_NAME.match(name)
            if m:
                return self.topo.node_cpus(int(m.group(1)))
            raise BadInput(f"{self.p.name}: {key}: unknown CPU set {name!r}")

        cpus = eval_cpu_expr(parse_cpu_expr(text), lookup)
        if not cpus and not allow_empty:
            raise BadInput(f"{self.p.name}: {key} = {text!r} selects no CPU on this host")
        offline = cpus - self.online
        if offline:
            raise BadInput(
                f"{self.p.name}: {key} = {text!r} selects offline or absent CPUs "
                f"{format_cpulist(offline)}"
            )
        return cpus

    def add(self, knob: Any, value: str, s: Setting, key: str, mode: Optional[Mode] = None) -> None:
        self.targets.append(Target(knob, value, s.reason, key, s.mode if mode is None else mode))

    # -- sections
    def sysctl(self) -> None:
        for key, s in self.p.sysctl.items():
            real = key
            if _DATA in key:
                assert self.data is not None
                real = key.replace(_DATA, self.data.name.replace(".", "/"))
            forwarding = key in _FORWARDING or key.endswith(".forwarding")
            if self.p.role in LB_ROLES and forwarding and s.value.split() == ["0"]:
                raise BadInput(
                    f"{self.p.name}: sysctl.{key} = 0: a {self.p.role} host must keep forwarding"
                )
            self.add(SysctlKnob(real), s.value, s, f"sysctl.{key}")

    def governor(self) -> None:
        if not self.p.governor:
            return
        from lbtune.tune import knobs as k

        wanted: dict[int, tuple[str, Setting]] = {}
        for expr, s in self.p.governor.items():
            for cpu in self.cpus(expr, f"governor.{expr}", self.data):
                wanted[cpu] = (expr, s)
        for cpu in sorted(wanted):
            expr, s = wanted[cpu]
            self.add(k.GovernorKnob(f"cpu{cpu}"), s.value, s, f"governor.{expr}")

    def irqbalance(self) -> None:
        if not self.p.irqbalance:
            return
        from lbtune.tune import knobs as k

        if "state" in self.p.irqbalance:
            s = self.p.irqbalance["state"]
            self.add(k.IrqbalanceKnob("service"), s.value, s, "irqbalance.state")
        if "ban" in self.p.irqbalance:
            s = self.p.irqbalance["ban"]
            banned = self.cpus(s.value, "irqbalance.ban", self.data)
            if banned >= self.online:
                raise BadInput(
                    f'{self.p.name}: irqbalance.ban bans every CPU; set state = "stopped" instead'
                )
            self.add(
                k.IrqbalanceBanKnob("banned_cpus"), format_cpulist(banned), s, "irqbalance.ban"
            )

    def placement_cpus(self, spec: Mapping[str, Any], key: str, nic: Nic) -> frozenset[int]:
        """CPUs a NIC's queue IRQs go to under `irq_affinity` (= the `channels = "cpus"` count).

        The strategy's candidates (lbtune.tune.placement), narrowed to `cpus` when given.
        """
        from lbtune.tune.placement import candidate_cpus

        strategy = spec["strategy"]
        given = self.cpus(spec["cpus"], f"{key}.cpus", nic) if "cpus" in spec else None
        try:
            cpus = candidate_cpus(self.inv, nic, strategy, given, bool(spec.get("skip_smt")))
        except BadInput as e:
            raise BadInput(f"{self.p.name}: {key}: {e}") from None
        if given is not None:
            cpus &= given
        if not cpus:
            raise BadInput(f"{self.p.name}: {key} selects no CPU on this host")
        return cpus

    def nics(self) -> None:
        defaults = self.p.nic.get("", {})
        seen: dict[str, str] = {}
        for sel, section in self.p.nic.items():
            if sel == "":
                continue
            if sel in NIC_ROLES:
                assert self.data is not None
                nic = self.data
            else:
                nic = self._nic(sel, f"nic.{sel}:")
            if nic.name in seen:
                raise BadInput(
                    f"{self.p.name}: nic.{seen[nic.name]} and nic.{sel} both name {nic.name}"
                )
            seen[nic.name] = sel
            self.nic(sel, nic, {**defaults, **section})

    def nic(self, sel: str, nic: Nic, sec: Mapping[str, Setting]) -> None:
        from lbtune.tune import knobs as k
        from lbtune.tune.placement import irq_cpus, xps_for

        prefix = f"nic.{sel}"
        name = nic.name
        if "txqueuelen" in sec:
            s = sec["txqueuelen"]
            self.add(k.TxqueuelenKnob(name), str(s.value), s, f"{prefix}.txqueuelen")
        placed: Optional[frozenset[int]] = None
        if "irq_affinity" in sec:
            placed = self.placement_cpus(sec["irq_affinity"].value, f"{prefix}.irq_affinity", nic)
        queues = len(nic.rx_queues)
        if "channels" in sec:
            s = sec["channels"]
            ch = nic.channels
            kind = "combined" if ch is None or ch.combined_max else "rx/tx"
            limit = (
                (ch.combined_max if kind == "combined" else min(ch.rx_max or 0, ch.tx_max or 0))
                if ch
                else None
            )
            if s.value == "cpus":
                count = len(placed if placed is not None else self._nic_local(nic))
                if limit:
                    count = min(count, limit)
            else:
                count = s.value
                if limit is not None and count > limit:
                    raise BadInput(
                        f"{self.p.name}: {prefix}.channels = {count}: "
                        f"{name} supports at most {limit}"
                    )
            kinds = ("combined",) if kind == "combined" else ("rx", "tx")
            for kd in kinds:
                self.add(k.ChannelsKnob(f"{name}:{kd}"), str(count), s, f"{prefix}.channels")
            if s.mode is Mode.SET:
                queues = count
        if "rings" in sec:
            s = sec["rings"]
            rings = nic.rings
            for d in ("rx", "tx"):
                cur = getattr(rings, d) if rings else None
                limit = getattr(rings, f"{d}_max") if rings else None
                if s.value == "max":
                    if limit is None:
                        if d == "rx":
                            raise BadInput(
                                f'{self.p.name}: {prefix}.rings = "max": '
                                f"{name} reports no ring sizes"
                            )
                        continue
                    value = limit
                else:
                    value = s.value
                    if limit is not None and value > limit:
                        raise BadInput(
                            f"{self.p.name}: {prefix}.rings = {value}: "
                            f"{name} {d} ring max is {limit}"
                        )
                    if rings is not None and cur is None and limit is None:
                        continue
                self.add(k.RingKnob(f"{name}:{d}"), str(value), s, f"{prefix}.rings")
        irq_map: Optional[dict[int, int]] = None
        if "irq_affinity" in sec:
            s = sec["irq_affinity"]
            spec = s.value
            assert placed is not None
            irq_map = irq_cpus(self.inv, nic, "list", cpus=placed, use_hint=spec["use_hint"])
            for irq, cpu in sorted(irq_map.items()):
                if cpu not in self.online:
                    raise BadInput(
                        f"{self.p.name}: {prefix}.irq_affinity puts IRQ {irq} on offline CPU {cpu}"
                    )
                self.add(
                    k.IrqAffinityKnob(str(irq)), format_cpulist({cpu}), s, f"{prefix}.irq_affinity"
                )
        if "rps" in sec:
            s = sec["rps"]
            rps = s.value
            if "cpus" in rps:
                how = rps["cpus"]
                if how == "same":
                    if irq_map is None:
                        raise BadInput(
                            f'{self.p.name}: {prefix}.rps.cpus = "same" needs irq_affinity'
                        )
                    cpus = frozenset(irq_map.values())
                elif how == "local":
                    cpus = self._nic_local(nic)
                elif how == "none":
                    cpus = frozenset()
                else:
                    cpus = self.cpus(how, f"{prefix}.rps.cpus", nic)
                for q in range(queues):
                    self.add(
                        k.RpsCpusKnob(f"{name}:rx-{q}"), format_cpulist(cpus), s, f"{prefix}.rps"
                    )
            if "flow_cnt" in rps:
                for q in range(queues):
                    self.add(
                        k.RpsFlowCntKnob(f"{name}:rx-{q}"), str(rps["flow_cnt"]), s, f"{prefix}.rps"
                    )
        if "xps" in sec:
            s = sec["xps"]
            if s.value == "none":
                for tq in nic.tx_queues:
                    self.add(k.XpsCpusKnob(f"{name}:tx-{tq.index}"), "", s, f"{prefix}.xps")
            else:
                if irq_map is None:
                    raise BadInput(f'{self.p.name}: {prefix}.xps = "match-irqs" needs irq_affinity')
                for txq, cpus in xps_for(irq_map, nic).items():
                    xps = format_cpulist(cpus)
                    self.add(k.XpsCpusKnob(f"{name}:tx-{txq}"), xps, s, f"{prefix}.xps")

    def cmdline(self) -> None:
        if not self.p.cmdline:
            return
        from lbtune.tune import knobs as k

        isolating: set[int] = set()
        for param, s in self.p.cmdline.items():
            cpus = self.cpus(s.value["cpus"], f"cmdline.{param}", self.data)
            if param in ("isolcpus", "nohz_full"):
                isolating |= cpus
            text = format_cpulist(cpus)
            if param == "isolcpus" and s.value.get("flags"):
                text = ",".join((*s.value["flags"], text))
            self.add(k.CmdlineKnob(param), text, s, f"cmdline.{param}")
        if isolating >= self.online:
            raise BadInput(
                f"{self.p.name}: cmdline isolates every CPU ({format_cpulist(isolating)}); "
                "leave at least one housekeeping CPU"
            )

    def run(self) -> list[Target]:
        self.sysctl()
        self.governor()
        self.irqbalance()
        self.nics()
        self.cmdline()
        return self.targets


def resolve(profile: Profile, inv: HostInventory, iface: Optional[str] = None) -> list[Target]:
    """The knob targets `profile` wants on the host described by `inv`, in apply order.

    `iface` names the data interface (`[nic."data"]`, `{data}`, `nic-local`). Raises BadInput
    for unknown interfaces, CPU sets that are empty or offline, values the hardware cannot take.
    """
    return _Resolver(profile, inv, iface).run()


def cpu_values(
    profile: Profile, inv: HostInventory, expr: str, iface: Optional[str] = None
) -> frozenset[int]:
    """Evaluate a CPU expression with the profile's `[cpu]` names on this host (BadInput if
    it selects no CPU, offline CPUs, or needs the data interface that `iface` does not give)."""
    r = _Resolver(replace(profile, nic={}, sysctl={}), inv, iface)
    return r.cpus(expr, "cpu expression", r.data)
