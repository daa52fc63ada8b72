"""`lbtune probe`: run the eBPF probes (drops, queues, napi) headless for a while and report.

All named probes compile together (one bcc compile, a spinner on stderr while it runs),
count for --duration, and are detached on exit, Ctrl-C or SIGTERM; an early stop still
reports what was counted. `--print-c` prints the final C instead of loading it.
"""

from __future__ import annotations

import signal
import sys
import time
from typing import Any, Callable, Iterator, Optional

import click

from lbtune.cli import complete
from lbtune.cli.diagnose import parse_duration
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json, jsonable
from lbtune.observe.probe_source import PROBES


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that the probes are detached on the way out."""


@click.command("probe")
@click.argument("probes", nargs=-1, required=True, type=click.Choice(PROBES))
@click.option("--duration", "-d", default="10s", show_default=True, metavar="TIME",
              help="How long to count: seconds (10), or with a unit (10s, 1m, 500ms).")
@click.option("--iface", "ifaces", multiple=True, metavar="IF", shell_complete=complete.interfaces,
              help="Only these interfaces (queues, napi; repeatable).")
@click.option("--top", default=20, show_default=True, type=click.IntRange(1, 10000),
              help="Rows of drops to show (text output).")
@click.option("--print-c", is_flag=True, help="Print the final C and exit without loading it.")
@common_options
@click.pass_context
def command(
    ctx: click.Context,
    probes: tuple[str, ...],
    duration: str,
    ifaces: tuple[str, ...],
    top: int,
    print_c: bool,
) -> int:  # fmt: skip
    """Count packet drops by kernel reason and location (drops), packets per NIC queue
    (queues) and NAPI budget exhaustion per queue and CPU (napi) with eBPF. Needs root
    and bcc; see docs/probes.md."""
    from lbtune.observe.probes import SIZE_LABELS, ProbeSession, plan_probes

    s = runtime_of(ctx)
    seconds = parse_duration(duration)
    host = s.host()
    with _spinner() as status:
        plan = plan_probes(host, probes, list(ifaces) or None, status)
        if print_c:
            sys.stdout.write(plan.text)
            return 0
        with _sigterm_raises(), ProbeSession(host, plan, status) as session:
            status(f"counting for {seconds:g} s (Ctrl-C stops early and reports)")
            stopped = _wait(seconds)
            sample = session.read()
    if s.json:
        doc = jsonable(sample)
        doc.update(kernel=plan.kernel, netns=plan.netns, stopped_by=stopped,
                   size_buckets=list(SIZE_LABELS))  # fmt: skip
        _add_objects(doc)
        emit_json(doc)
    else:
        _render(sample, plan, stopped, top)
    return 0


def _wait(seconds: float) -> Optional[str]:
    """Sleep for the window; the signal that ended it early, if any."""
    end = time.monotonic() + seconds
    try:
        while True:
            left = end - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, 0.2))
    except _Terminated:
        return "SIGTERM"
    except KeyboardInterrupt:
        return "SIGINT"


class _sigterm_raises:
    """While active, SIGTERM raises `_Terminated` and SIGINT KeyboardInterrupt in the main
    thread, also when lbtune was started with SIGINT ignored (a background job of a script):
    both stop the window early and still report, like `apply` and `lab run`."""

    def __enter__(self) -> None:
        self._old: dict[int, Any] = {}
        try:
            self._old[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._raise)
            self._old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        except ValueError:  # not the main thread: leave the defaults
            pass

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise _Terminated()

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class _spinner:
    """Progress on stderr: a status line with a spinner on a terminal, else one plain line
    per step ("lbtune: counting for 10 s ..."), so scripts and tests can see when the window
    started."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self._status: Any = None
        self._tty: Any = None

    def __enter__(self) -> Callable[[str], None]:
        import os

        # Its own copy of stderr: while bcc compiles, lbtune collects what LLVM writes to
        # fd 2 (to make errors one line), and progress must still get through meanwhile.
        try:
            self._tty = os.fdopen(os.dup(sys.stderr.fileno()), "w")
        except (OSError, ValueError):  # no usable fd 2 (a test runner's stream)
            return lambda text: None
        if not self.enabled:

            def line(text: str) -> None:
                self._tty.write(f"lbtune: {text}\n")
                self._tty.flush()

            return line
        from rich.console import Console

        self._status = Console(file=self._tty).status("starting")
        self._status.start()

        def update(text: str) -> None:
            self._status.update(text)

        return update

    def __exit__(self, *exc: object) -> None:
        if self._status is not None:
            self._status.stop()
        if self._tty is not None:
            self._tty.close()


def _add_objects(doc: dict[str, Any]) -> None:
    """The vocabulary's `object` key on queue and NAPI rows ("v0 rx 3", "v0 napi 0 cpu 1")."""
    for q in doc.get("queues", []):
        queue = "?" if q["queue"] is None else q["queue"]
        q["object"] = f"{q['dev']} {q['direction']} {queue}"
    for n in doc.get("napi", []):
        n["object"] = f"{n['dev']} napi {n['instance']} cpu {n['cpu']}"


