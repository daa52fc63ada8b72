"""Knob kinds by name, so a journal entry (`kind`, `object`) can be turned back into a knob."""

from __future__ import annotations

from typing import Callable

from lbtune.errors import BadInput
from lbtune.tune.knob import Knob

_KINDS: dict[str, Callable[[str], Knob]] = {}


def register(kind: str, factory: Callable[[str], Knob]) -> None:
    _KINDS[kind] = factory


def knob_from_record(kind: str, obj: str) -> Knob:
    _load_builtin()
    try:
        factory = _KINDS[kind]
    except KeyError:
        raise BadInput(f"journal names unknown knob kind {kind!r}") from None
    return factory(obj)


def kinds() -> list[str]:
    _load_builtin()
    return sorted(_KINDS)


def _load_builtin() -> None:
    if _KINDS:
        return
    from lbtune.tune.sysctl import SysctlKnob

    register(SysctlKnob.kind, SysctlKnob)
    import importlib

    try:  # NIC/IRQ/boot knobs live in their own module
        knobs = importlib.import_module("lbtune.tune.knobs")
    except ImportError:
        return
    knobs.register_all(register)
