"""A profile written from a diagnosis: the fixes `lbtune apply` makes, in one file.

`fix_profile(report, name, role, role_profile)` collects the profile values of every fix
(sysctl, NIC, IRQ and irqbalance), merges the values several findings want (a limit gets
the highest of them, field by field), leaves out what the role profile it includes already
sets at least as high, and lists every fix that no knob makes (in the application, the
platform, by hand) as a note. `FixProfile.text()` is the TOML: a header saying where it
comes from, `[profile]` with `include` and `notes`, one table per section with the finding
behind each value in a comment. `check_profile` loads the text as the file will be loaded
(its directory first, then the profile directories) and lints it.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from lbtune.diagnose import tomltext
from lbtune.diagnose.finding import HOST, PROFILE, Finding, Fix, ProfileSetting
from lbtune.diagnose.report import Report
from lbtune.diagnose.view import describe_window, fix_text
from lbtune.errors import BadInput
from lbtune.tune.lint import LintFinding, lint_profile
from lbtune.tune.profile import Profile, Setting, load_profile, profile_dirs

DEFAULT_NAME = "lbtune-fixes"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a profile name (tune.profile)
_NUMBERS = re.compile(r"^-?[0-9]+( -?[0-9]+)*$")
MAX_NOTE = 300  # a profile note is one line of at most this many characters
_TABLE_ORDER = {"sysctl": 0, "nic": 1, "irqbalance": 2}


@dataclass(frozen=True)
class Entry:
    """One value the profile sets, the findings (by number) that want it, and a remark."""

    setting: ProfileSetting
    findings: tuple[int, ...]
    scope: str  # PROFILE, or HOST: host-global, `--netns` skips it
    remark: str = ""  # e.g. "raised above web's 8192"


@dataclass(frozen=True)
class FixProfile:
    """The profile `diagnose --write-profile` writes."""

    name: str
    header: tuple[str, ...]  # comment lines at the top
    description: str
    include: tuple[str, ...]
    entries: tuple[Entry, ...]
    notes: tuple[str, ...]  # fixes no profile value makes, one line each
    covered: tuple[str, ...] = field(default=())  # values the included profile already sets

    @property
    def empty(self) -> bool:
        """True when the file would set nothing (no value, nothing included)."""
        return not self.entries and not self.include

    def text(self) -> str:
        out = [f"# {line}" for line in self.header]
        out += ["[profile]", f"name = {tomltext.string(self.name)}"]
        out.append(f"description = {tomltext.string(self.description)}")
        if self.include:
            out.append(f"include = {tomltext.value(list(self.include))}")
        if self.notes:
            out.append("notes = [")
            out += [f"  {tomltext.string(n)}," for n in self.notes]
            out.append("]")
        table: Optional[tuple[str, ...]] = None
        for e in sorted(self.entries, key=lambda e: _table_key(e.setting.table)):
            if e.setting.table != table:
                table = e.setting.table
                head = ".".join(tomltext.key(t, quote=i == 1) for i, t in enumerate(table))
                out += ["", f"[{head}]"]
            numbers = ", ".join(str(n) for n in e.findings)
            out.append(f"# finding {numbers}" + (f": {_comment(e.remark)}" if e.remark else ""))
            if e.scope == HOST:
                out.append("# host-global: `lbtune --netns` skips it; apply it on the host")
            out.append(f"{tomltext.key(e.setting.name)} = {e.setting.inline()}")
        if self.covered:
            out += ["", "# Already set by the included profile (not repeated here):"]
            out += [f"# - {_comment(c)}" for c in self.covered]
        return "\n".join(out) + "\n"


def _table_key(table: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
    return (_TABLE_ORDER.get(table[0], 9), table)


def _comment(text: str) -> str:
    """Data on a comment line: printable, one line."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _one_line(text: str, limit: int) -> str:
    text = " ".join(_comment(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def profile_name(path: str) -> str:
    """The profile name a file at `path` gets: its stem when that is a profile name."""
    stem = Path(path).name
    stem = stem[: -len(".toml")] if stem.endswith(".toml") else stem
    return stem if _NAME.match(stem) else DEFAULT_NAME


# ----------------------------------------------------------------------------- values


def _fields(text: str) -> Optional[list[int]]:
    return [int(x) for x in text.split()] if _NUMBERS.match(text) else None


def _numbers(s: ProfileSetting) -> Optional[list[int]]:
    v = dict(s.fields).get("value")
    if isinstance(v, bool) or v is None:
        return None
    return _fields(str(v))


def _with_value(s: ProfileSetting, numbers: list[int]) -> ProfileSetting:
    v: tomltext.Scalar = numbers[0] if len(numbers) == 1 else " ".join(map(str, numbers))
    fields = tuple((k, v if k == "value" else x) for k, x in s.fields)
    return ProfileSetting(s.table, s.name, fields, s.reason)


def _merge(a: ProfileSetting, b: ProfileSetting) -> Optional[ProfileSetting]:
    """The value two findings want for one key: the higher limit (field by field) when both
    raise numbers; None when they disagree otherwise (the first one is kept)."""
    if a.fields == b.fields:
        return a
    na, nb = _numbers(a), _numbers(b)
    if a.mode == b.mode == "raise" and na and nb and len(na) == len(nb):
        return _with_value(a, [max(x, y) for x, y in zip(na, nb)])
    return None


def _covers(role: Setting, ours: ProfileSetting) -> bool:
    """True when the included profile's value already makes our fix (same or higher)."""
    mine = dict(ours.fields)
    theirs = role.value
    if isinstance(theirs, dict):
        return all(theirs.get(k) == v for k, v in mine.items() if k not in ("mode",))
    if ours.mode == "raise" and role.mode.value in ("set", "raise"):
        want, have = _numbers(ours), _fields(str(theirs))
        if want and have and len(want) == len(have):
            return all(h >= w for h, w in zip(have, want))
    return str(theirs) == str(mine.get("value")) and role.mode.value == ours.mode


def _shown(s: Setting) -> str:
    v = s.value
    text = ", ".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else str(v)
    return text if s.mode.value == "set" else f"{text} ({s.mode.value})"


# ----------------------------------------------------------------------------- building


def _note(number: int, f: Finding, fx: Fix) -> str:
    text = f"finding {number} ({f.rule}, {f.object}): {fix_text(fx)} [{fx.scope}]"
    if fx.command:
        text += f"; {fx.command}"
    if fx.note:
        text += f": {fx.note}"
    return _one_line(text, MAX_NOTE)


def _collect(report: Report) -> tuple[dict[str, Entry], list[str], list[str]]:
    """The profile values of every finding's fixes, merged per key (entries), the fixes a
    profile cannot hold (notes) and the values two findings disagree on (conflicts)."""
    entries: dict[str, Entry] = {}
    notes: list[str] = []
    conflicts: list[str] = []
    for number, f in enumerate(report.findings, 1):
        for fx in f.fixes:
            if not fx.settings or fx.scope not in (PROFILE, HOST):
                notes.append(_note(number, f, fx))
                continue
            for s in fx.settings:
                old = entries.get(s.path)
                if old is None:
                    entries[s.path] = Entry(s, (number,), fx.scope)
                    continue
                merged = _merge(old.setting, s)
                if merged is None:
                    conflicts.append(
                        f"finding {number} wants {s.path} = {dict(s.fields).get('value')}, "
                        f"finding {old.findings[0]} another value: the first is written"
                    )
                    merged = old.setting
                entries[s.path] = Entry(merged, (*old.findings, number), old.scope)
    return entries, notes, conflicts


def _on_top_of(
    role_profile: Profile, entries: dict[str, Entry], ifaces: Sequence[str], notes: list[str]
) -> tuple[dict[str, Entry], list[str]]:
    """The entries left once the role's profile is included, and what it already covers.
    An entry the role sets differently stays, marked as overriding it."""
    covered: list[str] = []
    theirs = dict(role_profile.settings())
    if "data" in role_profile.nic:
        entries = _as_data(entries, ifaces, notes)
    role_irqbalance = any(k.startswith("irqbalance.") for k in theirs)
    for key in list(entries):
        e = entries[key]
        if e.setting.table == ("irqbalance",) and role_irqbalance:
            # The role already manages irqbalance (stopped, or banned from its data CPUs).
            covered.append(f"{key}: the {role_profile.name} profile manages irqbalance")
            del entries[key]
            continue
        have = theirs.get(key)
        if have is None:
            continue
        if _covers(have, e.setting):
            covered.append(f"{key} = {_shown(have)} in the {role_profile.name} profile")
            del entries[key]
        else:
            remark = f"overrides {_shown(have)} of the {role_profile.name} profile"
            entries[key] = Entry(e.setting, e.findings, e.scope, remark)
    return entries, covered


def _header(report: Report, path: str, command: str) -> tuple[str, ...]:
    """The comment lines at the top of the file: who wrote it, from what, what to do next."""
    where = describe_window(report)
    if report.netns:
        where += f", network namespace {report.netns}"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(report.generated))
    host = report.hostname or "the host"
    return (
        f"Written by `lbtune diagnose --write-profile` on {_comment(host)} ({where}), {stamp}.",
        "Each value carries the reason of the finding behind it (numbers as in the report).",
        f"Review it, then: {command} plan {_comment(path)}; {command} apply {_comment(path)}"
        f" (undo: {command} rollback)",
    )


def fix_profile(
    report: Report,
    path: str,
    role: Optional[str] = None,
    role_profile: Optional[Profile] = None,
    command: str = "lbtune",
) -> FixProfile:
    """The profile of `report`'s fixes (see the module doc), to be written to `path`.
    `role_profile` is the profile of `role` (included by name); `command` is how the user
    calls lbtune (`lbtune --netns NS`)."""
    entries, notes, conflicts = _collect(report)
    covered: list[str] = []
    include: tuple[str, ...] = ()
    if role_profile is not None:
        include = (role_profile.name,)
        entries, covered = _on_top_of(role_profile, entries, report.ifaces, notes)
    notes += [_one_line(c, MAX_NOTE) for c in conflicts]
    host = report.hostname or "the host"
    n = len(report.findings)
    description = _one_line(
        f"fixes for {n} finding{'' if n == 1 else 's'} of lbtune diagnose on {host}"
        + (f", on top of the {role} role profile" if role else ""),
        300,
    )
    return FixProfile(
        name=profile_name(path),
        header=_header(report, path, command),
        description=description,
        include=include,
        entries=tuple(entries.values()),
        notes=tuple(notes),
        covered=tuple(covered),
    )


def _as_data(
    entries: dict[str, Entry], ifaces: Sequence[str], notes: list[str]
) -> dict[str, Entry]:
    """The role profile tunes the data interface (`[nic."data"]`, bound by `--iface` at
    plan time), and a device may not be named twice: values for the one interface the
    diagnosis watched (`diagnose --iface IF`) go to the data section."""
    if len(ifaces) != 1:
        devs = sorted({e.setting.table[1] for e in entries.values() if e.setting.table[0] == "nic"})
        if devs:
            notes.append(
                _one_line(
                    f'the role profile tunes [nic."data"]: plan and apply with --iface set to '
                    f"an interface not named here ({', '.join(devs)}), or diagnose with "
                    "--iface DATA-IF to write its values as the data interface's",
                    MAX_NOTE,
                )
            )
        return entries
    out: dict[str, Entry] = {}
    for key, e in entries.items():
        s = e.setting
        if s.table == ("nic", ifaces[0]):
            s = ProfileSetting(("nic", "data"), s.name, s.fields, s.reason)
            e = Entry(s, e.findings, e.scope, f"{ifaces[0]}, the data interface")
            key = s.path
        out[key] = e
    return out


def check_profile(text: str, path: str, root: str = "/") -> list[LintFinding]:
    """Load `text` as the file `path` will be loaded (includes found in its directory first,
    then the profile directories of `root`) and lint it; BadInput when it does not load."""
    target = Path(path).resolve()
    search: Sequence[Path] = [target.parent, *profile_dirs(root)]
    with tempfile.TemporaryDirectory(prefix="lbtune-profile-") as d:
        tmp = Path(d) / target.name
        tmp.write_text(text, encoding="utf-8")
        try:
            return lint_profile(load_profile(str(tmp), search=search))
        except BadInput as e:  # name the file the user asked for, not the scratch copy
            raise BadInput(str(e).replace(str(tmp), path)) from None
