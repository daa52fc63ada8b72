"""The Guest interface over the UML backend: argv, Python targets, namespaces and progress run
the way they do in the VM guest (tests/vm/test_vm_boot.py)."""

from __future__ import annotations

import pytest

from lbtune.lab.guests.api import Guest
from lbtune.lab.guests.boot import boot_guest
from lbtune.lab.guests.uml import LabError, LabKernel, UmlGuest
from lbtune.lab.progress import DONE, START, ProgressReader, Step

pytestmark = pytest.mark.lab


@pytest.fixture()
def uml(lab_kernel: LabKernel) -> UmlGuest:
    return UmlGuest(lab_kernel)


def test_boot_guest_gives_the_uml_backend(lab_kernel: LabKernel) -> None:
    with boot_guest("uml") as g:
        assert isinstance(g, Guest)
        d = g.describe()
    assert (d["backend"], d["kernel"], d["cpus"]) == ("uml", lab_kernel.version, 1)


def test_boot_guest_rejects_an_unknown_backend() -> None:
    with pytest.raises(ValueError, match="uml, vm"):
        boot_guest("xen")


def test_run_returns_status_and_output_from_the_uml_kernel(uml: UmlGuest) -> None:
    r = uml.run(["sh", "-c", "uname -r; echo err >&2; exit 4"])
    assert (r.returncode, r.stdout, r.stderr) == (4, f"{uml.kernel.version}\n", "err\n")


def test_call_in_a_namespace_and_its_error(uml: UmlGuest) -> None:
    script = "ip netns add t1 && ip netns exec t1 ip -o link show"
    r = uml.run(["sh", "-c", script])
    assert r.returncode == 0 and "lo" in r.stdout and "eth0" not in r.stdout
    with pytest.raises(ValueError, match="one call"):
        uml.run(["true"], netns="t1")
    with pytest.raises(LabError) as info:
        uml.call("json:loads", ["{bad"])
    assert "JSONDecodeError" in info.value.guest_traceback


def test_progress_reaches_the_host(uml: UmlGuest) -> None:
    steps: list[Step] = []
    reader = ProgressReader(steps.append)
    uml.call("tests.vm.guest_targets:report_steps", [["x"]], watch=reader.poll)
    assert [(s.name, s.state) for s in steps] == [("x", START), ("x", DONE)]
