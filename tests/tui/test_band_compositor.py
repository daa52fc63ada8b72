"""The monitor's compositor (lbtune.tui.compositor.BandCompositor) draws what Textual's own
would: on every partial update of a scripted run (frames that change a few lines in both
columns, a frame that adds lines, a narrow terminal that scrolls, the help screen over it),
the rows the update writes are rendered again with Textual's stock `_get_renders` and the
two sets of strips must be equal, and the updates must have been partial ones with a crop
smaller than the screen (the case the band exists for)."""

from __future__ import annotations

from typing import Any

import pytest
from textual._compositor import Compositor

from lbtune.tui.app import MonitorApp
from lbtune.tui.compositor import BandCompositor, band_compositor_fits
from tests.conftest import DELL, KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick

pytestmark = pytest.mark.skipif(not band_compositor_fits(),
                                reason="another Textual than the band compositor was checked"
                                       " against: the monitor uses Textual's own")  # fmt: skip


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """Each partial update's crop and the number of rows compared with the stock render."""
    seen: list[tuple[Any, int]] = []
    real = BandCompositor.render_partial_update

    def checked(self: BandCompositor) -> Any:
        regions = set(self._dirty_regions)
        if regions:
            from textual.geometry import Region

            crop = Region.from_union(list(regions)).intersection(self.size.region)
            rows = {y for y, _, _ in self._regions_to_spans(regions)}
            ours = self._render_chops(crop, rows.__contains__)
            saved, self._get_renders = self._get_renders, lambda c=None: Compositor._get_renders(self, c)  # type: ignore[method-assign]  # noqa: E501
            try:
                stock = self._render_chops(crop, rows.__contains__)
            finally:
                self._get_renders = saved  # type: ignore[method-assign]
            for y in sorted(rows):
                assert ours[y] == stock[y], f"row {y} differs from Textual's own render"
            seen.append((crop, len(rows)))
        return real(self)

    monkeypatch.setattr(BandCompositor, "render_partial_update", checked)
    return seen


async def _run(name: str, size: tuple[int, int], steps: list[dict[str, Any]],
               seen: list[tuple[Any, int]]) -> MonitorApp:  # fmt: skip
    script = Script(name)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    async with app.run_test(size=size) as pilot:
        assert isinstance(app.screen._compositor, BandCompositor)
        for i, step in enumerate(steps):
            feed.push(tick(script.step(**step)))
            for _ in range(200):
                if app.frames == i + 1:
                    break
                await pilot.pause(0.02)
            await pilot.pause(0.1)  # the screen's update timer runs
        await pilot.press("question_mark")  # a screen over it, then back
        await pilot.pause(0.1)
        await pilot.press("escape")
        await pilot.pause(0.1)
    return app


STEPS = [
    {},
    {"snmp": {"TcpExt.ListenOverflows": 50, "TcpExt.ListenDrops": 50},
     "softnet": {1: (90000, 120, 40)}, "net_rx": {1: 3000},
     "queues": {("ens3", "rx", 2): 90000, ("ens3", "rx", 0): 1000}, "listen": {80: (511, 50)},
     "conntrack": 60000},
    {"snmp": {"TcpExt.ListenOverflows": 20, "TcpExt.ListenDrops": 20}, "net_rx": {0: 500}},
    {"softnet": {0: (5000, 3, 0)}, "conntrack": 100},
]  # fmt: skip


@pytest.mark.parametrize("name,size", [(KVM, (140, 48)), (KVM, (90, 30)), (DELL, (160, 50))])
async def test_every_partial_update_draws_what_textuals_own_compositor_draws(
        monkeypatch: pytest.MonkeyPatch, name: str, size: tuple[int, int]) -> None:  # fmt: skip
    seen = _watch(monkeypatch)
    await _run(name, size, STEPS, seen)
    assert seen, "no partial update happened"
    assert sum(n for _, n in seen) > 0
    height = size[1]
    assert any(c.height < height for c, _ in seen), [c for c, _ in seen]
