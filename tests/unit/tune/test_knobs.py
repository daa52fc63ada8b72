"""NIC/IRQ/irqbalance/cmdline/governor knobs against COPIES of the fixture host trees.

Trees are copied with symlinks kept as links (sysfs has link cycles; never follow them), and
every file a test needs beyond the tree (grub, cpufreq) is created in the copy only.
"""

from __future__ import annotations

import os
import pathlib
from typing import Optional, Sequence

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.irqbalance import discover_irqbalance
from lbtune.host.net.ethtool import EthtoolIoctlError, RecordedEthtool
from lbtune.host.runner import CommandResult, CommandRunner
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.knobs import (
    ChannelsKnob,
    CmdlineKnob,
    GovernorKnob,
    IrqAffinityKnob,
    IrqbalanceBanIrqKnob,
    IrqbalanceBanKnob,
    IrqbalanceKnob,
    RingKnob,
    RpsCpusKnob,
    RpsFlowCntKnob,
    TxqueuelenKnob,
    XpsCpusKnob,
)
from lbtune.tune.registry import kinds, knob_from_record
from tests.conftest import DELL, KVM, copy_host

NET = "sos_commands/networking"

GRUB = (
    b"# If you change this file, run 'update-grub' afterwards to update\n"
    b"# /boot/grub/grub.cfg.\n"
    b"\n"
    b"GRUB_DEFAULT=0\n"
    b"GRUB_TIMEOUT=5\n"
    b"GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`\n"
    b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    b'GRUB_CMDLINE_LINUX="isolcpus=managed_irq,domain,2-11,26-35  nohz_full=2-11,26-35 '
    b'irqaffinity=0-1,12-25,36-47 intel_iommu=on iommu=pt"\n'
    b"\n"
    b"# Uncomment to disable graphical terminal\n"
    b"#GRUB_TERMINAL=console\n"
)


def copy_tree(tmp_path: pathlib.Path, name: str = DELL) -> pathlib.Path:
    return copy_host(tmp_path, name)


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    return copy_tree(tmp_path)


@pytest.fixture
def host(root: pathlib.Path) -> Host:
    return Host.open(str(root))


class RecordingRunner(CommandRunner):
    def __init__(self, have: Sequence[str] = ()) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.have = set(have)

    def which(self, program: str) -> Optional[str]:
        return f"/usr/sbin/{program}" if program in self.have else None

    def run(self, argv: Sequence[str], timeout: Optional[float] = None) -> CommandResult:
        assert not isinstance(argv, str)
        self.calls.append(list(argv))
        return CommandResult(tuple(argv), 0, "", "")


class LiveLikeHost(Host):
    """A fixture tree that claims to be the running machine (to see the commands a live
    host would run), with a runner that only records."""

    @property
    def is_live(self) -> bool:
        return True


def live_like(root: pathlib.Path, have: Sequence[str] = ()) -> tuple[Host, RecordingRunner]:
    base = Host.open(str(root))
    runner = RecordingRunner(have)
    return LiveLikeHost(base.fs, base.ethtool, runner=runner), runner


def round_trip(knob: Knob, host: Host, value: str) -> Optional[str]:
    """check, write, read back; return the original for restore."""
    original = knob.read(host)
    knob.check(host, value)
    knob.write(host, value)
    assert knob.same(knob.read(host), value)
    return original


# ------------------------------------------------------------------ registry and objects


def test_every_kind_registered_and_rebuilt_from_obj_alone() -> None:
    objs = {
        "ring": "ens1f0np0:rx",
        "channels": "ens1f0np0:combined",
        "txqueuelen": "ens1f0np0",
        "irq_affinity": "96",
        "rps_cpus": "ens1f0np0:rx-3",
        "rps_flow_cnt": "ens1f0np0:rx-3",
        "xps_cpus": "ens1f0np0:tx-3",
        "irqbalance": "service",
        "irqbalance_ban": "banned_cpus",
        "cmdline": "isolcpus",
        "governor": "cpu3",
    }
    assert set(objs) | {"sysctl"} <= set(kinds())
    for kind, obj in objs.items():
        knob = knob_from_record(kind, obj)
        assert (knob.kind, knob.obj) == (kind, obj)
        assert knob.ident == f"{kind}:{obj}"


