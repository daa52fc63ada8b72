"""`lbtune diagnose`: sample the counters over a window and print ranked findings with fixes."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput, ExitCode

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}
MAX_DURATION = 24 * 3600.0
# A window at least this long reports progress on stderr (a bar on a terminal, a line
# otherwise), whatever the format and wherever the report goes.
PROGRESS_FROM = 1.0


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
    shell_complete=complete.interfaces,
    help="Only these interfaces' NIC counters (repeatable).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "md", "json", "html"]),
    default=None,
    help="Report format (default text; --json = json).",
)
@click.option("-o", "--output", metavar="FILE", shell_complete=complete.paths,
              help="Write the report to FILE.")  # fmt: skip
@click.option(
    "--write-profile",
    "profile_out",
    metavar="FILE.toml",
    shell_complete=complete.paths,
    help="Also write the fixes lbtune can apply as a profile (for plan/apply FILE.toml).",
)
@click.option(
    "--role",
    metavar="ROLE",
    help="With --write-profile: include this role's profile (web, lb-dr, lb-proxy, ...).",
)
@click.option("--force", is_flag=True, help="With -o/--write-profile: replace FILE if it exists.")
@click.option(
    "--baseline",
    metavar="CAPTURE",
    shell_complete=complete.paths,
    help="With --root: an earlier capture (directory or .tar.gz) of the same boot.",
)
@click.option(
    "--no-probes",
    is_flag=True,
    help="Counters only: do not load the eBPF probes (drops, napi) even as root with bcc.",
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
    profile_out: Optional[str],
    role: Optional[str],
    force: bool,
    baseline: Optional[str],
    no_probes: bool,
    rules: tuple[str, ...],
) -> int:
    """Find where packets die, how many, why, and the fix (exit 1 when there are findings).

    On the live host (or in --netns) the counters are sampled over --duration. With --root
    on a capture (`lbtune capture`) the counters count since boot; --baseline compares two.
    As root with bcc, the drops and napi probes add the kernel's own drop reasons to the
    findings (they load while the window runs; --no-probes skips them).
    --write-profile FILE.toml writes the fixes as a profile that plan and apply take.
    """
    from lbtune.diagnose.report import diagnose
    from lbtune.diagnose.rules import select
    from lbtune.diagnose.view import report_view
    from lbtune.host.host import Host
    from lbtune.host.outfile import check_output, write_output

    s = runtime_of(ctx)
    seconds = parse_duration(duration)
    fmt = fmt or ("json" if s.json else "text")
    select(rules)  # an unknown --rule fails before anything is read
    if force and output is None and profile_out is None:
        raise BadInput("--force needs -o FILE or --write-profile FILE")
    if output is not None:
        check_output(output, force)
    role_profile = _check_profile_options(profile_out, role, output, force, s.root)
    host = s.host()
    base = None
    trees = [s.tree]
    if baseline is not None:
        if host.is_live:
            raise BadInput("--baseline needs --root: it compares two captures")
        trees.append(s.open_tree(baseline, "--baseline"))
        base = Host.open(trees[-1].path)

    def display(text: str) -> str:
        for tree in trees:
            text = tree.display(text)
        return text

    progress, done = _progress(host.is_live and seconds >= PROGRESS_FROM, s.stderr)
    try:
        report = diagnose(
            host, seconds, ifaces or None, base, progress, rules or None,
            source=s.tree.source, display=display, probes=not no_probes,
        )  # fmt: skip
    except BadInput as e:
        raise BadInput(display(str(e))) from None
    finally:
        done()
        if base is not None:
            base.close()
    text = _render(report_view(report), fmt)
    if profile_out is not None:
        _write_profile(report, profile_out, role, role_profile, force, s)
    if output is not None:
        write_output(output, text.encode("utf-8"), force)
        n = len(report.findings)
        click.echo(f"lbtune: wrote {output} ({n} finding{'' if n == 1 else 's'})", err=True)
    else:
        sys.stdout.write(text)
    return int(ExitCode.FINDINGS) if report.findings else 0


def _check_profile_options(
    path: Optional[str], role: Optional[str], output: Optional[str], force: bool, root: str
) -> Any:
    """Refuse --write-profile/--role mistakes before the window; the role's profile."""
    from lbtune.diagnose.checklist.model import ROLE_PROFILES
    from lbtune.diagnose.fixprofile import profile_name
    from lbtune.host.outfile import check_output
    from lbtune.tune.profile import load_profile, profile_dirs

    if path is None:
        if role is not None:
            raise BadInput("--role needs --write-profile FILE.toml")
        return None
    if not path.endswith(".toml"):
        raise BadInput(
            f"--write-profile {path}: name it FILE.toml (plan and apply take a path ending "
            "in .toml as a file, anything else as a profile name)"
        )
    if output is not None and os.path.abspath(output) == os.path.abspath(path):
        raise BadInput("--write-profile and -o name the same file")
    check_output(path, force, "--write-profile")
    if role is None:
        return None
    if role not in ROLE_PROFILES:
        raise BadInput(f"--role {role!r}: unknown role (one of {', '.join(ROLE_PROFILES)})")
    name = ROLE_PROFILES[role]
    if profile_name(path) == name:
        raise BadInput(
            f"--write-profile {path} --role {role}: the profile would include itself "
            f"({name}); choose another file name"
        )
    # the profile the include will find: beside the file first, then the profile directories
    search = [Path(path).resolve().parent, *profile_dirs(root)]
    return load_profile(name, search=search)


