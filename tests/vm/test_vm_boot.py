"""The VM lab guest is the machine the tier promises: Debian's kernel, 4 CPUs on 2 NUMA nodes,
a 4-queue virtio NIC and an e1000e - as lbtune itself sees it inside the guest."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from lbtune.lab.guests.uml import LabError
from lbtune.lab.guests.vm import VmGuest, find_vm_image
from lbtune.lab.progress import DONE, START, ProgressReader, Step

pytestmark = pytest.mark.vm


def _show(vm: VmGuest) -> dict[str, Any]:
    r = vm.run(["lbtune", "show", "--json"], timeout=300)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def test_guest_runs_the_pinned_distro_kernel(vm: VmGuest) -> None:
    pinned = find_vm_image().version
    headers = sorted(p.name for p in Path("/usr/src").glob("linux-headers-*-amd64"))
    assert f"linux-headers-{pinned}" in headers
    r = vm.run(["uname", "-r"])
    assert (r.returncode, r.stdout.strip()) == (0, pinned)
    assert vm.describe()["kernel"] == pinned


def test_lbtune_show_in_the_guest_sees_the_vm_hardware(vm: VmGuest) -> None:
    show = _show(vm)
    assert show["kernel"] == find_vm_image().version
    cpus = show["cpus"]
    assert [c["id"] for c in cpus["cpus"] if c["online"]] == [0, 1, 2, 3]
    assert {n["id"]: n["cpus"] for n in cpus["nodes"]} == {0: [0, 1], 1: [2, 3]}
    nics = {n["name"]: n for n in show["nics"]}
    assert nics["eth0"]["driver"] == "virtio_net"
    assert nics["eth0"]["channels"]["combined"] == 4
    assert len(nics["eth0"]["rx_queues"]) == 4
    assert len(nics["eth0"]["tx_queues"]) == 4
    assert nics["eth1"]["driver"] == "e1000e"


def test_each_virtio_queue_has_its_own_irq(vm: VmGuest) -> None:
    dev = vm.run(["readlink", "/sys/class/net/eth0/device"])
    virtio = dev.stdout.strip().rsplit("/", 1)[-1]  # virtioN: its index follows the 9p devices
    assert dev.returncode == 0 and virtio.startswith("virtio"), dev
    r = vm.run(["cat", "/proc/interrupts"])
    assert r.returncode == 0
    names = {line.split()[-1] for line in r.stdout.splitlines() if virtio in line}
    for i in range(4):
        assert {f"{virtio}-input.{i}", f"{virtio}-output.{i}"} <= names, sorted(names)


def test_ipvs_is_a_module_not_loaded_at_boot(vm: VmGuest) -> None:
    r = vm.run(["cat", "/proc/modules"])
    assert r.returncode == 0
    assert "ip_vs " not in r.stdout
    r = vm.run(["modinfo", "-F", "filename", "ip_vs"])
    assert r.returncode == 0 and r.stdout.strip().endswith((".ko", ".ko.xz")), r.stderr


def test_call_returns_the_value_and_a_guest_error_carries_its_traceback(vm: VmGuest) -> None:
    assert vm.call("os.path:join", ["/a", "b"]) == "/a/b"
    with pytest.raises(LabError) as info:
        vm.call("json:loads", ["{not json"])
    assert "JSONDecodeError" in info.value.guest_traceback


def test_run_reports_exit_status_and_output(vm: VmGuest) -> None:
    r = vm.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")


def test_describe_names_the_accelerator_and_machine(vm: VmGuest) -> None:
    d = vm.describe()
    assert d["accelerator"] in ("kvm", "tcg")
    assert d["cpus"] == 4
    assert d["nodes"] == {"0": "0-1", "1": "2-3"}
    assert d["nics"]["eth0"] == {"driver": "virtio_net", "rx_queues": 4, "tx_queues": 4}
    assert d["boot_seconds"] > 0


def test_call_in_a_guest_netns_and_progress_reach_the_host(vm: VmGuest) -> None:
    assert vm.run(["ip", "netns", "add", "t1"]).returncode == 0
    try:
        links = vm.call("socket:if_nameindex", [], netns="t1")
        assert [name for _, name in links] == ["lo"]
        r = vm.run(["ip", "-o", "link", "show"], netns="t1")
        assert r.returncode == 0 and "eth0" not in r.stdout
    finally:
        vm.run(["ip", "netns", "del", "t1"])
    steps: list[Step] = []
    reader = ProgressReader(steps.append)
    value = vm.call("tests.vm.guest_targets:report_steps", [["a", "b"]], watch=reader.poll)
    assert [(s.name, s.state) for s in steps] == [
        ("a", START),
        ("a", DONE),
        ("b", START),
        ("b", DONE),
    ]
    assert value["cwd"] == os.getcwd()


def test_reboot_keeps_what_the_guest_wrote_and_takes_the_new_cmdline(vm: VmGuest) -> None:
    # Last in the module: the guest comes back with isolcpus=3 on its command line.
    token = f"written-before-reboot {os.getpid()}"
    r = vm.run(["sh", "-c", f"mkdir -p /var/lib/lbtune && echo '{token}' > /etc/lbtune-vm-test"])
    assert r.returncode == 0, r.stderr
    boots = vm.describe()["boots"]
    vm.reboot(cmdline_extra=("isolcpus=3",))
    assert vm.describe()["boots"] == boots + 1
    assert vm.run(["cat", "/etc/lbtune-vm-test"]).stdout == f"{token}\n"
    assert "isolcpus=3" in vm.run(["cat", "/proc/cmdline"]).stdout.split()
    assert vm.run(["cat", "/sys/devices/system/cpu/isolated"]).stdout.strip() == "3"
