"""Drops by cause: the rate of each way packets die, its history, and the kernel's reasons."""

from __future__ import annotations

from lbtune.tui.frame import Frame, sparkline
from lbtune.tui.lines import Line, line
from lbtune.tui.panels.common import DIM, HOT, rate, table

SPARK_WIDTH = 20


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    t = table("cause", "/s", "history", "total", right=frozenset({"/s", "total"}),
              squeeze=frozenset({"history"}))  # fmt: skip
    for d in frame.drops:
        if condensed and not d.total and d.rate is not None:
            continue
        style = HOT if d.rate else ("" if d.total else DIM)
        t.add(
            (f"{d.name} {d.detail}" if d.detail else d.name, style),
            (rate(d.rate), style),
            (sparkline(d.history, SPARK_WIDTH), "red" if d.rate else DIM),
            (f"{d.total:,}", style),
        )
    out = t.lines(width)
    if frame.reasons:
        k = table("kernel reason (probe)", "location", "/s", right=frozenset({"/s"}),
                  cut=frozenset({"location"}))  # fmt: skip
        for r in frame.reasons:
            k.add((r.reason, HOT), (r.location, ""), (rate(r.rate), ""))
        out += [(), *k.lines(width)]
    elif frame.probe_state not in ("on", "recorded"):
        out.append(line((f"kernel reasons: probes {frame.probe_state}", DIM)))
    else:
        out.append(line(("kernel reasons: no drops in the last refresh", DIM)))
    return out
