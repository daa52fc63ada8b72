"""Validating one profile document: every section, key and value, with the file and key
named in the one-line error (BadInput) for anything not understood."""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any, Mapping, Optional, Sequence

from lbtune.errors import BadInput
from lbtune.host.kernel.cmdline import ISOLCPUS_FLAGS
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.host.net.ifname import is_ifname
from lbtune.tune.plan import Mode
from lbtune.tune.profile.cpuexpr import MAX_EXPR, is_builtin_cpu_name, parse_cpu_expr
from lbtune.tune.profile.limits import ANY_INT, FIELDS, RANGES, STRINGS, not_tuning
from lbtune.tune.profile.model import (
    CMDLINE_KEYS,
    DATA,
    GOVERNORS,
    IFACE_MODES,
    NIC_GROUPS,
    NIC_KEYS,
    NIC_ROLES,
    PAUSE_FIELDS,
    PROFILE_KEYS,
    ROLES,
    SECTIONS,
    STRATEGIES,
    Profile,
    Setting,
    key_text,
    one_line,
    show_value,
)

_toml: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

MAX_FILE_BYTES = 1 << 20
MAX_INCLUDE_DEPTH = 16
MAX_REASON = 200

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_CPUNAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_DATA_PLACEHOLDER = "lbtunedata0"  # stands in for {data} when a key is checked at load time


class _Where:
    """Prefix for messages: `file: key: problem`."""

    def __init__(self, source: str) -> None:
        self.source = source

    def bad(self, key: str, problem: str) -> BadInput:
        return BadInput(f"{self.source}: {key}: {problem}")


