"""Persistence through the engine: files written via the transaction, restored by rollback."""

from __future__ import annotations

import functools
import os
import pathlib
from typing import Optional, Sequence

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.runner import CommandResult, CommandRunner
from lbtune.tune.engine import RolledBack, Transaction, apply_plan, rollback
from lbtune.tune.journal import ROLLED_BACK, StateDir
from lbtune.tune.knobs import CmdlineKnob, IrqAffinityKnob, RingKnob
from lbtune.tune.knobs.sysctl import SysctlKnob
from lbtune.tune.persist import (
    BOOT_UNIT,
    BOOT_WANTS,
    SYSCTL_CONF,
    boot_argv,
    check_persist_paths,
    persist_plan,
)
from lbtune.tune.plan import Target, make_plan
from tests.conftest import DELL, copy_host

GRUB = b'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX="isolcpus=2-11 quiet"\n# keep\n'


class RecordingRunner(CommandRunner):
    def __init__(self, have: Sequence[str] = (), fail: int = 0) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.have = set(have)
        self.fail = fail  # how many calls fail first

    def which(self, program: str) -> Optional[str]:
        return f"/usr/sbin/{program}" if program in self.have else None

    def run(self, argv: Sequence[str], timeout: Optional[float] = None) -> CommandResult:
        self.calls.append(list(argv))
        failing = len(self.calls) <= self.fail
        return CommandResult(tuple(argv), 1 if failing else 0, "", "boom" if failing else "")


class LiveLikeHost(Host):
    @property
    def is_live(self) -> bool:
        return True


@pytest.fixture
def root(tmp_path: pathlib.Path) -> pathlib.Path:
    dst = copy_host(tmp_path, DELL, dest="host")
    core = dst / "proc/sys/net/core"
    core.mkdir(parents=True, exist_ok=True)
    (core / "somaxconn").write_text("4096\n")
    (core / "netdev_max_backlog").write_text("1000\n")
    (dst / "etc/default/grub").write_bytes(GRUB)
    return dst


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    """Every regular file and link target under etc/ and sos_commands/ (never following links)."""
    out = {}
    for sub in ("etc", "sos_commands"):
        for p in sorted((root / sub).rglob("*")):
            if p.is_symlink():
                out[str(p.relative_to(root))] = b"-> " + str(p.readlink()).encode()
            elif p.is_file():
                out[str(p.relative_to(root))] = p.read_bytes()
    return out


def targets() -> list[Target]:
    return [
        Target(SysctlKnob("net.core.somaxconn"), "4096", key="sysctl.net.core.somaxconn"),  # ok
        Target(SysctlKnob("net.core.netdev_max_backlog"), "30000"),
        Target(RingKnob("ens1f0np0:rx"), "8192"),
        Target(IrqAffinityKnob("96"), "13"),
        Target(CmdlineKnob("isolcpus"), "2-9"),
    ]


