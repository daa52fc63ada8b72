"""A VM guest kept up by `lbtune lab up --vm` takes requests from another process:
`session.attach()` is a Guest speaking the one request protocol (lbtune.lab.protocol) to the
guest agent, and `lab down` still leaves nothing. One boot for the module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lbtune.lab.guests import session
from lbtune.lab.guests.vm import find_vm_image
from lbtune.lab.progress import ProgressReader, Step

pytestmark = pytest.mark.vm

BOOT_TIMEOUT = os.environ.get("LBTUNE_VM_BOOT_TIMEOUT", "600")


def _lbtune(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbtune", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def test_an_up_vm_lab_runs_argv_and_calls_for_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.geteuid() != 0:
        pytest.skip("VM lab unavailable: needs root")
    image = find_vm_image()
    run, tmp = tmp_path / "run", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "LBTUNE_LAB_RUN_DIR": str(run), "TMPDIR": str(tmp),
           "LBTUNE_VM_BOOT_TIMEOUT": BOOT_TIMEOUT}  # fmt: skip
    monkeypatch.setenv(session.ENV_RUN_DIR, str(run))
    try:
        up = _lbtune(env, "lab", "up", "--vm", timeout=float(BOOT_TIMEOUT) + 300)
        assert up.returncode == 0, up.stderr
        guest = session.attach()
        assert guest is not None and guest.backend == "vm"

        done = guest.run(["uname", "-r"], timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == image.version

        steps: list[Step] = []
        where = guest.call("tests.vm.guest_targets:report_steps", [["one"]], timeout=300,
                           watch=ProgressReader(steps.append).poll)  # fmt: skip
        assert where["workdir"].startswith(str(Path(guest.session.workdir) / "calls"))
        assert [(s.name, s.state) for s in steps] == [("one", "start"), ("one", "done")]

        down = _lbtune(env, "lab", "down", timeout=180)
        assert down.returncode == 0, down.stderr
        assert list(tmp.iterdir()) == []
    finally:
        _lbtune(env, "lab", "down", timeout=180)
