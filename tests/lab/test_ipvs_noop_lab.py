"""The memoized no-op of `lbtune ipvs apply` against real IPVS in the lab kernel
(tests/lab/guest/ipvs_noop.py): it answers exactly what the full run answers, only when
nothing the full run would look at has changed, and never in place of a change."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def steps(lab_kernel: Any) -> dict[str, Any]:
    """(lab_kernel: without the lab kernel the tier is skipped, which fails under CI.)"""
    from lbtune.lab.guests.uml import run_in_lab

    res = run_in_lab("tests.lab.guest.ipvs_noop:run", "/tmp/lbtune-noop-state", timeout=900)
    return res.value  # type: ignore[no-any-return]


def ops(step: dict[str, Any]) -> int:
    assert step["code"] == 0, step["err"]
    return int(json.loads(step["out"])["operations"])


def test_the_memo_answers_a_repeated_no_op_exactly_as_the_full_run(steps):
    assert ops(steps["first"]) > 30 and not steps["first"]["memo"]
    assert ops(steps["full"]) == 0 and not steps["full"]["memo"]  # this run records
    assert steps["memo"]["memo"] and steps["memo_text"]["memo"]
    assert steps["memo"]["out"] == steps["full"]["out"]  # byte for byte, --json
    assert steps["memo_json_first"]["memo"]  # `lbtune --json ipvs apply` (Ansible's way)
    assert steps["memo_json_first"]["out"] == steps["full"]["out"]
    assert steps["memo_text"]["out"] == steps["full_text"]["out"] == \
        "/tmp/noop.toml: nothing to change\n"
    assert steps["memo"]["err"] == "" and steps["memo_text"]["err"] == ""
    assert steps["memo_mode"] == ["0o600"]


@pytest.mark.parametrize("form", ["json", "text", "json_first"])
def test_the_record_answers_a_plan_exactly_as_the_full_plan(steps, form):
    memo, full = steps[f"plan_{form}_memo"], steps[f"plan_{form}_full"]
    assert memo["memo"] and not full["memo"], (memo["err"], full["err"])
    assert memo["code"] == full["code"] == 0 and memo["err"] == ""
    assert memo["out"] == full["out"]  # byte for byte
    if form == "text":
        assert memo["out"].startswith("0 operation(s), ") and "already in place" in memo["out"]
    else:
        assert ops(memo) == 0 and json.loads(memo["out"])["unchanged"] > 30


def test_connection_counts_are_not_settings(steps):
    assert "8001" in steps["conns_table"]
    assert steps["with_connection"]["memo"]
    assert ops(steps["with_connection"]) == 0


@pytest.mark.parametrize("what", ["weight", "sysctl", "timeout", "vip", "scheduler",
                                  "server_added"])
def test_drift_is_repaired_by_the_full_run_and_then_recorded_again(steps, what):
    plan = steps[f"{what}_plan"]  # the plan in between is the full one, and shows it
    assert not plan["memo"] and ops(plan) >= 1, what
    repair = steps[f"{what}_repair"]
    assert not repair["memo"] and ops(repair) >= 1, what
    after = steps[f"{what}_after"]
    assert not after["memo"] and ops(after) == 0  # the full no-op that records again
    assert steps[f"{what}_memo"]["memo"] and ops(steps[f"{what}_memo"]) == 0


def test_a_journal_directory_that_changed_goes_to_the_full_run(steps):
    assert not steps["temp_repair"]["memo"] and ops(steps["temp_repair"]) == 0
    assert not any("lbtune-tmp" in n for n in steps["temp_left"])  # the full run cleared it
    assert steps["temp_after"]["memo"]


def test_a_held_lock_is_reported_by_the_full_run(steps):
    locked = steps["locked"]
    assert locked["code"] == 6 and not locked["memo"]
    assert "another lbtune run holds" in locked["err"]
    # a plan while an apply holds the lock: answered from the record without taking it
    # (the full plan takes none either; a plan holding it would make that apply fail)
    plan = steps["locked_plan"]
    assert plan["memo"] and ops(plan) == 0
    assert steps["lock_untouched"]  # the holder's pid is still what the lock file says
    assert steps["unlocked"]["memo"]


def test_a_memo_that_is_not_roots_own_or_is_garbage_is_ignored_and_rewritten(steps):
    assert not steps["memo_0644"]["memo"] and ops(steps["memo_0644"]) == 0
    assert not steps["memo_garbage"]["memo"] and ops(steps["memo_garbage"]) == 0
    assert steps["memo_rewritten"]["memo"]


def test_an_edited_config_is_applied_by_the_full_run(steps):
    assert not steps["edited"]["memo"] and ops(steps["edited"]) == 1
    assert not steps["edited_after"]["memo"]
    assert steps["edited_memo"]["memo"]
    assert "10.78.0.1:8000" in steps["final_table"]
    line = next(ln for ln in steps["final_table"].splitlines() if "10.78.0.1:8000" in ln)
    assert line.split()[3] == "5"  # Route Weight


def test_other_options_and_environments_go_to_the_full_run(steps):
    assert not steps["verbose"]["memo"] and steps["verbose"]["code"] == 0
    bad = steps["bad_env"]
    assert bad["code"] == 2 and "LBTUNE_DEBUG" in bad["err"] and not bad["memo"]
    narrow = steps["tty_width"]  # the line is wider than COLUMNS: rich wraps it
    assert not narrow["memo"] and narrow["code"] == 0
    missing = steps["missing"]
    assert missing["code"] == 2 and "cannot read config" in missing["err"]
