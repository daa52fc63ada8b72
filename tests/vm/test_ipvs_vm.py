"""IPVS on Debian's 6.1 in the VM lab guest, where ip_vs and its schedulers are modules that
are not loaded at boot (the UML lab builds them in, so there nothing is ever loaded).

The guest runs the UML lab's own kernel-agnostic phases (tests/vm/guest_ipvs.py); the tests
below are the UML lab's tests of those phases (tests/lab/test_ipvs_lab.py,
test_ipvs_table_lab.py) applied to what the VM guest recorded, plus the module loading.
"""

from __future__ import annotations

from typing import Any

import pytest

from lbtune.lab.guests.vm import VmGuest
from tests.lab import test_ipvs_lab as dr
from tests.lab import test_ipvs_table_lab as table

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def lab(vm: VmGuest) -> dict[str, Any]:
    return vm.call("tests.vm.guest_ipvs:run", timeout=1800)  # type: ignore[no-any-return]


def test_reads_do_not_load_ip_vs_and_the_first_apply_does(lab):
    assert lab["at_boot"] == [] and lab["after_status"] == []
    plan = lab["plan"]
    assert plan["code"] == 0, plan["stderr"]
    assert plan["json"]["operations"] > 0
    assert lab["status"]["code"] == 0, lab["status"]["stderr"]
    assert lab["status"]["json"]["loaded"] is False
    apply = lab["apply"]
    assert apply["code"] == 0, apply["stderr"]
    assert apply["json"]["operations"] > 0
    assert {"ip_vs", "ip_vs_rr"} <= set(lab["after_apply"])


def test_the_schedulers_the_configs_name_load_as_modules(lab):
    # phase_rollback applies wlc and sh; the export round trip wrr, sh, lc, mh and rr
    assert {"ip_vs_wlc", "ip_vs_sh"} <= set(lab["after_rollback"])
    assert {"ip_vs_wrr", "ip_vs_lc", "ip_vs_mh"} <= set(lab["after_export"])
    assert "ip_vs_lblc" not in lab["after_export"]  # nothing loads what no config names


def test_second_apply_does_nothing(lab):
    dr.test_second_apply_does_nothing(lab)


def test_manual_drift_is_seen_and_repaired_in_place(lab):
    dr.test_manual_drift_is_seen_and_repaired_in_place(lab)


def test_failed_apply_is_rolled_back_completely(lab):
    dr.test_failed_apply_is_rolled_back_completely(lab)


def test_lbtune_rollback_restores_the_previous_table(lab):
    dr.test_lbtune_rollback_restores_the_previous_table(lab)


def test_export_reimported_with_ipvsadm_gives_the_same_table(lab):
    table.test_export_reimported_with_ipvsadm_gives_the_same_table(lab)


def test_the_export_carries_what_ipvsadm_save_leaves_out(lab):
    table.test_the_export_carries_what_ipvsadm_save_leaves_out(lab)


def test_export_of_the_kernel_table_matches_the_config_export(lab):
    table.test_export_of_the_kernel_table_matches_the_config_export(lab)
