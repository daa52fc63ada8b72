"""The VM harness's wedge detection (lbtune.lab.guests.vm): a request left unanswered after the
guest
kernel reported a stall fails early with the kernel's report and where each vCPU is, instead of
waiting out its whole timeout. The monitor half runs against a real qemu (stopped before its
first instruction, no guest); the console half against a console file written as the guest's
serial port writes it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lbtune.lab.guests.uml import LabError
from lbtune.lab.guests.vm import (
    QMP_SOCKET,
    ConsoleWatch,
    GuestWedged,
    VmGuest,
    qmp_hmp,
    vcpu_summary,
)

STALL = [
    "[  500.717641] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
    "[  500.718848] rcu: \t0-...0: (1 GPs behind) idle=4b34/1/0x4000000000000000 "
    "softirq=3071/3071 fqs=56558",
    "[  500.719001] \t(detected by 2, t=5252 jiffies, g=12425, q=473 ncpus=4)",
    "[  500.719100] NMI backtrace for cpu 0",
    "[  500.719200] RIP: 0010:virtnet_send_command+0x10f/0x180 [virtio_net]",
]


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(ln + "\n" for ln in lines))


def test_console_watch_sees_only_trouble_printed_after_it_started(tmp_path: Path) -> None:
    console = tmp_path / "console.1.log"
    _append(console, ["[    1.0] booting", *STALL])  # an earlier request's stall
    w = ConsoleWatch(console)
    w.look()
    assert w.trouble is None and w.report() == ""
    _append(console, ["[  600.0] lbtune: something harmless"])
    w.look()
    assert w.trouble is None


def test_console_watch_finds_the_stall_and_keeps_its_report(tmp_path: Path) -> None:
    console = tmp_path / "console.1.log"
    console.write_text("[    1.0] booting\n", encoding="utf-8")
    w = ConsoleWatch(console)
    with open(console, "a", encoding="utf-8") as fh:
        fh.write(STALL[0][:30])  # the serial port mid-line: not read yet
    w.look()
    assert w.trouble is None
    with open(console, "a", encoding="utf-8") as fh:
        fh.write(STALL[0][30:] + "\n" + "".join(ln + "\n" for ln in STALL[1:]))
    before = time.monotonic()
    w.look()
    assert w.trouble == STALL[0].strip()
    assert w.trouble_at is not None and w.trouble_at >= before
    assert w.report().splitlines() == STALL
    assert w.report(lines=2).splitlines() == STALL[:2]


@pytest.mark.parametrize(
    "line",
    [
        "[ 12.3] watchdog: BUG: soft lockup - CPU#1 stuck for 22s! [kworker/1:1:40]",
        "[ 12.3] rcu: INFO: rcu_preempt self-detected stall on CPU",
        "[ 12.3] INFO: task python3:311 blocked for more than 120 seconds.",
        "[ 12.3] Kernel panic - not syncing: hung_task: blocked tasks",
        "[ 12.3] BUG: kernel NULL pointer dereference, address: 0000000000000008",
        "[ 12.3] Oops: 0000 [#1] PREEMPT SMP NOPTI",
    ],
)
def test_console_watch_knows_the_kernels_trouble_reports(tmp_path: Path, line: str) -> None:
    console = tmp_path / "console.1.log"
    console.touch()
    w = ConsoleWatch(console)
    _append(console, ["[ 12.2] virtio_net virtio1 eth0: set channels", line])
    w.look()
    assert w.trouble == line


def test_console_watch_of_a_missing_console_is_quiet(tmp_path: Path) -> None:
    w = ConsoleWatch(tmp_path / "absent.log")
    w.look()
    assert w.trouble is None


REGS = """CPU#0
RAX=0000000000000000 RBX=0000000000000000 RCX=ff1dacb900185980 RDX=0000000000000001
RIP=ffffffff8d9112f0 RFL=00000086 [--S--P-] CPL=0 II=0 A20=1 SMM=0 HLT=0
ES =0000 0000000000000000 00000000 00000000
CPU#1
RIP=ffffffff8e2592eb RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1
CPU#2
RIP=00007f00dead0000 RFL=00000202 [-------] CPL=3 II=0 A20=1 SMM=0 HLT=0
"""


def test_vcpu_summary_says_where_each_vcpu_is() -> None:
    assert vcpu_summary(REGS) == (
        "cpu0 RIP=ffffffff8d9112f0 irqs off CPL=0; "
        "cpu1 RIP=ffffffff8e2592eb irqs on CPL=0 halted; "
        "cpu2 RIP=00007f00dead0000 irqs on CPL=3"
    )
    assert vcpu_summary("") == ""


@pytest.fixture
def stopped_qemu(tmp_path: Path) -> Iterator[Path]:
    """A real qemu with two vCPUs stopped before their first instruction, its QMP socket."""
    qemu = shutil.which("qemu-system-x86_64")
    if qemu is None:
        pytest.skip("qemu-system-x86_64 not installed (make setup installs it)")
    sock = tmp_path / QMP_SOCKET
    proc = subprocess.Popen(
        [qemu, "-nodefaults", "-no-user-config", "-display", "none", "-S", "-smp", "2",
         "-accel", "tcg", "-qmp", f"unix:{sock},server=on,wait=off"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "qemu made no QMP socket in 30 s"
            time.sleep(0.05)
        yield sock
    finally:
        proc.kill()
        proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_qmp_reads_the_registers_of_a_real_qemu(stopped_qemu: Path) -> None:
    text = qmp_hmp(stopped_qemu, "info registers -a")
    # the reset state of an x86 CPU, in real mode: EIP fff0 (CS base ffff0000), interrupts off;
    # the second CPU waits for its start-up IPI, which qemu shows as halted
    assert vcpu_summary(text) == (
        "cpu0 RIP=0000fff0 irqs off CPL=0; cpu1 RIP=0000fff0 irqs off CPL=0 halted"
    )


def test_qmp_error_and_absent_socket_raise(stopped_qemu: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^unknown command: .no-such-command."):
        qmp_hmp(stopped_qemu, "no-such-command")
    with pytest.raises(OSError):
        qmp_hmp(tmp_path / "nothing.sock", "info registers")


def _idle_guest(tmp_path: Path) -> tuple[VmGuest, subprocess.Popen[bytes]]:
    """A VmGuest with no guest behind it: its requests are never claimed; `proc` stands in
    for qemu so the guest counts as alive."""
    g = VmGuest.__new__(VmGuest)
    g.workdir = tmp_path
    g.boots = 1
    g._seq = 0
    g._closed = False
    g.wedge_grace = 1.0
    g._marks = {}
    g.broken = None
    for sub in ("req", "res"):
        (tmp_path / sub).mkdir()
    (tmp_path / "console.1.log").write_text("[ 1.0] booted\n", encoding="utf-8")
    g.proc = subprocess.Popen(["sleep", "60"])
    return g, g.proc


def test_a_request_after_a_stall_fails_early_with_the_report(tmp_path: Path) -> None:
    g, proc = _idle_guest(tmp_path)
    try:
        rid = g._request({"kind": "argv", "argv": ["true"]})
        _append(tmp_path / "console.1.log", STALL)
        with pytest.raises(LabError) as exc:
            g._answer(rid, timeout=60)
        # the guest is not asked again: the next request fails at once, saying why
        with pytest.raises(GuestWedged, match="not asked any more: the VM guest kernel wedged"):
            g.run(["true"], timeout=600)
        assert not list((tmp_path / "req").glob(f"{int(rid) + 1:06d}.json"))
    finally:
        proc.kill()
        proc.wait()
    msg = str(exc.value)
    assert isinstance(exc.value, GuestWedged) and exc.value.report in msg
    # the wedge's error after the grace (1 s), not the timeout's "did not answer ... in 60 s"
    assert msg.startswith(f"the VM guest kernel wedged: request {rid} unanswered")
    assert STALL[0].strip() in msg and "virtnet_send_command" in msg
    assert "vCPUs: (qemu monitor:" in msg  # no monitor behind this stand-in: it says so


def test_a_request_answered_after_a_stall_is_not_failed(tmp_path: Path) -> None:
    """A stall the guest recovers from (a loaded TCG host can starve a vCPU) is not a
    failure: the answer counts when it comes within the grace."""
    g, proc = _idle_guest(tmp_path)
    g.wedge_grace = 30.0
    try:
        rid = g._request({"kind": "argv", "argv": ["true"]})
        _append(tmp_path / "console.1.log", STALL)
        res = tmp_path / "res" / f"{rid}.json"
        tmp = res.with_suffix(".tmp")
        tmp.write_text(json.dumps({"returncode": 0, "stdout": "", "stderr": ""}))
        mover = subprocess.Popen(["sh", "-c", 'sleep 5; mv "$0" "$1"', str(tmp), str(res)])
        assert g._answer(rid, timeout=60)["returncode"] == 0  # 5 s after the stall: answered
        assert mover.wait() == 0
    finally:
        proc.kill()
        proc.wait()
