"""Python targets the VM tier calls inside the guest (VmGuest.call)."""

from __future__ import annotations

import os

from lbtune.lab.progress import DONE, START, ProgressWriter


def report_steps(names: list[str]) -> dict[str, str]:
    """Write a start and a done progress step per name; return where the steps went."""
    progress = ProgressWriter()
    for name in names:
        progress(name, START)
        progress(name, DONE, f"{name} ok")
    return {"workdir": os.environ.get("LBTUNE_LAB_WORKDIR", ""), "cwd": os.getcwd()}
