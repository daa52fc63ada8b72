"""Finding, reading and merging profiles: by name (the host's /etc/lbtune/profiles, then the
shipped ones) or by path, includes first and later values winning."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence, Union

import lbtune
from lbtune.errors import BadInput
from lbtune.host.textfile import read_user_text
from lbtune.tune.profile.cpuexpr import cpu_expr_names, is_builtin_cpu_name, parse_cpu_expr
from lbtune.tune.profile.model import Profile, ProfileInfo, Setting, show_value
from lbtune.tune.profile.schema import MAX_FILE_BYTES, MAX_INCLUDE_DEPTH, NAME, parse_profile_text


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
    if not NAME.match(name):
        raise BadInput(f"profile {show_value(name)}: not a profile name or a path to a .toml file")
    for d in dirs:
        p = d / f"{name}.toml"
        if p.is_file():
            return p
    where = ", ".join(str(d) for d in dirs) or "nowhere"
    raise BadInput(f"profile {name!r} not found (looked in {where})")


def _read(path: Path) -> str:
    return read_user_text(str(path), MAX_FILE_BYTES, "profile")


def _load_file(path: Path) -> Profile:
    name = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
    return parse_profile_text(_read(path), str(path), name if NAME.match(name) else None)


def _merge(docs: Sequence[Profile]) -> Profile:
    top = docs[-1]
    sysctl: dict[str, Setting] = {}
    nic: dict[str, dict[str, Setting]] = {}
    cpu: dict[str, Setting] = {}
    irqb: dict[str, Setting] = {}
    cmdline: dict[str, Setting] = {}
    governor: dict[str, Setting] = {}
    role: Optional[str] = None
    iface_optional: Optional[bool] = None
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
        if d.iface_optional is not None:  # the including profile's word wins
            iface_optional = d.iface_optional
        notes += [n for n in d.notes if n not in notes]
    return replace(
        top,
        role=role,
        iface_optional=iface_optional,
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
            if not is_builtin_cpu_name(n) and n not in defined:
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
    defaults = p.nic.get("", {})
    if defaults and len(p.nic) == 1:  # after includes: defaults that would apply nowhere
        raise BadInput(
            f"{p.path}: nic.{next(iter(defaults))}: a default for [nic.\"ROLE\"] and "
            "[nic.IFNAME] sections, but the profile (with its includes) has none: put it "
            'under the interface it is for, e.g. [nic."data"]'
        )
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
    if not merged.settings():
        raise BadInput(f"{path}: profile {merged.name} sets nothing (add a [sysctl] value or "
                       "another section)")  # fmt: skip
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
            if name in seen or not NAME.match(name):
                continue
            try:
                prof = load_profile(str(p), search=dirs)
                seen[name] = ProfileInfo(name, str(p), prof.description, prof.role, prof.include)
            except BadInput as e:
                seen[name] = ProfileInfo(name, str(p), error=str(e))
    return sorted(seen.values(), key=lambda i: i.name)
