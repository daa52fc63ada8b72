"""Number formatting and styles every panel shares."""

from __future__ import annotations

from typing import Optional

from lbtune.tui.lines import Grid

HOT = "bold red"
WARM = "yellow"
DIM = "dim"


def rate(value: Optional[float]) -> str:
    """A per-second rate in a narrow column: `-` unknown, `0`, `0.4`, `12`, `3.4k`, `1.2M`."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if value < 10:
        return f"{value:.1f}"
    if value < 10_000:
        return f"{value:,.0f}"
    if value < 10_000_000:
        return f"{value / 1000:,.1f}k"
    return f"{value / 1e6:,.1f}M"


def percent(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def table(
    *columns: str,
    right: frozenset[str] = frozenset(),
    squeeze: frozenset[str] = frozenset(),
    optional: tuple[str, ...] = (),
    cut: frozenset[str] = frozenset(),
) -> Grid:
    return Grid(columns, right, squeeze, optional, cut)


def loss_style(value: Optional[float]) -> str:
    return HOT if value else ""
