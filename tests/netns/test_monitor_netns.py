"""`lbtune --netns NS monitor` in a real terminal (tmux) while a real fault runs in NS.

The live feed, not a scripted one: a listener with a backlog of 2 that never accepts
(tests/netns/faults.py `ListenOverflow`) and a flood of connects to it in the namespace. The
screen, read with `tmux capture-pane`, must show the "accept queue" drop row counting, the
listener's port in the listen queues panel, and the accept-queue finding naming that port.
A second test floods a UDP socket with a tiny SO_RCVBUF, ends the load (the socket closes)
and presses `w`: the report written after the load still names the socket and its SO_RCVBUF
fix (tests/tui/test_frame_window.py checks the charts of its HTML rendering).
Waits are bounded by conditions (the screen showing the text), never by a sleep that is
asserted on.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Callable

import pytest

from tests.netns import faults as F

PORT = 18080


class Tmux:
    """One tmux server of its own (a private socket), one pane: the monitor."""

    def __init__(self, name: str) -> None:
        self.sock = name
        self.env = dict(os.environ, TERM="xterm-256color")

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                              env=self.env, timeout=20, check=False).stdout  # fmt: skip

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "mon")


def _start(tmux: Tmux, netns: str, size: tuple[int, int], *args: str) -> None:
    cmd = [sys.executable, "-m", "lbtune", "--netns", netns, "monitor", "--no-probes", *args]
    # The shell prints the monitor's exit status and keeps the pane open to be read.
    shell = f"{shlex.join(cmd)}; echo EXIT=$?; sleep 60"
    tmux("new-session", "-d", "-s", "mon", "-x", str(size[0]), "-y", str(size[1]),
         "-c", os.getcwd(), shell)  # fmt: skip


def _wait(tmux: Tmux, cond: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
    end = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < end:
        screen = tmux.screen()
        if cond(screen):
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{what} never appeared:\n{screen}")


def _quit(tmux: Tmux) -> None:
    tmux("send-keys", "-t", "mon", "q")
    shown = _wait(tmux, lambda s: "EXIT=" in s, "the monitor's exit")
    assert "EXIT=0" in shown, shown


def _lines_with(screen: str, *words: str) -> list[str]:
    return [ln for ln in screen.splitlines() if all(w in ln for w in words)]


ACCEPT_ROW = re.compile(r"accept queue +(\S+) +(\S+) +([\d,]+) *│")


def _accept_rows(screen: str) -> list[str]:
    """The "accept queue" rows of the drops panel that count drops (cause, rate, history,
    a total above 0)."""
    out = []
    for ln in screen.splitlines():
        m = ACCEPT_ROW.search(ln)
        if m and int(m.group(3).replace(",", "")) > 0:
            out.append(ln)
    return out


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed: scripts/setup.sh installs it")
    t = Tmux(f"lbtune-live-{os.getpid()}")
    try:
        yield t
    finally:
        t("kill-server")


@pytest.mark.parametrize("size", [(120, 40), (80, 24)], ids=["120x40", "80x24"])
def test_live_monitor_shows_a_real_listen_overflow(netns, tmux, size):
    fault = F.ListenOverflow(port=PORT, backlog=2, clients=20)
    with F.Background(netns, fault) as bg:
        _start(tmux, netns, size)
        seen = {"row": "", "port": "", "finding": ""}
        end = time.monotonic() + 60
        screen = ""
        while time.monotonic() < end and not all(seen.values()):
            bg.trigger()  # 20 connects to a queue of 3: about 17 overflow, every round
            truth = bg.truth()
            assert truth.details["effective_backlog"] == 2
            for _ in range(10):
                screen = tmux.screen()
                seen["row"] = seen["row"] or "\n".join(_accept_rows(screen))
                seen["port"] = seen["port"] or "\n".join(_lines_with(screen, f":{PORT}"))
                seen["finding"] = seen["finding"] or "\n".join(
                    _lines_with(screen, "Accept queue overflow"))  # fmt: skip
                if all(seen.values()):
                    break
                time.sleep(0.2)
        assert all(seen.values()), f"missing {[k for k, v in seen.items() if not v]}:\n{screen}"
        # The listener row shows the full queue against its effective backlog of 2.
        assert any(f"127.0.0.1:{PORT}" in ln for ln in seen["port"].splitlines()), screen
        # The finding stays on screen over its window, with the port it names: a later
        # screen (no trigger in between) still holds it.
        later = tmux.screen()
        assert "Accept queue overflow" in later and f"port {PORT}" in later, later
        _quit(tmux)


def test_report_after_the_load_names_the_closed_udp_socket(netns, tmux, tmp_path):
    port = 15353
    fault = F.UdpRcvbufErrors(port=port, rcvbuf=4096, datagrams=300)
    _start(tmux, netns, (120, 40), "--report-dir", str(tmp_path))
    _wait(tmux, lambda s: "drops by cause" in s and "every 1 s" in s, "the first refresh")
    title = f"UDP receive buffer full on port {port}"
    with F.Background(netns, fault) as bg:
        end = time.monotonic() + 60
        while time.monotonic() < end and title not in tmux.screen():
            bg.trigger()
            assert bg.truth().lo > 0  # the kernel dropped datagrams to the socket
            for _ in range(10):
                if title in tmux.screen():
                    break
                time.sleep(0.2)
        assert title in tmux.screen(), tmux.screen()
    # The load has ended and its socket is closed: two more refreshes sample the namespace
    # without it (each moves the drops' sparklines one step).
    assert f":{port} " not in subprocess.run(
        ["ip", "netns", "exec", netns, "ss", "-uln"], capture_output=True, text=True,
        check=True).stdout  # fmt: skip
    shown = {tmux.screen()}
    _wait(tmux, lambda s: (shown.add(s), len(shown) >= 3)[1], "two more refreshes")
    tmux("send-keys", "-t", "mon", "w")
    _wait(tmux, lambda s: "diagnose report of the last N seconds" in s, "the report dialog")
    # Enter writes the default file, --report-dir/lbtune-monitor-STAMP.md (keys that edit
    # the name do not pass through tmux to Textual reliably; the HTML rendering of the same
    # report is tests/tui/test_frame_window.py's).
    tmux("send-keys", "-t", "mon", "Enter")
    _wait(tmux, lambda s: "wrote " in s, "the report's status line")
    (out,) = tmp_path.glob("lbtune-monitor-*.md")
    report = out.read_text().replace("\\_", "_")  # markdown escapes underscores
    assert title in report, report
    assert f"SO_RCVBUF of the socket on udp port {port}" in report
    assert "the socket is not known" not in report and "net.core.rmem_default" not in report
    _quit(tmux)
