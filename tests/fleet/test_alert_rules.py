"""The shipped alert rules (docs/alerts/lbtune.rules.yml) are valid and do what their unit
tests (docs/alerts/lbtune.rules.test.yml) say: `promtool check rules` and `promtool test
rules`, and the unit tests bite (a rule with a changed threshold fails them)."""

from __future__ import annotations

import shutil

from tests.fleet.conftest import RULES, promtool

TESTS = RULES.with_name("lbtune.rules.test.yml")
ALERTS = ("LbtuneDropsRising", "LbtuneListenOverflow", "LbtuneListenQueueNearlyFull",
          "LbtuneConntrackNearlyFull", "LbtuneProfileDrift", "LbtuneProbeCost",
          "LbtuneCollectionFailing")  # fmt: skip


def test_rules_are_valid_and_every_alert_is_unit_tested():
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0 and f"SUCCESS: {len(ALERTS)} rules found" in r.stdout, r.stderr
    text, tests = RULES.read_text(), TESTS.read_text()
    for name in ALERTS:
        assert f"alert: {name}\n" in text
        assert f"alertname: {name}\n" in tests, f"{name} has no promtool unit test"


def test_promtool_unit_tests_pass():
    r = promtool("test", "rules", str(TESTS))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_the_unit_tests_fail_when_a_threshold_changes(tmp_path):
    shutil.copy(TESTS, tmp_path / TESTS.name)
    changed = RULES.read_text().replace(
        "(rate(lbtune_drops_total[5m])) > 1", "(rate(lbtune_drops_total[5m])) > 100"
    )
    assert changed != RULES.read_text()
    (tmp_path / RULES.name).write_text(changed)
    r = promtool("test", "rules", str(tmp_path / TESTS.name))
    assert r.returncode != 0 and "LbtuneDropsRising" in r.stdout + r.stderr
