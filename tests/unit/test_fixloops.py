"""The proven-fix count (tests/fixloops.py) comes from the loops themselves and stays true:
every declared loop names a registry rule that has a profile fix, no rule twice, each tier's
declarations are exactly what its one loop test is parametrized over, and every profile-fix
rule without a loop, and every rule without a profile fix, has its one-line reason."""

from __future__ import annotations

import collections

import pytest

from lbtune.diagnose.rules import RULES
from tests import fixloops


def test_every_declared_rule_is_in_the_registry_and_has_a_profile_fix() -> None:
    known = {r.id for r in RULES}
    with_fix = set(fixloops.profile_fix_rules())
    for rule, tier in fixloops.proven_fixes():
        assert rule in known, f"{tier} declares a loop for {rule!r}: no such rule"
        assert rule in with_fix, f"{tier} proves {rule!r}, whose registry entry has no profile fix"


def test_no_rule_is_declared_twice() -> None:
    seen = collections.Counter(rule for rule, _ in fixloops.proven_fixes())
    assert [r for r, n in seen.items() if n > 1] == []


@pytest.mark.parametrize("tier", list(fixloops.TIERS))
def test_the_declarations_are_exactly_what_the_loop_test_runs(tier: str) -> None:
    """The tier's one loop test is parametrized over its LOOPS list itself (the same
    objects, one test id per rule), so a loop cannot be declared without a test running it."""
    loops = fixloops.declared(tier)
    assert loops and all(isinstance(lp, fixloops.FixLoop) for lp in loops), loops
    test = fixloops.loop_test(tier)
    marks = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    assert len(marks) == 1, (tier, marks)
    argnames, argvalues = marks[0].args[:2]
    assert argnames == "loop", argnames
    assert list(argvalues) == loops and all(a is b for a, b in zip(argvalues, loops))
    assert marks[0].kwargs["ids"] == [lp.rule for lp in loops]


def test_every_profile_fix_rule_without_a_loop_says_why_in_one_place() -> None:
    unproven = fixloops.unproven_profile_fix_rules()
    assert set(unproven) == set(fixloops.UNPROVEN), (unproven, fixloops.UNPROVEN)
    proven = {rule for rule, _ in fixloops.proven_fixes()}
    assert proven | set(unproven) == set(fixloops.profile_fix_rules())
    for reason in [*fixloops.UNPROVEN.values(), *fixloops.no_profile_fix_rules().values()]:
        assert reason.strip() and "\n" not in reason, reason


def test_the_rules_without_a_profile_fix_are_the_registry_s() -> None:
    assert set(fixloops.NO_PROFILE_FIX) == {r.id for r in RULES if not r.profile_fix}
    assert set(fixloops.no_profile_fix_rules()) == set(fixloops.NO_PROFILE_FIX)
    # every rule is counted once: with a profile fix, or without one
    assert len(fixloops.profile_fix_rules()) + len(fixloops.NO_PROFILE_FIX) == len(RULES)

