"""`lbtune apply --persist` and a real reboot of the VM lab guest (issue 19, item 4).

The guest has no grub and no systemd, so the test is both: its bootloader boots the guest
again with the command line the persisted configuration yields (an `update-grub` stand-in,
tests/vm/data/update-grub, sources /etc/default/grub and grub.d/*.cfg in the guest as
grub-mkconfig does and writes /boot/grub/grub.cfg; the next boot takes that `linux` line),
and its service manager runs what systemd would at boot: `sysctl --system` (systemd-sysctl)
and the ExecStart= of /etc/systemd/system/lbtune-boot.service, parsed as systemd does.

The tests run in order on one guest (each stage needs the one before it). With
LBTUNE_VM_TRANSCRIPT=FILE the commands and their output are written there (docs/tuning.md,
"Persistence", quotes such a transcript).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lbtune.lab.guests.vm import VmGuest
from lbtune.tune.persist import BOOT_UNIT, BOOT_WANTS, SYSCTL_CONF

pytestmark = pytest.mark.vm

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
PROFILE = str(DATA / "lb-dr-iso.toml")
IFACE = "eth0"
GRUB_CFG = "/boot/grub/grub.cfg"
FILES = [
    "/etc/default/grub",
    "/etc/default/grub.d/50-lab.cfg",
    "/etc/default/irqbalance",
    SYSCTL_CONF,
    BOOT_UNIT,
    BOOT_WANTS,
]
LBTUNE_PARAMS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")
TIMEOUT = 600  # one lbtune command in the guest: ~15 s alone under TCG, far more when loaded

state: dict[str, Any] = {"log": []}


@pytest.fixture(scope="module", autouse=True)
def transcript() -> Iterator[None]:
    yield
    path = os.environ.get("LBTUNE_VM_TRANSCRIPT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(state["log"]) + "\n")


def _log(what: str, text: str = "") -> None:
    state["log"].append(what + ("\n" + text.rstrip() if text.strip() else ""))


def _logged(vm: VmGuest, argv: list[str], timeout: float = TIMEOUT) -> Any:
    r = vm.run(argv, timeout=timeout)
    _log(f"guest# {shlex.join(argv)}", r.stdout + r.stderr + f"(exit {r.returncode})")
    return r


def _snapshot(vm: VmGuest) -> dict[str, Any]:
    r = vm.run(["python3", str(HERE / "guest_state.py"), "snapshot", IFACE, *FILES], timeout=300)
    assert r.returncode == 0, r.stderr
    snap: dict[str, Any] = json.loads(r.stdout)
    return snap


def _lbtune(vm: VmGuest, *args: str) -> Any:
    return _logged(vm, ["lbtune", *args])


def exec_start_argv(unit: str) -> list[str]:
    """ExecStart= of a unit file as systemd splits it: its quoting, `%%` and `$$` unescaped
    (lbtune writes no other specifier or variable), the `-@:+!` prefixes dropped."""
    lines = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    words = shlex.split(lines[0][len("ExecStart=") :], posix=True)
    words[0] = words[0].lstrip("-@:+!")
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


def bootloader_cmdline(vm: VmGuest) -> list[str]:
    """The parameters of grub.cfg's `linux` line, as this harness's bootloader passes them:
    without the kernel image, `root=` and `ro` (the lab's root is its 9p overlay)."""
    r = vm.run(["cat", GRUB_CFG])
    assert r.returncode == 0, f"no {GRUB_CFG}: update-grub never ran ({r.stderr.strip()})"
    linux = [ln.split() for ln in r.stdout.splitlines() if ln.strip().startswith("linux ")]
    assert len(linux) == 1, r.stdout
    return [w for w in linux[0][2:] if w not in ("ro", "rw") and not w.startswith("root=")]


def boot_services(vm: VmGuest) -> dict[str, Any]:
    """What systemd would run at boot for lbtune's files: systemd-sysctl, then the unit that
    multi-user.target wants (only when its drop-in says so)."""
    out: dict[str, Any] = {}
    r = vm.run(["sysctl", "--system"], timeout=120)
    assert r.returncode == 0, r.stderr
    wants = vm.run(["cat", BOOT_WANTS])
    unit = vm.run(["cat", BOOT_UNIT])
    if wants.returncode == 0 and "Wants=lbtune-boot.service" in wants.stdout:
        assert unit.returncode == 0, "multi-user.target wants a boot unit that is not there"
        argv = exec_start_argv(unit.stdout)
        out["argv"] = argv
        _log("harness: lbtune-boot.service ExecStart=", shlex.join(argv))
        out["run"] = _logged(vm, argv)
    return out


def _params(cmdline: str) -> dict[str, str]:
    return dict(w.partition("=")[::2] for w in cmdline.split())


def _one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def _tuned(snap: dict[str, Any]) -> dict[str, Any]:
    """What lb-dr sets on the NIC and IRQs, and its sysctls (the values a boot must restore)."""
    irqs = {name: v["affinity"] for name, v in snap["irqs"].items()}
    return {k: snap[k] for k in ("channels", "txqueuelen", "queues", "sysctl")} | {"irqs": irqs}


def test_guest_prepared_as_a_debian_host_with_grub_defaults(vm: VmGuest) -> None:
    for src, dst in ((DATA / "grub", "/etc/default/grub"),
                     (DATA / "50-lab.cfg", "/etc/default/grub.d/50-lab.cfg")):  # fmt: skip
        r = vm.run(["install", "-D", "-m", "644", str(src), dst])
        assert r.returncode == 0, r.stderr
    assert vm.run(["sh", "-c", "command -v update-grub grubby"]).returncode != 0
    boot_services(vm)  # the first boot as well, so every snapshot is taken the same way
    state["clean"] = _snapshot(vm)
    assert not set(_params(state["clean"]["cmdline"])) & set(LBTUNE_PARAMS)


def test_persist_without_a_bootloader_tool_says_so_in_one_line(vm: VmGuest) -> None:
    r = _lbtune(vm, "apply", PROFILE, "--iface", IFACE, "--persist", "--yes")
    line = _one_line(r.stderr)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "update-grub" in line and "nothing changed" in line, line
    assert _snapshot(vm) == state["clean"]


def test_persist_writes_the_boot_files_and_regenerates_the_bootloader_config(
    vm: VmGuest,
) -> None:
    r = vm.run(["install", "-D", "-m", "755", str(DATA / "update-grub"),
                "/usr/local/sbin/update-grub"])  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _lbtune(vm, "apply", PROFILE, "--iface", IFACE, "--persist", "--yes")
    assert r.returncode == 0, r.stderr
    assert "reboot required for kernel command line changes" in r.stdout
    m = re.search(r"^applied as (\S+);", r.stdout, re.MULTILINE)
    assert m, r.stdout
    state["journal"] = m.group(1)
    applied = _snapshot(vm)
    state["applied"] = applied
    assert applied["channels"] == 2  # data cores 2-3: one queue each
    assert applied["files"][BOOT_UNIT] is not None
    unit = bytes.fromhex(applied["files"][BOOT_UNIT]).decode()
    argv = exec_start_argv(unit)
    assert argv[1:] == ["apply", PROFILE, "--iface", IFACE, "--boot", "--yes"], argv
    cmdline = bootloader_cmdline(vm)
    assert "isolcpus=managed_irq,domain,2-3" in cmdline and "nohz_full=2-3" in cmdline, cmdline
    assert "lbtune_lab=1" in cmdline  # grub.d is read too
    assert not set(_params(applied["cmdline"])) & set(LBTUNE_PARAMS)  # not before the reboot


def test_after_a_real_reboot_the_boot_unit_restores_the_tuning_and_verify_passes(
    vm: VmGuest,
) -> None:
    cmdline = bootloader_cmdline(vm)
    _log("harness: reboot with", " ".join(cmdline))
    vm.reboot(cmdline_extra=cmdline)
    assert vm.boots == 2
    booted = _snapshot(vm)
    _log("guest# cat /proc/cmdline /sys/devices/system/cpu/{isolated,nohz_full}",
         f"{booted['cmdline']}\n{booted['isolated']}\n{booted['nohz_full']}")  # fmt: skip
    params = _params(booted["cmdline"])
    assert params.get("isolcpus") == "managed_irq,domain,2-3", booted["cmdline"]
    assert params.get("nohz_full") == "2-3", booted["cmdline"]
    assert (booted["isolated"], booted["nohz_full"]) == ("2-3", "2-3")  # the kernel took them
    # a fresh boot: the NIC and IRQs are the kernel's again until the boot unit runs
    assert _tuned(booted) != _tuned(state["applied"])
    services = boot_services(vm)
    run = services["run"]
    assert run.returncode == 0, run.stderr
    restored = _snapshot(vm)
    assert _tuned(restored) == _tuned(state["applied"])
    data = {k: v for k, v in restored["irqs"].items() if re.search(r"put\.[01]$", k)}
    rows = [f"{k}: {v['affinity']} / {v['effective']}" for k, v in data.items()]
    _log("guest: the data queues' IRQs (smp_affinity_list / effective_affinity_list)",
         "\n".join(rows))  # fmt: skip
    r = _lbtune(vm, "verify", PROFILE, "--iface", IFACE)
    assert r.returncode == 0, r.stdout + r.stderr
    state["restored"] = restored


def test_rollback_restores_the_files_and_the_next_boot_is_clean(vm: VmGuest) -> None:
    r = _lbtune(vm, "rollback", "--to", state["journal"])
    assert r.returncode == 0, r.stdout + r.stderr
    after = _snapshot(vm)
    assert after["files"] == state["clean"]["files"]  # byte for byte, absent ones absent
    cmdline = bootloader_cmdline(vm)  # rollback ran update-grub again
    assert not {w.partition("=")[0] for w in cmdline} & set(LBTUNE_PARAMS), cmdline
    assert "lbtune_lab=1" in cmdline
    _log("harness: reboot with", " ".join(cmdline))
    vm.reboot(cmdline_extra=cmdline)
    assert "argv" not in boot_services(vm)  # no boot unit wanted any more
    clean = _snapshot(vm)
    _log("guest# cat /proc/cmdline", clean["cmdline"])
    assert not set(_params(clean["cmdline"])) & set(LBTUNE_PARAMS), clean["cmdline"]
    assert (clean["isolated"], clean["nohz_full"]) == (
        state["clean"]["isolated"],
        state["clean"]["nohz_full"],
    )
    assert _tuned(clean) == _tuned(state["clean"])
    assert clean["files"] == state["clean"]["files"]
