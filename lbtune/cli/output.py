"""Rendering helpers shared by commands: JSON conversion and the rich console."""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Any, Iterable, Optional, Sequence

from lbtune.host.kernel.cpulist import format_cpulist


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


def _shown(text: str) -> str:
    """`text` as the user should see it: paths of an unpacked capture replaced by the
    capture's own name (Runtime.display of the running command)."""
    import click

    ctx = click.get_current_context(silent=True)
    runtime = ctx.find_root().obj if ctx is not None else None
    display = getattr(runtime, "display", None)
    return display(text) if callable(display) else text


def emit_json(data: Any) -> None:
    import json  # only --json output needs it (start-up of every command)

    sys.stdout.write(_shown(json.dumps(jsonable(data), indent=2, sort_keys=False)) + "\n")


def echo(text: str = "") -> None:
    """One line of plain text on stdout: data printed as it is (no markup to escape)."""
    sys.stdout.write(_shown(text) + "\n")


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows in left-aligned columns under `headers`, two spaces apart, no trailing blanks.

    Plain text rather than a rich Table for the tuning commands: they run at boot and in
    scripts, and importing rich costs them about a fifth of their time.
    """
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()
             for r in [headers, *rows]]  # fmt: skip
    return "\n".join(lines)


def console() -> Any:
    """A rich Console on the current stdout (resolved now, so tests can capture it)."""
    import os

    from rich.console import Console

    width = None
    if not sys.stdout.isatty():  # pipes and files: wide enough for plan and show tables
        text = os.environ.get("COLUMNS", "").strip()
        width = int(text) if text.isdigit() and 20 <= int(text) <= 10_000 else 120
    return Console(file=sys.stdout, highlight=False, soft_wrap=False, width=width)


def print_trimmed(renderable: Any) -> None:
    """Print a rich renderable (a table) without the spaces rich pads each line with to the
    table's width: `lbtune doctor | cat -A` used to end every line in them."""
    import re

    con = console()
    with con.capture() as cap:
        con.print(renderable)
    pad = re.compile(r" +((?:\x1b\[[0-9;]*m)*)$")  # spaces, then any closing style codes
    sys.stdout.write("".join(pad.sub(r"\1", line) + "\n" for line in cap.get().splitlines()))


def cpus(s: Optional[Iterable[int]], empty: str = "-") -> str:
    """A CPU set for humans: `0-3,8`, or `empty` when none/unknown."""
    if s is None:
        return "?"
    text = format_cpulist(s)
    return text or empty
