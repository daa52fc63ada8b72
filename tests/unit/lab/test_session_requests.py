"""The lab that is up takes requests from any process, whichever backend it is: `session.attach()`
is a Guest speaking lbtune.lab.protocol to the guest agent, and `launch.run` uses it instead of
booting. The guest agent (lbtune.lab.inguest.agent) runs here on the host in the stand-in
lab's work directory, behind a stand-in supervisor, so no guest boots."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lbtune.lab import launch
from lbtune.lab.guests import session
from lbtune.lab.guests.session import SessionGuest
from lbtune.lab.progress import ProgressReader, Step
from lbtune.lab.protocol import READY, REBOOT, LabError

REPO = Path(__file__).resolve().parents[3]
T = "tests.unit.lab.agent_targets:"


def _wait_for(done, what: str, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def _up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str) -> Iterator[Path]:
    """A ready lab of `backend` whose agent runs on the host; yields its work directory."""
    monkeypatch.chdir(REPO)  # the agent's calls find the test targets from here
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    workdir = tmp_path / ("lbtune-vm.up" if backend == "vm" else "lbtune-lab-up")
    workdir.mkdir()
    sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                            "lbtune.lab.guests.session", "supervise"])  # fmt: skip
    _wait_for(lambda: b"supervise" in Path(f"/proc/{sup.pid}/cmdline").read_bytes(),
              "the stand-in supervisor never ran")  # fmt: skip
    # its own session: `down` kills the process groups of what names the work directory
    agent = subprocess.Popen([sys.executable, "-m", "lbtune.lab.inguest.agent", str(workdir)],
                             stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    _wait_for(lambda: (workdir / READY).exists(), "the agent never said ready")
    (run / session.STATE_FILE).write_text(json.dumps({
        "supervisor": sup.pid, "token": "0123456789abcdef", "started": 0, "backend": backend,
        "workdir": str(workdir), "ready": True}))  # fmt: skip
    try:
        yield workdir
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait()
        sup.kill()
        sup.wait()


@pytest.fixture
def vm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from _up(tmp_path, monkeypatch, "vm")


@pytest.fixture
def uml_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from _up(tmp_path, monkeypatch, "uml")


def test_a_vm_lab_that_is_up_takes_calls_and_argv(vm_up: Path) -> None:
    guest = session.attach()
    assert isinstance(guest, SessionGuest) and guest.backend == "vm"
    assert guest.call(T + "echo", [1, "two"], timeout=60) == [1, "two"]
    where = guest.call(T + "where", timeout=60)
    assert str(where["workdir"]).startswith(str(vm_up / "calls"))  # the call's own directory
    done = guest.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    with pytest.raises(LabError, match="KeyError") as caught:
        guest.call(T + "fails", timeout=60)
    assert "raise KeyError" in caught.value.guest_traceback
    # every answer was taken and its files removed
    assert list((vm_up / "res").iterdir()) == [] and list((vm_up / "req").iterdir()) == []


def test_a_call_in_an_up_lab_reports_progress(vm_up: Path) -> None:
    steps: list[Step] = []
    value = session.attach().call(  # type: ignore[union-attr]
        "tests.vm.guest_targets:report_steps", [["one", "two"]], timeout=60,
        watch=ProgressReader(steps.append).poll,
    )  # fmt: skip
    assert value
    assert [(s.name, s.state) for s in steps] == [
        ("one", "start"), ("one", "done"), ("two", "start"), ("two", "done")]


def test_down_stops_the_agent_with_a_stop_request(vm_up: Path) -> None:
    agents = session.processes_naming(str(vm_up))
    assert agents
    assert session.down(timeout=1) is True
    assert not vm_up.exists()  # down removed the work directory
    assert session.current() is None
    assert not any(session.pid_alive(p) for p in agents)


def test_the_agent_ends_at_a_stop_request(tmp_path: Path) -> None:
    from lbtune.lab.guests.api import AgentClient
    from lbtune.lab.protocol import stop_request

    agent = subprocess.Popen([sys.executable, "-m", "lbtune.lab.inguest.agent", str(tmp_path)],
                             stdin=subprocess.DEVNULL)  # fmt: skip
    try:
        AgentClient(tmp_path).send(stop_request())
        assert agent.wait(timeout=20) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert (tmp_path / REBOOT).read_text() == "0"


def test_launch_runs_in_the_lab_that_is_up_without_a_boot(
    uml_up: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_boot(*args: object, **kw: object) -> None:
        raise AssertionError("launch.run booted a guest although a lab is up")

    monkeypatch.setattr(launch, "UmlGuest", no_boot)
    assert launch.run(T + "echo", ["up"], timeout=60) == ["up"]


def test_launch_refuses_an_up_vm_lab_for_uml_runs(vm_up: Path) -> None:
    with pytest.raises(session.LabBusy, match="lab runs use the UML guest"):
        launch.run(T + "echo", ["up"], timeout=60)
