"""`lbtune monitor`: the live TUI over the counters (and the probes), a recording, or a tree.

Parses the options, builds the feed (live, `--replay`, or `--root` tree) and runs the
Textual app (lbtune/tui). `--record FILE` writes every tick to a recording as it goes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Optional

import click

from lbtune.cli import complete
from lbtune.cli.diagnose import parse_duration
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput, ExitCode, NeedsPrivilege
from lbtune.host.runtime import Runtime

if TYPE_CHECKING:
    from lbtune.tui.feed import Feed

MIN_INTERVAL = 0.1
MAX_INTERVAL = 3600.0


@click.command("monitor")
@click.option("--iface", metavar="IF", shell_complete=complete.interfaces,
              help="Only this interface's NIC counters (queues panel).")
@click.option("--interval", metavar="TIME",
              help="Refresh interval: seconds (1), or with a unit (500ms, 2s). Default 1 s "
                   "(a replay: the recording's own).")
@click.option("--no-probes", is_flag=True,
              help="Counters only: do not load the eBPF probes (b toggles them).")
@click.option("--record", metavar="FILE", shell_complete=complete.paths,
              help="Also write every tick to FILE (for --replay).")
@click.option("--replay", metavar="FILE", shell_complete=complete.paths,
              help="Play a recording instead of the live host.")
@click.option("--force", is_flag=True, help="With --record: replace FILE if it exists.")
@click.option("--report-dir", metavar="DIR", shell_complete=complete.directories,
              help="Default directory of reports (w key).")
@common_options
@click.pass_context
def command(
    ctx: click.Context,
    iface: Optional[str],
    interval: Optional[str],
    no_probes: bool,
    record: Optional[str],
    replay: Optional[str],
    force: bool,
    report_dir: Optional[str],
) -> int:  # fmt: skip
    """Watch drops by cause, listen queues, NIC queues, per-CPU softnet, conntrack and the
    diagnose findings live (keys: p pause, i interface, b probes, +/- interval, w report,
    ? help, q quit). See docs/monitor.md."""
    s = runtime_of(ctx)
    seconds = None
    if interval is not None:
        try:
            seconds = parse_duration(interval)
        except BadInput:
            seconds = -1.0
        if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
            raise BadInput(
                f"--interval {interval!r}: expected seconds like 1, 500ms or 2s, between 100ms "
                "and 1h"
            )
    if force and record is None:
        raise BadInput("--force needs --record FILE")
    if replay is not None and (record is not None or s.netns or s.root != "/"):
        raise BadInput("--replay plays a recording: it takes no --record, --root or --netns")
    if s.json:
        raise BadInput("monitor is interactive: for JSON use `lbtune diagnose --json`")
    try:
        import textual  # noqa: F401
    except ImportError:
        raise NeedsPrivilege(
            "the monitor needs textual: pip install 'lbtune[tui]' (make setup installs it)"
        ) from None
    feed = _feed(s, iface, seconds, not no_probes, record, replay, force)
    from lbtune.tui.app import MonitorApp

    try:
        if not _has_terminal():
            raise BadInput(_NO_TERMINAL)
        app = MonitorApp(feed, iface=iface, report_dir=report_dir)
        code = app.run()
    finally:
        feed.close()  # the probes are detached here, after the terminal is restored
    if app.return_code:  # Textual printed the error after restoring the terminal
        return int(ExitCode.INTERNAL)
    return int(code or 0)


_NO_TERMINAL = "monitor needs a terminal (stdin and stdout): for a report use `lbtune diagnose`"


def _has_terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


def _feed(
    s: Runtime,
    iface: Optional[str],
    seconds: Optional[float],
    probes: bool,
    record: Optional[str],
    replay: Optional[str],
    force: bool,
) -> Feed:
    from lbtune.tui.feed import LiveFeed, ReplayFeed, TreeFeed

    if replay is not None:
        from lbtune.host.textfile import open_user_text

        stream = open_user_text(replay, "--replay")
        try:
            return ReplayFeed(stream, replay, interval=seconds or 0.0, want_probes=probes)
        except BaseException:
            stream.close()
            raise
    host = s.host()
    if not host.is_live:
        if record is not None:
            raise BadInput("--record needs the live host: --root reads a recorded tree")
        return TreeFeed(host, interval=seconds or 1.0)
    out = None
    if record is not None:
        from lbtune.host.outfile import check_output, open_output

        check_output(record, force, "--record")
        if not _has_terminal():  # refuse before opening: --force would truncate the file
            raise BadInput(_NO_TERMINAL)

        out = open_output(record, force, "--record")
    try:
        return LiveFeed(host, interval=seconds or 1.0, want_probes=probes,
                        ifaces=[iface] if iface else None, record=out)  # fmt: skip
    except BaseException:
        if out is not None:
            out.close()
        raise
