"""VM tier fixtures: one VM lab guest (lbtune.lab.guests.vm) per test module, or a skip saying why.

Boots are slow under TCG (tens of seconds on a loaded 2-core machine), so every test of a module
shares one guest; a test that changes the guest undoes its change (or reboots it). A guest
that cannot boot here is a skip whose reason is not a `capability:` one: under CI=true it fails
(tests/tiers.py), because make setup provides everything the VM lab needs.

A guest whose kernel wedged (lbtune.lab.guests.vm.GuestWedged: a stall report on its console, then
no
answer) fails the test that was waiting and every later test of its module at once. The
session's end prints each wedge's report (the kernel's words and where each vCPU was) and, for
tests/vm_tier.py, writes the failed tests and the wedged modules to $LBTUNE_VM_REPORT.
$LBTUNE_VM_ONLY (module paths, comma-separated) keeps the run to those modules.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from lbtune.lab.guests.uml import LabUnavailable
from lbtune.lab.guests.vm import GuestWedged, VmGuest

# Boot budget per module: a loaded CI machine runs TCG several times slower than an idle one.
BOOT_TIMEOUT = float(os.environ.get("LBTUNE_VM_BOOT_TIMEOUT", "600"))
ENV_REPORT = "LBTUNE_VM_REPORT"
ENV_ONLY = "LBTUNE_VM_ONLY"

_failed: list[str] = []
_wedged: dict[str, str] = {}  # module path: the wedge's report


@pytest.fixture(scope="module")
def vm(request: pytest.FixtureRequest) -> Iterator[VmGuest]:
    try:
        guest = VmGuest.boot(timeout=BOOT_TIMEOUT)
    except LabUnavailable as exc:
        pytest.skip(f"VM lab unavailable: {exc}")
    except GuestWedged as exc:
        _record(request.node.nodeid, exc)
        raise
    with guest:
        yield guest
        if isinstance(guest.broken, GuestWedged):
            _record(request.node.nodeid, guest.broken)


def _record(module: str, wedge: GuestWedged) -> None:
    """The wedge of this module's guest: its first line, the kernel's report, the vCPUs."""
    _wedged[module] = str(wedge).split(";", 1)[0] + "\n" + wedge.report


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    only = {m for m in os.environ.get(ENV_ONLY, "").split(",") if m}
    if not only:
        return
    keep = [it for it in items if it.nodeid.split("::", 1)[0] in only]
    config.hook.pytest_deselected(items=[it for it in items if it not in keep])
    items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _failed.append(report.nodeid)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for module, report in _wedged.items():
        terminalreporter.section(f"VM guest wedged in {module}", sep="-", red=True)
        terminalreporter.line(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(ENV_REPORT)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"failed": sorted(set(_failed)), "wedged": _wedged}, fh)
