"""The findings of the diagnose rules over the last JUDGE_SECONDS, each with its fix; one
the rules no longer report stays (marked quiet) until quiet for that long."""

from __future__ import annotations

from lbtune.tui.frame import JUDGE_SECONDS, Frame
from lbtune.tui.lines import Line, line, wrap_all

LEVEL = {"fail": "bold red", "warn": "yellow", "info": "dim"}
TITLE = f"findings over the last {JUDGE_SECONDS:g} s (diagnose rules) and fixes"


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    judged = min(frame.judged, JUDGE_SECONDS) if frame.judged else frame.seconds
    if not frame.findings:
        said = f"No packet loss or limit reached in the last {judged:.0f} s."
        if frame.cumulative:
            said = "No packet loss or limit reached since boot."
        return wrap_all([line((said, "green"))], width)
    out: list[Line] = []
    for i, f in enumerate(frame.findings):
        quiet = frame.quiet[i] if i < len(frame.quiet) else 0.0
        held = (f"  quiet {quiet:.0f} s", "yellow") if quiet else ("", "")
        out.append(line((f"{f.level:4} ", LEVEL.get(f.level, "")), (f.title, "bold"), held))
        out.append(line((f"     {f.object}  {f.count} ({f.rate})", "dim")))
        for fx in f.fixes[: 1 if condensed else 2]:
            out.append(line((f"     fix: {fx.summary} ({fx.scope})", "")))
        kernel = [e for e in f.evidence if e.source.startswith("probe")]
        if kernel:
            said = kernel[0].counter.replace("kernel drop ", "", 1)
            out.append(line((f"     kernel: {said} = {kernel[0].value}", "red")))
    return wrap_all(out, width, indent=7)
