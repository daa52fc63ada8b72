"""A VM guest whose supervisor is killed (kill -9 of a test run) leaves nothing behind for long:
the next boot's reap_stale kills its qemu, deletes its host netns and removes its files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lbtune.lab.guests.uml import process_group_members
from lbtune.lab.guests.vm import find_vm_image, reap_stale

pytestmark = pytest.mark.vm


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_reap_stale_cleans_up_after_a_killed_supervisor(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("VM lab unavailable: needs root")
    find_vm_image()  # LabUnavailable (an error here) when set-up did not prepare the image
    env = {**os.environ, "TMPDIR": str(tmp_path), "LBTUNE_VM_ACCEL": "tcg"}
    code = "from lbtune.lab.guests.vm import VmGuest; VmGuest.boot(timeout=600)"
    sup = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 60
        owners: list[Path] = []
        while not owners and time.monotonic() < deadline and sup.poll() is None:
            owners = list(tmp_path.glob("lbtune-vm.*/owner.json"))
            time.sleep(0.1)
        assert owners, "the supervisor never started qemu"
        owner = json.loads(owners[0].read_text())
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        assert process_group_members(owner["qemu"]), "qemu should outlive its supervisor"
        assert owner["netns"] in _netns_names()
        assert reap_stale(str(tmp_path)) == [str(owners[0].parent)]
        deadline = time.monotonic() + 10
        while process_group_members(owner["qemu"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not process_group_members(owner["qemu"])
        assert owner["netns"] not in _netns_names()
        assert list(tmp_path.iterdir()) == []
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        reap_stale(str(tmp_path))


def test_reap_stale_leaves_a_live_supervisor_alone(tmp_path: Path) -> None:
    wd = tmp_path / "lbtune-vm.live"
    wd.mkdir()
    (wd / "owner.json").write_text(
        json.dumps({"supervisor": os.getpid(), "qemu": 999999, "netns": "lbtune-vm-x"})
    )
    assert reap_stale(str(tmp_path)) == []
    assert wd.is_dir()