@pytest.mark.parametrize(
    "cls,obj",
    [
        (RingKnob, "ens1f0np0"),
        (RingKnob, "ens1f0np0:rx_mini"),
        (RingKnob, "../etc:rx"),
        (RingKnob, "a/b:rx"),
        (ChannelsKnob, "eth0:queues"),
        (TxqueuelenKnob, "eth0/../../x"),
        (IrqAffinityKnob, "96/../1"),
        (IrqAffinityKnob, "-1"),
        (RpsCpusKnob, "eth0:tx-3"),
        (RpsCpusKnob, "eth0:rx-"),
        (XpsCpusKnob, "eth0:tx-../x"),
        (RpsFlowCntKnob, "eth0:rx-x"),
        (IrqbalanceKnob, "daemon"),
        (IrqbalanceBanKnob, "irqs"),
        (CmdlineKnob, "quiet"),
        (GovernorKnob, "cpu"),
        (GovernorKnob, "cpu3/../4"),
    ],
)
def test_bad_objects_refused(cls: type[Knob], obj: str) -> None:
    with pytest.raises(BadInput):
        cls(obj)


def test_interfaces_and_notes() -> None:
    assert RingKnob("eth0:rx").interface == "eth0"
    assert RingKnob("eth0:rx").disruptive and RingKnob.note == "link reset"
    assert ChannelsKnob("eth0:combined").disruptive and ChannelsKnob.note == "link reset"
    assert RpsCpusKnob("eth0:rx-1").interface == "eth0"
    assert TxqueuelenKnob("eth0").interface == "eth0"
    assert IrqAffinityKnob("96").interface is None
    assert CmdlineKnob.note == "reboot required"


# ------------------------------------------------------------------ rings and channels


def test_ring_round_trip_rewrites_only_the_current_value(root: pathlib.Path, host: Host) -> None:
    path = root / NET / "ethtool_-g_ens1f0np0"
    before = path.read_bytes()
    knob = RingKnob("ens1f0np0:rx")
    assert knob.read(host) == "1024"
    original = round_trip(knob, host, "4096")
    assert original == "1024"
    after = path.read_bytes().decode().splitlines()
    changed = [(a, b) for a, b in zip(before.decode().splitlines(), after) if a != b]
    assert changed == [("RX:\t\t1024", "RX:\t\t4096")]
    assert RingKnob("ens1f0np0:tx").read(host) == "1024"
    knob.restore(host, original)
    assert path.read_bytes() == before


def test_ring_refusals(host: Host) -> None:
    knob = RingKnob("ens1f0np0:tx")
    knob.check(host, "8192")
    for bad in ("8193", "0", "-1", "1k", ""):
        with pytest.raises(BadInput):
            knob.check(host, bad)
    assert RingKnob("lo:rx").read(host) is None  # "Operation not supported" recorded


def test_channels_round_trip(root: pathlib.Path, host: Host) -> None:
    path = root / NET / "ethtool_-l_ens1f0np0"
    before = path.read_bytes()
    knob = ChannelsKnob("ens1f0np0:combined")
    original = round_trip(knob, host, "32")
    assert original == "24"
    assert host.ethtool.channels("ens1f0np0").combined == 32  # type: ignore[union-attr]
    with pytest.raises(BadInput, match="maximum 48"):
        knob.check(host, "49")
    with pytest.raises(BadInput):
        knob.check(host, "0")
    knob.restore(host, original)
    assert path.read_bytes() == before
    assert ChannelsKnob("ens1f0np0:rx").read(host) is None  # n/a on mlx5
    assert ChannelsKnob("eno1:other").read(host) == "1"


def test_recorded_ethtool_setters_behave_like_a_driver(host: Host) -> None:
    eth = host.ethtool
    assert isinstance(eth, RecordedEthtool)
    with pytest.raises(EthtoolIoctlError):
        eth.set_rings("ens1f0np0", rx=8193)
    with pytest.raises(EthtoolIoctlError):
        eth.set_channels("ens1f0np0", rx=2)  # no separate rx channels on mlx5
    with pytest.raises(EthtoolIoctlError):
        eth.set_rings("lo", rx=10)
    eth.set_rings("eno1", rx=2048, tx=4096)
    rings = eth.rings("eno1")
    assert rings is not None and (rings.rx, rings.tx, rings.rx_max) == (2048, 4096, 4096)


# ------------------------------------------------------------------ sysfs attributes


