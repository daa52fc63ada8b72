"""The HTML report in a real browser: Debian's chromium renders it to PNG, offline.

The page must not be blank (many non-white pixels, many colours: text, tables, pictures),
the sparklines must have drawn their bars (pixels of exactly the sparkline colour, about
as many as their bars cover), and the per-CPU/per-queue charts theirs (the highlighted CPU
and queue bars, the others). With --baseline, the "between captures" bars are drawn.
"""

from __future__ import annotations

import pathlib

import pytest

from lbtune.diagnose.render import render_html
from lbtune.diagnose.svg import BAR_FILL, HIGHLIGHT_FILL, SPARK_FILL
from lbtune.diagnose.view import report_view
from tests.browser import CHROMIUM, Image, decode_png, screenshot
from tests.unit.diagnose.reports import baseline_report, live_report

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make setup)")

WHITE = (255, 255, 255)


def rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def shot(tmp_path: pathlib.Path, html: str, name: str) -> Image:
    page = tmp_path / f"{name}.html"
    page.write_text(html)
    png = tmp_path / f"{name}.png"
    screenshot(page, png, width=1100, height=1500)
    return decode_png(png.read_bytes())


def assert_not_blank(img: Image) -> None:
    colours = img.colours()
    total = img.width * img.height
    assert (img.width, img.height) == (1100, 1500)
    assert total - colours.get(WHITE, 0) > 0.03 * total, "the page is (nearly) blank"
    assert len(colours) > 50, f"only {len(colours)} colours: nothing rendered"


def test_live_report_renders_with_sparklines_and_charts(tmp_path: pathlib.Path) -> None:
    img = shot(tmp_path, render_html(report_view(live_report(tmp_path))), "live")
    assert_not_blank(img)
    # two series with two non-zero ticks each: each bar is about 40 x 8..30 px
    spark = img.count(rgb(SPARK_FILL))
    assert spark > 4 * 40 * 6, f"sparkline bars: {spark} pixels"
    # the charts: CPU 1 and queue 2 highlighted, the other bars in the chart colour
    assert img.count(rgb(HIGHLIGHT_FILL)) > 500
    assert img.count(rgb(BAR_FILL)) > 100


def test_baseline_report_renders_before_and_after(tmp_path: pathlib.Path) -> None:
    img = shot(tmp_path, render_html(report_view(baseline_report(tmp_path))), "baseline")
    assert_not_blank(img)
    # the first finding's "between captures" bar (the sparkline colour): the full bar width
    # (140 px) by 13 px; the second finding's is below the screenshot's fold
    assert img.count(rgb(SPARK_FILL)) > 100 * 10
