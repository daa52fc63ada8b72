"""The diagnose -> profile -> apply loop for fixes that are host-global sysctls, in the lab.

netdev_max_backlog, netdev_budget, nf_conntrack_max, tcp_max_orphans, tcp_mem and
rmem_default belong to the kernel, not to a network namespace: `lbtune --netns` cannot set
them, and a test must never set them on the host. So the loop runs in the UML lab kernel
(tests/lab/guest/fix_loop.py, one boot for every rule): the fault sets the faulty value and
is triggered inside `lbtune diagnose --write-profile`; the profile holds the fix and lints
clean; the control: the same load without the fix moves the fault's counter again, every
part of it counted (arrived or lost), so the counter does not stop by itself; `plan` shows
the fix, `apply` makes it; the same load again, proven to have arrived by a second counter
it moves (the fault's `arrival`: softnet processed, Tcp.PassiveOpens, Udp.InDatagrams),
moves the fault's own kernel counter by nothing and the rule stays quiet; `verify` exits 0
and `rollback` gives back the values from before the apply. The loops are declared in
tests/lab/guest/fix_loop.py's LOOPS, each with its rule (tests/fixloops.py counts them).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from lbtune.tune.lint import lint_profile
from lbtune.tune.profile import load_profile
from tests.lab.guest.fix_loop import LOOPS, LabLoop

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def loops() -> dict[str, dict[str, Any]]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.fix_loop:run", [lp.rule for lp in LOOPS], timeout=1500)
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    return {lp["rule"]: lp for lp in res.value["loops"]}


def moved(truth: dict[str, Any], counter: str) -> int:
    return int(truth["after"].get(counter, 0)) - int(truth["before"].get(counter, 0))


def findings(run: dict[str, Any]) -> list[dict[str, Any]]:
    assert run["exit"] in (0, 1), run["stderr"]
    return list(json.loads(run["stdout"])["findings"])


@pytest.mark.parametrize("loop", LOOPS, ids=[lp.rule for lp in LOOPS])
def test_host_global_fix_stops_the_counter(
    loops: dict[str, dict[str, Any]], loop: LabLoop, tmp_path: pathlib.Path
) -> None:
    rule, key = loop.rule, loop.key
    lp = loops[rule]
    counter = lp["counter"]
    assert counter == loop.counter
    # 1. the fault counted, diagnosed, written as a profile that lints clean
    assert moved(lp["truth1"], counter) > 0, lp["truth1"]
    first = [f for f in findings(lp["first"]) if f["rule"] == rule]
    assert first and lp["first"]["exit"] == 1, lp["first"]
    fixes = [x for f in first for x in f["fixes"] if x["key"] == key]
    assert fixes and fixes[0]["scope"] == "profile", first[0]["fixes"]
    assert lp["profile"] is not None, lp["first"]["stderr"]
    path = tmp_path / f"fix-{rule}.toml"
    path.write_text(lp["profile"])
    prof = load_profile(str(path))
    assert lint_profile(prof) == []
    wanted = dict(prof.settings())[key]
    assert wanted.value == fixes[0]["desired"] and wanted.reason, wanted
    # 2. the control: the same load without the fix moves the fault's counter again, and
    # every part of it was counted, arrived (the arrival counter) or lost (the fault's)
    control = lp["control"]
    assert control["attempted"] == lp["truth1"]["attempted"] > 0, control
    assert moved(control, counter) > 0, (counter, control)
    counted = moved(control, control["arrival"]) + moved(control, counter)
    assert counted >= control["attempted"], (control["arrival"], counted, control)
    # 3. plan shows the change, apply makes it
    assert lp["plan"]["exit"] == 0, lp["plan"]["stderr"]
    rows = {c["key"]: c for c in json.loads(lp["plan"]["stdout"])["changes"]}
    assert rows[key]["action"] == "change", rows[key]
    assert lp["apply"]["exit"] == 0, lp["apply"]["stderr"]
    sysctl = key.split(".", 1)[1]
    assert lp["applied"][sysctl] == rows[key]["desired"], (lp["applied"], rows[key])
    assert lp["before_apply"][sysctl] != lp["applied"][sysctl]
    # 4. the same load again: it arrived (the fault's positive-control counter moved by at
    # least what was sent), yet the fault's counter does not move and the rule is quiet
    arrival, attempted = lp["truth2"]["arrival"], lp["truth2"]["attempted"]
    assert arrival and attempted > 0, lp["truth2"]
    assert moved(lp["truth2"], arrival) >= attempted, (arrival, lp["truth2"])
    assert moved(lp["truth2"], counter) == 0, (counter, lp["truth2"])
    assert lp["truth2"]["attempted"] == lp["truth1"]["attempted"]
    assert [f for f in findings(lp["second"]) if f["rule"] == rule] == []
    # 5. verify, and rollback gives back every value from before the apply
    assert lp["verify"]["exit"] == 0, lp["verify"]["stdout"]
    assert lp["rollback"]["exit"] == 0, lp["rollback"]["stderr"]
    assert lp["after_rollback"] == lp["before_apply"]