def _table(v: object, where: _Where, key: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise where.bad(key, f"expected a table, got {show_value(v)}")
    for k in v:
        if not isinstance(k, str):
            raise where.bad(key, f"keys must be strings, got {key_text(k)}")
    return v


def _int(v: object, where: _Where, key: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise where.bad(key, f"expected an integer, got {show_value(v)}")
    if not lo <= v <= hi:
        raise where.bad(key, f"{show_value(v)} out of range {lo}..{hi}")
    return v


def _bool(v: object, where: _Where, key: str) -> bool:
    if not isinstance(v, bool):
        raise where.bad(key, f"expected true or false, got {show_value(v)}")
    return v


def _str(v: object, where: _Where, key: str, limit: int = 256) -> str:
    if not isinstance(v, str):
        raise where.bad(key, f"expected a string, got {show_value(v)}")
    if len(v) > limit or not one_line(v):
        raise where.bad(key, f"expected one printable line of at most {limit} characters")
    return v


def _choice(v: object, where: _Where, key: str, choices: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in choices:
        raise where.bad(key, f"{show_value(v)} is not one of {', '.join(choices)}")
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
            key, f"unknown field {show_value(unknown[0])} (allowed: {', '.join(sorted(allowed))})"
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
        raise where.bad(wkey, f"expected an integer or a string, got {show_value(raw)}")
    parts = key.split(".")
    conf_key = f"conf.{parts[-1]}" if len(parts) >= 5 and parts[2] in ("conf", "neigh") else ""
    if isinstance(raw, int):
        lo, hi = RANGES.get(key) or RANGES.get(conf_key) or ANY_INT
        return str(_int(raw, where, wkey, lo, hi))
    text = _str(raw, where, wkey)
    fields = text.split()
    spec = FIELDS.get(key)
    numeric = all(re.fullmatch(r"-?[0-9]{1,20}", f) for f in fields)
    if spec is not None:
        n, lo, hi, ordered = spec
        if len(fields) != n or not numeric:
            raise where.bad(wkey, f"{show_value(text)}: expected {n} integers")
        nums = [int(f) for f in fields]
        if any(not lo <= x <= hi for x in nums):
            raise where.bad(wkey, f"{show_value(text)}: fields out of range {lo}..{hi}")
        if ordered and nums != sorted(nums):
            raise where.bad(wkey, f"{show_value(text)}: fields must not decrease")
    elif len(fields) == 1 and numeric:
        lo, hi = RANGES.get(key) or RANGES.get(conf_key) or ANY_INT
        _int(int(fields[0]), where, wkey, lo, hi)
    elif not numeric:
        shape = STRINGS.get(key)
        if shape is None:
            raise where.bad(
                wkey, f"{show_value(text)}: expected an integer or integers separated by spaces"
            )
        if not re.fullmatch(shape, " ".join(fields)):
            raise where.bad(wkey, f"{show_value(text)}: not a valid value for {key}")
    if mode is not Mode.SET and not numeric:
        raise where.bad(wkey, f"mode {mode.value!r} needs numbers, got {show_value(text)}")
    return " ".join(fields)


def _check_sysctlkey_text(key: str, where: _Where) -> None:
    wkey = f"sysctl.{key_text(key)}"
    checked = key.replace(DATA, _DATA_PLACEHOLDER)  # {data} as a name sysctl_path takes
    if "{" in checked or "}" in checked:
        raise where.bad(wkey, "the only placeholder is {data} (the data interface)")
    if DATA in key:
        parts = key.split(".")
        if not (len(parts) >= 5 and parts[0] == "net" and parts[2] in ("conf", "neigh")) or (
            parts[3] != DATA or key.count(DATA) != 1
        ):
            raise where.bad(wkey, "{data} may only stand for the interface in net.*.conf.*")
    try:
        sysctl_path(checked)
    except BadInput as e:
        raise where.bad(wkey, str(e)) from None
    why = not_tuning(key)
    if why is not None:
        raise where.bad(wkey, f"not a tuning sysctl, lbtune never sets it: {why}")


def _flatten(
    tbl: Mapping[str, Any], prefix: str, where: _Where, out: dict[str, Any], depth: int
) -> None:
    """`[sysctl.net.core] somaxconn = {...}` and `"net.core.somaxconn" = {...}` are the same."""
    if depth > 8:
        raise where.bad(f"sysctl.{key_text(prefix)}", "nested too deeply")
    for k, v in tbl.items():
        if not isinstance(k, str):
            raise where.bad("sysctl", f"keys must be strings, got {key_text(k)}")
        full = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping) and not any(f in v for f in ("value", "reason", "mode")):
            if not v:
                raise where.bad(
                    f"sysctl.{key_text(full)}", 'empty table: write { value = ..., reason = "why" }'
                )
            _flatten(v, full, where, out, depth + 1)
        else:
            if full in out:
                raise where.bad(f"sysctl.{key_text(full)}", "set twice")
            out[full] = v


def _parse_sysctl(raw: object, where: _Where) -> dict[str, Setting]:
    flat: dict[str, Any] = {}
    _flatten(_table(raw, where, "sysctl"), "", where, flat, 0)
    out: dict[str, Setting] = {}
    for key, v in flat.items():
        _check_sysctlkey_text(key, where)
        wkey = f"sysctl.{key_text(key)}"
        values, reason, mode = _setting(v, where, wkey, modes=True)
        out[key] = Setting(
            _sysctl_value(key, values["value"], mode, where, wkey), reason, mode, where.source
        )
    return out


def _parse_nickey_text(key: str, raw: object, where: _Where, wkey: str) -> Setting:
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
            raise where.bad(wkey, f"expected a number or {special!r}, got {show_value(v)}")
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
    if key in ("rss_hash", "rss_indir", "rss_key", "flow_rules"):
        return _parse_rss_key(key, raw, where, wkey)
    values, reason, _ = _setting(raw, where, wkey)  # xps
    return Setting(
        _choice(values["value"], where, wkey, ("match-irqs", "none")),
        reason,
        Mode.SET,
        where.source,
    )


def _on_off(v: object, where: _Where, key: str) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, str) and v in ("on", "off"):
        return v
    raise where.bad(key, f"expected on/off (or true/false), got {show_value(v)}")


def _parse_nic_group(group: str, raw: object, where: _Where, wkey: str) -> dict[str, Setting]:
    """`coalesce`, `features` or `pause`: a table of names, each `{ value, reason }`.

    Coalescing parameters are ethtool's names (adaptive-rx, rx-usecs, ...), values a count
    or on/off for the adaptive and CQE flags; features the kernel's names or ethtool's
    aliases (lro, gro, tso, ...), checked against the device when the profile resolves;
    pause autoneg, rx, tx. Held as `"features.lro"` in the section."""
    from lbtune.host.net.nicparams import COALESCE_ATTRS, COALESCE_FLAGS, U32_MAX, is_feature_name

    tbl = _table(raw, where, wkey)
    if not tbl:
        raise where.bad(wkey, f"empty: name at least one {group} value")
    out: dict[str, Setting] = {}
    for name, spec in tbl.items():
        key = f"{wkey}.{key_text(name)}"
        values, reason, _ = _setting(spec, where, key)
        v = values["value"]
        if group == "coalesce":
            if name not in COALESCE_ATTRS:
                raise where.bad(
                    key,
                    f"not a coalescing parameter (ethtool's names: {', '.join(COALESCE_ATTRS)})",
                )
            value: object = (
                _on_off(v, where, key)
                if name in COALESCE_FLAGS
                else _int(v, where, key, 0, U32_MAX)
            )
        elif group == "features":
            if not is_feature_name(name):
                raise where.bad(
                    key,
                    "not a feature name (the kernel's, as `ethtool -k` prints them, or "
                    "ethtool's alias: lro, gro, tso, ...)",
                )
            value = _on_off(v, where, key)
        else:
            if name not in PAUSE_FIELDS:
                raise where.bad(key, f"unknown pause field (allowed: {', '.join(PAUSE_FIELDS)})")
            value = _on_off(v, where, key)
        out[f"{group}.{name}"] = Setting(value, reason, Mode.SET, where.source)
    return out


def _parse_nic_key(key: str, raw: object, where: _Where, wkey: str) -> dict[str, Setting]:
    if key in NIC_GROUPS:
        return _parse_nic_group(key, raw, where, wkey)
    return {key: _parse_nickey_text(key, raw, where, wkey)}


def _parse_rss_key(key: str, raw: object, where: _Where, wkey: str) -> Setting:
    """rss_hash = { udp4 = "sdfn", ... }, rss_indir = { value = "data-queues" | "equal N" |
    "weight W0 W1 ..." }, rss_key = { value = "6d:5a:..." }, flow_rules = { rules = ["flow-type
    tcp4 dst-port 179", ...], queue = "control" | N } (see lbtune.tune.knobs.rss / ntuple)."""
    from lbtune.host.net import rss

    if key == "rss_hash":
        values, reason, _ = _setting(raw, where, wkey, rss.FLOW_TYPES)
        if not values:
            raise where.bad(wkey, f"name at least one flow type ({', '.join(rss.FLOW_TYPES)})")
        fields: dict[str, str] = {}
        for flow, v in values.items():
            text = _str(v, where, f"{wkey}.{flow}", 16)
            try:
                letters = rss.canonical_letters(text)
            except ValueError as e:
                raise where.bad(f"{wkey}.{flow}", str(e)) from None
            if len(letters) != len(text) or not rss.hash_fields_fit(flow, letters):
                raise where.bad(f"{wkey}.{flow}", f"{text!r}: not hash fields {flow} can take")
            fields[flow] = letters
        return Setting(fields, reason, Mode.SET, where.source)
    if key == "rss_indir":
        values, reason, _ = _setting(raw, where, wkey)
        text = " ".join(_str(values["value"], where, wkey, 4096).split())
        if text != "data-queues":
            try:
                rss.table_of(text, 4096 if not text.startswith("table") else len(text.split()) - 1)
            except ValueError as e:
                raise where.bad(wkey, f'{e} (or "data-queues")') from None
        return Setting(text, reason, Mode.SET, where.source)
    if key == "rss_key":
        values, reason, _ = _setting(raw, where, wkey)
        text = _str(values["value"], where, wkey, 1024).strip().lower()
        if not re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2})*", text):
            raise where.bad(wkey, "expected hex bytes separated by ':' (6d:5a:...)")
        return Setting(text, reason, Mode.SET, where.source)
    values, reason, _ = _setting(raw, where, wkey, ("rules", "queue"))
    rules = values.get("rules")
    if not isinstance(rules, list) or not rules or len(rules) > 64:
        raise where.bad(wkey, 'rules: a list of 1 to 64 rules ("flow-type tcp4 dst-port 179")')
    texts = []
    for i, r in enumerate(rules):
        text = " ".join(_str(r, where, f"{wkey}.rules[{i}]", 200).split())
        if " action " in f" {text} ":
            raise where.bad(f"{wkey}.rules[{i}]", "no action: the queue comes from `queue`")
        try:
            rss.parse_rule_text(f"{text} action 0")
        except ValueError as e:
            raise where.bad(f"{wkey}.rules[{i}]", str(e)) from None
        texts.append(text)
    queue = values.get("queue", "control")
    if queue != "control":
        queue = _int(queue, where, f"{wkey}.queue", 0, 4095)
    return Setting({"rules": texts, "queue": queue}, reason, Mode.SET, where.source)