def test_txqueuelen(host: Host) -> None:
    knob = TxqueuelenKnob("ens1f0np0")
    original = round_trip(knob, host, "10000")
    assert original == "1000"
    with pytest.raises(BadInput):
        knob.check(host, "-5")
    knob.restore(host, original)
    assert knob.read(host) == "1000"
    assert TxqueuelenKnob("nosuch0").read(host) is None


def test_irq_affinity(root: pathlib.Path, host: Host) -> None:
    knob = IrqAffinityKnob("96")
    original = round_trip(knob, host, "12,13")
    assert original == "12"
    assert (root / "proc/irq/96/smp_affinity_list").read_text() == "12,13\n"
    assert knob.same(knob.read(host), "12-13")
    assert knob.same("0x3000", "12-13")
    knob.restore(host, original)
    assert knob.read(host) == "12"
    for bad in ("", "48", "1-2,x"):
        with pytest.raises(BadInput):
            knob.check(host, bad)


def test_irq_affinity_refuses_offline_cpu(root: pathlib.Path) -> None:
    (root / "sys/devices/system/cpu/online").write_text("0-46\n")
    host = Host.open(str(root))
    knob = IrqAffinityKnob("96")
    knob.check(host, "12-46")
    with pytest.raises(BadInput, match="47 are not online"):
        knob.check(host, "12,47")


def test_rps_cpus_mask_conversion(root: pathlib.Path, host: Host) -> None:
    knob = RpsCpusKnob("ens1f0np0:rx-3")
    attr = root / "sys/class/net/ens1f0np0/queues/rx-3/rps_cpus"
    assert knob.read(host) == ""  # 0000,00000000
    original = round_trip(knob, host, "12-15,40")
    assert attr.read_text() == "0100,0000f000\n"
    assert knob.read(host) == "12-15,40"
    assert knob.same("0x0000,000f", "0xf") and knob.same("0x0000,000f", "0-3")
    knob.restore(host, original)
    assert attr.read_text() == "0000,00000000\n"
    assert knob.read(host) == ""


def test_rps_cpus_refuses_offline(root: pathlib.Path) -> None:
    (root / "sys/devices/system/cpu/online").write_text("0-23\n")
    host = Host.open(str(root))
    with pytest.raises(BadInput, match="not online"):
        RpsCpusKnob("ens1f0np0:rx-3").check(host, "20-30")


def test_xps_cpus(root: pathlib.Path, host: Host) -> None:
    knob = XpsCpusKnob("ens1f0np0:tx-3")
    assert knob.read(host) == "15"  # the mlx5 hint of comp3
    original = round_trip(knob, host, "39")
    assert (root / "sys/class/net/ens1f0np0/queues/tx-3/xps_cpus").read_text() == "0080,00000000\n"
    knob.restore(host, original)
    assert knob.read(host) == "15"


def test_rps_on_small_host_mask_width(tmp_path: pathlib.Path) -> None:
    root = copy_tree(tmp_path, KVM)
    host = Host.open(str(root))
    knob = RpsCpusKnob("ens3:rx-0")
    assert knob.read(host) == "0-3"
    knob.write(host, "1")
    assert (root / "sys/class/net/ens3/queues/rx-0/rps_cpus").read_text() == "2\n"


def test_rps_flow_cnt(tmp_path: pathlib.Path) -> None:
    root = copy_tree(tmp_path, KVM)
    host = Host.open(str(root))
    knob = RpsFlowCntKnob("ens3:rx-2")
    original = round_trip(knob, host, "8192")
    assert original == "4096"
    for bad in ("4000", "-1", "x"):
        with pytest.raises(BadInput):
            knob.check(host, bad)
    knob.check(host, "0")
    knob.restore(host, original)
    assert knob.read(host) == "4096"


# ------------------------------------------------------------------ irqbalance

WANTS = "etc/systemd/system/multi-user.target.wants/irqbalance.service"


def test_irqbalance_host_tree_manages_the_boot_link(root: pathlib.Path, host: Host) -> None:
    knob = IrqbalanceKnob("service")
    assert knob.read(host) == "running"
    original = round_trip(knob, host, "stopped")
    assert not os.path.lexists(root / WANTS)
    assert (root / "etc/systemd/system/multi-user.target.wants/ssh.service").is_symlink()
    knob.restore(host, original)
    assert os.path.islink(root / WANTS)
    assert (root / WANTS).resolve() == (root / "usr/lib/systemd/system/irqbalance.service")
    with pytest.raises(BadInput):
        knob.check(host, "running,disabled")  # no runtime state in a host tree
    with pytest.raises(BadInput):
        knob.check(host, "paused")


