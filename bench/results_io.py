"""What every benchmark writes: the run's facts and its results as JSON next to the Markdown.

Every result's `meta` says what was measured and where: the script that wrote it, the commit
of the measured code (`bench/check.py` lists a result as stale once the paths its script
declares in `MEASURES` change after that commit), the machine (CPU model and count, memory,
kernel, virtualisation) and the load it ran under (`host_load`: load averages when this module was
imported, i.e. when the script started, and when `run_meta` is called at its end; plus the
busy processes the script itself added, if any).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parent.parent


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages now."""
    return [round(x, 2) for x in os.getloadavg()]


_START_LOAD = loadavg()
_START_TIME = time.time()


def commit() -> str:
    """The commit the measured code is at (`+dirty` when lbtune/ differs from it)."""
    git = ["git", "-C", str(TOP)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip()
    if not head:
        return "unknown"
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "lbtune", "probes",
                            "profiles"], check=False).returncode
    return head + ("+dirty" if dirty else "")


def _first(path: str, key: str) -> str:
    """The value of the first `key: value` line of a /proc file ("" when absent)."""
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == key:
                return value.strip()
    except OSError:
        pass
    return ""


def _detect_virt(flag: str) -> str:
    """`systemd-detect-virt --vm` or `--container` ("none"; "" when it cannot tell)."""
    exe = shutil.which("systemd-detect-virt")
    if not exe:
        return ""
    out = subprocess.run([exe, flag], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    """CPU model and count, memory, kernel and virtualisation of the machine running the bench."""
    mem_kib = _first("/proc/meminfo", "MemTotal").split()
    flags = _first("/proc/cpuinfo", "flags").split()
    return {
        "cpu_model": _first("/proc/cpuinfo", "model name") or platform.processor(),
        "cpus": os.cpu_count(),
        "memory_mib": int(mem_kib[0]) // 1024 if mem_kib else None,
        "kernel": platform.release(),
        "hypervisor_flag": "hypervisor" in flags,
        "virt_vm": _detect_virt("--vm"),
        "virt_container": _detect_virt("--container"),
    }


def script_name() -> str:
    """The bench script that is running, as a path from the repository's top."""
    main = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if main is not None and main.is_file():
        try:
            return str(main.relative_to(TOP))
        except ValueError:
            return str(main)
    return ""


def run_meta(rounds: int, *, busy_processes: int = 0, **extra: Any) -> dict[str, Any]:
    """The run's facts: date, script, commit, Python, machine and load, plus the bench's own.

    Call it when the measurement is over: the load's "end" is taken now, its "start" when the
    script imported this module. `busy_processes` is how many CPU-burning processes the script
    itself ran beside the measurement.
    """
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "script": script_name(),
        "commit": commit(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "machine": machine(),
        "host_load": {
            "start": _START_LOAD,
            "end": loadavg(),
            "seconds": round(time.time() - _START_TIME, 1),
            "busy_processes": busy_processes,
        },
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