def test_persist_files_written_and_rolled_back_exactly(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    (root / "etc/sysctl.d").mkdir()
    (root / "etc/sysctl.d/60-lbtune.conf").write_bytes(b"# an older one\nvm.swappiness = 1\n")
    before = snapshot(root)
    runner = RecordingRunner(have=["update-grub", "grubby"])
    base = Host.open(str(root))
    host = Host(base.fs, base.ethtool, runner=runner)
    state = StateDir(host, override=str(tmp_path / "state"))
    plan = make_plan(host, "lb-director", targets())
    journal = apply_plan(host, plan, state, persist=persist_plan)
    assert journal is not None

    conf = (root / SYSCTL_CONF[1:]).read_text()
    assert conf.splitlines()[0] == "# Written by lbtune for profile lb-director."
    assert "net.core.somaxconn = 4096\n" in conf  # already right, persisted anyway
    assert "net.core.netdev_max_backlog = 30000\n" in conf
    unit = (root / BOOT_UNIT[1:]).read_text()
    assert "Type=oneshot" in unit
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert exec_line.endswith(" apply lb-director --boot --yes")
    assert exec_line.split("=", 1)[1].startswith("/")
    assert "Wants=lbtune-boot.service" in (root / BOOT_WANTS[1:]).read_text()
    assert b"isolcpus=2-9 quiet" in (root / "etc/default/grub").read_bytes()
    assert runner.calls == []  # a host tree never runs commands
    assert {f.path for f in journal.files} == {SYSCTL_CONF, BOOT_UNIT, BOOT_WANTS}

    done = rollback(host, state)
    assert [j.state for j in done] == [ROLLED_BACK]
    assert snapshot(root) == before
    assert (root / "proc/irq/96/smp_affinity_list").read_text().strip() == "12"
    assert host.fs.read("/proc/sys/net/core/netdev_max_backlog") == "1000"


def test_persist_without_boot_knobs_writes_only_sysctl(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    host = Host.open(str(root))
    state = StateDir(host, override=str(tmp_path / "state"))
    plan = make_plan(host, "p", [Target(SysctlKnob("net.core.somaxconn"), "8192")])
    apply_plan(host, plan, state, persist=persist_plan)
    assert (root / SYSCTL_CONF[1:]).exists()
    assert not (root / BOOT_UNIT[1:]).exists()
    assert not (root / BOOT_WANTS[1:]).exists()


def test_persist_on_live_host_regenerates_grub(root: pathlib.Path, tmp_path: pathlib.Path) -> None:
    base = Host.open(str(root))
    runner = RecordingRunner(have=["grubby"])
    host = LiveLikeHost(base.fs, base.ethtool, runner=runner)
    state = StateDir(host, override=str(tmp_path / "state"))
    plan = make_plan(host, "p", [Target(CmdlineKnob("isolcpus"), "2-9")])
    journal = state.new_journal("p", [])
    persist_plan(Transaction(host, journal), plan)
    assert runner.calls == [["grubby", "--update-kernel=ALL", "--args=isolcpus=2-9"]]


def test_bootloader_failure_rolls_everything_back(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    before = snapshot(root)
    base = Host.open(str(root))
    runner = RecordingRunner(have=["update-grub"], fail=1)
    host = LiveLikeHost(base.fs, base.ethtool, runner=runner)
    state = StateDir(host, override=str(tmp_path / "state"))
    plan = make_plan(host, "p", targets())
    with pytest.raises(RolledBack, match="update-grub"):
        apply_plan(host, plan, state, persist=persist_plan)
    # the restore of the cmdline knob regenerates the bootloader config again
    assert runner.calls == [["update-grub"], ["update-grub"]]
    assert snapshot(root) == before
    assert host.fs.read("/proc/sys/net/core/netdev_max_backlog") == "1000"


def test_boot_unit_re_applies_with_the_same_interface_and_profile_path(
    root: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """Without --iface a profile with a [nic."data"] section does not resolve at boot; a
    profile given as a path is named by its absolute path (the unit runs from /)."""
    host = Host.open(str(root))
    state = StateDir(host, override=str(tmp_path / "state"))
    plan = make_plan(host, "lb-dr-iso", [Target(RingKnob("ens1f0np0:rx"), "8192")])
    hook = functools.partial(
        persist_plan, iface="ens1f0np0", profile_ref="profiles/lb-dr-iso.toml"
    )
    apply_plan(host, plan, state, persist=hook)
    unit = (root / BOOT_UNIT[1:]).read_text()
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    words = exec_line.split()
    assert words[-6:] == [
        "apply", os.path.abspath("profiles/lb-dr-iso.toml"), "--iface", "ens1f0np0",
        "--boot", "--yes",
    ]  # fmt: skip
    assert boot_argv(plan, None, "lb-dr")[-3:] == ["lb-dr", "--boot", "--yes"]


@pytest.mark.parametrize("tools", [[], ["grubby"]])
def test_cmdline_persist_on_a_live_host_needs_a_bootloader_tool(
    root: pathlib.Path, tools: list[str]
) -> None:
    base = Host.open(str(root))
    runner = RecordingRunner(have=tools)
    host = LiveLikeHost(base.fs, base.ethtool, runner=runner)
    plan = make_plan(host, "p", [Target(CmdlineKnob("isolcpus"), "2-9")])
    if tools:
        check_persist_paths(host, plan)
    else:
        with pytest.raises(BadInput, match=r"neither update-grub nor grubby .* nothing changed"):
            check_persist_paths(host, plan)
    assert runner.calls == []
    sysctl_only = make_plan(host, "p", [Target(SysctlKnob("net.core.somaxconn"), "8192")])
    check_persist_paths(host, sysctl_only)  # no command line, no tool needed
