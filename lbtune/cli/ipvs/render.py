"""The words of `ipvs plan` and `ipvs apply`: their JSON documents and summary lines.

The commands (lbtune.cli.ipvs.commands) print with these, and so does the answer of a
repeated no-op before click is imported (lbtune.cli.ipvs.fast): one text for both, so the
answer from the record is the full run's byte for byte. Nothing is imported here: the
no-op's answer pays for no module it does not run.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    from collections.abc import Sequence


def plan_document(source: str, operations: int, unchanged: int, changes: Sequence[object],
                  warnings: Sequence[str]) -> dict[str, object]:
    """`ipvs plan --json`: `unchanged` counts the objects already as wanted."""
    return {"config": source, "operations": operations, "unchanged": unchanged,
            "changes": changes, "warnings": warnings}  # fmt: skip


def apply_document(source: str, journal: str | None, operations: int, unchanged: int,
                   changes: Sequence[object], cut: Sequence[object],
                   warnings: Sequence[str]) -> dict[str, object]:
    """`ipvs apply --json` (and teardown): `journal` None when nothing changed."""
    return {"config": source, "journal": journal, "operations": operations,
            "unchanged": unchanged, "changes": changes, "cut": cut,
            "warnings": warnings}  # fmt: skip


def nothing_to_change(source: str) -> str:
    """An apply that changed nothing."""
    return f"{source}: nothing to change"


def plan_summary(operations: int, in_place: int, missing: int) -> str:
    """The last line of a plan: what it does, what is in place, what the kernel lacks."""
    return (f"{operations} operation(s), {in_place} already in place"
            + (f", {missing} not available (IPVS not loaded yet)" if missing else ""))


def flat_json(doc: dict[str, object]) -> str | None:
    """`doc` as lbtune.cli.output.emit_json writes it (`json.dumps(doc, indent=2)` and a
    newline) when every value is a string, a number, a boolean, None or an empty list;
    None for any other document. Without the json module, whose import (re, enum) costs
    the no-op's answer more than writing its few lines."""
    from _json import encode_basestring_ascii as quote

    lines = []
    for key, value in doc.items():
        if value is None:
            text = "null"
        elif value is True or value is False:
            text = "true" if value else "false"
        elif type(value) is int:
            text = str(value)
        elif type(value) is str:
            text = quote(value)
        elif type(value) is list and not value:
            text = "[]"
        else:
            return None
        lines.append(f"  {quote(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n" if lines else "{}\n"
