"""Per-CPU softnet: processed, dropped and squeezed per second, the CPU's share of NET_RX
softirqs and of NIC queue interrupts; isolated CPUs marked. On a host with many CPUs the
busiest come first (drops, then squeezes, then packets), so the CPU that drops is on screen."""

from __future__ import annotations

from typing import Optional

from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.tui.frame import CpuRow, Frame
from lbtune.tui.lines import Line, line
from lbtune.tui.panels.common import DIM, HOT, WARM, percent, rate, table

COLUMNS = ("cpu", "node", "pkts/s", "drop/s", "squeeze/s", "NET_RX/s", "rx%", "irq%")
MANY = 16  # more CPUs than this: busiest first
# Left out, in this order, when the panel is too narrow for every column.
OPTIONAL = ("node", "irq%", "rx%", "NET_RX/s")


def title(topology: Optional[CpuTopology]) -> str:
    many = topology is not None and len(topology.cpus) > MANY
    return "CPUs" + (" (busiest first)" if many else "") + ": softnet, NET_RX, IRQs"


def _activity(c: CpuRow) -> tuple[float, float, float, float, int]:
    return (-c.dropped_ps, -c.squeeze_ps, -c.processed_ps, -(c.net_rx_ps or 0.0), c.cpu)


def render(frame: Frame, condensed: bool, width: int) -> list[Line]:
    if not frame.cpus:
        return [line(("no /proc/net/softnet_stat here", DIM))]
    t = table(*COLUMNS, right=frozenset(COLUMNS[2:]), optional=OPTIONAL)
    shown = 0
    rows = sorted(frame.cpus, key=_activity) if len(frame.cpus) > MANY else frame.cpus
    for c in rows:
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
