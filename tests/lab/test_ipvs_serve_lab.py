"""`lbtune ipvs serve` against real IPVS in the lab kernel (tests/lab/guest/ipvs_serve.py):
every apply it answers is the one-shot full run's, byte for byte and table for table, from
an empty table, for a no-op, for each kind of edit, through drift made behind its back,
and for bad configs and a held lock; clients it cannot serve run the apply themselves."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytestmark = pytest.mark.lab

SCENARIOS = ["first", "first_text", "noop", "noop_text", "weight", "weight_text",
             "real_added", "real_removed", "service_removed", "service_added", "scheduler",
             "head_last", "drift_weight", "drift_real", "drift_and_edit", "bad_toml",
             "bad_key", "duplicate"]  # fmt: skip


@pytest.fixture(scope="module")
def steps(lab_kernel: Any) -> dict[str, Any]:
    """(lab_kernel: without the lab kernel the tier is skipped, which fails under CI.)"""
    from lbtune.lab.guests.uml import run_in_lab

    res = run_in_lab("tests.lab.guest.ipvs_serve:run", "/tmp/lbtune-serve-state", timeout=1200)
    return res.value  # type: ignore[no-any-return]


def served_lines(log: str) -> list[str]:
    return re.findall(r"lbtune ipvs serve: apply serve\.toml: .*", log)


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_server_answers_exactly_what_the_one_shot_run_answers(steps, name):
    s = steps[name]
    served, oneshot = s["served"], s["oneshot"]
    assert served["served"] and not served["click"], served  # it was the server's
    assert not oneshot["served"] and oneshot["click"]  # it was the full run's
    assert served["code"] == oneshot["code"]
    assert s["same"], (served, oneshot)  # output (journal ids aside) and table


def test_the_scenarios_change_what_they_say(steps):
    """The comparisons above are of real work: applies that change the table, no-ops that
    do not, errors that are errors."""
    def ops(name: str) -> int:
        return int(json.loads(steps[name]["served"]["out"])["operations"])
    assert ops("first") > 40 and ops("noop") == 0 and ops("weight") == 1
    assert ops("drift_weight") == 1 and ops("drift_real") >= 1 and ops("drift_and_edit") == 2
    assert ops("service_removed") >= 2 and ops("real_removed") >= 1
    for bad in ("bad_toml", "bad_key", "duplicate"):
        assert steps[bad]["served"]["code"] == 2
        assert steps[bad]["served"]["err"].startswith("lbtune: serve.toml")
    weight = next(ln for ln in steps["weight"]["served"]["table"].splitlines()
                  if "10.80.0.2:8003" in ln)
    assert weight.split()[3] == "9"


def test_the_server_reads_only_what_changed(steps):
    """The log: a repeated no-op decodes no service and reads no config section; a weight
    edit reads one section and decodes the services it changes and the drift's."""
    assert steps["noop_again_1"]["served"] and steps["noop_again_2"]["served"]
    assert json.loads(steps["noop_again_2"]["out"])["operations"] == 0
    lines = served_lines(steps["log"])
    assert any("config sections read 0 of 12, services decoded 0 of 12" in ln
               for ln in lines), lines
    assert any("config sections read 1 of 12" in ln for ln in lines)


def test_a_held_lock_is_exit_6_through_the_server_too(steps):
    served, oneshot = steps["locked_served"], steps["locked_oneshot"]
    assert served["served"] and served["code"] == oneshot["code"] == 6
    assert served["out"] == oneshot["out"] and served["err"] == oneshot["err"]


def test_clients_the_server_declines_or_cannot_reach_run_the_apply_themselves(steps):
    assert not steps["other_env"]["served"] and steps["other_env"]["code"] == 0
    assert steps["log_declined"]
    dead = steps["dead_server"]  # killed with SIGKILL: its socket is left behind
    assert steps["dead_socket_left"] and not dead["served"] and dead["code"] == 0


def test_one_server_per_state_directory_and_a_clean_stop(steps):
    second = steps["second_server"]
    assert second["code"] == 6 and "another lbtune ipvs serve listens" in second["err"]
    assert steps["restarted"]["served"] and steps["restarted"]["code"] == 0
    assert steps["stop_code"] == 0 and steps["socket_after_stop"] == []
    assert "stopped after" in steps["log"]
    line = next(ln for ln in steps["final_table"].splitlines() if "10.80.0.3:8002" in ln)
    assert line.split()[3] == "5"  # the restarted server's apply is in the kernel
