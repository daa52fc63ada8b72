"""Host side of `lbtune lab run`: boot the lab kernel, run the scenario in it, report progress.

`run_lab(config, on_step)` boots User-Mode Linux (the UML Guest, lbtune.lab.guests.api), calls
`lbtune.lab.experiments.scenario:guest_run` inside it and returns the `ScenarioResult`; the guest's
progress lines reach `on_step` while it runs. When a lab is up (`lbtune lab up`,
lbtune.lab.guests.session), the scenario runs in that guest instead, without a boot.

Stopping: Ctrl-C (SIGINT) and, while `host.signals.interruptible()` is active, SIGTERM raise
KeyboardInterrupt in the waiting host process; the UML runner then SIGKILLs the guest's
whole process group (nginx, HAProxy and wrk run inside the guest, so they go with it) and
removes its work directory. Nothing is left on the host.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from lbtune.host.signals import interruptible
from lbtune.lab.experiments.scenario import ScenarioConfig, ScenarioResult, result_from_json
from lbtune.lab.guests.api import UmlGuest
from lbtune.lab.guests.uml import LabKernel
from lbtune.lab.progress import ProgressCallback, ProgressReader

GUEST_TARGET = "lbtune.lab.experiments.scenario:guest_run"
BOOT_BUDGET = 300.0  # seconds for boot, set-up, checks and teardown around the load


def run_timeout(config: ScenarioConfig) -> float:
    """The longest a run may take before the guest is killed."""
    return BOOT_BUDGET + 2 * config.duration


def run_lab(
    config: ScenarioConfig,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> ScenarioResult:
    """Run the lab scenario in a lab kernel (a running `lab up` guest, or a fresh boot)."""
    from lbtune.lab.guests import session

    payload = dataclasses.asdict(config)
    if session.current() is not None:
        return result_from_json(session.request_run(payload, on_step, run_timeout(config)))
    reader = ProgressReader(on_step or (lambda step: None))
    with interruptible():
        value = UmlGuest(kernel).call(
            GUEST_TARGET, [payload], timeout=run_timeout(config), watch=reader.poll
        )
    return result_from_json(value)
