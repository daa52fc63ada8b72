"""`lbtune lab up` with real processes: two racing `up`s boot one guest, and the guest of a
supervisor killed with SIGKILL is found and reaped by the next `lab status` / `lab up`.

Every command runs as its own `python -m lbtune` process with a private run directory and
TMPDIR, so the guests found are this test's alone (other labs may run on the machine).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lbtune.lab.guests.session import processes_naming
from lbtune.lab.guests.uml import LabKernel, iter_lab_workdirs

pytestmark = pytest.mark.lab


@pytest.fixture
def lab_env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return dict(os.environ, TMPDIR=str(tmp), LBTUNE_LAB_RUN_DIR=str(tmp_path / "run"))


def _lbtune(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lbtune", "lab", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env,
    )  # fmt: skip


def _run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = _lbtune(env, *args)
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return False
    return text[text.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _guest(env: dict[str, str]) -> list[int]:
    """Live linux.uml processes of this test's labs (their uml_dir is under its TMPDIR)."""
    out = []
    for pid in processes_naming(env["TMPDIR"]):
        try:
            with open(f"/proc/{pid}/comm", encoding="utf-8") as fh:
                comm = fh.read().strip()
        except OSError:
            continue
        if comm == "linux.uml" and _alive(pid):
            out.append(pid)
    return out


def _down(env: dict[str, str]) -> None:
    _run(env, "down")


def test_two_racing_ups_boot_one_guest(lab_kernel: LabKernel, lab_env: dict[str, str]) -> None:
    first, second = _lbtune(lab_env, "up", "--json"), _lbtune(lab_env, "up", "--json")
    try:
        results = [(p.wait(timeout=180), *p.communicate()) for p in (first, second)]
        codes = sorted(code for code, _, _ in results)
        assert codes == [0, 6], results
        _, loser_out, loser_err = next(r for r in results if r[0] == 6)
        assert "Traceback" not in loser_err
        error = json.loads(loser_out)["error"]
        assert error["code"] == 6 and "already up or coming up" in error["message"]
        winner = json.loads(next(r for r in results if r[0] == 0)[1])
        # one work directory, one supervisor: the loser booted nothing
        assert [str(p) for p in iter_lab_workdirs(lab_env["TMPDIR"])] == [winner["workdir"]]
        code, out, _ = _run(lab_env, "status", "--json")
        assert code == 0 and json.loads(out)["supervisor"] == winner["supervisor"]
        assert _guest(lab_env) != []
    finally:
        _down(lab_env)
    assert _guest(lab_env) == [] and list(iter_lab_workdirs(lab_env["TMPDIR"])) == []


@pytest.mark.parametrize("command", ["status", "up"])
def test_a_killed_supervisors_guest_is_reaped(
    lab_kernel: LabKernel, lab_env: dict[str, str], command: str
) -> None:
    code, out, err = _run(lab_env, "up", "--json")
    assert code == 0, err
    supervisor = json.loads(out)["supervisor"]
    try:
        orphans = _guest(lab_env)
        assert orphans, "no guest is running after lab up"
        os.kill(supervisor, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _alive(supervisor) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(supervisor)
        time.sleep(1.0)
        assert set(_guest(lab_env)) == set(orphans)  # nothing took the guest down: it leaked

        code, out, err = _run(lab_env, command)
        assert code == 0 and "Traceback" not in err, err
        lines = out.splitlines()
        assert lines[0].startswith(f"the lab supervisor (pid {supervisor}) had died: killed its ")
        assert "orphaned guest process(es), removed its work directory" in lines[0]
        assert not any(pid in _guest(lab_env) for pid in orphans)
        if command == "status":
            assert lines[1:] == ["no lab is up"]
            assert _guest(lab_env) == [] and list(iter_lab_workdirs(lab_env["TMPDIR"])) == []
        else:  # `up` reaped the dead lab's guest and booted a new one
            assert lines[1].startswith("lab is up (supervisor pid ") and len(lines) == 2
            assert len(list(iter_lab_workdirs(lab_env["TMPDIR"]))) == 1
            assert _guest(lab_env) != []
        # nothing is left to reap: the next command says nothing about it
        code, out, _ = _run(lab_env, "status")
        assert code == 0 and "had died" not in out
    finally:
        _down(lab_env)
    assert _guest(lab_env) == [] and list(iter_lab_workdirs(lab_env["TMPDIR"])) == []
