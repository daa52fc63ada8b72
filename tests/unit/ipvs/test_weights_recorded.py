"""The weight formula replayed on agent reports recorded in the lab (tests/data/agent/)."""

from __future__ import annotations

import json
import pathlib
from typing import Any, Callable, Optional

from lbtune.ipvs.nodereport import AgentReport, parse_report
from lbtune.ipvs.weights import Policy, ServerState, step

DATA = pathlib.Path(__file__).parents[2] / "data" / "agent" / "lab-unequal-rates.json"
RS1, RS2, RS3 = "10.77.0.11", "10.77.0.12", "10.77.0.13"
Edit = Callable[[int, str, Optional[dict[str, Any]]], Optional[dict[str, Any]]]


def replay(policy: Optional[Policy] = None, edit: Optional[Edit] = None
           ) -> tuple[list[dict[str, int]], list[dict[str, str]], int]:  # fmt: skip
    """Weights after every round, the reasons, and how many weight writes it took."""
    rounds = json.loads(DATA.read_text())
    cfg = {a: 1 for a in rounds[0]}
    current = dict(cfg)
    state: dict[str, ServerState] = {}
    seen, reasons, writes = [], [], 0
    for i, r in enumerate(rounds):
        reports: dict[str, Optional[AgentReport]] = {}
        for addr, doc in r.items():
            doc = edit(i, addr, doc) if edit else doc
            reports[addr] = None if doc is None else parse_report(doc)
        state, decisions = step(policy or Policy(), cfg, current, reports, state)
        for d in decisions:
            writes += d.changed
            current[d.server] = d.weight
        seen.append(dict(current))
        reasons.append({d.server: d.reason for d in decisions})
    return seen, reasons, writes


def test_recorded_reports_parse():
    rounds = json.loads(DATA.read_text())
    assert len(rounds) == 22
    assert all(parse_report(doc).health == "ok" for r in rounds for doc in r.values())


def test_slow_server_settles_near_its_capacity_share():
    seen, _, _ = replay()
    for w in seen[2:]:
        assert w[RS1] > 0 and w[RS2] > 0
        assert 0.15 <= w[RS3] / max(w[RS1], w[RS2]) <= 0.3  # its link is a quarter of theirs


def test_deadband_and_smoothing_keep_writes_few():
    _, _, writes = replay()
    _, _, raw_writes = replay(Policy(alpha=1.0, deadband=0.0, min_step=0))
    assert writes <= 3 + 3  # the first round sets all three, then at most three edits
    assert raw_writes > 2 * writes  # every wobble of the load would be a write without them


def test_agent_lost_mid_run_gets_configured_weight_and_comes_back():
    def lose(i: int, addr: str, doc: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        return None if addr == RS3 and 10 <= i < 14 else doc

    seen, reasons, _ = replay(edit=lose)
    assert seen[9][RS3] < 40
    assert all(seen[i][RS3] == 100 for i in range(10, 14))
    assert "unreachable" in reasons[10][RS3]
    assert seen[-1][RS3] < 40  # measured again once it answers


def test_listen_drops_take_a_server_out_until_it_recovers():
    def drops(i: int, addr: str, doc: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        if doc is not None and addr == RS2 and i in (8, 9):
            doc = dict(doc, listen_drops_delta=12, health="overloaded",
                       reason="12 listen drop(s) on port 80 in 1 s")  # fmt: skip
        return doc

    seen, reasons, _ = replay(edit=drops)
    assert seen[8][RS2] == 0 and seen[9][RS2] == 0
    assert "listen drop" in reasons[8][RS2]
    assert seen[10][RS2] > 0  # no drops and its pressure is 0: back at once
    assert all(w[RS1] > 0 and w[RS3] > 0 for w in seen)
