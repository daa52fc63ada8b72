"""The shipped alert rules (docs/alerts/lbtune.rules.yml) are valid and do what their unit
tests (docs/alerts/lbtune.rules.test.yml) say: `promtool check rules` and `promtool test
rules`, and the unit tests bite (a rule with a changed threshold fails them)."""

from __future__ import annotations

import shutil

from tests.fleet.conftest import RULES, promtool

TESTS = RULES.with_name("lbtune.rules.test.yml")
ALERTS = ("LbtuneDropsRising", "LbtuneListenOverflow", "LbtuneListenQueueNearlyFull",
          "LbtuneConntrackNearlyFull", "LbtuneProfileDrift", "LbtuneProbeCost",
          "LbtuneCollectionFailing", "LbtuneSourceDown")  # fmt: skip


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


def test_a_source_down_bites(tmp_path):
    """LbtuneSourceDown fires on `lbtune_source_up 0` only (a source there but unreadable;
    a source the host does not have, ipvs off a director, has no series and cannot fire):
    its unit test fails when the rule fires on a source that is up."""
    shutil.copy(TESTS, tmp_path / TESTS.name)
    changed = RULES.read_text().replace(
        "max by (instance, source) (lbtune_source_up) == 0",
        "max by (instance, source) (lbtune_source_up) <= 1",
    )
    assert changed != RULES.read_text()
    (tmp_path / RULES.name).write_text(changed)
    r = promtool("test", "rules", str(tmp_path / TESTS.name))
    assert r.returncode != 0 and "LbtuneSourceDown" in r.stdout + r.stderr


def test_the_rules_and_docs_use_the_exporters_names():
    from tests.fleet.conftest import REPO

    for path in (RULES, TESTS, REPO / "docs" / "fleet.md", REPO / "README.md"):
        text = path.read_text()
        assert "lbtune_findings{" not in text and "`lbtune_findings`" not in text, path
