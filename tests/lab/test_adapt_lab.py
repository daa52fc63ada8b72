"""Adaptive weights in the lab kernel: `lbtune ipvs adapt` against real IPVS, and a short
`lbtune lab run --adaptive` (the weights react; performance is the benchmark's business)."""

from __future__ import annotations

from typing import Any

import pytest

from lbtune.lab.guests.uml import LabKernel
from tests.conftest import run_cli

pytestmark = pytest.mark.lab

RS1, RS2, RS3 = "10.77.0.11", "10.77.0.12", "10.77.0.13"


@pytest.fixture(scope="module")
def e2e() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.adapt_e2e:run", timeout=600)
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    return res.value  # type: ignore[no-any-return]


def _step(e2e: dict[str, Any], name: str) -> dict[str, Any]:
    st = e2e["steps"][name]
    assert st["adapt_running"], e2e.get("stderr")
    assert st["reached"], (name, st["weights"], e2e.get("log"))
    return st  # type: ignore[no-any-return]


def test_slow_server_gets_a_lower_weight_under_load(e2e):
    assert e2e["configured"] == {RS1: 1, RS2: 1, RS3: 1}
    w = _step(e2e, "unequal")["weights"]
    assert 0 < w[RS3] < w[RS1] / 2


def test_unreachable_agent_falls_back_to_the_configured_weight(e2e):
    w = _step(e2e, "agent_gone")["weights"]
    assert w[RS3] == 100  # configured 1 x scale 100
    notices = [e["reason"] for e in e2e["log"] if e.get("kind") == "notice"]
    said = [n for n in notices if "10.77.0.13:9177" in n and "unreachable" in n]
    assert len(said) == 1  # said once, not every poll


def test_down_servers_get_zero_and_never_all(e2e):
    w = _step(e2e, "two_down")["weights"]
    assert w[RS1] == 0 and w[RS2] == 0 and w[RS3] > 0
    w = _step(e2e, "all_down")["weights"]
    assert all(v > 0 for v in w.values())
    # replay every change adapt logged: at no moment were all three at 0
    now = dict(e2e["configured"])
    for e in e2e["log"]:
        if e.get("kind") == "weight" and e.get("applied"):
            now[e["server"]] = e["weight"]
            assert any(v > 0 for v in now.values()), e


def test_every_change_is_logged_with_a_reason_and_exit_restores(e2e):
    changes = [e for e in e2e["log"] if e.get("kind") == "weight"]
    assert changes and all(e.get("reason") for e in changes)
    assert any("nothing listens" in e["reason"] for e in changes)
    assert e2e["after_exit"] == {RS1: 1, RS2: 1, RS3: 1}
    assert e2e["adapt_exit"] == 0  # SIGTERM is a daemon's clean stop (README exit codes)
    assert e2e["log"][-1]["reason"].startswith("adapt stopped:")  # no error line after it


def test_lab_run_adaptive_weights_react(lab_kernel: LabKernel) -> None:
    r = run_cli("lab", "run", "--adaptive", "--schemes", "adapt", "--duration", "8",
                "--connections", "12", "--json")  # fmt: skip
    assert r.exit_code == 0, r.stderr[-2000:]
    (adapt,) = r.json["schemes"]
    assert adapt["scheme"] == "adapt" and adapt["failures"] == 0
    w = adapt["weights_at_end"]
    assert 0 < w[RS3] < w[RS1] and 0 < w[RS3] < w[RS2]  # the slow server got less
    assert adapt["weights_after"] == {RS1: 1, RS2: 1, RS3: 1}  # restored on exit
    assert any(e.get("kind") == "weight" for e in adapt["events"])
    assert {s["server"] for s in adapt["samples"]} == {"rs1", "rs2", "rs3"}
