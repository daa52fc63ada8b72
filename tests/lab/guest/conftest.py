"""Tests in this directory run only inside the lab guest (lbtune.lab.guests.uml.run_pytest_in_lab).

On the host they are not even collected (tests/lab/conftest.py ignores this directory); if a
file here is named explicitly on the host, every test in it is skipped by the fixture below.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from lbtune.lab.inguest.entry import in_lab


@pytest.fixture(autouse=True)
def _only_inside_the_lab() -> Iterator[None]:
    if not in_lab():
        pytest.skip("guest-only test: runs inside the lab kernel via run_pytest_in_lab")
    yield
