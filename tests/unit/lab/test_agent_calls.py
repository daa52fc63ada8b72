"""The VM guest agent's `call` requests (lbtune.lab.inguest.agent.run_call), run on the host: a call
forked from the agent's fork server gives the payload a fresh `python -m lbtune.lab.inguest.entry`
gives (value, error, output, exit, timeout), and the calls that must not fork do not."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from lbtune.lab.inguest.agent import Forker, run_call

REPO = Path(__file__).resolve().parents[3]
T = "tests.unit.lab.agent_targets:"


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    f = Forker()  # the server starts at the first forked call
    yield f


@pytest.fixture(autouse=True)
def _cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # a fresh `python -m` finds the targets from here, as the agent's


def both(tmp_path: Path, forker: Forker, target: str, args: list[Any],
         timeout: float = 60) -> tuple[dict[str, Any], dict[str, Any]]:
    """The payload forked, then fresh."""
    req = {"kind": "call", "target": target, "args": args, "timeout": timeout}
    return (run_call(req, tmp_path, "forked", forker), run_call(req, tmp_path, "fresh", None))


def test_a_value_is_the_same_forked_or_fresh(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "echo", [1, "two", {"3": [4]}])
    assert forked == fresh == {"ok": True, "value": [1, "two", {"3": [4]}], "output": ""}


def test_output_is_captured_stdout_then_stderr(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "noisy", ["x"])
    assert forked == fresh
    assert forked["output"] == "out:x\nerr:x\n" and forked["value"] == "x"
    # the capture files are not left behind
    assert sorted(p.name for p in (tmp_path / "calls" / "forked").iterdir()) == []


def test_an_exception_is_the_same_payload(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "fails", [])
    assert forked["ok"] is fresh["ok"] is False
    for key in ("exc_type", "error"):
        assert forked[key] == fresh[key]
    assert forked["error"] == "KeyError: 'no such thing'"
    assert "raise KeyError" in forked["traceback"] and forked["traceback"] in forked["output"]


def test_a_process_that_dies_reports_its_exit(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "dies", [3])
    assert forked == fresh
    assert forked["error"] == "the guest Python process exited 3 without a result"
    assert forked["traceback"] == "dying\n"


def test_a_timeout_kills_the_call(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "sleeps", [30], timeout=1.5)
    for p in (forked, fresh):
        assert p["error"] == "the guest Python process exited -9 without a result", p
        assert "lbtune-vm: timed out after 1.5 s" in p["traceback"]


def test_the_call_sees_its_workdir_and_no_stdin(tmp_path: Path, forker: Forker) -> None:
    forked, fresh = both(tmp_path, forker, T + "where", [])
    assert forked["value"]["workdir"] == str(tmp_path / "calls" / "forked")
    assert fresh["value"]["workdir"] == str(tmp_path / "calls" / "fresh")
    assert forked["value"]["stdin"] == fresh["value"]["stdin"] == "/dev/null"
    # forked by the fork server, not started by the asking process as the fresh one is
    assert fresh["value"]["ppid"] == os.getpid() != forked["value"]["ppid"]
    assert forker.failed is None


def test_concurrent_calls_each_get_their_own_answer(tmp_path: Path, forker: Forker) -> None:
    out: dict[int, Optional[dict[str, Any]]] = {}

    def one(i: int) -> None:
        req = {"kind": "call", "target": T + "noisy", "args": [str(i)], "timeout": 60}
        out[i] = run_call(req, tmp_path, f"c{i}", forker)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        got = out[i]
        assert got is not None and got["value"] == str(i)
        assert got["output"] == f"out:{i}\nerr:{i}\n"


class _Refuses(Forker):
    """A fork server that cannot fork (its process start raises)."""

    def __init__(self) -> None:
        super().__init__()

        class Ctx:
            def Process(self, **_: Any) -> Any:  # multiprocessing's name
                raise OSError(12, "Cannot allocate memory")

        self._ctx = Ctx()  # type: ignore[assignment]


def test_a_fork_server_that_fails_falls_back_to_fresh_processes(tmp_path: Path) -> None:
    f = _Refuses()
    req = {"kind": "call", "target": T + "echo", "args": [1], "timeout": 60}
    assert run_call(req, tmp_path, "a", f) == {"ok": True, "value": [1], "output": ""}
    assert f.failed == "OSError: [Errno 12] Cannot allocate memory"
    assert run_call(req, tmp_path, "b", f)["value"] == [1]  # and stays on fresh ones


class Never(Forker):
    def run(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("a call that must run fresh was forked")


def test_a_call_asked_fresh_is_not_forked(tmp_path: Path) -> None:
    req = {"kind": "call", "target": T + "where", "args": [], "timeout": 60, "fresh": True}
    got = run_call(req, tmp_path, "f", Never())
    assert got["ok"] and got["value"]["ppid"] == os.getpid()


def test_a_call_in_a_netns_is_not_forked(tmp_path: Path) -> None:
    req = {"kind": "call", "target": T + "echo", "args": [1], "timeout": 60,
           "netns": "lbtune-no-such-netns"}  # fmt: skip
    got = run_call(req, tmp_path, "n", Never())
    # run through `ip netns exec`, which refuses the namespace: no result, ip's message
    assert got["ok"] is False and "without a result" in got["error"]
    assert "lbtune-no-such-netns" in got["output"]


def test_calls_are_forked_only_while_the_host_asks(tmp_path: Path) -> None:
    from lbtune.lab.inguest import agent

    assert agent._call_forker(tmp_path) is None  # the default: a new interpreter per call
    (tmp_path / agent.FORK_CALLS).touch()
    first = agent._call_forker(tmp_path)
    assert isinstance(first, Forker) and agent._call_forker(tmp_path) is first
    (tmp_path / agent.FORK_CALLS).unlink()
    assert agent._call_forker(tmp_path) is None
