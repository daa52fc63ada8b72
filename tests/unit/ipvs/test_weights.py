"""The adaptive weight formula (lbtune.ipvs.weights) on agent reports."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import pytest

from lbtune.ipvs.nodereport import AgentReport, judge
from lbtune.ipvs.weights import Policy, ServerState, step

SIGNALS = ("listen", "egress", "conns")


def report(egress_mbit: float, capacity_mbit: Optional[float] = 100.0, drops: int = 0,
           listening: bool = True, queue: int = 0) -> AgentReport:
    """A judged report of a server sending egress_mbit of capacity_mbit."""
    r = AgentReport(
        node="rs", port=80, time=0.0, interval=1.0, cpu_util=0.5, cpus=1, runq=1,
        mem_available=800 << 20, mem_total=1 << 30, connections=10, listening=listening,
        listen_queue=queue, listen_backlog=511, listen_drops=drops, listen_drops_delta=drops,
        egress_dev="eth0", egress_bps=egress_mbit * 1e6,
        egress_capacity_bps=None if capacity_mbit is None else capacity_mbit * 1e6,
        max_conns=None, signals=SIGNALS, load=0.0, bottleneck="", pressure=0.0, health="ok",
        reason="",
    )  # fmt: skip
    return judge(r)


CFG = {"a": 1, "b": 1, "c": 1}


def run(rounds, policy=None, configured=CFG, current=None):
    """Feed rounds of {server: report} through step(), applying each decision; the last
    decisions and every weight seen per server."""
    policy = policy or Policy()
    state: dict[str, ServerState] = {}
    current = dict(current or {s: w for s, w in configured.items()})
    seen: dict[str, list[int]] = {s: [] for s in configured}
    decisions = []
    for reports in rounds:
        state, decisions = step(policy, configured, current, reports, state)
        for d in decisions:
            current[d.server] = d.weight
            seen[d.server].append(d.weight)
    return {d.server: d for d in decisions}, seen


def test_judge_takes_the_busiest_signal_and_calls_overload():
    r = report(60, 100)
    assert r.bottleneck == "egress" and r.load == pytest.approx(0.6) and r.health == "ok"
    assert report(97, 100).health == "ok"  # a full link is busy, not overloaded
    assert report(10, 100, queue=500).health == "overloaded"
    dropped = report(10, 100, drops=3)
    assert dropped.health == "overloaded" and "listen drop" in dropped.reason
    assert report(10, listening=False).health == "down"
    # cpu is not among the signals: a busy CPU does not count
    assert replace(report(10), cpu_util=0.99).load == pytest.approx(0.1)


def test_weights_follow_capacity_on_unequal_servers():
    # a and b can send 100 Mbit/s, c 20: all three at the same load
    rounds = [{"a": report(50, 100), "b": report(50, 100), "c": report(10, 20)}] * 4
    last, _ = run(rounds)
    assert last["a"].weight == last["b"].weight
    assert last["c"].weight == pytest.approx(last["a"].weight / 5, abs=2)
    assert "capacity share 0.20" in last["c"].reason


def test_overloaded_server_gets_zero_until_it_recovers_below_low():
    p = Policy(alpha=1.0)  # no smoothing: the thresholds alone
    # listen-queue fill is pressure: 500/512 = 0.98, 450/512 = 0.88, 350/512 = 0.68
    busy = {"a": report(30), "b": report(30), "c": report(30, queue=500)}
    middle = {"a": report(30), "b": report(30), "c": report(30, queue=450)}  # low < p < high
    calm = {"a": report(30), "b": report(30), "c": report(30, queue=350)}
    last, seen = run([busy, middle, middle, calm], policy=p)
    assert seen["c"][:3] == [0, 0, 0]  # in at 0.99, still out at 0.88 (> low 0.80)
    assert seen["c"][3] > 0 and "capacity share" in last["c"].reason
    # without the overload first, 0.88 keeps it in service (hysteresis, not one threshold)
    _, seen2 = run([middle], policy=p)
    assert seen2["c"][0] > 0


def test_listen_drops_and_down_servers_get_zero():
    last, _ = run([{"a": report(30), "b": report(30, drops=5), "c": report(5, listening=False)}])
    assert last["b"].weight == 0 and "listen drop" in last["b"].reason
    assert last["c"].weight == 0 and "nothing listens" in last["c"].reason
    assert last["a"].weight > 0


def test_a_full_link_is_busy_not_overloaded():
    last, _ = run([{"a": report(99, 100), "b": report(99, 100), "c": report(19.9, 20)}] * 3)
    assert all(d.weight > 0 for d in last.values())
    assert last["c"].weight == pytest.approx(last["a"].weight / 5, abs=1)


def test_never_all_zero_when_all_overloaded():
    full = {"queue": 510}
    rounds = [{"a": report(99, 100, **full), "b": report(99, 100, **full),
               "c": report(19.9, 20, **full)}] * 3  # fmt: skip
    last, seen = run(rounds)
    assert all(d.weight > 0 for d in last.values())
    assert all(w > 0 for ws in seen.values() for w in ws)
    assert "every server overloaded" in last["c"].reason
    # weights by capacity alone: c keeps a fifth of a's
    assert last["c"].weight < last["a"].weight


def test_all_down_falls_back_to_configured_weights():
    cfg = {"a": 2, "b": 1}
    last, _ = run([{"a": report(1, listening=False), "b": report(1, listening=False)}],
                  configured=cfg)  # fmt: skip
    assert {s: d.weight for s, d in last.items()} == {"a": 200, "b": 100}  # cfg x scale


def test_unreachable_agent_keeps_configured_weight():
    cfg = {"a": 3, "b": 1}
    last, _ = run([{"a": report(40), "b": None}, {"a": report(40), "b": None}], configured=cfg)
    assert last["b"].weight == 100 and "unreachable" in last["b"].reason  # 1 x scale
    assert last["a"].weight == 300  # the only one measured: full weight, 3 x scale


def test_configured_zero_stays_zero():
    last, _ = run([{"a": report(10), "b": report(10), "c": report(10)}],
                  configured={"a": 1, "b": 1, "c": 0})  # fmt: skip
    assert last["c"].weight == 0 and last["c"].reason == "configured weight 0"


def test_deadband_keeps_small_changes_out():
    steady = [{"a": report(50), "b": report(50), "c": report(50)}] * 3
    _, seen = run(steady)
    first = seen["a"][0]
    # a wobble of a few percent in load does not move the weight
    wobble = steady + [{"a": report(53), "b": report(47), "c": report(50)}] * 2
    _, seen2 = run(wobble)
    assert seen2["a"][-1] == first and seen2["b"][-1] == first
    # a real change does
    shift = steady + [{"a": report(90), "b": report(20), "c": report(50)}] * 3
    _, seen3 = run(shift)
    assert seen3["a"][-1] < first == seen3["b"][-1]  # b has the most left: full weight


def test_smoothing_damps_a_single_spike():
    p = Policy(alpha=0.5)
    rounds = [{"a": report(30), "b": report(30), "c": report(30, queue=100)}] * 3
    rounds.append({"a": report(30), "b": report(30), "c": report(30, queue=505)})  # one
    _, seen = run(rounds, policy=p)
    assert seen["c"][-1] > 0  # smoothed pressure (0.2 -> 0.59) is nowhere near high
    rounds += [{"a": report(30), "b": report(30), "c": report(30, queue=505)}] * 4
    _, seen = run(rounds, policy=p)
    assert seen["c"][-1] == 0  # a lasting one is


def test_idle_samples_do_not_make_a_server_look_slow():
    # idle: a trickle at a low load says nothing about capacity
    idle = {"a": report(0.02), "b": report(0.02), "c": report(0.02)}
    busy = {"a": report(50, 100), "b": report(50, 100), "c": report(10, 20)}
    last, seen = run([idle, idle, busy, busy])
    assert seen["a"][:2] == seen["b"][:2] == seen["c"][:2]  # all at full capacity share
    assert last["c"].weight < last["a"].weight / 3


def test_servers_busier_together_change_nothing():
    calm = {"a": report(30), "b": report(30), "c": report(6, 20)}
    busy = {"a": report(90), "b": report(90), "c": report(18, 20)}
    _, seen = run([calm] * 3 + [busy] * 4)
    assert len(set(seen["a"])) == 1 and len(set(seen["c"])) == 1  # ratios hold: no writes
    assert seen["a"][0] == 100 and seen["c"][0] == 20
