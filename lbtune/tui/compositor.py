"""A Textual compositor that renders only what an update writes.

On a partial update Textual's compositor asks every widget whose clip (its container's
visible area) crosses the band of rows around the changed regions for *all* its visible
lines in that band, then writes only the changed spans: with six panels, their boxes and
columns, the header, status line and footer, a tick that changes a dozen lines renders most
of the screen again from the widgets' caches, and that was the largest part of the
monitor's main thread (docs/monitor.md, bench/watch_profile.py). `BandCompositor` renders,
for each changed region, only the widgets in front of it down to the first that covers it
whole (a widget paints every cell of its region, so nothing behind that one shows there),
and each of those only for the rows of the changed regions it takes part in: a changed
line of a panel renders that line of that panel, not its box, its column or the screen.

What reaches the terminal is unchanged: Textual writes a changed span from the pieces
("chops") of its rows between the cuts (the widgets' edges), and a piece that touches a
changed region is the frontmost widget's there, which is rendered (tests/tui/
test_band_compositor.py compares the bytes with Textual's own compositor's).

Used only with the Textual versions it was checked against (the snapshot and pilot tests
in tests/tui run with the pinned one): another version gets Textual's own compositor.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Optional

import textual
from textual._compositor import Compositor
from textual.geometry import Region

# Versions whose Compositor._get_renders, render_partial_update and visible_widgets this
# was read against.
CHECKED = frozenset({"8.2.8"})


@lru_cache(maxsize=1)
def band_compositor_fits() -> bool:
    # cached: textual.__version__ reads the package's metadata on every access
    return getattr(textual, "__version__", "") in CHECKED


class BandCompositor(Compositor):
    # While a partial update renders: the widgets to render, each with the rows (a band
    # across the screen) it is needed for.
    _bands: Optional[dict[Any, Region]] = None
    _dirty: Optional[list[Region]] = None

    @property
    def visible_widgets(self) -> Any:
        widgets = super().visible_widgets
        bands = self._bands
        if bands is None:
            return widgets
        return {w: (region, clip.intersection(bands[w]))
                for w, (region, clip) in widgets.items() if w in bands}  # fmt: skip

    def render_partial_update(self) -> Any:
        self._dirty = list(self._dirty_regions)
        try:
            return super().render_partial_update()
        finally:
            self._dirty = None

    def _needed(self, dirty: list[Region]) -> dict[Any, Region]:
        """Per widget to render: the band of rows (the screen's width) of the changed
        regions it is in front of, down to the first that covers a region whole."""
        rows: dict[Any, tuple[int, int]] = {}
        order = [(w, region.intersection(clip))
                 for w, (region, clip) in super().visible_widgets.items()]  # fmt: skip
        for d in _joined(dirty):
            top, bottom = d.y, d.bottom
            for w, shown in order:
                if not shown.overlaps(d):
                    continue
                y0, y1 = max(top, shown.y), min(bottom, shown.bottom)
                had = rows.get(w)
                rows[w] = (y0, y1) if had is None else (min(had[0], y0), max(had[1], y1))
                if shown.contains_region(d):
                    break
        width = self.size.width
        return {w: Region(0, y0, width, y1 - y0) for w, (y0, y1) in rows.items()}

    def _get_renders(self, crop: Optional[Region] = None) -> Any:
        dirty = self._dirty
        if crop is None or not dirty:
            return super()._get_renders(crop)
        self._bands = self._needed(dirty)
        try:
            return list(super()._get_renders(crop))  # rendered while the bands hold
        finally:
            self._bands = None


def _joined(regions: list[Region]) -> list[Region]:
    """The regions with those of the same columns on touching rows joined: a panel's changed
    lines are a region each, and every widget in front of one is in front of the others
    (a widget in front of part of a joined region is found all the same)."""
    out: list[Region] = []
    for r in sorted(regions, key=lambda r: (r.x, r.width, r.y)):
        last = out[-1] if out else None
        if last is not None and (last.x, last.width) == (r.x, r.width) and r.y <= last.bottom:
            out[-1] = Region(last.x, last.y, last.width, max(last.bottom, r.bottom) - last.y)
        else:
            out.append(r)
    return out
