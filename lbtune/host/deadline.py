"""Waiting for something to become true, up to a deadline: lbtune's one polling loop.

A lab guest that powers off, a process that exits, a file another process writes: the
waits that have no event to block on ask again every few milliseconds until the answer is
yes or the time is up. `wait_until` is that loop; what to do at the deadline (raise, kill,
give up quietly) stays with the caller.
"""

from __future__ import annotations

import time
from typing import Callable


def wait_until(done: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Call `done()` every `interval` seconds until it returns True (then True) or `timeout`
    seconds have passed (then False, without a last call). `done` may do work between looks
    (read progress, check a watchdog) and raise to end the wait early."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
