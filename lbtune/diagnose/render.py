"""Renderers of a report view that need no UI library: JSON, Markdown and HTML.

Each lays out the same `ReportView` and escapes every data string for its format: Markdown
backslash-escapes the characters that start inline markup and writes code spans with a fence
no data can close (table cells also escape `|`); HTML escapes everything with html.escape.
The terminal renderer (rich) is `lbtune.cli.diagnose`.

HTML draws the pictures as inline SVG (`lbtune.diagnose.svg`): a sparkline of each evidence
counter per second over the window, bars before and between two captures, and the per-CPU
and per-queue bar charts. Markdown pastes into tickets: tables only, no pictures.
"""

from __future__ import annotations

import html
import json
import re

from lbtune.diagnose import svg
from lbtune.diagnose.view import (
    COLUMNS,
    DROP_COLUMNS,
    DROPS_HEADING,
    NO_FINDINGS,
    EvidenceView,
    ReportView,
    before_text,
    ticks_text,
)

_MD_INLINE = re.compile(r"([\\`*_\[\]<>|~&#!])")
_BACKTICKS = re.compile(r"`+")


def md_text(text: str) -> str:
    """`text` as literal Markdown (CommonMark lets any ASCII punctuation be escaped)."""
    return _MD_INLINE.sub(r"\\\1", " ".join(text.splitlines()))


def md_code(text: str, in_table: bool = False) -> str:
    """`text` as a literal code span. Inside a GFM table cell a `|` still ends the cell,
    even in a code span, so it is escaped there."""
    text = " ".join(text.splitlines())
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    out = f"{fence}{pad}{text}{pad}{fence}"
    return out.replace("|", "\\|") if in_table else out


def render_json(view: ReportView) -> str:
    return json.dumps(view.document(), indent=2) + "\n"


def render_markdown(view: ReportView) -> str:
    lines = [f"# {md_text(view.heading)}", ""]
    lines += [f"- {label}: {md_text(value)}" for label, value in view.facts]
    lines += [f"- findings: {view.summary}", ""]
    if not view.findings:
        lines += [NO_FINDINGS, ""]
    else:
        lines.append("| " + " | ".join(COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        for f in view.findings:
            cells = [md_text(c) for c in f.row]
            cells[2] = md_code(f.object, in_table=True)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        for chart in view.charts:  # the rows with a count (or a finding's CPU or queue)
            lines += [f"| {md_text(chart.title)} | {md_text(chart.unit)} |", "|---|---:|"]
            lines += [
                f"| {md_text(b.label)} | {b.value:,} |"
                for b in chart.bars
                if b.value or b.highlight
            ]
            lines.append("")
        for f in view.findings:
            lines += [
                f"## {f.number}. {md_text(f.title)}",
                "",
                f"**{md_text(f.rule)}** ({f.level}) on {md_code(f.object)}: {md_text(f.cause)}",
                "",
                "Evidence:",
            ]
            for e in f.evidence:
                lines.append(
                    f"- {md_code(e.counter)} = {e.value} ({md_text(e.rate)}) from "
                    f"{md_text(e.source)}{md_text(before_text(e))}"
                )
            lines += ["", "Fix:"]
            for fx in f.fixes:
                lines.append(f"- {md_text(fx.summary)} ({fx.scope})")
                for label, text in fx.details:
                    shown = f"{label}: {md_code(text)}" if label else md_text(text)
                    lines.append(f"  - {shown}")
            lines.append("")
    if view.drops:
        lines += [f"## {DROPS_HEADING}", "", "| " + " | ".join(DROP_COLUMNS) + " |"]
        lines += ["|" + "---|" * len(DROP_COLUMNS)]
        lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in view.drops] + [""]
    if view.not_read:
        lines += ["## Not read", ""]
        lines += [f"- {md_text(k)}: {md_text(v)}" for k, v in view.not_read]
        lines.append("")
    return "\n".join(lines)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}"
    "td.n{text-align:right}"
    ".fail{color:#b00020;font-weight:bold}.warn{color:#a65e00}.info{color:#555}"
    "code{background:#f4f4f4;padding:0 .2em}svg{display:block}"
    ".chart{margin:.5em 0 1.2em 0}h3{font-size:1em;margin:.8em 0 .2em 0}"
)


def _evidence_rows(f_evidence: tuple[EvidenceView, ...]) -> list[str]:
    e = html.escape
    pictures = any(ev.series or ev.before_after for ev in f_evidence)
    head = "<tr><th>counter</th><th>value</th><th>rate</th>"
    head += "<th>over the window</th>" if pictures else ""
    out = ["<table>", head + "<th>source</th></tr>"]
    for ev in f_evidence:
        cells = [
            f"<td><code>{e(ev.counter)}</code></td>",
            f'<td class="n">{e(ev.value)}</td>',
            f'<td class="n">{e(ev.rate)}</td>',
        ]
        if pictures:
            pic = ""
            if ev.series is not None:
                s = ev.series
                pic = svg.sparkline(s.rates, f"{ev.counter} per tick", s.ref.gauge, ticks_text(s))
            elif ev.before_after is not None:
                b = ev.before_after
                unit = "" if b.ref.gauge else "/s"
                pic = svg.before_after_bars(b.before_rate, b.after_rate, ev.counter, unit)
            cells.append(f"<td>{pic}</td>")
        cells.append(f"<td>{e(ev.source)}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    return out


def render_html(view: ReportView) -> str:
    e = html.escape
    head = e(view.heading)
    facts = "; ".join(f"{e(label)} {e(value)}" for label, value in view.facts)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{head}</title><style>{_CSS}</style></head><body>",
        f"<h1>{head}</h1>",
        f"<p>{facts}; findings {e(view.summary)}</p>",
    ]
    if not view.findings:
        out.append(f"<p>{e(NO_FINDINGS)}</p>")
    else:
        out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr>")
        for f in view.findings:
            cells = [f"<td>{e(c)}</td>" for c in f.row]
            cells[1] = f'<td class="{e(f.level)}">{e(f.level)}</td>'
            cells[2] = f"<td><code>{e(f.object)}</code></td>"
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</table>")
        for chart in view.charts:
            bars = [(b.label, b.value, b.highlight) for b in chart.bars]
            out.append(f"<h3>{e(chart.title)} ({e(chart.unit)})</h3>")
            out.append(f'<div class="chart">{svg.bar_chart(bars, chart.title, chart.unit)}</div>')
        for f in view.findings:
            out.append(f'<h2 class="{e(f.level)}">{f.number}. {e(f.title)}</h2>')
            out.append(
                f"<p><b>{e(f.rule)}</b> ({e(f.level)}) on <code>{e(f.object)}</code>: "
                f"{e(f.cause)}</p>"
            )
            out.append("<p>Evidence:</p>")
            out += _evidence_rows(f.evidence)
            out.append("<p>Fix:</p><ul>")
            for fx in f.fixes:
                extra = "".join(
                    f"<br>{e(label)}: <code>{e(text)}</code>" if label else f"<br>{e(text)}"
                    for label, text in fx.details
                )
                out.append(f"<li>{e(fx.summary)} ({e(fx.scope)}){extra}</li>")
            out.append("</ul>")
    if view.drops:
        out.append(f"<h2>{e(DROPS_HEADING)}</h2><table><tr>")
        out.append("".join(f"<th>{e(c)}</th>" for c in DROP_COLUMNS) + "</tr>")
        out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in view.drops]
        out.append("</table>")
    if view.not_read:
        out.append("<h2>Not read</h2><ul>")
        out += [f"<li>{e(k)}: {e(v)}</li>" for k, v in view.not_read]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
