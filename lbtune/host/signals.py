"""Process signals during a change: SIGTERM stops an apply the way Ctrl-C does, and nothing
interrupts a restore.

`interruptible()` makes SIGTERM raise KeyboardInterrupt (SIGINT already does), so `systemctl
stop`, `timeout` and a plain `kill` get the same all-or-nothing restore as Ctrl-C instead of
leaving a half-applied host. `shielded()` ignores both while values are being put back: a
second Ctrl-C must not stop a rollback half way. Signal handlers can only be set from the main
thread; elsewhere both are no-ops.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt inside the block."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """SIGINT and SIGTERM are ignored inside the block (a restore runs to its end)."""
    if not _main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
