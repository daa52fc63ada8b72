"""The collection's `lbtune_ipvs` module against real IPVS in the lab kernel, run by the
real `ansible-playbook` (tests/lab/guest/ansible_ipvs.py; one boot, one playbook)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.ansible_ipvs:run", timeout=900).value
    except LabUnavailable as e:
        pytest.skip(str(e))
    assert res["rc"] == 0, res["out"]
    return res  # type: ignore[no-any-return]


def weight(table: str, rs: str) -> str:
    line = table.split(f"{rs}:80", 1)[1].splitlines()[0]
    return line.split()[1]


def test_check_mode_reports_and_changes_nothing(lab):
    r = lab["r"]["check"]
    assert r["changed"] is True
    assert r["operations"] >= 3  # the service and two real servers (and the VIP)
    assert f"{lab['rs'][0]}:80" in r["diff"]["after"]
    assert lab["vip"] not in lab["r"]["t_check"]["stdout"]  # nothing in the kernel's table


def test_apply_then_idempotent(lab):
    a = lab["r"]["apply"]
    assert a["changed"] is True and a["journal"]
    table = lab["r"]["t_apply"]["stdout"]
    assert f"{lab['vip']}:80 rr" in table
    assert all(weight(table, rs) == "1" for rs in lab["rs"])
    g = lab["r"]["again"]
    assert g["changed"] is False and g["operations"] == 0


def test_manual_drift_is_repaired(lab):
    assert weight(lab["r"]["t_drift"]["stdout"], lab["rs"][0]) == "7"
    p = lab["r"]["repair"]
    assert p["changed"] is True
    assert [(c["op"], c["object"]) for c in p["changes"]] == [
        ("edit", f"tcp:{lab['vip']}:80/{lab['rs'][0]}:80")]
    assert "weight=7" in p["diff"]["before"] and "weight=1" in p["diff"]["after"]
    assert weight(lab["r"]["t_repair"]["stdout"], lab["rs"][0]) == "1"


def test_absent_tears_down_then_idempotent(lab):
    assert lab["r"]["absent"]["changed"] is True
    assert lab["vip"] not in lab["r"]["t_absent"]["stdout"]
    assert lab["r"]["absent_again"]["changed"] is False
