"""One view model, four renderers, every data string escaped: an IPv6 object such as
`tcp [fd77::2]:9443` survives rich (where `[...]` is markup), Markdown and HTML intact, and
markup in data never becomes markup in the report."""

from __future__ import annotations

import html
import json
import re

import pytest

from lbtune.cli.diagnose import render_text
from lbtune.diagnose.finding import APPLICATION, Evidence, Finding, Fix, ProfileSetting
from lbtune.diagnose.render import md_code, md_text, render_html, render_json, render_markdown
from lbtune.diagnose.report import LIVE, Report
from lbtune.diagnose.view import COLUMNS, report_view
from lbtune.vocab import Level

V6 = "tcp [fd77::2]:9443"
HOSTILE = "[bold red]x[/] <script>alert(1)</script> | *em* `tick` _u_ &amp;"


def report(obj: str = V6, title: str = HOSTILE) -> Report:
    f = Finding(
        rule="accept-queue-overflow",
        title=title,
        level=Level.FAIL,
        object=obj,
        cause=f"cause with {HOSTILE} and {V6}",
        count=1234,
        unit="handshake packets",
        rate=12.5,
        evidence=(Evidence(f"sock_diag {obj} drops", 1234, 12.5, "sock_diag [x]"),),
        fixes=(
            Fix(
                knob=f"application listen() backlog on {obj}",
                current="2",
                desired="1024",
                settings=(
                    ProfileSetting(
                        ("sysctl",), "net.core.somaxconn", (("value", 4096),), f"why {HOSTILE}"
                    ),
                ),
                command="ss -tlnm 'sport = :9443' | cat",
                note=f"note {HOSTILE}",
                scope=APPLICATION,
            ),
        ),
    )
    return Report(
        hostname="<b>web-1</b>", kernel="6.18 [test]", netns=None, root="/", mode=LIVE,
        seconds=2.0, findings=(f,), missing={"conntrack": "not loaded [here]"},
    )  # fmt: skip


def test_text_shows_ipv6_objects_and_no_markup_is_interpreted(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "400")
    out = render_text(report_view(report()))
    assert out.count(V6) >= 3, out  # table, heading, cause (and the fix's knob)
    assert "[bold red]x[/]" in out  # shown as written, not applied
    assert "not loaded [here]" in out and "6.18 [test]" in out
    assert "1,234 handshake packets" in out and "fix: application listen() backlog" in out


def test_markdown_escapes_data_and_keeps_the_table_shape() -> None:
    md = render_markdown(report_view(report()))
    row = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    # a `|` in data is escaped, so the row still has one cell per column
    assert len(re.split(r"(?<!\\)\|", row)) - 2 == len(COLUMNS), row
    assert "`tcp [fd77::2]:9443`" in md  # literal in a code span
    # outside code spans (where CommonMark shows everything literally) markup is escaped
    outside = re.sub(r"(`+).*?\1", "", md)
    assert "<script>" not in outside and "\\<script\\>" in md
    assert "\\[bold red\\]" in md and "\\*em\\*" in md and "\\&amp;" in md
    assert "# lbtune diagnose: \\<b\\>web-1\\</b\\>" in md


def test_html_escapes_every_data_string() -> None:
    out = render_html(report_view(report()))
    assert "<script" not in out.lower() and "<b>web-1" not in out
    assert html.escape(V6) in out and "&lt;script&gt;" in out
    assert "&amp;amp;" in out  # data "&amp;" is text, not an entity
    # the findings table and the finding's evidence table: none made from data
    assert out.count("<table>") == 2 and "not loaded [here]" in out


def test_json_is_data_not_text() -> None:
    doc = json.loads(render_json(report_view(report())))
    f = doc["findings"][0]
    assert f["object"] == V6 and f["title"] == HOSTILE
    assert (f["level"], f["count"], f["unit"], f["rate"], f["gauge"]) == (
        "fail", 1234, "handshake packets", 12.5, False)  # fmt: skip
    fix = f["fixes"][0]
    assert set(fix) == {"knob", "current", "desired", "key", "profile", "command", "note", "scope"}
    assert fix["key"] == "sysctl.net.core.somaxconn"  # a profile key, as plan and lint say
    assert fix["profile"] == [
        'sysctl."net.core.somaxconn" = { value = 4096, reason = '
        + json.dumps(f"why {HOSTILE}")
        + " }"
    ]
    assert doc["summary"] == {"fail": 1, "warn": 0, "info": 0}


@pytest.mark.parametrize(
    ("text", "span"),
    [("a`b", "``a`b``"), ("`x`", "`` `x` ``"), ("a|b", "`a|b`"), ("", "`  `")],
)
def test_md_code_spans_cannot_be_closed_by_data(text: str, span: str) -> None:
    assert md_code(text) == span


def test_md_text_folds_lines() -> None:
    assert md_text("a\n# b") == "a \\# b"


def test_every_renderer_lays_out_the_same_view() -> None:
    """The table columns and the finding's count/rate text come from the view, once."""
    view = report_view(report(obj="cpu 3", title="plain"))
    f = view.findings[0]
    assert f.row == ("1", "fail", "cpu 3", "plain", "1,234 handshake packets", "12.50/s")
    for out in (render_markdown(view), render_html(view), render_text(view)):
        for cell in f.row[2:]:
            assert cell in out, (cell, out[:200])
