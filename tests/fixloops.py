"""The one count of proven fixes: which rules a fix loop proves, which it does not, and why.

A fix loop (docs/testing.md, docs/diagnose.md "Proven fixes") makes a rule's fault, diagnoses
it with `--write-profile`, applies the profile and makes the same load again: the fault's own
kernel counter stops while a second counter proves the load arrived, and a control (the same
load without the fix) shows that the counter does not stop by itself. Each tier declares its
loops in one list, `LOOPS`, of `FixLoop`s (each carries the `rule` it proves), and runs them
from ONE test parametrized over that list (`TIERS` names both); nothing else declares a
loop. Everything here is read from those declarations and from lbtune's rule registry
(`Rule.profile_fix`), never from a hand list of proven rules. Importing this module, and
calling its functions, needs no root and boots nothing (the loop modules are imported, not
run).

For README/docs renderers:

- ``proven_fixes() -> list[tuple[str, str]]``: ``(rule, tier)`` of every declared loop,
  tiers in `TIERS` order, loops in declaration order. The proven-fix count is its length.
- ``profile_fix_rules() -> list[str]``: the rules whose findings can carry a profile fix
  (a fix `lbtune apply` makes), in registry order.
- ``unproven_profile_fix_rules() -> dict[str, str]``: profile-fix rules with no loop ->
  why (`UNPROVEN`, the one place that says it).
- ``no_profile_fix_rules() -> dict[str, str]``: rules with no profile fix -> why
  (`NO_PROFILE_FIX`), in registry order.

``len(proven_fixes())`` of ``len(profile_fix_rules())`` is the sentence "N of M rules with a
profile fix have a proven fix". tests/unit/test_fixloops.py holds the declarations to the
registry and to the tests that run them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

# tier -> (the module that declares and runs its loops, its one loop test)
TIERS: dict[str, tuple[str, str]] = {
    "netns": (
        "tests.netns.test_fix_loop",
        "test_fault_diagnose_profile_apply_and_the_counter_stops",
    ),
    "lab": ("tests.lab.test_fix_loop_lab", "test_host_global_fix_stops_the_counter"),
    "vm": ("tests.vm.test_fix_loop_vm", "test_fault_diagnose_apply_and_the_counter_stops"),
}

# Rules with a profile fix that no loop proves: rule -> why, one line. Rendered by the docs.
UNPROVEN: dict[str, str] = {
    "coalescing": "its fault is 20,000 interrupts a second on one queue; qemu's NICs take about "
    "9,000 frames a second under TCG: shown on fixture trees",
    "pause-frames": "no emulated NIC sends pause frames: shown on fixture trees only",
}

# Rules whose findings carry no profile fix (Rule.profile_fix is False): rule -> why, one line.
NO_PROFILE_FIX: dict[str, str] = {
    "nic-policer": "the cloud platform's allowance: a bigger instance, no host setting",
    "conntrack-insert-failed": "a race in the clients' UDP pattern: resolver options or "
    "NOTRACK, made by hand",
    "udp-no-port": "nothing listens on the port: the application (or the VIP on lo) fixes it",
    "tcp-no-listener": "nothing listens on the port: the application (or the VIP on lo) fixes it",
    "addr-not-local": "the VIP on lo of a DR real server: an address, added by hand",
}


@dataclass(frozen=True)
class FixLoop:
    """What every loop declaration carries: the rule whose fix it proves (a registry id).
    Each tier's loop type extends it with what its test needs."""

    rule: str


def declared(tier: str) -> list[FixLoop]:
    """The loops `tier`'s module declares (its LOOPS)."""
    module, _ = TIERS[tier]
    loops: list[FixLoop] = list(importlib.import_module(module).LOOPS)
    return loops


def loop_test(tier: str) -> Any:
    """The test function that runs `tier`'s loops."""
    module, name = TIERS[tier]
    return getattr(importlib.import_module(module), name)


def proven_fixes() -> list[tuple[str, str]]:
    """(rule, tier) of every declared fix loop."""
    return [(lp.rule, tier) for tier in TIERS for lp in declared(tier)]


def _registry() -> list[Any]:
    from lbtune.diagnose.rules import RULES

    return list(RULES)


def profile_fix_rules() -> list[str]:
    """Rules whose findings can carry a profile fix, from the registry (Rule.profile_fix)."""
    return [r.id for r in _registry() if r.profile_fix]


def unproven_profile_fix_rules() -> dict[str, str]:
    """Profile-fix rules without a loop -> why (UNPROVEN; the unit test keeps them equal)."""
    proven = {rule for rule, _ in proven_fixes()}
    return {r: UNPROVEN.get(r, "") for r in profile_fix_rules() if r not in proven}


def no_profile_fix_rules() -> dict[str, str]:
    """Rules with no profile fix -> why, in registry order."""
    return {r.id: NO_PROFILE_FIX.get(r.id, "") for r in _registry() if not r.profile_fix}
