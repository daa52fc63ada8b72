"""Small inline SVG pictures for the HTML report: sparklines, bar charts, before/after bars.

The report is mailed and opened offline, so every picture is SVG text inside the page: no
script, no external font or stylesheet (the text uses the reader's sans-serif font). Every
label is escaped. Sizes are fixed so the page lays out the same everywhere; values are
scaled to the tallest one in the picture.
"""

from __future__ import annotations

import html
from typing import Optional, Sequence

SPARK_FILL = "#d9480f"  # per-second series bars (a colour used nowhere else in the page)
BAR_FILL = "#4a6fa5"
HIGHLIGHT_FILL = "#b00020"
BEFORE_FILL = "#9aa5b1"
TEXT = 'font-family="sans-serif" font-size="10" fill="#333"'


def _svg(width: int, height: int, body: Sequence[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{html.escape(label)}">'
        + "".join(body)
        + "</svg>"
    )


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def sparkline(
    values: Sequence[Optional[float]],
    label: str,
    gauge: bool = False,
    note: str = "",
    width: int = 240,
) -> str:
    """One bar per tick (a gauge: one point per tick, joined), with the maximum and `note`
    (the ticks: "10 x 1 s") written beside it; a tick without a value leaves a gap."""
    height, right = 32, 70
    plot = width - right
    n = max(1, len(values))
    top = max((v for v in values if v is not None), default=0.0)
    body = [f'<rect x="0" y="0" width="{plot}" height="{height}" fill="#f6f6f6"/>']
    step = plot / n
    if gauge:
        pts = [
            f"{(i + 0.5) * step:.1f},{height - 2 - (v / top * (height - 4) if top else 0):.1f}"
            for i, v in enumerate(values)
            if v is not None
        ]
        body.append(
            f'<polyline points="{" ".join(pts)}" fill="none" stroke="{SPARK_FILL}" '
            'stroke-width="2"/>'
        )
    else:
        for i, v in enumerate(values):
            if v is None or v <= 0 or top <= 0:
                continue
            h = max(1.0, v / top * (height - 2))
            body.append(
                f'<rect x="{i * step + 0.5:.1f}" y="{height - h:.1f}" '
                f'width="{max(1.0, step - 1):.1f}" height="{h:.1f}" fill="{SPARK_FILL}"/>'
            )
    unit = "" if gauge else "/s"
    body.append(f'<text x="{plot + 4}" y="12" {TEXT}>max {_num(top)}{unit}</text>')
    body.append(f'<text x="{plot + 4}" y="26" {TEXT}>{html.escape(note)}</text>')
    return _svg(width, height, body, label)


def bar_chart(
    bars: Sequence[tuple[str, int, bool]], label: str, unit: str, width: int = 720
) -> str:
    """Vertical bars (label, value, highlighted), labels under every bar that has room."""
    height, base, left = 150, 120, 48
    n = max(1, len(bars))
    step = (width - left) / n
    top = max((v for _, v, _ in bars), default=0)
    body = [
        f'<text x="0" y="10" {TEXT}>{html.escape(_num(top))}</text>',
        f'<text x="0" y="{base}" {TEXT}>0</text>',
        f'<line x1="{left}" y1="{base}" x2="{width}" y2="{base}" stroke="#999"/>',
    ]
    every = max(1, int(28 // step) + 1)  # a label needs about 28 px
    for i, (name, value, hot) in enumerate(bars):
        x = left + i * step
        if value > 0 and top > 0:
            h = max(1.0, value / top * (base - 14))
            fill = HIGHLIGHT_FILL if hot else BAR_FILL
            body.append(
                f'<rect x="{x + 0.5:.1f}" y="{base - h:.1f}" width="{max(1.0, step - 1):.1f}" '
                f'height="{h:.1f}" fill="{fill}"><title>{html.escape(name)}: {value:,} '
                f"{html.escape(unit)}</title></rect>"
            )
        if i % every == 0:
            body.append(
                f'<text x="{x + step / 2:.1f}" y="{base + 12}" text-anchor="middle" '
                f"{TEXT}>{html.escape(name)}</text>"
            )
    return _svg(width, height, body, label)


def before_after_bars(
    before: Optional[float], after: Optional[float], label: str, unit: str, width: int = 360
) -> str:
    """Two horizontal bars: the rate before (since boot up to the baseline capture) and
    between the two captures."""
    height, left, right = 40, 130, 90
    plot = width - left - right
    top = max(before or 0.0, after or 0.0)
    body = []
    rows = (
        ("since boot to baseline", before, BEFORE_FILL),
        ("between captures", after, SPARK_FILL),
    )
    for i, (name, v, fill) in enumerate(rows):
        y = 4 + i * 18
        body.append(f'<text x="0" y="{y + 10}" {TEXT}>{name}</text>')
        if v is not None and v > 0 and top > 0:
            body.append(
                f'<rect x="{left}" y="{y}" width="{max(1.0, v / top * plot):.1f}" height="13" '
                f'fill="{fill}"/>'
            )
        shown = "-" if v is None else f"{_num(v)}{html.escape(unit)}"
        body.append(f'<text x="{left + plot + 4}" y="{y + 10}" {TEXT}>{shown}</text>')
    return _svg(width, height, body, label)
