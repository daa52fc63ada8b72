"""The time source of sampling: what time it is and how to wait, injectable for tests.

`lbtune.observe.schedule` decides when samples are taken and the `Sampler` stamps them; both
ask a `Clock`, so tests drive a diagnose window or a monitor stream with a fake clock that
advances instantly instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Protocol


class Clock(Protocol):
    """A monotonic clock, the wall clock, and a wait that a stop event can cut short."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def wait(self, seconds: float, stop: Optional[threading.Event] = None) -> bool:
        """Wait `seconds` (or until `stop` is set); True when `stop` ended the wait."""
        ...


class SystemClock:
    """The real clocks: time.monotonic, time.time, and sleeping (on the event when given,
    so a monitor's worker thread stops at once)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    def wait(self, seconds: float, stop: Optional[threading.Event] = None) -> bool:
        if stop is not None:
            return stop.wait(max(0.0, seconds))
        if seconds > 0:
            time.sleep(seconds)
        return False


SYSTEM_CLOCK: Clock = SystemClock()
