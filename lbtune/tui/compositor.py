"""A Textual compositor that renders only the rows an update needs.

On a partial update Textual's compositor asks every widget whose clip (its container's
visible area) crosses the changed rows for *all* its visible lines, then keeps only the
changed rows: with six panels, their containers, the header, status line and footer, a
tick that changes a dozen lines renders the whole screen again from the widgets' caches,
and that was the largest part of the monitor's main thread (docs/monitor.md, bench/
watch_profile.py). `BandCompositor` narrows each clip to the band of rows the update
covers (the whole screen's width, so the cuts of a line are untouched) while the update is
rendered: a widget renders those rows only.

Used only with the Textual versions it was checked against (the snapshot and pilot tests
in tests/tui run with the pinned one): another version gets Textual's own compositor.
"""

from __future__ import annotations

from typing import Any, Optional

import textual
from textual._compositor import Compositor
from textual.geometry import Region

# Versions whose Compositor._get_renders and visible_widgets this was read against.
CHECKED = frozenset({"8.2.8"})


def band_compositor_fits() -> bool:
    return getattr(textual, "__version__", "") in CHECKED


class BandCompositor(Compositor):
    _band: Optional[Region] = None

    @property
    def visible_widgets(self) -> Any:
        widgets = super().visible_widgets
        band = self._band
        if band is None:
            return widgets
        return {w: (region, clip.intersection(band))
                for w, (region, clip) in widgets.items() if clip.overlaps(band)}  # fmt: skip

    def _get_renders(self, crop: Optional[Region] = None) -> Any:
        if crop is None:
            return super()._get_renders(crop)
        self._band = Region(0, crop.y, self.size.width, crop.height)
        try:
            return list(super()._get_renders(crop))  # rendered while the band holds
        finally:
            self._band = None
