"""Panel text as plain lines of styled spans: the layout the monitor redraws every second.

A panel is a list of `Line`s, each a tuple of (text, style) spans, laid out for a given width
by the small helpers here: `Grid` (columns sized to their widest cell, the spare width shared
out in proportion, as rich's expanding tables do) and `wrap` (at spaces). Lines are plain
tuples, so the widget compares a new frame's lines with the shown ones and redraws only the
lines that changed, with no rich renderable measured and rendered again every second (a
profile put two thirds of the monitor's CPU there). No textual here: `tui/app.py` turns lines
into strips.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Optional, Sequence

Span = tuple[str, str]  # (text, rich style string; "" for none)
Line = tuple[Span, ...]
HEADER = "bold"
ELLIPSIS = "…"


def line(*spans: Span) -> Line:
    """A line of spans, empty ones dropped."""
    return tuple(s for s in spans if s[0])


def text(value: str, style: str = "") -> list[Line]:
    """Text that may hold newlines, one line per text line."""
    return [((row, style),) if row else () for row in value.split("\n")]


def plain(ln: Line) -> str:
    return "".join(t for t, _ in ln)


def fit(value: str, width: int, right: bool = False, cut: str = ELLIPSIS) -> str:
    """`value` padded to `width` cells (left or right aligned), cut (marked with `cut`) if
    longer. Cells are characters: panel text is ASCII plus single-cell block characters."""
    if len(value) > width:
        return value[: max(0, width - len(cut))] + cut[:width]
    return value.rjust(width) if right else value.ljust(width)


def share(extra: int, weights: Sequence[int]) -> list[int]:
    """`extra` cells shared out in proportion to `weights` (rounded up in turn, so the
    parts add up to `extra`)."""
    total = sum(weights)
    out = []
    for w in weights:
        part = -(-w * extra // total) if total > 0 else extra
        out.append(part)
        extra -= part
        total -= w
    return out


@dataclass
class Grid:
    """A table without borders: a bold header row, one space of padding either side of every
    cell but the outer edges, columns as wide as their widest cell; spare width is shared out
    in proportion to the columns' widths. A grid too wide first narrows the `squeeze`
    columns (bars: cut without a mark), then leaves out the `optional` columns (in their
    order), then cuts the `cut` columns (with an ellipsis). The first column (what the row
    is: a port, a CPU, a cause) and numbers are never cut while anything else can give: only
    a panel narrower than all of that cuts the widest of them."""

    columns: Sequence[str]
    right: frozenset[str] = frozenset()
    squeeze: frozenset[str] = frozenset()
    optional: Sequence[str] = ()
    cut: frozenset[str] = frozenset()
    rows: list[tuple[Span, ...]] = field(default_factory=list)

    def add(self, *cells: Span) -> None:
        self.rows.append(cells)

    def lines(self, width: int) -> list[Line]:
        shown = list(range(len(self.columns)))
        widths = [len(c) for c in self.columns]
        for row in self.rows:
            for i, (value, _style) in enumerate(row):
                if len(value) > widths[i]:
                    widths[i] = len(value)

        def pads() -> list[int]:
            last = len(shown) - 1
            return [(0 if k == 0 else 1) + (0 if k == last else 1) for k in range(len(shown))]

        def need() -> int:
            squeezed = sum(widths[i] - 1 for i in shown if self.columns[i] in self.squeeze)
            return sum(widths[i] for i in shown) + sum(pads()) - squeezed

        for name in self.optional:
            if need() <= width:
                break
            if name in self.columns and len(shown) > 1:
                shown.remove(self.columns.index(name))
        pad = pads()
        outer = [widths[i] + p for i, p in zip(shown, pad)]
        spare = width - sum(outer)
        if spare > 0:
            outer = [w + x for w, x in zip(outer, share(spare, outer))]
        names = [self.columns[i] for i in shown]
        for k, c in enumerate(names):
            if spare < 0 and c in self.squeeze:
                give = min(-spare, outer[k] - pad[k] - 1)
                outer[k] -= give
                spare += give
        rest = [c for c in names[1:] if c not in self.right]
        for allowed in (set(self.cut), set(rest), set(names[1:]), set(names)):
            while spare < 0:  # the widest column that may give gives a cell at a time
                able = [k for k in range(len(names))
                        if names[k] in allowed and outer[k] > pad[k] + 1]  # fmt: skip
                if not able:
                    break
                k = max(able, key=lambda x: outer[x])
                outer[k] -= 1
                spare += 1
        inner = tuple(w - p for w, p in zip(outer, pad))
        align = tuple(c in self.right for c in names)
        cuts = tuple("" if c in self.squeeze else ELLIPSIS for c in names)
        header = tuple((c, HEADER) for c in names)
        rows = [tuple(row[i] for i in shown) for row in self.rows]
        return [_row(cells, inner, align, cuts) for cells in (header, *rows)]


@lru_cache(maxsize=2048)
def _row(
    cells: tuple[Span, ...], inner: tuple[int, ...], align: tuple[bool, ...], cuts: tuple[str, ...]
) -> Line:
    """A grid row laid out: cached, since most rows of a panel are the same as a second ago
    (and the same line object then compares equal at once)."""
    out: list[Span] = []
    gap = ""
    for (value, style), w, right, cut in zip(cells, inner, align, cuts):
        cell = fit(value, w, right, cut)
        if not style:
            out.append((gap + cell, ""))
        else:
            # Padding carries no style, so underlines and reverse stay on the text.
            body = cell.strip(" ")
            lead = len(cell) - len(cell.lstrip(" "))
            out.append((gap + " " * lead, ""))
            out.append((body, style))
            out.append((" " * (len(cell) - lead - len(body)), ""))
        gap = "  "
    return _merge(out)


def _merge(spans: Iterable[Span]) -> Line:
    """Adjacent spans of one style joined, empty ones dropped."""
    out: list[Span] = []
    for t, s in spans:
        if not t:
            continue
        if out and out[-1][1] == s:
            out[-1] = (out[-1][0] + t, s)
        else:
            out.append((t, s))
    return tuple(out)


def wrap(ln: Line, width: int, indent: int = 0) -> list[Line]:
    """One line broken at spaces into lines of at most `width` cells (a word longer than
    that is cut into pieces); the space a line breaks at is dropped, as rich does. Lines
    after the first start with `indent` spaces (a hanging indent), if that leaves room."""
    if width <= 0 or sum(len(t) for t, _ in ln) <= width:
        return [ln]
    if indent >= width // 2:
        indent = 0
    chars = [(ch, style) for t, style in ln for ch in t]
    out: list[Line] = []
    start = 0
    hang: Line = ((" " * indent, ""),) if indent else ()
    while start < len(chars):
        room = width if not out else width - indent
        lead = () if not out else hang
        end = start + room
        if end >= len(chars):
            out.append(lead + _merge(chars[start:]))
            break
        cut: Optional[int] = None
        for k in range(end, start, -1):
            if chars[k][0] == " ":
                cut = k
                break
        if cut is None:  # one long word
            out.append(lead + _merge(chars[start:end]))
            start = end
            continue
        out.append(lead + _merge(chars[start:cut]))
        start = cut + 1
    return out


def wrap_all(lines: Iterable[Line], width: int, indent: int = 0) -> list[Line]:
    return [part for ln in lines for part in wrap(ln, width, indent)]
