"""A test that fails on purpose, to check that run_pytest_in_lab reports failures.

Collected only when named explicitly (its name does not match test_*.py) and, through the
conftest in this directory, skipped unless running inside the lab guest.
"""

from __future__ import annotations


def test_fails_on_purpose() -> None:
    assert 1 + 1 == 3, "deliberate failure inside the lab guest"
