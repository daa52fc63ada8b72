"""Per-NIC, per-queue rx/tx packets and drops, with bars; a queue far above the mean is
highlighted (RSS or IRQ imbalance)."""

from __future__ import annotations

from typing import Optional

from lbtune.tui.frame import Frame, NicView, bar
from lbtune.tui.lines import Line, Span, line, wrap_all
from lbtune.tui.panels.common import DIM, HOT, WARM, rate, table


def chosen(frame: Frame, name: Optional[str]) -> Optional[NicView]:
    """The NIC to show: the chosen one when sampled, else the busiest."""
    for n in frame.nics:
        if n.dev == name:
            return n
    return frame.nics[0] if frame.nics else None


def render(frame: Frame, name: Optional[str], condensed: bool, width: int) -> list[Line]:
    nic = chosen(frame, name)
    if nic is None:
        return [line(("no NIC counters here", DIM))]
    others = "  ".join(f"{n.dev} {rate(n.rx_pps)}/s" for n in frame.nics if n is not nic)
    head: list[Span] = [
        (nic.dev, "bold"), (f" ({nic.driver or '?'})  rx {rate(nic.rx_pps)} pps  ", ""),
        ("drops " + rate(nic.drops_ps) + "/s", HOT if nic.drops_ps else ""),
    ]  # fmt: skip
    if nic.imbalance is not None:
        head.append((f"  busiest/mean {nic.imbalance:.1f}x",
                     WARM if any(r.hot for r in nic.rows) else ""))  # fmt: skip
    out = [line(*head)]
    if others:
        out.append(line((f"also: {others}  (i: choose)", DIM)))
    if not nic.rows:
        out.append(line((nic.note or "no per-queue counters", DIM)))
        return wrap_all(out, width)
    out = wrap_all(out, width)
    napi = any(r.exhausted_ps is not None for r in nic.rows)
    cols = ["q", "rx pps", "share", "", "tx pps", "drops/s"] + (["napi out/s"] if napi else [])
    t = table(*cols, right=frozenset({"q", "rx pps", "share", "tx pps", "drops/s",
                                      "napi out/s"}), squeeze=frozenset({""}))  # fmt: skip
    for r in nic.rows:
        if condensed and not r.rx_pps and not r.tx_pps and not r.drops_ps:
            continue
        style = WARM if r.hot else ""
        cells: list[Span] = [
            (str(r.queue), style),
            (rate(r.rx_pps), style),
            (f"{100 * r.rx_share:.0f}%", style),
            (bar(r.rx_share, 10), "yellow" if r.hot else "cyan"),
            (rate(r.tx_pps), ""),
            (rate(r.drops_ps), HOT if r.drops_ps else ""),
        ]
        if napi:
            cells.append((rate(r.exhausted_ps), WARM if r.exhausted_ps else ""))
        t.add(*cells)
    return out + t.lines(width)
