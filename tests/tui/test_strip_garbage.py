"""A panel line's strip is freed by reference counting when a new frame replaces it.

Textual's `Strip.divide` at a strip's own end answers `[self]` and keeps that list in the
strip's own cache: a reference cycle. Every line the compositor drew that way stayed in
memory, with its caches, until the garbage collector found it, and counted towards setting
the collector off: on a 48-CPU replay most of the monitor's collections. The panels hand
the compositor `WholeStrip`s, whose division at their end keeps nothing."""

from __future__ import annotations

import gc
import random
import sys
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from lbtune.tui.app import MonitorApp, PanelView, WholeStrip
from tests.conftest import DELL
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed
from tests.tui.test_panel_render import STEPS, _step


def test_a_whole_strip_divided_at_its_end_is_itself_and_keeps_no_reference() -> None:
    segments = [Segment("cpu 3 ", Style(bold=True)), Segment("12.5k", None)]
    ours, textuals = WholeStrip(segments, 11), Strip(segments, 11)
    held = sys.getrefcount(ours), sys.getrefcount(textuals)
    assert ours.divide([11]) == [ours] and ours.divide([11, 40]) == [ours]
    assert textuals.divide([11]) == [textuals]
    assert sys.getrefcount(ours) == held[0]  # nothing kept: freed when dropped
    assert sys.getrefcount(textuals) == held[1] + 1  # (Textual's: a cycle through its cache)


def test_every_other_division_is_textuals() -> None:
    rng = random.Random(7)  # noqa: S311 (test data)
    for _ in range(300):
        segments = [Segment("x" * rng.randint(1, 6), Style(bold=rng.random() < 0.5))
                    for _ in range(rng.randint(1, 6))]  # fmt: skip
        length = sum(len(s.text) for s in segments)
        cuts = sorted(rng.sample(range(1, length + 4), rng.randint(1, min(4, length + 3))))
        ours, textuals = WholeStrip(segments, length), Strip(segments, length)
        assert [list(s) for s in ours.divide(cuts)] == [list(s) for s in textuals.divide(cuts)]


async def test_a_replaced_line_is_not_left_for_the_garbage_collector() -> None:
    script = Script(DELL)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    widths: set[int] = set()
    async with app.run_test(size=(160, 50)) as pilot:
        await _step(app, feed, script, pilot, STEPS[0])
        widths = {p.size.width for p in app.query(PanelView)}
        gc.collect()
        gc.disable()
        try:
            for step in [*STEPS, *STEPS]:
                await _step(app, feed, script, pilot, step)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            strips: list[Any] = [o for o in gc.garbage if isinstance(o, Strip)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
    assert app.frames == 1 + 2 * len(STEPS)
    lines = [s for s in strips if s.cell_length in widths]
    assert lines == [], f"{len(lines)} panel lines left for the collector"
