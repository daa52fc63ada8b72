"""A checkout under /tmp or /run cannot run the VM tier: the guest mounts its own tmpfs there.

`lbtune.lab.guests.vm.hidden_from_guest` says why, in one line, for a path the guest would
not see (followed through symlinks); `VmGuest.boot` and `lbtune lab up --vm` refuse with it
(vm.check_host), and `make test` / `make vm` refuse with it before setup and before any tier
runs (the Makefile's `vm-paths` target), instead of spending the py tier and then failing
the vm tier under CI. No VM is booted here.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

from lbtune.lab.guests.vm import hidden_from_guest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", ["/tmp/checkout", "/tmp/checkout/.tox/vm/bin/python",
                                  "/run/user/0/lbtune", "/tmp", "/run"])  # fmt: skip
def test_paths_under_the_guests_own_tmpfs_are_refused(path: str) -> None:
    why = hidden_from_guest("the checkout", path)
    assert why is not None and path in why and "\n" not in why
    assert "mounts its own /tmp and /run" in why


@pytest.mark.parametrize("path", ["/tmpfoo/x", "/runner/x", "/srv/lbtune", "/var/tmp/co"])
def test_paths_the_guest_sees_pass(path: str) -> None:
    assert hidden_from_guest("the checkout", path) is None


def test_a_symlink_into_tmp_is_followed() -> None:
    outside = pathlib.Path(tempfile.mkdtemp(dir="/var/tmp"))
    inside = pathlib.Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        (outside / "co").symlink_to(inside)
        why = hidden_from_guest("the checkout", str(outside / "co"))
        assert why is not None and str(inside) in why
    finally:
        shutil.rmtree(outside)
        shutil.rmtree(inside)


def _fake_checkout(parent: str) -> pathlib.Path:
    """The Makefile and the lbtune package (linked) in a new directory under `parent`;
    no scripts/: if the check did not stop `make`, set-up could not run from here either."""
    co = pathlib.Path(tempfile.mkdtemp(dir=parent, prefix="lbtune-co-"))
    shutil.copy(REPO / "Makefile", co / "Makefile")
    (co / "lbtune").symlink_to(REPO / "lbtune")
    return co


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("python3") is None,
                    reason="make and python3 are what `make test` itself needs")
@pytest.mark.parametrize("target", ["test", "vm"])
def test_make_refuses_a_checkout_under_tmp_before_setup(target: str) -> None:
    co = _fake_checkout("/tmp")
    try:
        r = subprocess.run(["make", "-s", "-C", str(co), target], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "MAKEFLAGS": ""})
        assert r.returncode == 2, r.stdout + r.stderr
        lines = [ln for ln in (r.stdout + r.stderr).splitlines()
                 if ln.strip() and not ln.startswith("make")]  # fmt: skip
        assert len(lines) == 1, r.stdout + r.stderr
        assert str(co) in lines[0] and "/tmp and /run" in lines[0]
        assert not (co / ".venv").exists()  # set-up never started
    finally:
        shutil.rmtree(co)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("python3") is None,
                    reason="make and python3 are what `make test` itself needs")
def test_make_passes_a_checkout_the_guest_sees() -> None:
    co = _fake_checkout("/var/tmp")
    try:
        r = subprocess.run(["make", "-s", "-C", str(co), "vm-paths"], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "MAKEFLAGS": ""})
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        shutil.rmtree(co)
