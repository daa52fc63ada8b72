"""`lab up/down` state files against a hostile run directory: a planted state file must not
make `lab down` kill processes for, or remove, a directory that is not a lab work
directory of this user; a run directory others can write is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lbtune.lab.guests import session
from lbtune.lab.guests.uml import LabError


def _wait_for_exec(pid: int, needle: bytes, what: str) -> None:
    """Until /proc/PID/what shows the new program's (Popen returns when the exec closes its
    error pipe, before the kernel has set up the new command line and environment)."""
    deadline = time.monotonic() + 10
    while needle not in Path(f"/proc/{pid}/{what}").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, f"pid {pid} never exec'd"
        time.sleep(0.01)


@pytest.fixture
def fake_supervisor():  # type: ignore[no-untyped-def]
    """A live process whose command line looks like a lab supervisor's."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "lbtune.lab.guests.session", "supervise"])  # fmt: skip
    _wait_for_exec(proc.pid, b"supervise", "cmdline")
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_planted_state_file_naming_another_directory_is_not_believed(
    tmp_path, monkeypatch, fake_supervisor
):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    victim = tmp_path / "home"  # not a lab work directory
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    (run / session.STATE_FILE).write_text(json.dumps(
        {"supervisor": fake_supervisor, "workdir": str(victim), "started": 0}))  # fmt: skip
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    assert session.current() is None
    assert session.down() is False
    assert (victim / "precious").read_text() == "keep me"
    os.kill(fake_supervisor, 0)  # still alive: nothing was killed for it
    assert not (run / session.STATE_FILE).exists()  # the stale file is gone


def test_a_run_directory_others_can_write_is_refused(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o777)
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    with pytest.raises(LabError, match="only it can write"):
        session.current()


def test_a_run_directory_that_is_a_symlink_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "run").symlink_to(target)
    monkeypatch.setenv(session.ENV_RUN_DIR, str(tmp_path / "run"))
    with pytest.raises(LabError, match="not a directory of this user"):
        session.current()


@pytest.fixture
def orphan(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A state file of a supervisor that died, and a 'guest' (own session) carrying its token."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    token = "0123456789abcdef"  # noqa: S105 - a session token, not a secret
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / session.STATE_FILE).write_text(json.dumps(
        {"supervisor": dead.pid, "token": token, "started": 0}))  # fmt: skip
    guest = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=dict(os.environ, **{session.ENV_SESSION: token}),
                             start_new_session=True)  # fmt: skip
    # the reaper matches the environment, empty until the exec is done (failed once)
    _wait_for_exec(guest.pid, f"{session.ENV_SESSION}={token}".encode(), "environ")
    yield run, dead.pid, guest
    guest.kill()
    guest.wait()


def test_the_guest_of_a_dead_supervisor_is_reaped_once(orphan) -> None:  # type: ignore[no-untyped-def]
    run, dead, guest = orphan
    reaped = session.reap_dead()
    assert reaped is not None and reaped.pids == (guest.pid,) and reaped.supervisor == dead
    assert guest.wait(timeout=10) == -9
    assert reaped.describe() == (f"the lab supervisor (pid {dead}) had died: "
                                 "killed its 1 orphaned guest process(es)")  # fmt: skip
    assert not (run / session.STATE_FILE).exists()
    assert session.reap_dead() is None


def test_nothing_is_reaped_while_the_lock_is_held(orphan) -> None:  # type: ignore[no-untyped-def]
    import fcntl

    run, _, guest = orphan
    with open(run / session.LOCK_FILE, "w") as fh:  # a live supervisor holds it
        fcntl.flock(fh, fcntl.LOCK_EX)
        assert session.reap_dead() is None
        with pytest.raises(session.LabBusy, match="already up or coming up"):
            session.up()
    assert guest.poll() is None and (run / session.STATE_FILE).exists()
