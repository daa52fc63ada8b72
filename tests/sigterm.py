"""SIGTERM ends a test run the way Ctrl-C does, so the fixtures are torn down.

A CI timeout or a supervisor stopping the run sends SIGTERM, whose default action kills
pytest on the spot: every fixture still set up stays behind on the host (a throwaway
network namespace, a lab guest, a `lab up --vm` supervisor and its qemu). With this plugin
the first SIGTERM raises KeyboardInterrupt in the test run; pytest then stops, tears down
the fixtures that are set up (`pytest_sessionfinish`) and exits 2 (interrupted). Later
SIGTERMs do nothing, so they cannot cut that teardown short (SIGKILL still ends it).

tests/conftest.py imports the hook; ``python -m pytest -p tests.sigterm`` loads it alone.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Optional


def _ignore(signum: int, frame: Optional[FrameType]) -> None:
    """Not SIG_IGN: that would be inherited by every process the teardown starts."""


def _interrupt(signum: int, frame: Optional[FrameType]) -> None:
    signal.signal(signal.SIGTERM, _ignore)
    raise KeyboardInterrupt(f"signal {signum} (SIGTERM): stopping and tearing down fixtures")


def pytest_configure(config: Any) -> None:
    # only over the default action: a runner that set its own handler keeps it
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # fmt: skip
        signal.signal(signal.SIGTERM, _interrupt)
