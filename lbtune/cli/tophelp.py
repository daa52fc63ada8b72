"""`lbtune --help` (and `-h`) answered before click loads: the group's help exactly as click
renders it for a terminal of 80 columns or more (click wraps at min(columns, 80) - 2).

Importing click and the modules it needs is most of what the command line costs to start
(`bench/run.py` measures `lbtune --help` against `python -c pass`); the top-level help is the
same text every time, so lbtune.cli.entry prints it from here when the arguments are exactly
`--help` or `-h`, the terminal is at least 80 columns wide and the LBTUNE_* environment is
usable. Anything else (a narrower terminal, `lbtune plan --help`, a bad LBTUNE_* variable,
which exits 2 the usual way) goes through click. `tests/cli/test_cli_frame.py` renders the help
with click and fails when TEXT differs: after changing the group's options, docstring or
COMMANDS, paste what it prints here. Standard library only.
"""

from __future__ import annotations

import os
import sys

WIDTH = 80  # click's max_content_width: wider terminals get this same text

TEXT = """\
Usage: lbtune [OPTIONS] COMMAND [ARGS]...

  Tune and diagnose Linux load-balancer and web-server hosts.

  Exit codes: 0 ok, 1 findings or drift, 2 bad input, 3 needs root or a kernel
  capability, 4 a change failed (or was interrupted) and everything was
  restored, 5 restoring failed too (`lbtune rollback` retries), 6 another run
  holds the lock, 70 internal error, 130 interrupted (Ctrl-C) outside a
  change. A daemon (exporter, ipvs agent, adapt, serve) stopped by SIGTERM
  exits 0.

Options:
  --root DIR     Read /proc, /sys and /etc below DIR (a fixture, capture or
                 sosreport).
  --netns NAME   Operate inside network namespace NAME.
  --json         Machine-readable JSON on stdout.
  -v, --verbose  More detail (repeat for more).
  --debug        Show tracebacks on errors.
  --version      Show the version and exit.
  -h, --help     Show this message and exit.

Commands:
  apply       Apply a profile (journaled, all-or-nothing).
  capture     Save what lbtune reads, for --root.
  checklist   Is this host ready for a load test?
  compare     Which hosts differ from a template host or a profile (captures).
  completion  Print the Tab-completion script for bash, zsh or fish.
  diagnose    Find where packets die and the fix.
  doctor      Say what this host can do (root, bcc, tracefs, IPVS, lab).
  exporter    Prometheus metrics: drops by cause, findings, drift.
  history     List applies and their state.
  ipvs        IPVS DR director, real servers, self-test.
  lab         The IPVS DR lab (UML kernel): load, spread, diagnosis.
  monitor     Live TUI: drops by cause, queues, CPUs, findings.
  plan        Show what applying a profile would change.
  probe       Count drops by kernel reason, per-queue packets, NAPI (eBPF).
  profile     List, show and lint tuning profiles.
  rollback    Restore what the last apply replaced.
  show        Show CPU/NUMA topology, NICs, queue IRQs and irqbalance.
  verify      Check a profile is in effect (exit 1 on drift).
"""


def columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size, without importing
    shutil): $COLUMNS, else stdout's terminal, else 80."""
    try:
        cols = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            cols = 0
    return cols or WIDTH


def try_help(args: list[str]) -> int | None:
    """Print the top-level help and return 0 when click would print TEXT; else None."""
    if args not in (["--help"], ["-h"]) or columns() < WIDTH:
        return None
    from lbtune.environ import problem

    if problem(os.environ) is not None:  # click's path says what is wrong (exit 2)
        return None
    try:
        sys.stdout.write(TEXT)
        sys.stdout.flush()
    except BrokenPipeError:  # `lbtune --help | head -1`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:  # stdout full or gone: click's path reports it the usual way (exit 70)
        return None
    return 0
