"""The current findings of the diagnose rules on the last refresh, each with its fix."""

from __future__ import annotations

from lbtune.tui.frame import Frame
from lbtune.tui.lines import Line, line, wrap_all

LEVEL = {"fail": "bold red", "warn": "yellow", "info": "dim"}


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    if not frame.findings:
        return wrap_all(
            [line(("No packet loss or limit reached in the last refresh.", "green"))], width
        )
    out: list[Line] = []
    for f in frame.findings:
        out.append(line((f"{f.level:4} ", LEVEL.get(f.level, "")), (f.title, "bold"),
                        (f"  {f.object}  {f.count} ({f.rate})", "dim")))  # fmt: skip
        for fx in f.fixes[: 1 if condensed else 2]:
            out.append(line((f"     fix: {fx.summary} ({fx.scope})", "")))
        kernel = [e for e in f.evidence if e.source.startswith("probe")]
        if kernel:
            said = kernel[0].counter.replace("kernel drop ", "", 1)
            out.append(line((f"     kernel: {said} = {kernel[0].value}", "red")))
    return wrap_all(out, width)
