"""The monitor's compositor (lbtune.tui.compositor.BandCompositor) draws what Textual's own
would: on every partial update of a scripted run (frames that change a few lines in both
columns, a frame that adds lines, a narrow terminal that scrolls, the help screen over it),
the same changed regions are rendered again with Textual's stock `_get_renders` and every
span the update writes must be the same bytes for the terminal, and the updates must have
been partial ones with a crop smaller than the screen (the case the compositor exists for).
It renders only the widgets in front of each changed region, so the pieces of a row outside
the changed spans (never written) are not compared."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region

from lbtune.tui.app import MonitorApp
from lbtune.tui.compositor import BandCompositor, band_compositor_fits
from tests.conftest import DELL, KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick

pytestmark = pytest.mark.skipif(not band_compositor_fits(),
                                reason="another Textual than the band compositor was checked"
                                       " against: the monitor uses Textual's own")  # fmt: skip


# A cursor move that nothing is written after (Textual moves to a piece that starts where a
# span ends and writes none of it): no cell changes, so it is left out of the comparison.
_IDLE_MOVE = re.compile(r"\x1b\[\d+;\d+H(?=\x1b\[\d+;\d+H|$)")


def _watch(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, int]]:
    """Each partial update's crop and the number of rows it writes, after checking that it
    writes to the terminal exactly what Textual's own compositor writes for the same
    changed regions."""
    seen: list[tuple[Any, int]] = []
    real = BandCompositor.render_partial_update
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor")

    def checked(self: BandCompositor) -> Any:
        regions = set(self._dirty_regions)
        ours = real(self)
        if regions:
            self._dirty_regions.update(regions)
            stock = Compositor.render_partial_update(self)  # Textual's own _get_renders
            assert ours is not None and stock is not None
            assert ours.spans == stock.spans
            for y, x1, x2 in ours.spans:
                mine, theirs = (ChopsUpdate([u.chops[y]], [(0, x1, x2)], [u.chop_ends[y]])
                                .render_segments(console) for u in (ours, stock))  # fmt: skip
                assert _IDLE_MOVE.sub("", mine) == _IDLE_MOVE.sub("", theirs), (
                    f"row {y} is written otherwise than by Textual's own")
            crop = Region.from_union(list(regions)).intersection(self.size.region)
            seen.append((crop, len({y for y, _, _ in ours.spans})))
        return ours

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


def test_changed_lines_of_the_same_columns_on_touching_rows_are_joined():
    from textual.geometry import Region

    from lbtune.tui.compositor import _joined

    lines = [Region(80, y, 78, 1) for y in (9, 5, 6, 7)]  # a panel's changed lines
    others = [Region(2, 5, 76, 1), Region(80, 12, 78, 1), Region(80, 6, 40, 2)]
    assert _joined(lines + others) == [
        Region(2, 5, 76, 1),  # another panel's line: its own
        Region(80, 6, 40, 2),  # other columns: its own
        Region(80, 5, 78, 3),  # rows 5, 6, 7
        Region(80, 9, 78, 1),  # row 9: not touching row 7's
        Region(80, 12, 78, 1),
    ]
    assert _joined([Region(0, 0, 10, 3), Region(0, 1, 10, 1)]) == [Region(0, 0, 10, 3)]
    assert _joined([]) == []
