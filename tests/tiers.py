"""Tiers that cannot run fail under CI: every skip becomes a failure, except named capabilities.

A skipped test passes `make test`, so a tier that silently skips (no lab kernel, not root, no
bcc, no chromium) would let the suite say "green" about code it never ran. When the tiers are
required - ``CI`` is set to a true value (as CI systems set it: ``true``, ``1``, ``yes``...) or
``LBTUNE_REQUIRE_TIERS=1`` - each skip is turned into a failure whose message starts with
``tier cannot run:`` and carries the skip's reason. The one exception is a skip for a kernel
capability this machine lacks (a drop reason an older kernel does not have, IPv6 switched off)
that no setup script can install: its reason starts with one of CAPABILITIES, the list
docs/testing.md documents (tests/unit/test_tiers.py keeps the two equal and every
``capability:`` reason in tests/ on the list). Root, a missing program and the host/guest split
are not kernel capabilities: a ``capability:`` reason off the list fails under CI too.

The hooks cover ``pytest.skip()`` in a test or fixture, ``skipif`` markers and skips at
collection (``pytest.importorskip`` at module level). An xfail is not a skip and is left alone.
tests/conftest.py imports the hooks; ``python -m pytest -p tests.tiers`` loads them alone.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any, Optional, Union

import pytest

CAPABILITY = "capability:"
# The kernel capabilities a test may skip for under CI (docs/testing.md lists the same).
CAPABILITIES = (
    "capability: this kernel has no TCP_LISTEN_OVERFLOW drop reason",
    "capability: IPv6 is off in this kernel",
    "capability: kernel without BTF",
    "capability: no conntrack in this kernel",
    "capability: a kernel without ip_vs loaded",
    "capability: the host kernel's BTF has no CONSUMED reason",
)
ENV_REQUIRE = "LBTUNE_REQUIRE_TIERS"
_FALSE = frozenset({"", "0", "false", "no", "off"})


def required(environ: Optional[dict[str, str]] = None) -> bool:
    """True when skips must fail: CI (any value CI systems use for "on") or LBTUNE_REQUIRE_TIERS."""
    env = os.environ if environ is None else environ
    return any(env.get(name, "").strip().lower() not in _FALSE for name in ("CI", ENV_REQUIRE))


def documented_capability(reason: str) -> bool:
    """`reason` names a kernel capability of the documented list (CAPABILITIES)."""
    return reason.startswith(CAPABILITIES)


def skip_reason(longrepr: Any) -> str:
    """The reason of a skip report: pytest stores (path, line, "Skipped: REASON")."""
    is_tuple = isinstance(longrepr, tuple) and len(longrepr) == 3
    text = str(longrepr[2]) if is_tuple else str(longrepr)
    prefix = "Skipped: "
    return text[len(prefix) :] if text.startswith(prefix) else text


class TierFailure:
    """A report's longrepr for a skip turned into a failure (terminal, short summary, junit)."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.reprcrash = self  # the short summary and junitxml read .reprcrash.message

    def toterminal(self, tw: Any) -> None:
        tw.line(self.message, red=True)

    def __str__(self) -> str:
        return self.message


def enforce(report: Union[pytest.TestReport, pytest.CollectReport]) -> None:
    """Turn a skip report into a failure when the tiers are required (see module doc)."""
    if not report.skipped or hasattr(report, "wasxfail") or not required():
        return
    reason = skip_reason(report.longrepr)
    if documented_capability(reason):
        return
    why = "a skip fails under CI"
    if reason.startswith(CAPABILITY):
        why = "not a kernel capability docs/testing.md lists; " + why
    report.outcome = "failed"
    report.longrepr = TierFailure(  # type: ignore[assignment]
        f"tier cannot run: {reason} ({why}; see docs/testing.md)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[Any, Any, None]:
    outcome = yield
    enforce(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[Any, Any, None]:
    outcome = yield
    enforce(outcome.get_result())
