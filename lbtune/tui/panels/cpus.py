"""Per-CPU softnet: processed, dropped and squeezed per second, the CPU's share of NET_RX
softirqs and of NIC queue interrupts; isolated CPUs marked."""

from __future__ import annotations

from lbtune.tui.frame import Frame
from lbtune.tui.lines import Line, line
from lbtune.tui.panels.common import DIM, HOT, WARM, percent, rate, table

COLUMNS = ("cpu", "node", "pkts/s", "drop/s", "squeeze/s", "NET_RX/s", "rx%", "irq%")


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    if not frame.cpus:
        return [line(("no /proc/net/softnet_stat here", DIM))]
    t = table(*COLUMNS, right=frozenset(COLUMNS[2:]))
    shown = 0
    for c in frame.cpus:
        active = c.processed_ps or c.dropped_ps or c.squeeze_ps or c.net_rx_ps or c.irq_share
        if condensed and not active:
            continue
        shown += 1
        # Work on an isolated CPU is what isolation was meant to prevent.
        label = (f"{c.cpu}{' iso' if c.isolated else ''}",
                 (HOT if active else WARM) if c.isolated else "")  # fmt: skip
        t.add(
            label,
            ("-" if c.node is None else str(c.node), DIM),
            (rate(c.processed_ps), ""),
            (rate(c.dropped_ps), HOT if c.dropped_ps else ""),
            (rate(c.squeeze_ps), WARM if c.squeeze_ps else ""),
            (rate(c.net_rx_ps), ""),
            (percent(c.net_rx_share), ""),
            (percent(c.irq_share), ""),
        )
    out = t.lines(width)
    if condensed and shown < len(frame.cpus):
        out.append(line((f"{len(frame.cpus) - shown} idle CPUs hidden (c: show all)", DIM)))
    return out
