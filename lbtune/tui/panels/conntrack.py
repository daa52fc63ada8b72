"""Conntrack table fill and its drops."""

from __future__ import annotations

from lbtune.tui.frame import Frame, bar
from lbtune.tui.lines import Line, Span, line, wrap_all
from lbtune.tui.panels.common import DIM, HOT, WARM, percent, rate


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    ct = frame.conntrack
    if ct is None:
        return [line(("conntrack not loaded here", DIM))]
    fill = ct.fill or 0.0
    style = HOT if fill >= 0.95 else (WARM if fill >= 0.8 else "green")
    limit = "?" if ct.max is None else f"{ct.max:,}"
    entries = f" {percent(ct.fill)}  {ct.count:,} / {limit} entries"
    head = line((bar(fill, 20), style), (entries, ""))
    drops: list[Span] = []
    for label, value in (("drop", ct.drops_ps), ("early_drop", ct.early_drop_ps),
                         ("insert_failed", ct.insert_failed_ps)):  # fmt: skip
        drops.append((f"{label} {rate(value)}/s  ", HOT if value else DIM))
    return wrap_all([head, line(*drops)], width)