def test_irqbalance_not_installed(tmp_path: pathlib.Path) -> None:
    host = Host.open(str(copy_tree(tmp_path, KVM)))
    assert IrqbalanceKnob("service").read(host) is None
    assert IrqbalanceBanKnob("banned_cpus").read(host) is None


def test_irqbalance_live_uses_systemctl(root: pathlib.Path) -> None:
    host, runner = live_like(root)
    knob = IrqbalanceKnob("service")
    assert knob.read(host) == "running"  # pid 1187 and the wants link
    knob.write(host, "stopped")
    knob.write(host, "running,disabled")
    assert runner.calls == [
        ["systemctl", "stop", "irqbalance.service"],
        ["systemctl", "disable", "irqbalance.service"],
        ["systemctl", "start", "irqbalance.service"],
        ["systemctl", "disable", "irqbalance.service"],
    ]
    assert knob.normalize("running,enabled") == "running"
    assert not knob.same("running", "running,disabled")


def test_irqbalance_ban_edits_one_line(root: pathlib.Path, host: Host) -> None:
    conf = root / "etc/default/irqbalance"
    before = conf.read_bytes()
    knob = IrqbalanceBanKnob("banned_cpus")
    assert knob.read(host) == "0x0000000f,fc000ffc"
    assert knob.same(knob.read(host), "2-11,26-35")
    original = round_trip(knob, host, "2-11,26-35,40")
    old, new = before.decode().splitlines(True), conf.read_text().splitlines(True)
    assert len(old) == len(new)
    diff = [(a, b) for a, b in zip(old, new) if a != b]
    assert diff == [
        (
            'IRQBALANCE_BANNED_CPUS="0000000f,fc000ffc"\n',
            'IRQBALANCE_BANNED_CPULIST="2-11,26-35,40"\n',
        )
    ]
    knob.restore(host, original)
    assert conf.read_bytes() == before
    with pytest.raises(BadInput, match="every online CPU"):
        knob.check(host, "0-47")


def test_irqbalance_ban_conflicting_lines_and_append(tmp_path: pathlib.Path) -> None:
    root = copy_tree(tmp_path, KVM)
    conf = root / "etc/sysconfig/irqbalance"
    conf.parent.mkdir(parents=True)
    text = (
        "# irqbalance\n"
        "IRQBALANCE_ARGS=--foreground\n"
        "export IRQBALANCE_BANNED_CPULIST='3' # housekeeping\n"
        "IRQBALANCE_BANNED_CPUS=8\n"
        "#IRQBALANCE_BANNED_CPUS=\n"
    )
    conf.write_text(text)
    host = Host.open(str(root))
    knob = IrqbalanceBanKnob("banned_cpus")
    assert knob.read(host) == "3"
    knob.write(host, "2-3")
    assert conf.read_text() == (
        "# irqbalance\n"
        "IRQBALANCE_ARGS=--foreground\n"
        "export IRQBALANCE_BANNED_CPULIST='2-3' # housekeeping\n"
        "#IRQBALANCE_BANNED_CPUS=\n"
    )
    emptied = "# irqbalance\nIRQBALANCE_ARGS=--foreground\n#IRQBALANCE_BANNED_CPUS=\n"
    knob.write(host, "")
    assert conf.read_text() == emptied
    knob.write(host, "1")
    assert conf.read_text().endswith('#IRQBALANCE_BANNED_CPUS=\nIRQBALANCE_BANNED_CPULIST="1"\n')
    knob.restore(host, "")
    assert conf.read_text() == emptied


# ------------------------------------------------------------------ kernel command line


@pytest.fixture
def grub(root: pathlib.Path) -> pathlib.Path:
    path = root / "etc/default/grub"
    path.write_bytes(GRUB)
    return path


