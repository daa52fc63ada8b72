"""Every long-running command stops on SIGTERM with exit 0: systemd's `systemctl stop` sends
SIGTERM and counts any other exit status as a failure (issue 32). Ctrl-C (SIGINT) at a
terminal stays an interruption, 130, for the daemons that had it.

Each daemon runs as a real process (`python -m lbtune`, a fresh interpreter as systemd starts
it), inside a throwaway namespace where it takes --netns; it is stopped only once it said it is
ready (its listening line, or its first round's line), so the signal reaches the serving loop,
not the start-up. `lbtune ipvs adapt` runs `--dry-run` here (the host kernel has no IPVS); its
stop with weights to put back is tests/lab/test_adapt_lab.py. `lbtune monitor` is interactive:
it runs on a pseudo-terminal, over the 48-CPU fixture, and SIGTERM leaves it with 0 too.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
READY_WAIT = 60.0  # seconds a daemon may take to say it is ready (a bound, not a timing check)


class Daemon:
    """A running `python -m lbtune ARGS`, its stdout and stderr collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: pathlib.Path) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "lbtune", *args], cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)  # fmt: skip
        self.out: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._readers = [threading.Thread(target=self._read, args=(name,), daemon=True)
                         for name in self.out]  # fmt: skip
        for t in self._readers:
            t.start()

    def _read(self, name: str) -> None:
        stream = getattr(self.proc, name)
        for line in stream:
            self.out[name].append(line)

    def text(self, name: str) -> str:
        return "".join(self.out[name])

    def wait_ready(self, stream: str, needle: str) -> None:
        deadline = time.monotonic() + READY_WAIT
        while needle not in self.text(stream):
            assert self.proc.poll() is None, (f"exited {self.proc.returncode} before it was "
                                              f"ready: {self.text('stderr')}")  # fmt: skip
            assert time.monotonic() < deadline, f"not ready: {self.text('stderr')}"
            time.sleep(0.05)

    def stop(self, sig: int) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        for t in self._readers:
            t.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def daemons(tmp_path: pathlib.Path) -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        d.kill()


def _env(tmp_path: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBTUNE_")}
    env.update(PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
               LBTUNE_STATE_DIR=str(tmp_path / "state"))  # fmt: skip
    return env


ADAPT_CONFIG = """\
[[service]]
address = "10.0.0.100"
port = 80
  [[service.real_server]]
  address = "10.0.0.11"
  agent = "http://127.0.0.1:1/"
"""

# name -> (arguments after `--netns NS`, or None for a command that takes no --netns;
#          the stream and text that say it is ready)
DAEMONS = {
    "exporter": (["exporter", "--listen", "127.0.0.1:0"], "stdout", "lbtune exporter on http"),
    "ipvs agent": (["ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", "0"], "stdout",
                   "agent for port 80 on http://127.0.0.1:"),
    "ipvs adapt": (["ipvs", "adapt", "dr.toml", "--dry-run", "--interval", "0.5"], "stdout",
                   "unreachable"),
    "ipvs serve": (["ipvs", "serve"], "stderr", "listening on"),
}  # fmt: skip


def _start(name: str, netns: str, tmp_path: pathlib.Path, daemons: list[Daemon]) -> Daemon:
    (tmp_path / "dr.toml").write_text(ADAPT_CONFIG)
    args, stream, needle = DAEMONS[name]
    pre = [] if name == "ipvs serve" else ["--netns", netns]  # serve: the host's own IPVS
    d = Daemon([*pre, *args], _env(tmp_path), tmp_path)
    daemons.append(d)
    d.wait_ready(stream, needle)
    return d


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_sigterm_is_a_clean_stop(name: str, netns: str, tmp_path: pathlib.Path,
                                 daemons: list[Daemon]) -> None:  # fmt: skip
    d = _start(name, netns, tmp_path, daemons)
    code = d.stop(signal.SIGTERM)
    err = d.text("stderr")
    assert code == 0, f"{name}: exit {code} on SIGTERM: {err}"
    assert "Traceback" not in err and "interrupted" not in err, err


@pytest.mark.parametrize("name", ["exporter", "ipvs agent", "ipvs adapt"])
def test_ctrl_c_is_still_an_interruption(name: str, netns: str, tmp_path: pathlib.Path,
                                         daemons: list[Daemon]) -> None:  # fmt: skip
    d = _start(name, netns, tmp_path, daemons)
    code = d.stop(signal.SIGINT)
    err = d.text("stderr")
    assert code == 130, f"{name}: exit {code} on SIGINT: {err}"
    assert err.endswith("lbtune: interrupted\n") and "Traceback" not in err, err


def _read(fd: int, wait: float) -> bytes:
    ready, _, _ = select.select([fd], [], [], wait)
    if not ready:
        return b""
    try:
        return os.read(fd, 65536) or b"\0"  # b"\0": the terminal closed
    except OSError:  # EIO: every process on the terminal is gone
        return b"\0"


def test_monitor_on_a_terminal_stops_on_sigterm(tmp_path: pathlib.Path) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    tree = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
    env = {**_env(tmp_path), "TERM": "xterm-256color"}
    proc = subprocess.Popen([sys.executable, "-m", "lbtune", "--root", str(tree), "monitor"],
                            stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)  # fmt: skip
    os.close(slave)
    screen = b""
    try:
        deadline = time.monotonic() + READY_WAIT
        while b"softnet" not in screen.lower():  # a panel is drawn: the app runs
            assert proc.poll() is None and time.monotonic() < deadline, screen[-2000:]
            screen += _read(master, 0.5)
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 60
        while proc.poll() is None:  # read what it writes on the way out, or it blocks
            assert time.monotonic() < deadline, "still running 60 s after SIGTERM"
            screen += _read(master, 0.2)
        code = proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert code == 0, screen[-2000:]
    assert b"Traceback" not in screen and b"interrupted" not in screen
