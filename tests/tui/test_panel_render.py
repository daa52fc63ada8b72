"""A panel draws its lines without Textual's styles cache (`PanelView.render_lines`): the
strips must be those the styles cache makes of the same widget (the content lines with the
app's line filters), for every row and for a crop of a few columns, in a scripted run with
frames that change lines, a focused (highlighted) panel box and a narrow terminal; and a
panel whose style is no longer plain (a border, padding, opacity) is drawn by Textual.

A panel makes its lines again only when what its draw function reads (its key) changed:
after every frame the lines shown must be those a new draw makes, and a panel whose part of
the frames holds still is not drawn again."""

from __future__ import annotations

from typing import Any

import pytest
from textual._styles_cache import StylesCache
from textual.geometry import Region
from textual.widget import Widget

from lbtune.tui.app import MonitorApp, PanelView
from tests.conftest import DELL, KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick
from tests.tui.test_band_compositor import STEPS as BAND_STEPS

# the band compositor's scripted steps: an idle tick, a burst of drops, then a calmer one
STEPS = BAND_STEPS[:3]


def _textuals(panel: PanelView, crop: Region) -> list[Any]:
    """What Textual's own styles cache draws of `crop` (a new cache: nothing kept)."""
    return [list(s) for s in StylesCache().render_widget(panel, crop)]


def _check(app: MonitorApp) -> int:
    compared = 0
    for panel in app.query(PanelView):
        size = panel.size
        if not size.height or not size.width:
            continue
        assert panel._is_plain()
        assert app.frame is not None
        assert panel._lines == panel.draw(app.frame, app, size.width), f"{panel.id} is stale"
        full = size.region
        ours = [list(s) for s in panel.render_lines(full)]
        assert ours == _textuals(panel, full), f"{panel.id} drawn otherwise than by Textual"
        part = Region(2, 0, max(1, size.width // 3), min(3, size.height))
        assert [list(s) for s in panel.render_lines(part)] == _textuals(panel, part)
        compared += size.height
    return compared


async def _frames(app: MonitorApp, feed: ScriptedFeed, script: Script, pilot: Any) -> int:
    compared = 0
    for step in STEPS:
        await _step(app, feed, script, pilot, step)
        compared += _check(app)
    return compared


async def _step(app: MonitorApp, feed: ScriptedFeed, script: Script, pilot: Any,
                step: dict[str, Any]) -> None:
    """One scripted tick, and wait until the app has made its frame."""
    want = app.frames + 1
    feed.push(tick(script.step(**step)))
    for _ in range(200):
        if app.frames == want:
            break
        await pilot.pause(0.02)
    await pilot.pause(0.1)


@pytest.mark.parametrize("name,size", [(KVM, (140, 48)), (KVM, (90, 30)), (DELL, (160, 50))])
async def test_panels_draw_what_textuals_styles_cache_draws(
    name: str, size: tuple[int, int]
) -> None:
    script = Script(name)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    async with app.run_test(size=size) as pilot:
        compared = await _frames(app, feed, script, pilot)
        await pilot.press("tab")  # a focused box: its colours change around the panel
        await pilot.pause(0.1)
        compared += _check(app)
        app.theme = "textual-light"  # every colour changes
        await pilot.pause(0.2)
        compared += _check(app)
    assert compared > 20


async def test_a_panel_that_is_not_plain_is_drawn_by_textual(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    script = Script(KVM)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    called: list[str] = []
    real = Widget.render_lines

    def textual(self: Widget, crop: Region) -> Any:
        called.append(str(self.id))
        return real(self, crop)

    monkeypatch.setattr(Widget, "render_lines", textual)
    async with app.run_test(size=(140, 48)) as pilot:
        await _frames(app, feed, script, pilot)
        panel = app.query_one("#drops", PanelView)
        called.clear()
        full = panel.size.region
        panel.render_lines(full)
        assert called == []  # plain: drawn here
        panel.styles.padding = (0, 1)
        await pilot.pause(0.1)
        assert not panel._is_plain()
        full = panel.size.region
        assert [list(s) for s in panel.render_lines(full)] == _textuals(panel, full)
        assert "drops" in called


async def test_a_panel_whose_part_of_the_frame_holds_still_is_not_drawn_again() -> None:
    script = Script(KVM)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    drawn: dict[str, int] = {}
    async with app.run_test(size=(140, 48)) as pilot:
        for panel in app.query(PanelView):
            real = panel.draw

            def counted(f: Any, a: Any, w: int, real: Any = real, name: str = str(panel.id)) -> Any:
                drawn[name] = drawn.get(name, 0) + 1
                return real(f, a, w)

            panel.draw = counted
        steps = [{}, {"conntrack": 100}, {}, {}]
        for step in steps:
            await _step(app, feed, script, pilot, step)
            _check(app)
        before = dict(drawn)
        feed.push(tick(script.step()))  # the same as the last: nothing but the history moves
        for _ in range(200):
            if app.frames == len(steps) + 1:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.1)
        assert drawn["listen"] == before["listen"]
        assert drawn["conntrack"] == before["conntrack"]
        assert drawn["drops"] == before["drops"] + 1  # its history grows every frame
        _check(app)  # (draws each panel once more)
        before = dict(drawn)
        await pilot.press("c")  # condensed: every panel's key changes
        await pilot.pause(0.1)
        assert all(drawn[name] > before[name] for name in ("listen", "conntrack", "cpus"))
        _check(app)


@pytest.mark.parametrize(
    "spans, width",
    [
        ((("cpu 3", ""), ("  12.5k", "bold red")), 40),  # short: padded with the base style
        ((("x" * 20, ""), ("y" * 20, "green")), 40),  # exactly the width
        ((("x" * 30, ""), ("y" * 30, "green")), 40),  # longer: cropped inside a span
        ((("漢字テスト", "bold"), ("→ ▁▂▃", "")), 9),  # wide cells: cropped mid-character
        ((), 12),  # an empty line
    ],
)
def test_a_lines_strip_is_the_one_textuals_extend_and_crop_make(spans, width):
    from rich.segment import Segment
    from rich.style import Style
    from textual.strip import Strip

    from lbtune.tui.app import line_strip

    base = Style.parse("white on #101010")
    segments = [Segment(t, base + Style.parse(s) if s else base) for t, s in spans]
    textual = Strip(segments).extend_cell_length(width, base).crop(0, width)
    ours = line_strip(spans, base, width)
    assert list(ours) == list(textual) and ours.cell_length == textual.cell_length == width
