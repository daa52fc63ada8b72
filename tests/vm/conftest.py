"""VM tier fixtures: one VM lab guest (lbtune.lab.vm) per test module, or a skip saying why.

Boots are slow under TCG (tens of seconds on a loaded 2-core machine), so every test of a module
shares one guest; a test that changes the guest undoes its change (or reboots it). A guest
that cannot boot here is a skip whose reason is not a `capability:` one: under CI=true it fails
(tests/tiers.py), because make setup provides everything the VM lab needs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from lbtune.lab.uml import LabUnavailable
from lbtune.lab.vm import VmGuest

# Boot budget per module: a loaded CI machine runs TCG several times slower than an idle one.
BOOT_TIMEOUT = float(os.environ.get("LBTUNE_VM_BOOT_TIMEOUT", "600"))


@pytest.fixture(scope="module")
def vm() -> Iterator[VmGuest]:
    try:
        guest = VmGuest.boot(timeout=BOOT_TIMEOUT)
    except LabUnavailable as exc:
        pytest.skip(f"VM lab unavailable: {exc}")
    with guest:
        yield guest
