"""Listen queues per port: accept-queue fill against the effective backlog, overflows/s."""

from __future__ import annotations

from lbtune.tui.frame import Frame, bar
from lbtune.tui.lines import Line, line
from lbtune.tui.panels.common import DIM, HOT, WARM, percent, rate, table


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    if not frame.listen:
        return [line(("no listening TCP sockets (or no sock_diag here)", DIM))]
    t = table("listener", "queue", "backlog", "fill", "", "overflow/s",
              right=frozenset({"queue", "backlog", "fill", "overflow/s"}),
              squeeze=frozenset({""}))  # fmt: skip
    for r in frame.listen:
        if condensed and not r.queue and not r.overflows:
            continue
        style = HOT if r.overflows else (WARM if r.fill >= 0.8 else "")
        t.add(
            (r.endpoint, ""),
            (str(r.queue), style),
            (str(r.backlog), ""),
            (percent(r.fill), style),
            (bar(r.fill, 8), style or "green"),
            (rate(r.overflows), HOT if r.overflows else ""),
        )
    return t.lines(width)
