"""A full conntrack table in the lab kernel, and what `lbtune diagnose` says about it.

nf_conntrack_max is host-global (read-only in a child namespace), so the fault runs in the
UML guest's init namespace (tests/lab/guest/conntrack_full.py): nf_conntrack_max = 16, 24
connections over lo, one boot for the whole module. Each round triggers the fault inside a
`diagnose --duration 2` window: first with --json (table empty before: 8 drops), then with
text output (the table is still full from the first round: all 24 drop).

The tracking half of the fault (a namespace tracks once a ruleset needs it: one entry per
connection) runs in a namespace of the guest too: making conntrack track loads nf_conntrack
and act_ct, and tests load no module on the host (it was a netns-tier test before).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.lab

MAX, CONNS = 16, 24


@pytest.fixture(scope="module")
def lab_run() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.conntrack_full:run", MAX, CONNS, 2.0, timeout=180)
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    rounds = {r["format"]: r for r in res.value["rounds"]}
    assert set(rounds) == {"json", "text"}
    return rounds


def delta(truth: dict[str, Any], key: str) -> int:
    return int(truth["after"].get(key, 0)) - int(truth["before"].get(key, 0))


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_table_fills_to_max_and_drops_the_rest(lab_run, fmt):
    r = lab_run[fmt]
    t = r["truth"]
    assert t["details"]["tracker"] == "tc"
    # the table fills up; in the second round, entries the first one left (closed
    # connections) may expire meanwhile, so it can be one or two short of full
    before = t["details"]["count_before"]
    assert MAX - before <= t["details"]["count_full"] <= MAX
    assert t["details"]["count_full"] == MAX or before > 0
    assert t["after"]["conntrack max"] == MAX
    assert t["capacity"] == (MAX if fmt == "json" else 0)
    assert t["hi"] == CONNS - t["capacity"] and t["lo"] == CONNS - MAX
    assert t["lo"] == t["hi"] or fmt == "text"
    assert t["lo"] <= delta(t, "conntrack stat drop") <= t["hi"]
    assert delta(t, "conntrack stat early_drop") == 0  # established entries are ASSURED
    # the fault landed inside the diagnose window: triggered after its first sample, and
    # its last sample taken once the fault's result was in (conditions, not timing)
    ev = r["events"]
    assert ev[:2] == ["sample", "trigger"] and "fault not done" not in ev, ev
    assert "fault done" in ev and ev[-1] == "sample", ev


def _finding(r: dict[str, Any]) -> dict[str, Any]:
    assert r["exit_code"] == 1, r["stderr"] + r["stdout"]
    findings = json.loads(r["stdout"])["findings"]
    hits = [f for f in findings if f["rule"] == "conntrack-full"]
    assert len(hits) == 1, [(f["rule"], f["object"]) for f in findings]
    return hits[0]  # type: ignore[no-any-return]


def test_diagnose_finds_the_full_table_json(lab_run):
    r = lab_run["json"]
    f, t = _finding(r), r["truth"]
    assert f["level"] == "fail"
    assert t["lo"] <= f["count"] <= t["hi"], (f["count"], t["lo"], t["hi"])
    ev = {e["counter"]: e["value"] for e in f["evidence"]}
    assert any("drop" in k and t["lo"] <= v <= t["hi"] for k, v in ev.items()), ev
    fix = next(x for x in f["fixes"] if "nf_conntrack_max" in x["knob"])
    assert int(fix["current"]) == MAX
    assert int(fix["desired"]) > MAX


def test_diagnose_finds_the_full_table_text(lab_run):
    f = _finding(lab_run["json"])
    r, t = lab_run["text"], lab_run["text"]["truth"]
    assert r["exit_code"] == 1, r["stderr"] + r["stdout"]
    out = r["stdout"]
    fix = next(x for x in f["fixes"] if "nf_conntrack_max" in x["knob"])
    for what in (f["title"], f["object"], fix["knob"], str(MAX)):
        assert what in out, f"text output lacks {what!r}:\n{out}"
    drops = delta(t, "conntrack stat drop")
    assert t["lo"] <= drops <= t["hi"] and f" {drops} " in out, (drops, out)


def test_a_namespace_tracks_one_entry_per_connection() -> None:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.conntrack_full:tracking_in_netns", CONNS, timeout=180)
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    t = res.value
    assert t["details"]["tracker"] == "tc"  # UML 6.1 has no nf_tables ip family
    assert t["counter"] == "conntrack count" and t["lo"] == t["hi"] == CONNS
    assert delta(t, "conntrack count") == CONNS
    assert delta(t, "conntrack stat drop") == 0
