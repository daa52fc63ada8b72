"""The pictures of a report: per-second series from the window's ticks, before/after rates
between two captures, per-CPU and per-queue charts where their rules fire; HTML draws them
as inline SVG and loads nothing from anywhere, Markdown keeps tables only, JSON carries the
numbers. Reports come from the real pipeline (tests/unit/diagnose/reports.py)."""

from __future__ import annotations

import json
import pathlib
import re

from lbtune.diagnose.render import render_html, render_json, render_markdown
from lbtune.diagnose.svg import SPARK_FILL
from lbtune.diagnose.view import report_view
from lbtune.observe.counters import NIC_QUEUE, SOFTNET, CounterRef
from tests.unit.diagnose.reports import MOVES, baseline_report, live_report

DROPS = CounterRef(SOFTNET, (1, "dropped"))
QUEUE = CounterRef(NIC_QUEUE, ("ens3", "rx", 2, "drops"))


def test_series_are_the_counters_second_by_second(tmp_path: pathlib.Path) -> None:
    r = live_report(tmp_path)
    assert r.mode == "live" and r.seconds == 4.0
    s = r.series[DROPS]
    assert s.values == tuple(MOVES[k][0] for k in (1, 2, 3, 4)) == (0, 40, 10, 0)
    assert s.ends == (1.0, 2.0, 3.0, 4.0) and s.seconds == (1.0, 1.0, 1.0, 1.0)
    assert r.series[QUEUE].values == (0, 12, 3, 0)
    counts = {f.rule: f.count for f in r.findings}
    # the series add up to the finding's count over the whole window
    assert counts["cpu-backlog-drop"] == sum(v or 0 for v in s.values) == 50
    assert counts["nic-rx-drop"] == 15
    view = report_view(r)
    ev = [e for f in view.findings for e in f.evidence if e.series is not None]
    assert [e.spark for e in ev] == ["▁█▃▁", "▁█▃▁"]  # 10 of 40 and 3 of 12: a quarter


def test_charts_only_where_their_rules_fire(tmp_path: pathlib.Path) -> None:
    view = report_view(live_report(tmp_path))
    charts = {c.title: c for c in view.charts}
    drops = charts["softnet dropped per CPU (input backlog full)"]
    assert [(b.label, b.value, b.highlight) for b in drops.bars] == [
        ("cpu 0", 0, False), ("cpu 1", 50, True), ("cpu 2", 0, False), ("cpu 3", 0, False)
    ]  # fmt: skip
    assert "softnet time squeeze per CPU" not in charts  # no time-squeeze finding
    q = charts["ens3 rx drops per queue"]
    assert [(b.label, b.value) for b in q.bars] == [("q0", 0), ("q1", 0), ("q2", 15), ("q3", 0)]
    pkts = charts["ens3 rx packets per queue"]
    assert [b.value for b in pkts.bars] == [5000, 0, 20000, 0]


def test_html_draws_inline_svg_and_loads_nothing(tmp_path: pathlib.Path) -> None:
    out = render_html(report_view(live_report(tmp_path)))
    # a sparkline for each evidence line with a series, and the four charts
    assert out.count(f'fill="{SPARK_FILL}"') == 4  # two series x two non-zero ticks
    assert out.count("<svg ") == 2 + 4
    # mailed and opened offline: no script, no font, no stylesheet, no image from elsewhere
    lowered = out.lower()
    for bad in ("<script", "<link", "@import", "url(", "src=", "href=", "@font-face"):
        assert bad not in lowered, bad
    assert re.findall(r"https?://[^\"' ]+", out) == ["http://www.w3.org/2000/svg"] * 6


def test_markdown_keeps_tables_only(tmp_path: pathlib.Path) -> None:
    md = render_markdown(report_view(live_report(tmp_path)))
    assert "<svg" not in md and "![" not in md and "▁" not in md
    table = md[md.index("| softnet dropped per CPU (input backlog full) | packets |") :]
    # one row per CPU with a count (or named by a finding)
    assert table.splitlines()[1:4] == ["|---|---:|", "| cpu 1 | 50 |", ""]


def test_json_carries_the_series(tmp_path: pathlib.Path) -> None:
    doc = json.loads(render_json(report_view(live_report(tmp_path))))
    ev = {e["counter"]: e for f in doc["findings"] for e in f["evidence"]}
    s = ev["softnet[cpu1].dropped"]["series"]
    assert s == {"ends": [1.0, 2.0, 3.0, 4.0], "seconds": [1.0] * 4, "values": [0, 40, 10, 0]}


def test_baseline_compares_before_and_between_the_captures(tmp_path: pathlib.Path) -> None:
    r = baseline_report(tmp_path)
    assert r.mode == "captures" and r.series == {}  # two samples: no ticks
    q = r.before_after[QUEUE]
    assert (q.before, q.after, q.after_seconds) == (37, 1000, 600.0)
    assert q.after_rate is not None and abs(q.after_rate - 1000 / 600) < 1e-9
    assert q.before_rate is not None and q.before_rate < 0.001  # 37 since boot (23 days)
    view = report_view(r)
    out = render_html(view)
    assert "since boot to baseline" in out and "between captures" in out
    md = render_markdown(view)
    assert "before: 0.00/s since boot to the baseline capture" in md
    titles = {c.title for c in view.charts}
    assert "softnet dropped per CPU (input backlog full)" in titles