def test_cmdline_edits_only_the_value(grub: pathlib.Path, host: Host) -> None:
    knob = CmdlineKnob("isolcpus")
    assert knob.read(host) == "managed_irq,domain,2-11,26-35"
    assert knob.running_value(host) == "managed_irq,domain,2-11,26-35"
    original = round_trip(knob, host, "managed_irq,domain,2-9,26-33")
    assert grub.read_bytes() == GRUB.replace(
        b"isolcpus=managed_irq,domain,2-11,26-35", b"isolcpus=managed_irq,domain,2-9,26-33"
    )
    assert knob.running_value(host) == "managed_irq,domain,2-11,26-35"  # reboot required
    assert knob.same("managed_irq,domain,2-5,6-9,26-33", knob.read(host))
    knob.restore(host, original)  # host tree: no bootloader tool is run
    assert grub.read_bytes() == GRUB


def test_cmdline_add_and_remove_a_parameter(grub: pathlib.Path, host: Host) -> None:
    knob = CmdlineKnob("rcu_nocbs")
    assert knob.read(host) == ""
    original = round_trip(knob, host, "2-11,26-35")
    assert grub.read_bytes() == GRUB.replace(b'iommu=pt"', b'iommu=pt rcu_nocbs=2-11,26-35"')
    knob.restore(host, original)
    assert grub.read_bytes() == GRUB


def test_cmdline_refusals(grub: pathlib.Path, host: Host) -> None:
    with pytest.raises(BadInput, match="no housekeeping"):
        CmdlineKnob("isolcpus").check(host, "managed_irq,domain,0-47")
    with pytest.raises(BadInput, match="no housekeeping"):
        CmdlineKnob("nohz_full").check(host, "0-47")
    CmdlineKnob("rcu_nocbs").check(host, "0-47")  # offloading callbacks everywhere is fine
    with pytest.raises(BadInput):
        CmdlineKnob("isolcpus").check(host, '2-3" init=/bin/sh "')
    with pytest.raises(BadInput):
        CmdlineKnob("irqaffinity").check(host, "48-50")
    grub.write_bytes(GRUB.replace(b'DEFAULT="quiet"', b'DEFAULT="quiet nohz_full=4"'))
    with pytest.raises(BadInput, match="GRUB_CMDLINE_LINUX_DEFAULT"):
        CmdlineKnob("nohz_full").check(host, "2-5")


def test_cmdline_without_grub_file_is_missing(host: Host) -> None:
    assert CmdlineKnob("isolcpus").read(host) is None


def test_cmdline_restore_on_live_host_regenerates_bootloader(
    grub: pathlib.Path, root: pathlib.Path
) -> None:
    host, runner = live_like(root, have=["update-grub"])
    knob = CmdlineKnob("isolcpus")
    knob.write(host, "2-5")
    assert runner.calls == []  # write never runs a bootloader tool
    knob.restore(host, "managed_irq,domain,2-11,26-35")
    assert runner.calls == [["update-grub"]]
    assert grub.read_bytes() == GRUB
    host, runner = live_like(root, have=["grubby"])
    CmdlineKnob("rcu_nocbs").restore(host, "")
    assert runner.calls == [["grubby", "--update-kernel=ALL", "--remove-args=rcu_nocbs"]]


# ------------------------------------------------------------------ governor


def test_governor(root: pathlib.Path, host: Host) -> None:
    cpufreq = root / "sys/devices/system/cpu/cpu3/cpufreq"
    cpufreq.mkdir()
    (cpufreq / "scaling_governor").write_text("powersave\n")
    (cpufreq / "scaling_available_governors").write_text("performance powersave\n")
    knob = GovernorKnob("cpu3")
    original = round_trip(knob, host, "performance")
    assert original == "powersave"
    with pytest.raises(BadInput, match="not available"):
        knob.check(host, "ondemand")
    knob.restore(host, original)
    assert knob.read(host) == "powersave"
    assert GovernorKnob("cpu5").read(host) is None  # no cpufreq in the tree


class RestartRunner(RecordingRunner):
    """systemctl that restarts irqbalance (a new PID in the tree), or fails, or does nothing."""

    def __init__(self, root: pathlib.Path, mode: str) -> None:
        super().__init__()
        self.root, self.mode = root, mode

    def run(self, argv: Sequence[str], timeout: Optional[float] = None) -> CommandResult:
        self.calls.append(list(argv))
        if self.mode == "restart":
            (self.root / "proc/1187").rename(self.root / "proc/4242")
        if self.mode == "fail":
            err = "System has not been booted with systemd as init system (PID 1).\nHost is down\n"
            return CommandResult(tuple(argv), 1, "", err)
        return CommandResult(tuple(argv), 0, "", "")


