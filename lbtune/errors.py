"""Exit codes and the exception types that map onto them.

Every error a user can cause is an `LbtuneError` subclass carrying its exit code; the CLI
turns it into one line on stderr. Anything else is a bug and exits `INTERNAL`.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit status of every lbtune command (documented in README.md)."""

    OK = 0
    FINDINGS = 1  # findings reported, drift detected, a check failed
    USAGE = 2  # bad command line, bad input file, unknown object
    NEEDS_ROOT = 3  # missing privilege or kernel capability
    ROLLED_BACK = 4  # a change failed and everything was restored
    ROLLBACK_INCOMPLETE = 5  # a change failed and restoring failed too: see `lbtune history`
    BUSY = 6  # another lbtune run holds the lock
    INTERNAL = 70  # a bug in lbtune (EX_SOFTWARE); --debug shows the traceback
    INTERRUPTED = 130  # Ctrl-C outside a change (128 + SIGINT, as shells report it)


# What each code means, for the man pages' EXIT STATUS (scripts/manpages.py); README.md's
# "Exit codes" table says the same at length.
EXIT_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "Success. Also an apply that a signal reached after it was committed, and a "
    "daemon (exporter, ipvs agent, ipvs adapt, ipvs serve) stopped by SIGTERM.",
    ExitCode.FINDINGS: "Findings reported, drift detected, or a check failed.",
    ExitCode.USAGE: "Bad input: the command line, an LBTUNE_* variable, an unknown interface "
    "or namespace, a malformed host tree, profile or config; nothing was changed.",
    ExitCode.NEEDS_ROOT: "Needs root or a kernel capability this host does not have.",
    ExitCode.ROLLED_BACK: "A change failed, or the apply was interrupted (Ctrl-C, SIGTERM), "
    "and everything was restored.",
    ExitCode.ROLLBACK_INCOMPLETE: "A change failed and restoring failed too; the journal is "
    "kept and lbtune rollback retries.",
    ExitCode.BUSY: "Another lbtune run holds the lock.",
    ExitCode.INTERNAL: "Internal error (a bug): run again with --debug and report the traceback.",
    ExitCode.INTERRUPTED: "Interrupted (Ctrl-C) while nothing was being changed, a daemon "
    "at a terminal included.",
}


class LbtuneError(Exception):
    """An error the user can act on; its message is one line."""

    exit_code: ExitCode = ExitCode.USAGE


class BadInput(LbtuneError):
    """Input (command line, profile, host tree) that lbtune cannot use."""

    exit_code = ExitCode.USAGE


MAX_PROBLEM = 300  # characters of a MalformedHostFile's problem shown


class MalformedHostFile(BadInput):
    """A kernel file under the host root does not have the kernel's format."""

    def __init__(self, path: str, problem: str) -> None:
        if len(problem) > MAX_PROBLEM:  # a quoted line of a hostile file: keep it one line
            problem = problem[:MAX_PROBLEM] + "..."
        super().__init__(f"{path}: {problem}")
        self.path = path


class NeedsPrivilege(LbtuneError):
    """The operation needs root or a kernel feature this host does not have."""

    exit_code = ExitCode.NEEDS_ROOT


class Busy(LbtuneError):
    """Another lbtune run holds the lock."""

    exit_code = ExitCode.BUSY
