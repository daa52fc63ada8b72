"""Knob kinds by name, so a journal entry (`kind`, `object`) can be turned back into a knob.

Built-in kinds are looked up in `lbtune.tune.knobs.FAMILY_OF_KIND`, which imports only the
family a journal names; `register` adds others (tests).
"""

from __future__ import annotations

from typing import Callable

from lbtune.errors import BadInput
from lbtune.tune.knob import Knob

_KINDS: dict[str, Callable[[str], Knob]] = {}


def register(kind: str, factory: Callable[[str], Knob]) -> None:
    _KINDS[kind] = factory


def knob_from_record(kind: str, obj: str) -> Knob:
    factory = _KINDS.get(kind)
    if factory is None:
        from lbtune.tune.knobs import kind_class

        try:
            factory = _KINDS[kind] = kind_class(kind)
        except KeyError:
            raise BadInput(f"journal names unknown knob kind {kind!r}") from None
    return factory(obj)


def kinds() -> list[str]:
    from lbtune.tune.knobs import FAMILY_OF_KIND

    return sorted(set(FAMILY_OF_KIND) | set(_KINDS))
