"""tests/sigterm.py, proved on a tiny suite run by a real pytest in a subprocess: a SIGTERM in
the middle of a test tears the fixtures down (a second SIGTERM during the teardown does not
cut it short) and pytest exits 2; without the plugin the same SIGTERM leaves the fixture up."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]

SUITE = '''
import pathlib, time
import pytest

MARKS = pathlib.Path(__file__).parent

@pytest.fixture(scope="session")
def resource():
    (MARKS / "setup").touch()
    yield
    (MARKS / "teardown-started").touch()
    time.sleep(1.0)  # the parent sends a second SIGTERM here
    (MARKS / "teardown").touch()

def test_long(resource):
    (MARKS / "running").touch()
    time.sleep(60)
'''


def _wait_for(path: pathlib.Path, proc: subprocess.Popen) -> None:  # type: ignore[type-arg]
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None, f"pytest ended before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} within 60 s"
        time.sleep(0.02)


def _start(tmp_path: pathlib.Path, *plugin: str) -> subprocess.Popen:  # type: ignore[type-arg]
    (tmp_path / "test_tiny.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LBTUNE_REQUIRE_TIERS")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), "-c", os.devnull, "test_tiny.py"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def test_sigterm_tears_the_fixtures_down_and_exits_interrupted(tmp_path: pathlib.Path) -> None:
    proc = _start(tmp_path, "-p", "tests.sigterm")
    try:
        _wait_for(tmp_path / "running", proc)
        proc.send_signal(signal.SIGTERM)
        _wait_for(tmp_path / "teardown-started", proc)
        proc.send_signal(signal.SIGTERM)  # ignored: the teardown goes on
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert (tmp_path / "teardown").exists(), out
    assert proc.returncode == 2, out  # pytest's "interrupted"
    assert "SIGTERM" in out


def test_without_the_plugin_sigterm_leaves_the_fixture_up(tmp_path: pathlib.Path) -> None:
    # the control: the default action kills pytest before any teardown
    proc = _start(tmp_path)
    try:
        _wait_for(tmp_path / "running", proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGTERM
    assert (tmp_path / "setup").exists() and not (tmp_path / "teardown-started").exists()
