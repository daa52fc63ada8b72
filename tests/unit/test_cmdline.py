"""/proc/cmdline parsing and the CPU-isolation parameters."""

from __future__ import annotations

import pytest

from lbtune.host.kernel.cmdline import KernelCmdline
from tests.conftest import AWS, DELL, HOSTS

ISOLATED = frozenset({*range(2, 12), *range(26, 36)})


def test_fixture_cmdline_r750():
    raw = (HOSTS / DELL / "proc/cmdline").read_text()
    cl = KernelCmdline.parse(raw)
    assert cl.get("BOOT_IMAGE") == "/vmlinuz-5.15.0-105-generic"
    assert cl.get("root") == "/dev/mapper/vg0-root"
    assert cl.has("ro") and cl.get("ro") is None  # bare flag
    assert cl.has("quiet")
    assert cl.get("isolcpus") == "managed_irq,domain,2-11,26-35"
    assert cl.isolcpus_flags() == ("managed_irq", "domain")
    assert cl.cpus("isolcpus") == ISOLATED
    assert cl.cpus("nohz_full") == ISOLATED
    assert cl.cpus("rcu_nocbs") == ISOLATED
    assert cl.cpus("irqaffinity") == frozenset({0, 1, *range(12, 26), *range(36, 48)})
    assert cl.get("intel_iommu") == "on"


def test_fixture_cmdline_cloud():
    cl = KernelCmdline.parse((HOSTS / AWS / "proc/cmdline").read_text())
    assert cl.get("BOOT_IMAGE") == "(hd0,gpt1)/boot/vmlinuz-6.1.72-96.166.amzn2023.x86_64"
    assert cl.get("console") == "ttyS0,115200n8"  # last one wins
    assert cl.get("nvme_core.io_timeout") == "4294967295"
    assert cl.cpus("isolcpus") is None
    assert cl.isolcpus_flags() == ()


@pytest.mark.parametrize(
    ("raw", "key", "cpus"),
    [
        ("isolcpus=1-3", "isolcpus", {1, 2, 3}),
        ("isolcpus=domain,managed_irq,1-3,5", "isolcpus", {1, 2, 3, 5}),
        ("isolcpus=nohz,domain,managed_irq,4", "isolcpus", {4}),
        ("isolcpus=managed_irq,domain,0-11:2/4", "isolcpus", {0, 1, 4, 5, 8, 9}),
        ("nohz_full=2-7 rcu_nocbs=2-7", "rcu_nocbs", set(range(2, 8))),
        ("isolcpus=1 isolcpus=2", "isolcpus", {2}),  # last one wins
        ("isolcpus=", "isolcpus", set()),
        ("nohz_full=(null)", "nohz_full", set()),
    ],
)
def test_cpu_parameters(raw, key, cpus):
    assert KernelCmdline.parse(raw).cpus(key) == frozenset(cpus)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("ro quiet", "isolcpus"),  # absent
        ("isolcpus", "isolcpus"),  # bare flag, no value
        ("isolcpus=1-x", "isolcpus"),  # the kernel ignores what it cannot parse
        ("isolcpus=domain,bogus,1-3", "isolcpus"),  # unknown flag
        ("nohz_full=1-N", "nohz_full"),  # needs the CPU count; not supported
        ("irqaffinity=0-3:2", "irqaffinity"),  # bare ':' is not the kernel's syntax
    ],
)
def test_cpu_parameters_unusable(raw, key):
    assert KernelCmdline.parse(raw).cpus(key) is None


def test_quoting_and_init_args():
    cl = KernelCmdline.parse('root=/dev/sda1 dyndbg="file net/core/* +p" -- single isolcpus=3')
    assert cl.get("dyndbg") == "file net/core/* +p"
    assert cl.cpus("isolcpus") is None  # after "--" everything belongs to init
    assert not cl.has("single")


def test_unbalanced_quote_falls_back_to_whitespace():
    cl = KernelCmdline.parse('root=/dev/sda1 bad="x isolcpus=2-3')
    assert cl.get("root") == "/dev/sda1"
    assert cl.cpus("isolcpus") == frozenset({2, 3})


def test_empty_cmdline():
    cl = KernelCmdline.parse("")
    assert cl.params == ()
    assert cl.get("root") is None and not cl.has("root")
