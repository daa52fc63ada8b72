"""tests/vm_tier.py, the vm tier's runner: a second run only for modules whose guest kernel
wedged, and only when every failure was in them. Real pytest runs of a small suite stand in for
the VM modules: its tests record a wedge in tests/vm/conftest.py as the `vm` fixture does when
lbtune.lab.guests.vm raises GuestWedged (a real wedge of the guest kernel:
tests/vm/test_vm_wedge.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.vm_tier import rerun_modules

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
import os, time
import pytest
from tests.vm import conftest as vm_conftest

pytestmark = pytest.mark.vm
SECOND = bool(os.environ.get("LBTUNE_VM_ONLY"))
MODE = os.environ["VM_TIER_MODE"]


def _wedge(name):
    vm_conftest._wedged[name] = "the VM guest kernel wedged: request 000011 unanswered\\nvCPUs: ..."


def test_wedges():
    if MODE == "sleep":
        open(os.environ["VM_TIER_STARTED"], "w").close()
        time.sleep(60)
    if not SECOND or MODE == "wedge-twice":
        _wedge("test_a.py")
        raise AssertionError("the VM guest kernel wedged")


def test_after_the_wedge():
    if not SECOND or MODE == "wedge-twice":
        raise AssertionError("the VM guest is not asked any more")
"""

OTHER = """
import os
import pytest
pytestmark = pytest.mark.vm


def test_elsewhere():
    assert os.environ["VM_TIER_MODE"] != "other-fails"
"""


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vm: the VM lab\n")
    (tmp_path / "test_a.py").write_text(SUITE)
    (tmp_path / "test_b.py").write_text(OTHER)
    return tmp_path


def _tier(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    suite = _suite(tmp_path)
    env = {**os.environ, "VM_TIER_MODE": mode, "VM_TIER_STARTED": str(tmp_path / "started")}
    env.pop("LBTUNE_VM_ONLY", None)
    args = ["-c", str(suite / "pytest.ini"), "--rootdir", str(suite), "-p", "tests.vm.conftest"]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.vm_tier", *args, "-p", "no:cacheprovider", str(suite)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _run(tmp_path: Path, mode: str) -> tuple[int, str]:
    proc = _tier(tmp_path, mode)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def test_only_wedged_modules_where_every_failure_was() -> None:
    wedged = {"tests/vm/test_a.py": "report"}
    assert rerun_modules({"failed": ["tests/vm/test_a.py::t1", "tests/vm/test_a.py::t2"],
                          "wedged": wedged}) == ["tests/vm/test_a.py"]  # fmt: skip
    assert rerun_modules({"failed": ["tests/vm/test_a.py::t1", "tests/vm/test_b.py::t"],
                          "wedged": wedged}) == []  # fmt: skip
    assert rerun_modules({"failed": ["tests/vm/test_b.py::t"], "wedged": {}}) == []
    assert rerun_modules({}) == []


def test_a_wedged_module_runs_again_and_its_second_run_decides(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "wedge-once")
    assert code == 0, out
    first, second = out.split("vm tier: the guest kernel wedged in test_a.py", 1)
    assert "2 failed, 1 passed" in first  # the first run's failures stay in the log
    assert "VM guest wedged in test_a.py" in first and "request 000011" in first
    assert "2 passed, 1 deselected" in second  # test_b.py is not run again


def test_a_second_wedge_fails_the_tier(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "wedge-twice")
    assert code == 1, out
    assert out.count("VM guest wedged in test_a.py") == 2
    assert out.count("vm tier: the guest kernel wedged") == 1


def test_a_failure_outside_the_wedged_module_is_not_run_again(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "other-fails")
    assert code == 1, out
    assert "3 failed" in out and "vm tier:" not in out


def test_sigterm_reaches_pytest_once_and_nothing_runs_after_it(tmp_path: Path) -> None:
    proc = _tier(tmp_path, "sleep")
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0, out
    assert "vm tier:" not in out  # no second run after a signal
