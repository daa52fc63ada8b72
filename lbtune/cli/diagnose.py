"""`lbtune diagnose`: sample the counters over a window and print ranked findings with fixes."""

from __future__ import annotations

import re
import sys
from typing import Any, Optional

import click

from lbtune.cli.main import common_options, settings_of
from lbtune.errors import BadInput, ExitCode

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}
MAX_DURATION = 24 * 3600.0


def parse_duration(text: str) -> float:
    """`10`, `10s`, `1.5m`, `500ms` -> seconds; BadInput otherwise."""
    m = _DURATION.match(text or "")
    if not m:
        raise BadInput(f"--duration {text!r}: expected seconds like 10, 10s, 1m or 500ms")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds <= 0 or seconds > MAX_DURATION:
        raise BadInput(f"--duration {text!r}: must be more than 0 and at most 24h")
    return seconds


@click.command("diagnose")
@click.option(
    "--duration",
    "-d",
    default="10s",
    show_default=True,
    metavar="TIME",
    help="Sampling window: seconds (10), or with a unit (10s, 1m, 500ms).",
)
@click.option(
    "--iface",
    "ifaces",
    multiple=True,
    metavar="IF",
    help="Only these interfaces' NIC counters (repeatable).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "md", "json", "html"]),
    default=None,
    help="Report format (default text; --json = json).",
)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE.")
@click.option(
    "--baseline",
    metavar="CAPTURE",
    help="With --root: an earlier capture (directory or .tar.gz) of the same boot.",
)
@click.option(
    "--rule",
    "rules",
    multiple=True,
    metavar="ID",
    help="Only these rules (ids in docs/diagnose.md).",
)
@common_options
@click.pass_context
def diagnose_command(
    ctx: click.Context,
    duration: str,
    ifaces: tuple[str, ...],
    fmt: Optional[str],
    output: Optional[str],
    baseline: Optional[str],
    rules: tuple[str, ...],
) -> int:
    """Find where packets die, how many, why, and the fix (exit 1 when there are findings).

    On the live host (or in --netns) the counters are sampled over --duration. With --root
    on a capture (`lbtune capture`) the counters count since boot; --baseline compares two.
    """
    from lbtune.diagnose.report import diagnose
    from lbtune.diagnose.rules import RULES
    from lbtune.host.host import Host

    s = settings_of(ctx)
    seconds = parse_duration(duration)
    fmt = fmt or ("json" if s.json else "text")
    known = {r.id for r in RULES}
    for r in rules:
        if r not in known:
            raise BadInput(f"--rule {r}: unknown rule (see docs/diagnose.md)")
    if output is not None:
        _check_writable(output)
    host = s.host()
    base = None
    if baseline is not None:
        if host.is_live:
            raise BadInput("--baseline needs --root: it compares two captures")
        base = Host.open(s.tree(baseline, "--baseline"))
    progress, done = _progress(host.is_live and fmt == "text" and output is None)
    try:
        report = diagnose(host, seconds, ifaces or None, base, progress, rules or None)
    finally:
        done()
        if base is not None:
            base.close()
    text = _render(report, fmt)
    if output is not None:
        _write(output, text)
        click.echo(f"lbtune: wrote {output} ({len(report.findings)} findings)", err=True)
    elif text is not None:
        sys.stdout.write(text)
    return int(ExitCode.FINDINGS) if report.findings else 0


def _check_writable(path: str) -> None:
    import os

    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise BadInput(f"-o {path}: is a directory")
    if not os.path.isdir(d):
        raise BadInput(f"-o {path}: directory {d} does not exist")


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise BadInput(f"-o {path}: {e.strerror}") from None


def _progress(enabled: bool) -> tuple[Any, Any]:
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("sampling"),
        BarColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    bar.start()
    task = bar.add_task("sampling", total=1.0)

    def update(elapsed: float, total: float) -> None:
        bar.update(task, completed=elapsed / total if total else 1.0)

    return update, bar.stop


def _render(report: Any, fmt: str) -> str:
    from lbtune.diagnose.report import render_html, render_markdown, to_document

    if fmt == "json":
        import json

        return json.dumps(to_document(report), indent=2) + "\n"
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    return _render_text(report)


_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}


def _render_text(report: Any) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    from lbtune.cli.output import console
    from lbtune.diagnose.report import describe_window, fix_text, rate_text

    buf = io.StringIO()
    real = console()
    out = Console(
        file=buf,
        width=real.width,
        force_terminal=real.is_terminal,
        color_system=real.color_system,
        highlight=False,
        soft_wrap=False,
    )
    where = f" netns {report.netns}" if report.netns else ""
    out.print(
        f"[bold]{report.hostname or '?'}[/bold]{where}  kernel {report.kernel or '?'}  "
        f"{describe_window(report)}"
    )
    if not report.findings:
        out.print("[green]No packet loss or limit reached in the window.[/green]")
    else:
        t = Table(box=None, pad_edge=False)
        for col in ("#", "severity", "object", "finding", "count", "rate"):
            t.add_column(col, justify="right" if col in ("#", "count", "rate") else "left")
        for i, f in enumerate(report.findings, 1):
            sev = f.severity.value
            t.add_row(
                str(i),
                f"[{_STYLE[sev]}]{sev}[/]",
                f.object,
                f.title,
                f"{f.count:,}",
                rate_text(f.rate),
            )
        out.print(t)
        for i, f in enumerate(report.findings, 1):
            out.print()
            out.print(f"[bold]{i}. {f.title}[/bold]  [dim]({f.rule}, {f.object})[/dim]")
            out.print(f"   {f.cause}", markup=False)
            for e in f.evidence:
                out.print(
                    f"   evidence: {e.counter} = {e.value:,} ({rate_text(e.rate)}) [{e.source}]",
                    markup=False,
                )
            for fx in f.fixes:
                out.print(f"   fix: {fix_text(fx)}", markup=False)
                if fx.profile_key:
                    out.print(f"        profile: {fx.profile_key}", markup=False)
                if fx.command:
                    out.print(f"        now: {fx.command}", markup=False)
                if fx.note:
                    out.print(f"        {fx.note}", markup=False)
    if report.missing:
        out.print()
        out.print(
            "not read: " + "; ".join(f"{k} ({v})" for k, v in sorted(report.missing.items())),
            style="dim",
            markup=False,
        )
    return buf.getvalue()
