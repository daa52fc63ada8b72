"""The embedded lab runner: boot UML, run code in it, get results, leave nothing behind."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from lbtune.host.deadline import wait_until
from lbtune.lab.guests.uml import (
    FPU_LEGACY,
    LabError,
    LabKernel,
    LabResult,
    LabTimeout,
    iter_lab_workdirs,
    process_group_members,
    run_in_lab,
    run_pytest_in_lab,
)

pytestmark = pytest.mark.lab

GUEST_TESTS = Path(__file__).parent / "guest"


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Lab work directories go to a private temp dir, and HOME too, to spot leftovers."""
    tmp = tmp_path / "tmp"
    home = tmp_path / "home"
    tmp.mkdir()
    home.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("HOME", str(home))
    return tmp_path


def test_lab_kernel_reports_uml_version(lab_kernel: LabKernel) -> None:
    assert lab_kernel.version[0].isdigit()
    assert os.path.isfile(os.path.join(lab_kernel.modules_dir, "modules.dep"))
    assert lab_kernel.fpu_mode in ("native", "shim", "legacy")


def test_boot_runs_kernel_release_and_leaves_nothing(
    lab_kernel: LabKernel, private_tmp: Path
) -> None:
    result = run_in_lab("lbtune.lab.inguest.checks:kernel_release", kernel=lab_kernel)

    assert isinstance(result, LabResult)
    assert result.value == lab_kernel.version
    assert result.value != os.uname().release
    assert result.exit_status == 0
    assert "Linux version" in result.console
    # it powered itself off (exit 0), not killed by the runner's timeout (-9): a condition,
    # not a time limit (boot time is no claim of the tests)
    assert result.uml_returncode == 0, result.console[-2000:]
    assert list(iter_lab_workdirs(str(private_tmp / "tmp"))) == []
    assert not (private_tmp / "home" / ".uml").exists()


def test_ipvs_version_matches_proc_net_ip_vs(lab_kernel: LabKernel) -> None:
    report = run_in_lab("lbtune.lab.inguest.checks:ipvs_version_report", kernel=lab_kernel).value

    netlink, proc = report["netlink"], report["proc"]
    assert proc["header"].startswith(f"IP Virtual Server version {netlink['version']} ")
    assert netlink["version"] == proc["version"]
    assert netlink["conn_tab_size"] == proc["conn_tab_size"] > 0
    assert netlink["version_code"] >> 16 >= 1


def test_guest_exception_comes_back_as_lab_error(lab_kernel: LabKernel) -> None:
    with pytest.raises(LabError) as caught:
        run_in_lab(
            "lbtune.lab.inguest.checks:load_module", "lbtune-no-such-module", kernel=lab_kernel
        )

    err = caught.value
    assert "KernelFeatureMissing" in str(err)
    assert "lbtune-no-such-module" in str(err)
    assert err.guest_traceback.startswith("Traceback (most recent call last):")
    assert "in load_module" in err.guest_traceback
    assert err.exc_type == "lbtune.lab.inguest.checks.KernelFeatureMissing"
    assert err.result is not None and err.result.exit_status == 1


def test_bad_target_is_rejected_before_booting() -> None:
    with pytest.raises(ValueError):
        run_in_lab("lbtune.lab.inguest.checks.kernel_release")
    with pytest.raises(TypeError):
        run_in_lab("lbtune.lab.inguest.checks:load_module", object())


def test_guest_pytest_passes(lab_kernel: LabKernel) -> None:
    result = run_pytest_in_lab(str(GUEST_TESTS / "test_in_guest.py"), kernel=lab_kernel)

    assert result.exit_status == 0, result.output
    assert "2 passed" in result.output


def test_guest_pytest_failure_reports_nonzero_exit(lab_kernel: LabKernel) -> None:
    nodeid = f"{GUEST_TESTS / 'failing_in_guest.py'}::test_fails_on_purpose"
    result = run_pytest_in_lab(nodeid, kernel=lab_kernel)

    assert result.exit_status == 1
    assert "deliberate failure inside the lab guest" in result.output
    assert "1 failed" in result.output


def test_timeout_kills_the_whole_uml_process_group(
    lab_kernel: LabKernel, private_tmp: Path
) -> None:
    # The guest sleeps 600 s: LabTimeout at all proves the 5 s timeout fired and killed it.
    with pytest.raises(LabTimeout) as caught:
        run_in_lab("time:sleep", 600, timeout=5, kernel=lab_kernel)

    assert process_group_members(caught.value.pgid) == []
    assert list(iter_lab_workdirs(str(private_tmp / "tmp"))) == []


def _uml_processes_under(directory: Path) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(directory).encode() in f.read():
                    pids.append(int(pid))
        except (OSError, ValueError):
            continue
    return pids


def test_sigterm_to_the_caller_tears_the_guest_down(
    lab_kernel: LabKernel, tmp_path: Path
) -> None:
    # A bench script or test run stopped by `timeout` gets SIGTERM, whose default action
    # would kill it and leave its UML guest running: run_in_lab turns it into
    # KeyboardInterrupt, and the guest's whole process group goes with the caller.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import sys; from lbtune.lab.guests.uml import run_in_lab\n"
            "try:\n    run_in_lab('time:sleep', 600, timeout=600)\n"
            "except KeyboardInterrupt:\n    sys.exit(143)\n")
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(Path(__file__).parents[2]))
    caller = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        # the guest is up once a UML process runs from the caller's work directory
        assert wait_until(lambda: any(p != caller.pid for p in _uml_processes_under(tmp)),
                          120, 0.2), "no UML guest started"
        caller.send_signal(signal.SIGTERM)
        assert caller.wait(timeout=120) == 143
    finally:
        if caller.poll() is None:
            caller.kill()
        left = _uml_processes_under(tmp)
        for pid in left:  # a failing run does not leave its guest on the host either
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert left == []
    assert list(iter_lab_workdirs(str(tmp))) == []


def test_concurrent_runs_do_not_collide(lab_kernel: LabKernel) -> None:
    results: list[LabResult] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(run_in_lab("lbtune.lab.inguest.checks:kernel_info", kernel=lab_kernel))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert [r.value["uml"] for r in results] == [True, True]


def test_legacy_fpu_mode_runs_ipvs(lab_kernel: LabKernel) -> None:
    """The no-compiler fallback: seccomp hides xstate ptrace, the guest avoids AVX."""
    legacy = dataclasses.replace(lab_kernel, fpu_mode=FPU_LEGACY)
    result = run_in_lab("lbtune.lab.inguest.checks:ipvs_version_report", kernel=legacy)

    assert result.fpu_mode == FPU_LEGACY
    assert result.value["netlink"]["version"] == result.value["proc"]["version"]
