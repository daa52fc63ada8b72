"""`lbtune lab up --vm`, `lab status` and `lab run` with a VM lab, without booting anything:
flags and errors (one line, documented exit code), status of a VM session, the reaping of a VM
supervisor that died, and `in_lab()` in the VM guest."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lbtune.lab.guests import session
from lbtune.lab.inguest import entry as guest
from tests.conftest import run_cli

TOKEN = "0123456789abcdef"  # noqa: S105 - a session token, not a secret


@pytest.fixture
def run_dir(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    return run


def _one_line(r) -> None:  # type: ignore[no-untyped-def]
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_lab_run_refuses_vm_exit_2(run_dir):
    r = run_cli("lab", "run", "--vm")
    assert r.exit_code == 2 and "UML guest only" in r.stderr
    _one_line(r)


def test_lab_up_vm_without_an_image_is_exit_3_and_leaves_nothing(run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_VM_CACHE", str(tmp_path / "no-cache"))
    r = run_cli("lab", "up", "--vm")
    assert r.exit_code == 3, r.stderr
    assert ("no VM image" in r.stderr) if os.geteuid() == 0 else ("needs root" in r.stderr)
    _one_line(r)
    assert not (run_dir / session.STATE_FILE).exists()
    assert not session.processes_naming("lbtune.lab.guests.session")  # no supervisor started


def test_lab_up_vm_bad_boot_timeout_is_exit_2(run_dir, monkeypatch):
    monkeypatch.setenv(session.ENV_VM_BOOT_TIMEOUT, "soon")
    if os.geteuid() != 0:
        pytest.skip("needs root: the VM lab's root check comes first")
    r = run_cli("lab", "up", "--vm")
    assert r.exit_code == 2 and "LBTUNE_VM_BOOT_TIMEOUT" in r.stderr
    _one_line(r)


@pytest.mark.parametrize("flags", [["--vm"], []])
def test_a_racing_up_of_either_backend_is_busy_exit_6(run_dir, flags):
    with open(run_dir / session.LOCK_FILE, "w") as fh:  # a live supervisor holds the lock
        fcntl.flock(fh, fcntl.LOCK_EX)
        r = run_cli("lab", "up", *flags)
    assert r.exit_code == 6 and "already up" in r.stderr
    _one_line(r)


@pytest.fixture
def vm_up(run_dir, tmp_path):  # type: ignore[no-untyped-def]
    """The state of a ready VM session: a live process that looks like its supervisor."""
    workdir = tmp_path / "lbtune-vm.test"
    workdir.mkdir()
    sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                            "lbtune.lab.guests.session", "supervise", "--vm"])  # fmt: skip
    # Popen returns at fork: until the exec, /proc/PID/cmdline is still this test's, and
    # status would not recognise the supervisor (a race seen in 2 of 3 runs).
    deadline = time.monotonic() + 10
    while b"supervise" not in Path(f"/proc/{sup.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the stand-in supervisor never ran"
        time.sleep(0.01)
    lock = open(run_dir / session.LOCK_FILE, "w")  # noqa: SIM115 - held as the supervisor does
    fcntl.flock(lock, fcntl.LOCK_EX)
    (run_dir / session.STATE_FILE).write_text(json.dumps({
        "supervisor": sup.pid, "token": TOKEN, "started": 0, "backend": "vm",
        "workdir": str(workdir), "ready": True, "kernel": "6.1.0-56-amd64",
        "accelerator": "tcg", "accelerator_reason": "a KVM probe boot failed",
        "boot_seconds": 207.4, "phase": "ready"}))  # fmt: skip
    yield sup
    lock.close()
    sup.kill()
    sup.wait()


def test_status_says_backend_and_accelerator(vm_up):
    r = run_cli("lab", "status", "--json")
    assert r.exit_code == 0
    assert r.json["up"] is True and r.json["ready"] is True
    assert r.json["backend"] == "vm" and r.json["accelerator"] == "tcg"
    assert r.json["kernel"] == "6.1.0-56-amd64" and r.json["boot_seconds"] == 207.4
    r = run_cli("lab", "status")
    assert f"lab is up (ready, vm backend, supervisor pid {vm_up.pid})" in r.stdout
    assert "accelerator tcg (a KVM probe boot failed), booted in 207 s" in r.stdout


def test_lab_run_in_an_up_vm_lab_is_busy_exit_6(vm_up):
    r = run_cli("lab", "run", "--duration", "1")
    assert r.exit_code == 6 and "UML guest" in r.stderr
    _one_line(r)
    assert vm_up.poll() is None  # the VM lab stays up


def test_a_dead_vm_supervisors_guest_and_files_are_reaped(run_dir, tmp_path):
    tmp = tmp_path / "tmp"
    workdir = tmp / "lbtune-vm.dead"
    workdir.mkdir(parents=True)
    disk = tmp / "lbtune-vm.dead.state.img"
    disk.write_bytes(b"")
    # killed and not yet reaped by its parent (as after kill -9 when init reaps late): a zombie
    dead = subprocess.Popen(["sleep", "60"])
    dead.kill()
    while Path(f"/proc/{dead.pid}/stat").read_text().split(") ")[1][0] != "Z":
        pass
    qemu = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(workdir)],
                            env=dict(os.environ, **{session.ENV_SESSION: TOKEN}),
                            start_new_session=True)  # fmt: skip
    # Popen returns at fork: until the exec the stand-in's cmdline (and environment, which
    # the reaper matches) are still this test's
    while str(workdir).encode() not in Path(f"/proc/{qemu.pid}/cmdline").read_bytes():
        time.sleep(0.01)
    try:
        (workdir / "owner.json").write_text(json.dumps(
            {"supervisor": dead.pid, "qemu": qemu.pid, "netns": "lbtune-vm-0000test"}))  # fmt: skip
        # died while booting: the state file has no work directory yet, only the tmpdir
        (run_dir / session.STATE_FILE).write_text(json.dumps(
            {"supervisor": dead.pid, "token": TOKEN, "started": 0, "backend": "vm",
             "tmpdir": str(tmp)}))  # fmt: skip
        r = run_cli("lab", "status", "--json")
        assert r.exit_code == 0 and r.json["up"] is False
        assert r.json["reaped"] == {"supervisor": dead.pid, "pids": [qemu.pid],
                                    "workdir": str(workdir)}  # fmt: skip
        assert qemu.wait(timeout=10) == -9
        assert list(tmp.iterdir()) == []
        assert not (run_dir / session.STATE_FILE).exists()
    finally:
        dead.wait()
        if qemu.poll() is None:
            qemu.kill()
            qemu.wait()


@pytest.mark.parametrize(
    "env, cmdline, expected",
    [
        ({"LBTUNE_IN_VM": "1"}, "console=ttyS0 rdinit=/init lbtune.vm=1 isolcpus=3\n", True),
        ({}, "console=ttyS0 rdinit=/init lbtune.vm=1\n", False),  # no env marker
        ({"LBTUNE_IN_VM": "1"}, "console=ttyS0 rdinit=/init\n", False),  # not the VM's kernel
        ({"LBTUNE_IN_VM": "1"}, "console=ttyS0 xlbtune.vm=1x\n", False),  # a word, not a substring
    ],
)
def test_in_lab_in_the_vm_guest(tmp_path, monkeypatch, env, cmdline, expected):
    path = tmp_path / "cmdline"
    path.write_text(cmdline)
    monkeypatch.delenv("LBTUNE_IN_LAB", raising=False)
    monkeypatch.delenv("LBTUNE_IN_VM", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(guest, "PROC_CMDLINE", str(path))
    assert guest.in_lab() is (expected and not guest.running_on_uml())


def test_in_lab_on_this_host_with_the_env_marker_is_false(monkeypatch):
    monkeypatch.setenv("LBTUNE_IN_VM", "1")
    if guest.VM_CMDLINE_MARK in Path("/proc/cmdline").read_text().split():
        pytest.skip("host-only test: this kernel was booted by the VM lab")
    assert guest.in_lab() is False


def test_the_vm_boots_with_the_mark_in_lab_checks():
    from lbtune.lab.guests.vm import CMDLINE_MARK, VmImage, qemu_argv

    image = VmImage("6.1.0-56-amd64", "/k", "/i", "/m")
    argv = qemu_argv("qemu", image, "tcg", "/w", "/s", "/c", ("isolcpus=3",))
    assert CMDLINE_MARK in argv[argv.index("-append") + 1].split()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the VM lab checks need it")
def test_a_python_under_tmp_is_refused_before_any_boot(monkeypatch, tmp_path):
    """The guest mounts its own /tmp and /run: a venv there would be invisible in it (the agent
    exited 127 when a checkout under /tmp booted); refused in one sentence instead."""
    from lbtune.lab.guests import vm
    from lbtune.lab.guests.uml import LabUnavailable

    vm.check_host()  # this checkout and venv are visible in the guest
    for path in ("/tmp/checkout/.venv/bin/python", "/run/x/bin/python3"):
        monkeypatch.setattr(sys, "executable", path)
        with pytest.raises(LabUnavailable, match="mounts its own /tmp and /run") as e:
            vm.check_host()
        assert path in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setattr(sys, "executable", "/tmpfoo/bin/python")  # a prefix, not the directory
    vm.check_host()
    # a venv outside /tmp that is a symlink into it: the guest follows the link to nothing
    outside = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        (outside / "venv").symlink_to(tmp_path)
        monkeypatch.setattr(sys, "executable", str(outside / "venv" / "python3"))
        with pytest.raises(LabUnavailable, match=str(tmp_path)):
            vm.check_host()
    finally:
        shutil.rmtree(outside)
