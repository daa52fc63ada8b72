"""What every benchmark writes: the run's facts and its results as JSON next to the Markdown."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any


def commit() -> str:
    """The commit the measured code is at (`+dirty` when lbtune/ differs from it)."""
    top = Path(__file__).resolve().parent.parent
    git = ["git", "-C", str(top)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    if not head:
        return "unknown"
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "lbtune", "probes",
                            "profiles"], check=False).returncode
    return head + ("+dirty" if dirty else "")


def run_meta(rounds: int, **extra: Any) -> dict[str, Any]:
    """Date, commit, Python, kernel and CPU count of this run, plus benchmark-specific facts."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "rounds": rounds,
        **extra,
    }


def write_json(out: Path, meta: dict[str, Any], results: list[Any]) -> None:
    """`{"meta": ..., "results": [...]}` (dataclass results as dicts) at `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "results": [asdict(r) for r in results]}
    out.write_text(json.dumps(doc, indent=2) + "\n")


def write_markdown(
    out: Path, heading: list[str], columns: list[tuple[str, str]], rows: list[list[str]]
) -> str:
    """Write `heading` lines and a table to the .md beside `out`; print and return the text.

    `columns` are (title, "l" or "r") pairs; `rows` hold the cells as text.
    """
    lines = [*heading, "", "| " + " | ".join(t for t, _ in columns) + " |"]
    lines.append("|" + "|".join("---:" if a == "r" else "---" for _, a in columns) + "|")
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    md = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(md)
    print(md)
    return md
