"""A Textual app on the monitor's driver that points fd 2 at a file while it changes its text,
as bcc's compile does while the probes attach (lbtune.host.trace.bpf._StderrCapture); run by
tests/tui/test_monitor_terminal.py in a real terminal. Writes DONE to the file named by its
argument when fd 2 is back, then waits for q."""

from __future__ import annotations

import os
import sys
import tempfile

from textual.app import App, ComposeResult
from textual.widgets import Static

from lbtune.tui.driver import QuietLinuxDriver


class Redirecting(App[None]):
    def compose(self) -> ComposeResult:
        yield Static("before the redirect", id="text")

    def on_mount(self) -> None:
        self.set_timer(0.5, self.redirect)

    def redirect(self) -> None:
        self._capture = tempfile.TemporaryFile()  # noqa: SIM115 (kept while fd 2 points at it)
        self._saved = os.dup(2)
        os.dup2(self._capture.fileno(), 2)
        self.query_one("#text", Static).update("changed while fd 2 was a file")
        self.set_timer(1.0, self.restore)

    def restore(self) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        with open(sys.argv[1], "w") as f:
            f.write("DONE")

    def on_key(self, event: object) -> None:
        if getattr(event, "key", "") == "q":
            self.exit()


if __name__ == "__main__":
    Redirecting(driver_class=QuietLinuxDriver).run()
