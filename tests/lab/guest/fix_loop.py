"""Runs inside the UML lab kernel: the diagnose -> profile -> apply loop for host-global fixes.

The sysctls these fixes set belong to the kernel, not to a network namespace, so the loop
runs in the guest's init namespace (a kernel of its own, never the host's): for each rule,
a fault from tests.netns.faults sets the faulty value and is triggered inside `lbtune
diagnose --json --write-profile`; the control, the same load once more without the fix
(the application restarted first where the loop restarts it), outside any window; `plan`
and `apply` take the profile; the application restarts where the limit is taken when a
socket is made; the same load runs again inside a second window; then `verify` and
`rollback`. The values of every global sysctl involved are read before the apply and after
the rollback, and put back after each rule (the next rule starts from the guest's defaults).

The loops are declared in LOOPS (each names its rule: tests/fixloops.py counts them from
there); tests/lab/test_fix_loop_lab.py runs one test per loop over the same list.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tests.fixloops import FixLoop
from tests.netns import faults as F

GLOBAL_KEYS = (
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.core.netdev_budget_usecs",
    "net.core.rmem_default",
    "net.core.rmem_max",
    "net.ipv4.tcp_max_orphans",
    "net.ipv4.tcp_mem",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_buckets",
)


@dataclass(frozen=True)
class LabLoop(FixLoop):
    fault: Callable[[], F.Fault]
    counter: str  # the fault's kernel counter that must stop moving
    key: str  # the profile key the fix sets
    restart: bool = False  # the limit is taken when a socket is made: restart the application


LOOPS = [
    LabLoop(
        "conntrack-full",
        lambda: F.ConntrackFull(max_entries=16, conns=24, tracker="tc", close_timeout=1),
        "conntrack stat drop",
        "sysctl.net.netfilter.nf_conntrack_max",
        restart=True,
    ),
    LabLoop(
        "cpu-backlog-drop",
        lambda: F.BacklogFlood(max_backlog=8),
        "softnet dropped",
        "sysctl.net.core.netdev_max_backlog",
    ),
    LabLoop(
        "orphan-overflow",
        lambda: F.OrphanFlood(max_orphans=4),
        "TcpExt.TCPAbortOnMemory",
        "sysctl.net.ipv4.tcp_max_orphans",
    ),
    LabLoop(
        "tcp-memory-pressure",
        lambda: F.TcpMemPressure(),
        "TcpExt.TCPMemoryPressures",
        "sysctl.net.ipv4.tcp_mem",
    ),
    LabLoop(
        "time-squeeze",
        lambda: F.BacklogFlood(budget=8),
        "softnet time_squeeze",
        "sysctl.net.core.netdev_budget",
    ),
    LabLoop(
        "udp-rcvbuf-errors",
        lambda: F.UdpDefaultRcvbuf(datagrams=300),
        "Udp.RcvbufErrors",
        "sysctl.net.core.rmem_default",
        restart=True,
    ),
]
BY_RULE = {lp.rule: lp for lp in LOOPS}


def read_globals() -> dict[str, Optional[str]]:
    out: dict[str, Optional[str]] = {}
    for k in GLOBAL_KEYS:
        try:
            out[k] = F.read_sysctl(k)
        except OSError:
            out[k] = None
    return out


def _put_back(values: dict[str, Optional[str]]) -> None:
    for k, v in values.items():
        if v is not None:
            with contextlib.suppress(OSError):  # read-only here (conntrack buckets, some)
                F.write_global_sysctl(k, v)


def _window(bg: Any, args: list[str]) -> tuple[Any, Any]:
    """A diagnose run with the fault inside its window: triggered after the first sample,
    the later samples wait for its result (trigger_in_window)."""
    from tests.conftest import run_cli

    with F.trigger_in_window(bg):
        res = run_cli(*args)
    return res, bg.truth()


def _loop(rule: str, duration: float) -> dict[str, Any]:
    from tests.conftest import run_cli

    loop = BY_RULE[rule]
    profile = f"/tmp/fix-{rule}.toml"
    diag = ["diagnose", "--duration", f"{duration:g}", "--json"]
    out: dict[str, Any] = {"rule": rule, "counter": loop.counter}
    t0 = time.monotonic()
    # a bound on each wait for the fault child (setup, a trigger), not a timing claim: on a
    # loaded 2-core machine the backlog flood's 20 veth pairs took over 30 s to set up
    with F.Background(None, loop.fault(), timeout=120) as bg:
        first, truth1 = _window(bg, [*diag, "--write-profile", profile])
        out["first"] = {"exit": first.exit_code, "stdout": first.stdout, "stderr": first.stderr}
        out["truth1"] = dataclasses.asdict(truth1)
        out["profile"] = pathlib.Path(profile).read_text() if os.path.exists(profile) else None
        # the control: the same load without the fix, outside any window
        if loop.restart:
            bg.restart()
        bg.trigger()
        out["control"] = dataclasses.asdict(bg.truth())
        plan = run_cli("plan", profile, "--json")
        out["plan"] = {"exit": plan.exit_code, "stdout": plan.stdout, "stderr": plan.stderr}
        out["before_apply"] = read_globals()
        applied = run_cli("apply", profile, "--yes", "--json")
        out["apply"] = {"exit": applied.exit_code, "stdout": applied.stdout,
                        "stderr": applied.stderr}  # fmt: skip
        out["applied"] = read_globals()
        if loop.restart:
            bg.restart()
        second, truth2 = _window(bg, diag)
        out["second"] = {"exit": second.exit_code, "stdout": second.stdout,
                         "stderr": second.stderr}  # fmt: skip
        out["truth2"] = dataclasses.asdict(truth2)
        verify = run_cli("verify", profile)
        out["verify"] = {"exit": verify.exit_code, "stdout": verify.stdout}
        rollback = run_cli("rollback")
        out["rollback"] = {"exit": rollback.exit_code, "stderr": rollback.stderr}
        out["after_rollback"] = read_globals()
    out["seconds"] = time.monotonic() - t0
    return out


def run(rules: Optional[list[str]] = None, duration: float = 2.0) -> Any:
    """Every rule's loop (or `rules`), each from the guest's own global values."""
    from tests.conftest import run_cli

    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"  # the guest's /tmp is a tmpfs
    run_cli("diagnose", "--duration", "0.1", "--json")  # imports warm before the windows
    defaults = read_globals()
    loops = []
    for rule in rules or list(BY_RULE):
        try:
            loops.append(_loop(rule, duration))
        finally:
            _put_back(defaults)
    return {"defaults": defaults, "loops": loops}