def test_irqbalance_banirq_edits_the_args_line_and_restores_it(root: pathlib.Path, host: Host):
    conf = root / "etc/default/irqbalance"
    before = conf.read_bytes()
    knob = IrqbalanceBanIrqKnob("banned_irqs")
    assert knob.read(host) == "62"  # IRQBALANCE_ARGS="--banirq=62", no newline at the end
    assert knob.same("97, 96", "96,97")
    original = round_trip(knob, host, "96,97")
    after = conf.read_bytes()
    assert after.splitlines()[:-1] == before.splitlines()[:-1]
    assert after.splitlines()[-1] == b'IRQBALANCE_ARGS="--banirq=96 --banirq=97"'
    knob.restore(host, original)
    assert conf.read_bytes() == before
    for bad in ("x", "1-3", "-1"):
        with pytest.raises(BadInput):
            knob.check(host, bad)


def test_irqbalance_banirq_keeps_other_args_and_appends_or_removes_its_line(
    tmp_path: pathlib.Path,
) -> None:
    root = copy_tree(tmp_path, KVM)
    conf = root / "etc/default/irqbalance"
    conf.parent.mkdir(parents=True)
    debian = "# irqbalance\n#IRQBALANCE_ARGS=\n"
    conf.write_text(debian)
    host = Host.open(str(root))
    knob = IrqbalanceBanIrqKnob("banned_irqs")
    assert knob.read(host) == ""
    knob.write(host, "27,28")
    assert conf.read_text() == debian + 'IRQBALANCE_ARGS="--banirq=27 --banirq=28"\n'
    assert discover_irqbalance(host.fs).banned_irqs == {27, 28}
    knob.restore(host, "")
    assert conf.read_text() == debian  # byte for byte
    conf.write_text("export IRQBALANCE_ARGS='--journal -i 5 --banirq 6'\n")
    assert knob.read(host) == "5,6"
    knob.write(host, "7")
    assert conf.read_text() == 'export IRQBALANCE_ARGS="--journal --banirq=7"\n'
    knob.write(host, "")
    assert conf.read_text() == 'export IRQBALANCE_ARGS="--journal"\n'
    assert knob.read(host) == ""


@pytest.mark.parametrize("mode", ["fail", "inactive"])
def test_irqbalance_ban_fails_when_the_running_daemon_was_not_restarted(
    root: pathlib.Path, mode: str
) -> None:
    """A running irqbalance (pid 1187) that try-restart left alone keeps its old ban: the
    write fails (so the apply rolls back), in one line; a restore does not fail for it."""
    base = Host.open(str(root))
    runner = RestartRunner(root, mode)
    host = LiveLikeHost(base.fs, base.ethtool, runner=runner)
    knob = IrqbalanceBanKnob("banned_cpus")
    original = knob.read(host)
    with pytest.raises(KnobError) as info:
        knob.write(host, "2-3")
    msg = str(info.value)
    assert "\n" not in msg and "irqbalance (pid 1187) was not restarted" in msg
    why = "Host is down" if mode == "fail" else "it is not the service's process"
    assert why in msg
    knob.restore(host, original)  # puts the file back without raising
    assert knob.read(host) == original
    assert runner.calls == [["systemctl", "try-restart", "irqbalance.service"]] * 2


def test_irqbalance_ban_restarted_daemon_or_none_running_is_fine(root: pathlib.Path) -> None:
    base = Host.open(str(root))
    host = LiveLikeHost(base.fs, base.ethtool, runner=RestartRunner(root, "restart"))
    IrqbalanceBanKnob("banned_cpus").write(host, "2-3")  # pid 1187 -> 4242: restarted
    (root / "proc/4242").rename(root / "proc/4243.gone")
    (root / "proc/4243.gone/comm").write_text("bash\n")
    host = LiveLikeHost(base.fs, base.ethtool, runner=RestartRunner(root, "fail"))
    IrqbalanceBanKnob("banned_cpus").write(host, "2-4")  # nothing running: nothing to restart


def test_irqbalance_restore_is_a_no_op_when_the_state_is_the_original(root: pathlib.Path) -> None:
    host, runner = live_like(root)
    knob = IrqbalanceKnob("service")
    knob.restore(host, "running")  # a stop that failed left it running
    assert runner.calls == []
    knob.restore(host, "stopped")
    assert runner.calls[0] == ["systemctl", "stop", "irqbalance.service"]
