"""A guest kernel that wedges is reported as one: the harness's wedge detection against a real
wedge of Debian's kernel in the VM lab (lbtune.lab.guests.vm, tests/vm_tier.py).

The wedge is made the way a kernel bug would look from outside: four SCHED_FIFO busy loops,
one pinned to each vCPU, with RT throttling off, so nothing else runs in the guest again - not
the agent, not the RCU grace-period kthread. The kernel then reports an RCU stall on the
console (its stall timeout cut to 3 s first) and the request that started the loops is never
answered. The harness must fail that request once the grace after the report is over, with
the kernel's report and where each vCPU was (read from qemu's monitor), and fail every later
request at once. The guest is this module's own, not the `vm` fixture's, so its deliberate
wedge is not counted as one for tests/vm_tier.py.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

import lbtune.lab.guests.vm as vm_mod
from lbtune.lab.guests.uml import LabUnavailable
from lbtune.lab.guests.vm import GuestWedged, VmGuest
from tests.vm.conftest import BOOT_TIMEOUT

pytestmark = pytest.mark.vm
# the kernel's first words: another CPU's report of the stall, or the stalled CPU's own
STALL = re.compile(r"rcu: INFO: rcu_preempt (?:detected stalls on CPUs/tasks|self-detected stall)")

HOGS = """
import os
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99))
for cpu in (1, 2, 3, 0):  # the parent, on CPU 0 last, holds the CPU it forks from
    if cpu == 0 or os.fork() == 0:
        os.sched_setaffinity(0, {cpu})
        while True:
            pass
"""

# A shell loop forking beside the loops while they start, so that RCU grace periods are under
# way when the loops take every vCPU: with none in flight nothing reports a stall (seen here,
# once at boot and once in a request, in full runs) and the wedge waits out its timeout.
CHURN = "(while :; do cat /proc/uptime > /dev/null; done) &\nsleep 1\n"


@pytest.fixture(scope="module")
def guest() -> Iterator[VmGuest]:
    try:
        g = VmGuest.boot(timeout=BOOT_TIMEOUT)
    except LabUnavailable as exc:
        pytest.skip(f"VM lab unavailable: {exc}")
    with g:
        yield g


def test_a_wedged_guest_fails_the_request_with_the_kernels_report(guest: VmGuest) -> None:
    setup = (
        "echo 3 > /sys/module/rcupdate/parameters/rcu_cpu_stall_timeout"
        " && sysctl -q -w kernel.sched_rt_runtime_us=-1"
    )
    r = guest.run(["sh", "-c", setup], timeout=120)
    assert r.returncode == 0, r.stderr
    assert guest.run(["true"]).returncode == 0  # answered before the wedge
    guest.wedge_grace = 20.0
    with pytest.raises(GuestWedged) as exc:
        guest.run(["sh", "-c", CHURN + "exec python3 -c " + shlex.quote(HOGS)], timeout=200)
    err = exc.value
    message = str(err)
    assert message.startswith("the VM guest kernel wedged: request "), message
    assert STALL.search(message), message
    assert err.report in message
    assert err.report.startswith("vCPUs: cpu0 RIP="), err.report
    assert len(re.findall(r"\bcpu\d RIP=[0-9a-f]+ irqs (?:on|off) CPL=\d", err.report)) == 4
    kernel = err.report.split("kernel report (console.1.log):\n", 1)[1]
    assert STALL.search(kernel.splitlines()[0]), kernel


def test_a_wedged_guest_is_not_asked_again(guest: VmGuest) -> None:
    with pytest.raises(GuestWedged, match="not asked any more: the VM guest kernel wedged"):
        guest.run(["true"], timeout=600)


def test_a_guest_that_wedges_while_it_boots_fails_the_boot_with_the_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same loops (and CHURN), started by the guest's root stage before its agent: the
    boot never reaches an agent, and it fails
    with the report once the grace after it is over instead of after the boot timeout
    (240 s here: a boot takes 10-60 s)."""
    render = vm_mod.render_stage2

    def wedging_stage2(*args: Any, **kwargs: Any) -> str:
        hogs = "echo -1 > /proc/sys/kernel/sched_rt_runtime_us\n"
        hogs += CHURN + "python3 -c " + shlex.quote(HOGS) + "\n"
        return hogs + render(*args, **kwargs)

    monkeypatch.setattr(vm_mod, "render_stage2", wedging_stage2)
    monkeypatch.setattr(vm_mod, "WEDGE_GRACE", 20.0)
    with pytest.raises(GuestWedged) as exc:
        VmGuest.boot(cmdline_extra=("rcupdate.rcu_cpu_stall_timeout=3",), timeout=240)
    message = str(exc.value)
    assert message.startswith("the VM guest kernel wedged: boot 1 reached no guest agent"), message
    assert STALL.search(message), message
    assert len(re.findall(r"\bcpu\d RIP=[0-9a-f]+ irqs (?:on|off) CPL=\d", message)) == 4
