"""A failure forced at every change of the real lb-dr plan restores the whole host tree."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.tune import engine
from lbtune.tune.journal import ROLLED_BACK, StateDir
from lbtune.tune.plan import make_plan
from lbtune.tune.profile import load_profile, resolve
from tests.conftest import DELL, copy_host


def files(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()  # byte for byte
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "var/lib/lbtune" not in str(p)
    }


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = copy_host(tmp_path_factory.mktemp("faults"), DELL, dest="host")
    host = Host.open(str(root))
    targets = resolve(load_profile("lb-dr"), discover_host(host), "ens1f0np0")
    plan = make_plan(host, "lb-dr", targets)
    return root, host, plan


def test_plan_covers_several_knob_kinds(setup):
    _, _, plan = setup
    kinds = {c.knob.kind for c in plan.to_apply}
    assert {"sysctl", "ring", "irq_affinity", "irqbalance_ban"} <= kinds
    assert len(plan.to_apply) >= 20


def test_failure_at_every_index_restores_everything(setup, tmp_path):
    root, host, plan = setup
    before = files(root)
    n = len(plan.to_apply)
    for fail_at in range(n):
        state = StateDir(host, override=str(tmp_path / f"state-{fail_at}"))

        def fault(i, knob, fail_at=fail_at):
            if i == fail_at:
                raise OSError(5, f"injected at {i} ({knob.ident})")

        with pytest.raises(engine.RolledBack, match="injected"):
            engine.apply_plan(host, plan, state, fault=fault)
        assert files(root) == before, f"not restored after a failure at change {fail_at}"
        assert state.journals()[-1].state == ROLLED_BACK


def test_failure_in_persistence_after_all_knobs_restores_everything(setup, tmp_path):
    root, host, plan = setup
    before = files(root)
    from lbtune.tune.persist import persist_plan

    def failing_persist(txn, p):
        persist_plan(txn, p)
        raise OSError(28, "No space left on device")

    state = StateDir(host, override=str(tmp_path / "state"))
    with pytest.raises(engine.RolledBack, match="No space"):
        engine.apply_plan(host, plan, state, persist=failing_persist)
    assert files(root) == before