def _write_profile(
    report: Any, path: str, role: Optional[str], role_profile: Any, force: bool, s: Any
) -> None:
    """Write the fixes' profile to `path`, checked to load and lint as that file will."""
    from lbtune.diagnose.fixprofile import check_profile, fix_profile
    from lbtune.host.outfile import write_output

    command = "lbtune" + (f" --netns {s.netns}" if s.netns else "")
    fp = fix_profile(report, path, role, role_profile, command)
    if fp.empty:
        click.echo(
            f"lbtune: no fix here is a profile value; {path} not written "
            f"({len(fp.notes)} fix(es) to make elsewhere, see the report)",
            err=True,
        )
        return
    text = fp.text()
    problems = check_profile(text, path, s.root)  # BadInput when it does not even load
    write_output(path, text.encode("utf-8"), force, "--write-profile")
    for p in problems:
        click.echo(
            f"lbtune: {path}: lint {p.level.value}: {p.key} = {p.desired}: {p.reason}", err=True
        )
    click.echo(
        f"lbtune: wrote {path} ({len(fp.entries)} value(s), {len(fp.notes)} note(s)); "
        f"next: {command} plan {path}",
        err=True,
    )


def _progress(enabled: bool, stream: Any) -> tuple[Any, Callable[[], None]]:
    """A progress callback for the window on `stream` (stderr) and its closer: a transient
    bar on a terminal, one line when the window opens otherwise (logs, CI)."""
    if not enabled:
        return None, lambda: None
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        told: list[bool] = []

        def announce(elapsed: float, total: float) -> None:
            if not told:
                told.append(True)
                stream.write(f"lbtune: sampling the counters for {total:g} s\n")
                stream.flush()

        return announce, lambda: None
    import os

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    # Its own copy of the terminal: while bcc compiles the probes (in the background), lbtune
    # collects what LLVM writes to fd 2, and the bar must keep moving meanwhile.
    try:
        tty_out: Any = os.fdopen(os.dup(stream.fileno()), "w")
    except (AttributeError, OSError, ValueError):
        tty_out = None
    bar = Progress(
        TextColumn("sampling"),
        BarColumn(),
        TimeRemainingColumn(),
        console=Console(file=tty_out or stream),
        transient=True,
    )
    bar.start()
    task = bar.add_task("sampling", total=1.0)

    def update(elapsed: float, total: float) -> None:
        bar.update(task, completed=elapsed / total if total else 1.0)

    def done() -> None:
        bar.stop()
        if tty_out is not None:
            tty_out.close()

    return update, done


def _render(view: Any, fmt: str) -> str:
    from lbtune.diagnose.render import render_html, render_json, render_markdown

    if fmt == "json":
        return render_json(view)
    if fmt == "md":
        return render_markdown(view)
    if fmt == "html":
        return render_html(view)
    return render_text(view)


_STYLE = {"fail": "bold red", "warn": "yellow", "info": "dim"}


def render_text(view: Any) -> str:
    """The terminal report of a `ReportView`. Every data string goes in as a rich `Text`,
    never as markup: `tcp [fd77::2]:9443` is an object, not a style tag."""
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from lbtune.cli.output import console
    from lbtune.diagnose.view import (
        COLUMNS,
        DROP_COLUMNS,
        DROPS_HEADING,
        NO_FINDINGS,
        NUMERIC_COLUMNS,
        before_text,
    )

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
    r = view.report
    facts = [(label, value) for label, value in view.facts if label != "probes"]
    line = Text.assemble((r.hostname or "?", "bold"), *(f"  {k}: {v}" for k, v in facts))
    out.print(line)
    for label, value in view.facts:
        if label == "probes":  # its own line, never wrapped: one line says what is missing
            out.print(Text(f"{label}: {value}"), soft_wrap=True)
    if not view.findings:
        out.print(Text(NO_FINDINGS, style="green"))
    else:
        t = Table(box=None, pad_edge=False)
        for col in COLUMNS:
            t.add_column(col, justify="right" if col in NUMERIC_COLUMNS else "left")
        for f in view.findings:
            cells = [Text(c) for c in f.row]
            cells[1].stylize(_STYLE.get(f.level, ""))
            t.add_row(*cells)
        out.print(t)
        for f in view.findings:
            out.print()
            head = Text(f"{f.number}. {f.title}", style="bold")
            head.append(f"  ({f.rule}, {f.object})", style="dim")
            out.print(head)
            out.print(Text(f"   {f.cause}"))
            for e in f.evidence:
                line = Text(f"   evidence: {e.counter} = {e.value} ({e.rate}) [{e.source}]")
                if e.spark:
                    line.append(f"  {e.spark}", style="cyan")
                if e.before_after is not None:
                    line.append(before_text(e), style="dim")
                out.print(line)
            for fx in f.fixes:
                out.print(Text(f"   fix: {fx.summary} ({fx.scope})"))
                for label, text in fx.details:
                    out.print(Text(f"        {label}: {text}" if label else f"        {text}"))
    if view.drops:
        out.print()
        out.print(Text(DROPS_HEADING, style="bold"))
        t = Table(box=None, pad_edge=False)
        for col in DROP_COLUMNS:
            t.add_column(col, justify="right" if col in ("count", "rate") else "left")
        for row in view.drops:
            t.add_row(*(Text(c) for c in row))
        out.print(t)
    if view.not_read:
        out.print()
        out.print(
            Text("not read: " + "; ".join(f"{k} ({v})" for k, v in view.not_read), style="dim")
        )
    return buf.getvalue()
