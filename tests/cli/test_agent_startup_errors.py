"""`lbtune ipvs agent` and `adapt` refuse what cannot work at once: one line, exit 2, no hang.

The agent once hung for ever when its second port could not be bound (the HTTP server it had
already made was shut down without ever having served), and `--duration nan` never ended.
Each case runs as a real process; the 60 s limit only keeps a regression from stalling the
suite (the assertion is the exit code and the message).
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest


def _lbtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbtune", *args], capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _refused(r: subprocess.CompletedProcess[str], *words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_the_same_port_twice_is_refused():
    p = str(_free_port())
    r = _lbtune("ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", p, "--haproxy-port", p,
                "--duration", "30")
    _refused(r, "--haproxy-port", "--agent-port")


def test_a_haproxy_port_in_use_is_refused():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        r = _lbtune("ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", "0",
                    "--haproxy-port", port, "--duration", "30")
    _refused(r, f"127.0.0.1:{port}", "in use")


def test_an_agent_port_in_use_is_refused():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        r = _lbtune("ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", port,
                    "--duration", "30")
    _refused(r, f"127.0.0.1:{port}", "in use")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_agent_duration_must_be_a_positive_number(value):
    r = _lbtune("ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", "0",
                "--duration", value)
    _refused(r, "--duration")


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_adapt_duration_must_be_a_positive_number(value, tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text('[[service]]\naddress = "10.0.0.100"\nport = 80\n'
                   '  [[service.real_server]]\n  address = "10.0.0.11"\n')
    r = _lbtune("ipvs", "adapt", str(cfg), "--dry-run", "--duration", value)
    _refused(r, "--duration")


@pytest.mark.parametrize(("args", "words"), [
    (("--allow", "10.0.0.0/33"), ("--allow", "10.0.0.0/33")),
    (("--allow", ","), ("--allow",)),
    (("--listen", "eth0"), ("--listen",)),
])  # fmt: skip
def test_bad_listen_and_allow_are_refused(args, words):
    r = _lbtune("ipvs", "agent", "--agent-port", "0", "--duration", "5", *args)
    _refused(r, *words)


def test_adapt_timeout_beyond_the_fetch_deadline_is_refused(tmp_path):
    """The fetch refuses a deadline over 30 s: adapt must not accept one that would make
    every agent look unreachable."""
    cfg = tmp_path / "dr.toml"
    cfg.write_text('[[service]]\naddress = "10.0.0.100"\nport = 80\n'
                   '  [[service.real_server]]\n  address = "10.0.0.11"\n')
    r = _lbtune("ipvs", "adapt", str(cfg), "--dry-run", "--timeout", "45", "--duration", "1")
    _refused(r, "--timeout")