def _rate(count: int, seconds: float) -> str:
    if seconds <= 0:
        return "-"
    r = count / seconds
    return f"{r:,.0f}" if r >= 10 else f"{r:.1f}"


def _render(sample: Any, plan: Any, stopped: Optional[str], top: int) -> None:
    from rich.table import Table

    from lbtune.observe.probes import SIZE_LABELS

    out = console()
    where = f"  netns {plan.netns}" if plan.netns else ""
    ended = f", stopped by {stopped}" if stopped else ""
    out.print(
        f"[bold]lbtune probe {' '.join(sample.probes)}[/bold]  kernel {plan.kernel}{where}  "
        f"{sample.seconds:.1f} s{ended}"
    )
    secs = sample.seconds
    for section in _sections(sample, secs, top, SIZE_LABELS):
        title, cols, rows, empty = section
        out.print()
        out.print(f"[bold]{title}[/bold]")
        if not rows:
            out.print(f"  {empty}")
            continue
        t = Table(box=None, pad_edge=False, padding=(0, 1, 0, 2))
        for c in cols:
            t.add_column(c, justify="left" if c in _LEFT else "right", no_wrap=True)
        for r in rows:
            t.add_row(*r)
        out.print(t)
    out.print()
    measured = max((c.measured_seconds for c in sample.costs), default=0.0)
    out.print(
        "[bold]probe cost[/bold] (kernel BPF run-time statistics, sampled: on for "
        f"{measured:.1f} s of the {sample.seconds:.1f} s)"
    )
    for c in sample.costs:
        per = f"{c.ns_per_event:.0f} ns/event" if c.ns_per_event is not None else "n/a"
        out.print(
            f"  {c.probe:7} {per}, {c.events_per_second:,.0f} events/s "
            f"({c.events:,} events sampled)"
        )
    for note in sample.notes:
        out.print(f"[dim]note: {note}[/dim]", markup=True, highlight=False)


_LEFT = {"reason", "location", "protocol", "dev", "dir", "source", "napi"}
_SOURCE = {"netlink qstats": "qstats"}  # the column is narrow; JSON has the full name


def _sections(
    sample: Any, secs: float, top: int, size_labels: tuple[str, ...]
) -> Iterator[tuple[str, list[str], list[list[str]], str]]:
    if "drops" in sample.probes:
        total = sum(d.count for d in sample.drops)
        scope = "host-wide" if sample.drops_scope == "host" else sample.drops_scope
        rows = [
            [f"{d.count:,}", _rate(d.count, secs), d.reason or "-", d.location, d.protocol]
            for d in sample.drops[:top]
        ]
        title = f"drops: {total:,} ({scope}), by kernel reason and location"
        if sample.drops_lost:
            title += f"; {sample.drops_lost:,} not attributed (map full)"
        if len(sample.drops) > top:
            title += f"; top {top} of {len(sample.drops)}"
        yield (title, ["count", "/s", "reason", "location", "protocol"], rows,
               "no drops in the window")  # fmt: skip
    if "queues" in sample.probes:
        sized = any(q.sizes is not None for q in sample.queues)
        rows = []
        for q in sample.queues:
            row = [q.dev, q.direction, "?" if q.queue is None else str(q.queue),
                   f"{q.packets:,}", _rate(q.packets, secs), f"{q.bytes:,}"]  # fmt: skip
            if sized:
                row += [f"{n:,}" for n in q.sizes] if q.sizes else ["-"] * len(size_labels)
            rows.append([*row, _SOURCE.get(q.source, q.source)])
        cols = ["dev", "dir", "queue", "packets", "pps", "bytes"]
        cols += list(size_labels) if sized else []
        title = "queues: per queue" + (", skbs by length (bytes)" if sized else "")
        yield title, [*cols, "source"], rows, "no interface to count"
    if "napi" in sample.probes:
        ranked = sorted(sample.napi, key=lambda n: (-n.exhausted, -n.polls))
        rows = [
            [n.dev, str(n.instance), "?" if n.queue is None else str(n.queue), str(n.cpu),
             f"{n.polls:,}", f"{n.work:,}", f"{n.work / n.polls:.1f}" if n.polls else "-",
             str(n.budget), f"{n.exhausted:,}", f"{100.0 * n.exhausted / n.polls:.1f}%"]
            for n in ranked
        ]  # fmt: skip
        title = "napi: polls per NAPI instance and CPU, most budget-exhausted first"
        if sample.napi_lost:
            title += f"; {sample.napi_lost:,} polls not attributed (map full)"
        cols = ["dev", "napi", "queue", "cpu", "polls", "work", "work/poll", "budget",
                "exhausted", "exhausted %"]  # fmt: skip
        yield title, cols, rows, "no NAPI polls in the window"
