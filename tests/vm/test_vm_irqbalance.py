"""irqbalance (Debian's package) and `lbtune apply lb-dr` in the VM lab guest (issue 19, item 3).

lb-dr bans its data cores from irqbalance (`IRQBALANCE_BANNED_CPULIST` in
/etc/default/irqbalance) and pins the data queues' IRQs there, and bans those IRQs themselves
(`IRQBALANCE_ARGS="--banirq=N ..."`: a CPU ban alone does not stop irqbalance 1.9.2 from moving
IRQs pinned on the banned CPUs); a running irqbalance must be
restarted to read the ban. The guest has no systemd, so the test starts irqbalance the way
Debian's irqbalance.service does (its environment file, `--foreground $IRQBALANCE_ARGS`; plus
`--interval=1` so that it rebalances every second), and `systemctl` there cannot restart or
stop anything: lbtune must then refuse (the daemon would move the IRQs onto the banned cores)
instead of reporting the apply as done. The tests run in order on one guest.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lbtune.lab.guests.vm import VmGuest

pytestmark = pytest.mark.vm

HERE = Path(__file__).resolve().parent
IFACE = "eth0"
ENV_FILE = "/etc/default/irqbalance"
DATA_IRQS = r"^virtio\d+-(input|output)\.[01]$"  # lb-dr: 2 data cores, 2 queues
OTHER_IRQS_SPREAD = r"^(i8042|rtc0)$"  # legacy IRQs irqbalance places (lb-dr does not)
TIMEOUT = 600

state: dict[str, Any] = {}


def _guest(vm: VmGuest, *args: str) -> Any:
    r = vm.run(["python3", str(HERE / "guest_state.py"), *args], timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _lbtune(vm: VmGuest, *args: str) -> Any:
    return vm.run(["lbtune", *args], timeout=TIMEOUT)


def _one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _start(vm: VmGuest) -> int:
    started = _guest(vm, "irqbalance-start", "--interval=1")
    assert started["pid"], started
    return int(started["pid"])


def _stop(vm: VmGuest, pid: int) -> None:
    assert _guest(vm, "irqbalance-stop", str(pid))["stopped"]


def test_apply_is_refused_while_an_irqbalance_runs_that_cannot_be_restarted(vm: VmGuest) -> None:
    state["clean"] = _guest(vm, "snapshot", IFACE, ENV_FILE)
    assert state["clean"]["files"][ENV_FILE] is not None  # Debian's file, from the package
    pid = _start(vm)
    r = _lbtune(vm, "apply", "lb-dr", "--iface", IFACE, "--yes")
    line = _one_line(r.stderr)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert f"irqbalance (pid {pid}) was not restarted" in line, line
    after = _guest(vm, "snapshot", IFACE, ENV_FILE)
    assert after["files"] == state["clean"]["files"]
    assert (after["channels"], after["sysctl"]) == (state["clean"]["channels"],
                                                    state["clean"]["sysctl"])  # fmt: skip
    assert _guest(vm, "irqbalance-env", str(pid))["running"]  # left alone
    state["pid"] = pid


def test_stopped_state_without_systemd_is_refused_in_one_line_and_restores_nothing_needed(
    vm: VmGuest,
) -> None:
    pid = state["pid"]
    r = _lbtune(vm, "apply", str(HERE / "data" / "irqbalance-stopped.toml"), "--yes")
    line = _one_line(r.stderr)
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "systemctl stop irqbalance.service failed" in line, line
    assert _guest(vm, "irqbalance-env", str(pid))["running"]
    _stop(vm, pid)


def test_with_irqbalance_stopped_lb_dr_bans_the_data_cores_and_a_restarted_daemon_reads_it(
    vm: VmGuest,
) -> None:
    state["before"] = before = _guest(vm, "snapshot", IFACE, ENV_FILE)
    r = _lbtune(vm, "--json", "apply", "lb-dr", "--iface", IFACE, "--yes")
    assert r.returncode == 0, r.stderr
    state["journal"] = json.loads(r.stdout)["journal"]
    applied = _guest(vm, "snapshot", IFACE, ENV_FILE)
    env_text = bytes.fromhex(applied["files"][ENV_FILE]).decode()
    assert 'IRQBALANCE_BANNED_CPULIST="2-3"' in env_text.splitlines(), env_text
    data = {k: v["affinity"] for k, v in applied["irqs"].items() if k[-1] in "01"}
    assert sorted(data.values()) == ["2", "2", "3", "3"], data
    args = [ln for ln in env_text.splitlines() if ln.startswith("IRQBALANCE_ARGS=")]
    assert len(args) == 1, env_text
    banned = {int(w.split("=")[1]) for w in args[0].split("=", 1)[1].strip('"').split()}
    pinned = {v["irq"] for k, v in applied["irqs"].items() if re.search(r"(input|output)\.", k)}
    assert pinned and pinned <= banned, (args, applied["irqs"])  # the IRQs themselves
    assert before["files"] != applied["files"]
    # IRQs irqbalance manages (legacy ones lb-dr leaves alone) allowed on every CPU again,
    # then irqbalance starts as its unit would (at boot, or by hand), the ban in its env: at
    # start it places every IRQ it manages, so it must move these, and onto 0-1 only
    spread = _guest(vm, "spread", OTHER_IRQS_SPREAD, "0-3")
    widened = sorted(k for k, v in spread.items() if v == "0-3")
    assert widened, spread
    pid = _start(vm)
    assert _guest(vm, "irqbalance-env", str(pid))["env"].get("IRQBALANCE_BANNED_CPULIST") == "2-3"
    # it runs: it moves one of them onto the control plane; whatever it moved is there
    watch = "^(" + "|".join(re.escape(k) for k in widened) + ")$"
    placed = _guest(vm, "wait-within", watch, "0-1", "120")
    assert placed["within"], placed
    moved = {k: v["affinity"] for k, v in placed["irqs"].items() if v["affinity"] != "0-3"}
    assert all(v in ("0", "1", "0-1", "0,1") for v in moved.values()), moved
    assert _guest(vm, "irqbalance-env", str(pid))["running"]
    state["pid"], state["applied"] = pid, applied


def test_a_banned_irqbalance_leaves_the_data_queues_irqs_where_lb_dr_put_them(
    vm: VmGuest,
) -> None:
    """The documented coordination: with the data cores banned, irqbalance keeps its hands
    off the data queues' IRQs. verify reads every planned value back while irqbalance keeps
    rebalancing (every second)."""
    r = _lbtune(vm, "verify", "lb-dr", "--iface", IFACE)
    now = _guest(vm, "irqs")
    moved = {
        name: (irq["affinity"], now[name]["affinity"])
        for name, irq in state["applied"]["irqs"].items()
        if name[-1] in "01" and now[name]["affinity"] != irq["affinity"]
    }
    assert moved == {}, moved
    assert r.returncode == 0, r.stdout + r.stderr


def test_rollback_restores_the_irqbalance_file_channels_and_sysctls(vm: VmGuest) -> None:
    _stop(vm, state["pid"])
    r = _lbtune(vm, "rollback")
    assert r.returncode == 0, r.stdout + r.stderr
    after = _guest(vm, "snapshot", IFACE, ENV_FILE)
    before = state["before"]
    assert after["files"] == before["files"] == state["clean"]["files"]  # byte for byte
    for key in ("channels", "txqueuelen", "queues", "sysctl"):
        assert after[key] == before[key], key
    state["after"] = after
    pid = _start(vm)  # and irqbalance, started again, has no ban
    env = _guest(vm, "irqbalance-env", str(pid))["env"]
    assert "IRQBALANCE_BANNED_CPULIST" not in env, env
    _stop(vm, pid)


def test_rollback_restores_the_queue_irq_affinities() -> None:
    queues = re.compile(r"(input|output)\.\d$")  # the IRQs lb-dr placed (not the config IRQ)
    after, before = state["after"], state["before"]
    assert {k: v["affinity"] for k, v in after["irqs"].items() if queues.search(k)} == {
        k: v["affinity"] for k, v in before["irqs"].items() if queues.search(k)
    }
