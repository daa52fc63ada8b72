"""A Textual terminal driver whose input thread sleeps until there is input.

Textual's Linux driver reads the keyboard in a thread that wakes every 0.1 s to see whether
it should stop and whether a lone ESC has waited long enough to be the escape key: ten
wake-ups a second, each taking the interpreter lock from the threads that draw, about a
tenth of the idle monitor's CPU (docs/monitor.md, bench/monitor.py). `QuietLinuxDriver`'s
input thread blocks until the terminal has input, a half-read escape sequence is due, or
the driver stops (its exit event, when set, wakes the thread through a pipe); the keys and
the events it sends are Textual's own (the same parser, fed the same way). It writes the
screen to its own copy of fd 2: the probes' compile points fd 2 at a file for a while.

Used only with the Textual versions it was checked against (CHECKED, with the compositor):
another version gets Textual's own driver.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
import threading
from codecs import getincrementaldecoder
from typing import Any, Optional

from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

SLICE = 0.1  # seconds: Textual's own wait, kept while an escape sequence is half read


class _WakingEvent(threading.Event):
    """An Event that, when set, also writes a byte to a pipe (a thread in select() wakes)."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        # a full pipe wakes the thread anyway; a closed one has nobody waiting
        with contextlib.suppress(OSError):
            os.write(self._wake_fd, b"x")


class QuietLinuxDriver(LinuxDriver):
    _own_file = False

    def __init__(self, app: Any, **kw: Any) -> None:
        super().__init__(app, **kw)
        # The screen goes to a copy of the terminal's fd 2 taken now, not to fd 2 itself:
        # while the probes compile, bcc's compiler diagnostics are caught by pointing fd 2 at
        # a file (lbtune.host.trace.bpf), and frames written then were lost; later frames
        # send only changed lines, so panels that did not change stayed blank for good.
        err = sys.__stderr__
        if err is not None:
            with contextlib.suppress(OSError, ValueError):
                self._file = open(os.dup(err.fileno()), "w", encoding=err.encoding,  # noqa: SIM115
                                  errors=err.errors, closefd=True)  # fmt: skip
                self._own_file = True
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.exit_event = _WakingEvent(self._wake_w)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except OSError:  # empty (BlockingIOError) or closed
            pass

    def run_input_thread(self) -> None:
        """Textual's `LinuxDriver.run_input_thread` (8.2.8), waiting without a timeout
        while no escape sequence is half read, and woken by the exit event's pipe."""
        self._drain_wake()
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_r, selectors.EVENT_READ)

        fileno = self.fileno
        EVENT_READ = selectors.EVENT_READ

        parser = XTermParser(self._debug)
        feed = parser.feed
        tick = parser.tick

        decode = getincrementaldecoder("utf-8")().decode
        read = os.read

        def timeout() -> Optional[float]:
            due = parser._timeout_time  # set while a lone ESC may still start a sequence
            return None if due is None else min(SLICE, max(0.0, due - get_time()))

        def process_selector_events(
            selector_events: list[tuple[selectors.SelectorKey, int]], final: bool = False
        ) -> None:
            events = [(k, m) for k, m in selector_events if k.fd == fileno]
            if len(events) < len(selector_events):
                self._drain_wake()
            for last, (_selector_key, mask) in loop_last(events):
                if mask & EVENT_READ:
                    unicode_data = decode(read(fileno, 1024 * 4), final=final and last)
                    if not unicode_data:
                        # This can occur if the stdin is piped
                        break
                    for event in feed(unicode_data):
                        self.process_message(event)
            for event in tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                process_selector_events(selector.select(timeout()))
            selector.unregister(self.fileno)
            process_selector_events(selector.select(SLICE), final=True)

        finally:
            selector.close()
            try:
                for _event in feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def close(self) -> None:
        super().close()  # stops the writer thread, after its last write
        if self._own_file and self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
