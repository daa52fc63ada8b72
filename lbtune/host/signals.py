"""Process signals during a change: SIGTERM stops an apply the way Ctrl-C does, nothing
interrupts a restore, and nothing undoes an outcome once it is decided.

`interruptible()` makes SIGTERM raise KeyboardInterrupt (SIGINT already does), so `systemctl
stop`, `timeout` and a plain `kill` get the same all-or-nothing restore as Ctrl-C instead of
leaving a half-applied host. `shielded()` ignores both while values are being put back: a
second Ctrl-C must not stop a rollback half way.

Once the block's outcome is decided (`Scope.decide()`: the journal says applied, or
everything was restored) a signal can no longer change it: it is recorded instead of raised
and delivered when the block ends: to an enclosing `interruptible()` block as
KeyboardInterrupt, else to the handler that was there before. A command-line process calls
`hold_after_decided()` first: there the recording handler stays installed until the process
exits, so the command reports its decided outcome with its documented exit code (a SIGTERM
between the commit and the exit used to kill it with the default action, status -15, after
the journal said applied). `late_signals()` names what arrived after the decision.

A daemon's serving loop runs in `until_stopped()`: SIGTERM ends it normally (exit 0, a clean
stop to systemd), Ctrl-C is still an interruption (exit 130).

Signal handlers can only be set from the main thread; elsewhere all of this is a no-op.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator, Optional

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Scope:
    """One `interruptible()` block: raising until `decide()`, recording afterwards."""

    def __init__(self) -> None:
        self.decided = False
        self.late: list[int] = []

    def decide(self) -> None:
        """The outcome is final (committed or restored): signals no longer interrupt."""
        self.decided = True


_scopes: list[Scope] = []
_hold = False
_late: list[str] = []  # names of signals received after a decided outcome, this process


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum: int, frame: Any) -> None:
    scope = _scopes[-1] if _scopes else None
    if (scope is not None and scope.decided) or (scope is None and _hold):
        if scope is not None:
            scope.late.append(signum)
        _late.append(signal.Signals(signum).name)
        return
    raise KeyboardInterrupt(signal.Signals(signum).name)


def hold_after_decided(on: bool = True) -> None:
    """Process mode (the CLI's entry point): after a decided outcome, signals stay recorded
    until the process exits instead of going back to their default action. `on=False`
    (`lbtune ipvs serve`, which runs many commands in one process): the handlers are put
    back after each block, and a held signal is delivered to them."""
    global _hold
    _hold = on


def late_signals() -> list[str]:
    """Names of the signals that arrived after an outcome was decided (oldest first)."""
    return list(_late)


@contextlib.contextmanager
def interruptible() -> Iterator[Scope]:
    """SIGINT and SIGTERM raise KeyboardInterrupt inside the block until `Scope.decide()`."""
    scope = Scope()
    if not _main_thread():
        yield scope
        return
    old = {s: signal.signal(s, _on_signal) for s in _SIGNALS}
    _scopes.append(scope)
    failed = True
    try:
        yield scope
        failed = False
    finally:
        _scopes.pop()
        keep = scope.decided and _hold and not _scopes
        if not keep:
            for s, handler in old.items():
                signal.signal(s, handler)
        if scope.late and not failed and not keep:
            # Deliver what was held back, now that the outcome is recorded.
            if _scopes:
                raise KeyboardInterrupt(signal.Signals(scope.late[0]).name)
            signal.raise_signal(scope.late[0])


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """SIGINT and SIGTERM are ignored inside the block (a restore runs to its end)."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def until_stopped() -> Iterator[Scope]:
    """The run of a daemon (`lbtune exporter`, `ipvs agent`, `ipvs adapt`): an `interruptible()`
    block that SIGTERM ends normally, so `systemctl stop` or `kill` is a clean stop (exit 0,
    not a failure to systemd), while Ctrl-C (SIGINT) still raises KeyboardInterrupt (exit 130,
    an interrupted run at a terminal). Code after the block (a restore, a close) runs either
    way."""
    try:
        with interruptible() as scope:
            yield scope
    except KeyboardInterrupt as e:
        if str(e) != signal.Signals.SIGTERM.name:
            raise


def current_scope() -> Optional[Scope]:
    """The innermost `interruptible()` block, if any."""
    return _scopes[-1] if _scopes else None
