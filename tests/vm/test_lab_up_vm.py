"""`lbtune lab up --vm` keeps a VM guest up behind the lab lock: `lab status` says backend and
accelerator, a racing `lab up` exits busy without booting, `lab down` leaves no qemu, no host
network namespace and no file. One boot for the module (TCG boots take minutes when loaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbtune.lab.guests.vm import find_vm_image

pytestmark = pytest.mark.vm

BOOT_TIMEOUT = os.environ.get("LBTUNE_VM_BOOT_TIMEOUT", "600")


def _lbtune(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbtune", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def _processes_naming(text: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    out.append(int(entry))
            except OSError:
                continue
    return out


def test_lab_up_vm_status_down_leaves_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("VM lab unavailable: needs root")
    image = find_vm_image()  # LabUnavailable (an error here) when set-up did not prepare it
    run, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "LBTUNE_LAB_RUN_DIR": str(run), "TMPDIR": str(tmp),
           "LBTUNE_VM_BOOT_TIMEOUT": BOOT_TIMEOUT}  # fmt: skip
    workdir = ""
    try:
        up = _lbtune(env, "lab", "up", "--vm", timeout=float(BOOT_TIMEOUT) + 300)
        assert up.returncode == 0, up.stderr
        assert "lab is up: vm backend" in up.stdout
        assert "booting kernel" in up.stderr  # progress, on stderr

        status = _lbtune(env, "--json", "lab", "status")
        assert status.returncode == 0, status.stderr
        st = json.loads(status.stdout)
        assert st["up"] is True and st["ready"] is True
        assert st["backend"] == "vm"
        assert st["accelerator"] in ("kvm", "tcg") and st["accelerator_reason"]
        assert st["kernel"] == image.version
        assert st["boot_seconds"] > 0
        workdir = st["workdir"]
        owner = json.loads((Path(workdir) / "owner.json").read_text())
        assert owner["netns"] in _netns_names()
        assert _processes_naming(workdir), "qemu runs with the work directory"
        state = json.loads((run / "lab-up.json").read_text())
        assert state["cpus"] == 4 and state["nodes"] == {"0": "0-1", "1": "2-3"}
        assert "lbtune.vm=1" in state["cmdline"].split()  # what the guest's in_lab() checks

        text = _lbtune(env, "lab", "status")
        assert "vm backend" in text.stdout and f"accelerator {st['accelerator']}" in text.stdout

        racing = _lbtune(env, "lab", "up")  # UML or VM: the lock says one guest
        assert racing.returncode == 6, racing.stderr
        assert racing.stderr.count("\n") == 1 and "already up" in racing.stderr

        down = _lbtune(env, "lab", "down", timeout=180)
        assert down.returncode == 0, down.stderr
        assert "lab stopped" in down.stdout
        assert not _processes_naming(workdir)
        assert owner["netns"] not in _netns_names()
        assert list(tmp.iterdir()) == []
        assert not (run / "lab-up.json").exists()
        after = json.loads(_lbtune(env, "--json", "lab", "status").stdout)
        assert after["up"] is False
    finally:
        _lbtune(env, "lab", "down", timeout=180)
