"""Rendering helpers shared by commands: JSON conversion and the rich console."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from typing import Any, Iterable, Optional

from lbtune.host.cpulist import format_cpulist


def jsonable(obj: Any) -> Any:
    """Dataclasses, sets and enums as plain JSON values (CPU sets become sorted lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: jsonable(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if not f.name.startswith("_")
        }
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, (frozenset, set)):
        return sorted(jsonable(x) for x in obj)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(x) for x in obj]
    return obj


def emit_json(data: Any) -> None:
    json.dump(jsonable(data), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def console() -> Any:
    """A rich Console on the current stdout (resolved now, so tests can capture it)."""
    import os

    from rich.console import Console

    width = None
    if not sys.stdout.isatty():  # pipes and files: wide enough for plan and show tables
        width = int(os.environ.get("COLUMNS", "") or 120)
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def cpus(s: Optional[Iterable[int]], empty: str = "-") -> str:
    """A CPU set for humans: `0-3,8`, or `empty` when none/unknown."""
    if s is None:
        return "?"
    text = format_cpulist(s)
    return text or empty
