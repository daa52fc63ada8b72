"""`lab up/down` state files against a hostile run directory: a planted state file must not
make `lab down` kill processes for, or remove, a directory that is not a lab work
directory of this user; a run directory others can write is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lbtune.lab import session
from lbtune.lab.uml import LabError


@pytest.fixture
def fake_supervisor():  # type: ignore[no-untyped-def]
    """A live process whose command line looks like a lab supervisor's."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             "lbtune.lab.session", "supervise"])  # fmt: skip
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
