"""Host side of every lab experiment: the lab that is up, else a fresh guest - written once.

`run(target, args, timeout, on_step)` calls an in-guest target (``"pkg.mod:func"``) in the
guest of the lab that is up (`lbtune lab up`, lbtune.lab.guests.session), or, when none is,
in a freshly booted UML guest (lbtune.lab.guests.uml.UmlGuest), and returns its JSON value;
the guest's progress lines reach `on_step` while it runs. Both go through
lbtune.lab.guests.api.Guest. `run_lab` (`lbtune lab run`), `run_failover_lab`
(`lbtune lab failover`), `run_cluster_lab` (`lbtune lab cluster`) and `run_adaptive_lab`
(`lbtune lab run --adaptive`) are its callers.

The experiments run in the UML guest: a lab kept up with `--vm` makes them LabBusy (take it
down, then run again). Stopping: Ctrl-C (SIGINT) and, while `host.signals.interruptible()` is
active, SIGTERM raise KeyboardInterrupt in the waiting host process; a fresh UML guest's
whole process group is then SIGKILLed (nginx, HAProxy and wrk run inside the guest, so they
go with it) and its work directory removed. An interrupted (or failed) run in a lab that is
up takes that lab down: its half-run experiment cannot be stopped from outside any other way.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

from lbtune.host.signals import interruptible
from lbtune.lab.experiments.adaptive import AdaptiveConfig
from lbtune.lab.experiments.cluster import ClusterLabConfig
from lbtune.lab.experiments.cluster_stats import ClusterResult
from lbtune.lab.experiments.cluster_stats import result_from_json as cluster_from_json
from lbtune.lab.experiments.failover import FailoverConfig
from lbtune.lab.experiments.failover_stats import FailoverResult
from lbtune.lab.experiments.failover_stats import result_from_json as failover_from_json
from lbtune.lab.experiments.scenario import ScenarioConfig, ScenarioResult, result_from_json
from lbtune.lab.guests import session
from lbtune.lab.guests.uml import LabKernel, UmlGuest
from lbtune.lab.progress import ProgressCallback, ProgressReader

GUEST_TARGET = "lbtune.lab.experiments.scenario:guest_run"
FAILOVER_TARGET = "lbtune.lab.experiments.failover:guest_run"
CLUSTER_TARGET = "lbtune.lab.experiments.cluster:guest_run"
ADAPTIVE_TARGET = "lbtune.lab.experiments.adaptive:guest_run"
BOOT_BUDGET = 300.0  # seconds for boot, set-up, checks and teardown around the load
FAILOVER_BOOT_BUDGET = 120.0


def run(
    target: str,
    args: Sequence[Any],
    timeout: float,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> Any:
    """``target(*args)`` in the lab that is up, else in a fresh UML guest: its JSON value.
    LabBusy when the lab that is up is not a UML guest; LabError when the guest fails."""
    reader = ProgressReader(on_step or (lambda step: None))
    guest = session.attach()
    if guest is not None:
        if guest.backend != "uml":
            raise session.LabBusy(
                f"the lab that is up is the {guest.backend} guest; lab runs use the UML guest "
                "(lbtune lab down, then run again)"
            )
        try:
            return guest.call(target, args, timeout=timeout, watch=reader.poll)
        except BaseException:
            session.down()
            raise
    with interruptible():
        return UmlGuest(kernel).call(target, args, timeout=timeout, watch=reader.poll)


def run_timeout(config: ScenarioConfig) -> float:
    """The longest a run may take before the guest is killed."""
    return BOOT_BUDGET + 2 * config.duration


def run_lab(
    config: ScenarioConfig,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> ScenarioResult:
    """Run the lab scenario (`lbtune lab run`) in a lab kernel (see `run`)."""
    payload = dataclasses.asdict(config)
    return result_from_json(run(GUEST_TARGET, [payload], run_timeout(config), on_step, kernel))


def run_failover_lab(
    config: FailoverConfig,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> FailoverResult:
    """Run the failover experiment (`lbtune lab failover`) in a lab kernel (see `run`)."""
    payload = dataclasses.asdict(config)
    timeout = FAILOVER_BOOT_BUDGET + config.budget()
    return failover_from_json(run(FAILOVER_TARGET, [payload], timeout, on_step, kernel))


def run_cluster_lab(
    config: ClusterLabConfig,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> ClusterResult:
    """Run the director-cluster experiment (`lbtune lab cluster`) in a lab kernel (see `run`)."""
    payload = dataclasses.asdict(config)
    timeout = FAILOVER_BOOT_BUDGET + config.budget()
    return cluster_from_json(run(CLUSTER_TARGET, [payload], timeout, on_step, kernel))


def run_adaptive_lab(
    cfg: AdaptiveConfig,
    on_step: Optional[ProgressCallback] = None,
    kernel: Optional[LabKernel] = None,
) -> dict[str, Any]:
    """Run the adaptive-weights experiment (`lbtune lab run --adaptive`) in a lab kernel
    (see `run`); its JSON result."""
    timeout = 300.0 + len(cfg.schemes) * (cfg.duration + 40.0)
    value: dict[str, Any] = run(ADAPTIVE_TARGET, [dataclasses.asdict(cfg)], timeout, on_step,
                                kernel)  # fmt: skip
    return value
