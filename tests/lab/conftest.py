"""Lab tier fixtures: the UML lab kernel, or a skip saying why it is unavailable.

tests/lab/guest/ holds tests that run *inside* the guest (run_pytest_in_lab); on the host
that directory is not collected at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pytest

from lbtune.lab.guests.uml import LabKernel, LabUnavailable, find_lab_kernel
from lbtune.lab.inguest.entry import in_lab

GUEST_DIR = Path(__file__).parent / "guest"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Optional[bool]:
    if not in_lab() and collection_path == GUEST_DIR:
        return True
    return None


@pytest.fixture(scope="session")
def lab_kernel() -> LabKernel:
    try:
        return find_lab_kernel()
    except LabUnavailable as exc:
        pytest.skip(f"lab kernel unavailable: {exc}")