def _parse_nic(raw: object, where: _Where) -> dict[str, dict[str, Setting]]:
    out: dict[str, dict[str, Setting]] = {}
    defaults: dict[str, Setting] = {}
    for k, v in _table(raw, where, "nic").items():
        if k in NIC_KEYS:
            defaults.update(_parse_nic_key(k, v, where, f"nic.{k}"))
            continue
        if k not in NIC_ROLES and not is_ifname(k):
            raise where.bad(
                f"nic.{key_text(k)}",
                f"not a knob ({', '.join(NIC_KEYS)}), a role "
                f"({', '.join(NIC_ROLES)}) or an interface name",
            )
        section: dict[str, Setting] = {}
        for nk, nv in _table(v, where, f"nic.{k}").items():
            if nk not in NIC_KEYS:
                raise where.bad(
                    f"nic.{k}.{key_text(nk)}", f"unknown key (allowed: {', '.join(NIC_KEYS)})"
                )
            section.update(_parse_nic_key(nk, nv, where, f"nic.{k}.{nk}"))
        out[k] = section
    if defaults:
        out = {"": defaults, **out}
    return out


def _parse_cpu(raw: object, where: _Where) -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for k, v in _table(raw, where, "cpu").items():
        wkey = f"cpu.{key_text(k)}"
        if not _CPUNAME.match(k):
            raise where.bad(wkey, "CPU set names are lower case letters, digits and _")
        if is_builtin_cpu_name(k) and k != "housekeeping":
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
        wkey = f"irqbalance.{key_text(k)}"
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
        wkey = f"cmdline.{key_text(k)}"
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
        wkey = f"governor.{key_text(k)}"
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
        raise BadInput(f"{source}: a profile is a TOML table, got {show_value(data)}")
    for k in data:
        if not isinstance(k, str) or k not in SECTIONS:
            raise BadInput(
                f"{source}: unknown section [{key_text(k)}] (allowed: {', '.join(SECTIONS)})"
            )
    meta = _table(data.get("profile", {}), where, "profile")
    for k in meta:
        if k not in PROFILE_KEYS:
            raise where.bad(
                f"profile.{key_text(k)}", f"unknown key (allowed: {', '.join(PROFILE_KEYS)})"
            )
    pname = name
    if "name" in meta:
        declared = _str(meta["name"], where, "profile.name", 64)
        if not NAME.match(declared):
            raise where.bad("profile.name", f"{show_value(declared)} is not a profile name")
        if name is not None and declared != name:
            raise where.bad("profile.name", f"{declared!r} does not match the file name {name!r}")
        pname = declared
    if pname is None:
        raise BadInput(f'{source}: profile has no name (add [profile] name = "...")')
    include = meta.get("include", [])
    if not isinstance(include, list) or not all(
        isinstance(i, str) and NAME.match(i) for i in include
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
    iface_optional = None
    if "iface" in meta:
        iface_optional = _choice(meta["iface"], where, "profile.iface", IFACE_MODES) == "optional"
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
        iface_optional=iface_optional,
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
    except RecursionError:  # thousands of nested tables or arrays
        raise BadInput(f"{source}: invalid TOML: nested too deeply") from None
    return parse_profile_data(data, source, name)
