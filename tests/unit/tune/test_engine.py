"""The knob engine on a throwaway host tree: plan, apply, verify, rollback, faults, crashes."""

from __future__ import annotations

import os
import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.tune import engine
from lbtune.tune.journal import APPLIED, APPLYING, ROLLED_BACK, Busy, StateDir
from lbtune.tune.knobs.sysctl import SysctlKnob
from lbtune.tune.plan import Action, Mode, Target, make_plan

SYSCTLS = {
    "net.core.somaxconn": "4096\n",
    "net.core.netdev_max_backlog": "1000\n",
    "net.ipv4.tcp_fin_timeout": "60\n",
    "net.ipv4.tcp_rmem": "4096\t131072\t6291456\n",
    "net.ipv4.ip_local_port_range": "32768\t60999\n",
    "vm.swappiness": "60\n",
}


@pytest.fixture
def tree(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "root"
    for key, value in SYSCTLS.items():
        p = root / ("proc/sys/" + key.replace(".", "/"))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(value)
    (root / "proc/sys/kernel").mkdir(parents=True, exist_ok=True)
    (root / "proc/sys/kernel/hostname").write_text("testhost\n")
    return root


@pytest.fixture
def host(tree: pathlib.Path) -> Host:
    return Host.open(str(tree))


@pytest.fixture
def state(host: Host, tmp_path: pathlib.Path) -> StateDir:
    return StateDir(host, override=str(tmp_path / "state"))


def snapshot(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def targets() -> list[Target]:
    return [
        Target(SysctlKnob("net.core.somaxconn"), "8192", "accept backlog", "sysctl.a"),
        Target(SysctlKnob("net.core.netdev_max_backlog"), "250000", "backlog", "sysctl.b"),
        Target(SysctlKnob("net.ipv4.tcp_fin_timeout"), "60", "default", "sysctl.c"),
        Target(
            SysctlKnob("net.ipv4.tcp_rmem"), "4096 262144 16777216", "rmem", "sysctl.d", Mode.RAISE
        ),
        Target(SysctlKnob("vm.swappiness"), "10", "lb", "sysctl.e"),
    ]


def test_plan_rows(host):
    plan = make_plan(host, "t", targets())
    rows = {c.knob.obj: (c.current, c.desired, c.action) for c in plan.changes}
    assert rows["net.core.somaxconn"] == ("4096", "8192", Action.CHANGE)
    assert rows["net.ipv4.tcp_fin_timeout"] == ("60", "60", Action.OK)
    # raise is field by field: 4096 stays, 131072 -> 262144, 6291456 -> 16777216
    assert rows["net.ipv4.tcp_rmem"][1:] == ("4096 262144 16777216", Action.CHANGE)
    assert len(plan.to_apply) == 4


def test_raise_does_not_lower(host):
    t = [Target(SysctlKnob("net.core.somaxconn"), "1024", mode=Mode.RAISE)]
    assert make_plan(host, "t", t).to_apply == ()
    t = [Target(SysctlKnob("net.core.somaxconn"), "1024", mode=Mode.LOWER)]
    assert make_plan(host, "t", t).to_apply[0].desired == "1024"


def test_missing_key_is_planned_as_missing_and_skipped(host, state):
    plan = make_plan(host, "t", [Target(SysctlKnob("net.core.nonexistent"), "1")])
    assert [c.action for c in plan.changes] == [Action.MISSING]
    assert plan.to_apply == ()
    verdicts = engine.verify_targets(host, [Target(SysctlKnob("net.core.nonexistent"), "1")])
    assert verdicts[0].status is engine.KnobStatus.MISSING


def test_apply_verify_rollback_round_trip(tree, host, state):
    before = snapshot(tree)
    plan = make_plan(host, "t", targets())
    journal = engine.apply_plan(host, plan, state)
    assert journal is not None and journal.state == APPLIED
    # a tree attribute keeps the kernel's line ending
    assert (tree / "proc/sys/net/core/somaxconn").read_text() == "8192\n"
    assert all(v.status is engine.KnobStatus.OK for v in engine.verify_targets(host, targets()))
    # journal holds the exact originals, tabs included
    originals = {k.obj: k.original for k in journal.knobs}
    assert originals["net.ipv4.tcp_rmem"] == "4096\t131072\t6291456"
    # applying again plans nothing
    assert make_plan(host, "t", targets()).to_apply == ()
    assert engine.apply_plan(host, make_plan(host, "t", targets()), state) is None
    engine.rollback(host, state)
    after = snapshot(tree)
    assert {k: v.rstrip(b"\n") for k, v in after.items()} == {
        k: v.rstrip(b"\n") for k, v in before.items()
    }
    assert state.journals()[-1].state == ROLLED_BACK


def test_verify_reports_drift(tree, host, state):
    engine.apply_plan(host, make_plan(host, "t", targets()), state)
    (tree / "proc/sys/vm/swappiness").write_text("30\n")
    verdicts = {v.object: v.status for v in engine.verify_targets(host, targets())}
    assert verdicts["vm.swappiness"] is engine.KnobStatus.DRIFT
    assert verdicts["net.core.somaxconn"] is engine.KnobStatus.OK
    j = engine.last_applied(state)
    assert j is not None
    assert {v.object: v.status for v in engine.verify_journal(host, j)}["vm.swappiness"] is (
        engine.KnobStatus.DRIFT
    )


@pytest.mark.parametrize("fail_at", range(4))
def test_failure_at_every_index_restores_everything(tree, host, state, fail_at):
    before = snapshot(tree)
    plan = make_plan(host, "t", targets())

    def fault(i, knob):
        if i == fail_at:
            raise OSError(5, "injected failure")

    with pytest.raises(engine.RolledBack, match="injected failure"):
        engine.apply_plan(host, plan, state, fault=fault)
    after = snapshot(tree)
    assert {k: v.rstrip(b"\n") for k, v in after.items()} == {
        k: v.rstrip(b"\n") for k, v in before.items()
    }
    assert state.journals()[-1].state == ROLLED_BACK


def stripped(snap: dict[str, bytes]) -> dict[str, bytes]:
    """Fake kernel files lose their trailing newline on write; the kernel's never do."""
    return {k: v.rstrip(b"\n") for k, v in snap.items()}


def test_failing_persistence_rolls_back_knobs_and_files(tree, host, state):
    (tree / "etc/sysctl.d").mkdir(parents=True)
    (tree / "etc/sysctl.d/60-lbtune.conf").write_bytes(b"# old\nvm.swappiness = 1\n")
    before = snapshot(tree)

    def persist(txn, plan):
        txn.replace_file("/etc/sysctl.d/60-lbtune.conf", b"new\n")
        txn.replace_file("/etc/lbtune-new-file", b"x")
        raise OSError(28, "disk full")

    with pytest.raises(engine.RolledBack, match="disk full"):
        engine.apply_plan(host, make_plan(host, "t", targets()), state, persist=persist)
    assert stripped(snapshot(tree)) == stripped(before)
    assert not (tree / "etc/lbtune-new-file").exists()
    assert (tree / "etc/sysctl.d/60-lbtune.conf").read_bytes() == b"# old\nvm.swappiness = 1\n"


def test_persisted_files_are_restored_by_rollback(tree, host, state):
    (tree / "etc/sysctl.d").mkdir(parents=True)
    (tree / "etc/sysctl.d/60-lbtune.conf").write_bytes(b"# hand written\n")

    def persist(txn, plan):
        txn.replace_file("/etc/sysctl.d/60-lbtune.conf", b"vm.swappiness = 10\n")
        txn.replace_file("/etc/systemd/system/lbtune-boot.service", b"[Unit]\n")

    engine.apply_plan(host, make_plan(host, "t", targets()), state, persist=persist)
    assert (tree / "etc/systemd/system/lbtune-boot.service").exists()
    engine.rollback(host, state)
    assert (tree / "etc/sysctl.d/60-lbtune.conf").read_bytes() == b"# hand written\n"
    assert not (tree / "etc/systemd/system/lbtune-boot.service").exists()


def test_killed_apply_is_detected_and_rolled_back(tree, host, state):
    before = snapshot(tree)
    plan = make_plan(host, "t", targets())
    pid = os.fork()
    if pid == 0:  # the apply that gets "kill -9"ed after two changes

        def die(i, knob):
            if i == 2:
                os._exit(9)

        try:
            engine.apply_plan(host, plan, state, fault=die)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 9
    assert (tree / "proc/sys/net/core/somaxconn").read_text() == "8192\n"  # half applied
    assert state.interrupted() is not None and state.journals()[-1].state == APPLYING
    with pytest.raises(engine.Interrupted, match="rollback"):
        engine.apply_plan(host, make_plan(host, "t", targets()), state)
    engine.rollback(host, state)
    assert snapshot(tree) == before  # byte for byte, line endings included
    assert state.interrupted() is None


def test_concurrent_apply_is_refused(host, state):
    with state.lock():
        pid = os.fork()
        if pid == 0:
            try:
                engine.apply_plan(host, make_plan(host, "t", targets()), state)
            except Busy:
                os._exit(42)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 42


def test_rollback_to_undoes_newer_applies_in_order(tree, host, state):
    first = engine.apply_plan(host, make_plan(host, "a", targets()[:2]), state)
    engine.apply_plan(
        host,
        make_plan(host, "b", [Target(SysctlKnob("net.core.somaxconn"), "16384")]),
        state,
    )
    assert (tree / "proc/sys/net/core/somaxconn").read_text() == "16384\n"
    assert first is not None
    done = engine.rollback(host, state, to=first.id)
    assert [j.profile for j in done] == ["b", "a"]
    assert (tree / "proc/sys/net/core/somaxconn").read_text() == "4096\n"
    with pytest.raises(BadInput, match="already rolled-back"):
        engine.rollback(host, state, to=first.id)
    with pytest.raises(BadInput, match="nothing to roll back"):
        engine.rollback(host, state)


@pytest.mark.parametrize(
    "key",
    [
        "../../etc/passwd",
        "/etc/shadow",
        "net/../../../etc/shadow",
        "net..core",
        "net.core.",
        "net core",
        "net.ipv4.conf.a/../../x.rp_filter",
        "kernel.a/b",
        "net.ipv4.conf.eth0.rp_filter\n",
        "",
        "net.ipv4.conf.../.rp_filter",
    ],
)
def test_hostile_sysctl_keys_are_refused(key):
    with pytest.raises(BadInput):
        sysctl_path(key)


def test_vlan_interface_sysctl_key():
    assert sysctl_path("net.ipv4.conf.bond0/100.rp_filter") == (
        "/proc/sys/net/ipv4/conf/bond0.100/rp_filter"
    )
    assert SysctlKnob("net.ipv4.conf.bond0/100.rp_filter").interface == "bond0.100"
    assert SysctlKnob("net.ipv4.conf.all.rp_filter").interface is None


def test_symlink_escaping_the_root_is_refused(tree, host, tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("1\n")
    link = tree / "proc/sys/net/core/evil"
    link.symlink_to(outside)
    with pytest.raises(BadInput):
        make_plan(host, "t", [Target(SysctlKnob("net.core.evil"), "0")])
    assert outside.read_text() == "1\n"


def test_effective_conf_is_max_of_all_and_interface(tmp_path):
    from lbtune.host.fs import HostFS
    from lbtune.host.kernel.sysctl import conf_key, effective_conf

    for iface, value in (("all", "1"), ("bond0.100", "2"), ("eth0", "0")):
        d = tmp_path / "proc/sys/net/ipv4/conf" / iface
        d.mkdir(parents=True)
        (d / "rp_filter").write_text(value + "\n")
    fs = HostFS(str(tmp_path))
    assert conf_key("bond0.100", "rp_filter") == "net.ipv4.conf.bond0/100.rp_filter"
    assert effective_conf(fs, "bond0.100", "rp_filter") == (2, 1, 2)
    assert effective_conf(fs, "eth0", "rp_filter") == (1, 1, 0)
    assert effective_conf(fs, "eth9", "rp_filter") is None


def test_lbtune_command_names_root_and_netns(tmp_path):
    from lbtune.host.fs import HostFS
    from lbtune.host.host import Host
    from lbtune.tune.journal import lbtune_command

    assert lbtune_command(Host(HostFS("/")), "rollback") == "lbtune rollback"
    assert lbtune_command(Host(HostFS("/"), netns="lab-rs1"), "history") == (
        "lbtune --netns lab-rs1 history"
    )
    assert lbtune_command(Host(HostFS(str(tmp_path))), "rollback") == (
        f"lbtune --root {tmp_path} rollback"
    )


def test_rollback_restores_channels_before_the_queue_irq_affinities(tmp_path, monkeypatch):
    """virtio_net places every queue IRQ again when the channel count changes: rollback must
    restore the channels first, or the affinities it restored before end at the driver's
    placement (found in the VM tier, tests/vm/test_vm_irqbalance.py)."""
    from lbtune.tune.knobs.irq import IrqAffinityKnob
    from lbtune.tune.knobs.nic import ChannelsKnob
    from tests.conftest import KVM, copy_host

    root = copy_host(tmp_path, KVM)
    host = Host.open(str(root))
    irqs = {n: root / f"proc/irq/{n}/smp_affinity_list" for n in (27, 28, 29)}
    eth = host.ethtool
    set_channels = eth.set_channels

    def driver_set_channels(dev, **kw):  # the driver's placement: every IRQ on CPU 3
        set_channels(dev, **kw)
        for path in irqs.values():
            path.write_text("3\n")

    monkeypatch.setattr(eth, "set_channels", driver_set_channels)
    before = {n: p.read_bytes() for n, p in irqs.items()}
    plan = make_plan(
        host,
        "t",
        [
            Target(ChannelsKnob("ens3:combined"), "2", "fewer queues", "nic.channels"),
            *(Target(IrqAffinityKnob(str(n)), "2", "pin", "nic.irq") for n in irqs),
        ],
    )
    assert [c.knob.kind for c in plan.to_apply] == ["channels"] + ["irq_affinity"] * 3
    st = StateDir(host, override=str(tmp_path / "state"))
    engine.apply_plan(host, plan, st)
    assert {p.read_text() for p in irqs.values()} == {"2\n"}
    engine.rollback(host, st)
    assert {n: p.read_bytes() for n, p in irqs.items()} == before
    assert host.ethtool.channels("ens3").combined == 4  # type: ignore[union-attr]
