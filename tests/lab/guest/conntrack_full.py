"""Runs inside the UML lab kernel: a full conntrack table, for real, under `lbtune diagnose`.

nf_conntrack_max is host-global (read-only in a child namespace of the host kernel), so the
fault runs in the guest's init namespace: tests.netns.faults.ConntrackFull makes conntrack
track, lowers nf_conntrack_max and opens more connections over lo than the table holds. Each
round runs the fault in a forked child, triggered `delay` seconds after the first sample of
`lbtune diagnose --duration D`, which runs in this process.

The guest has one CPU and imports are slow there: a first, short diagnose run warms the
imports up so that the timed runs open their window at once (measured: `window_open`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional


def _sample_clock() -> tuple[list[float], list[Callable[[], None]], Callable[[], None]]:
    """Record when the sampler takes each sample (monotonic) and run the callbacks queued in
    `after_first` once the first sample is in; returns (times, after_first, undo)."""
    times: list[float] = []
    after_first: list[Callable[[], None]] = []
    try:
        from lbtune.observe.sampler import Sampler
    except ImportError:
        return times, after_first, lambda: None
    orig = Sampler.take

    def take(self: Any) -> Any:
        times.append(time.monotonic())
        sample = orig(self)
        while after_first:
            after_first.pop(0)()
        return sample

    Sampler.take = take  # type: ignore[method-assign]

    def undo() -> None:
        Sampler.take = orig  # type: ignore[method-assign]

    return times, after_first, undo


def run(
    max_entries: int = 16,
    conns: int = 24,
    duration: float = 2.0,
    delay: float = 0.8,
    formats: tuple[str, ...] = ("json", "text"),
    tracker: str = "tc",
) -> dict[str, Any]:
    """One round per output format; returns the fault's truth and what diagnose printed.

    tracker "tc": Debian's UML 6.1 kernel has no nf_tables ip/inet family
    (CONFIG_NF_TABLES_IPV4/INET off), so `nft add table ip` fails there with EOPNOTSUPP.
    """
    from tests.conftest import run_cli
    from tests.netns.faults import Background, ConntrackFull, conntrack_stats

    warm = run_cli("diagnose", "--duration", "0.1", "--json", "--no-probes")
    rounds = []
    times, after_first, undo = _sample_clock()
    try:
        for fmt in formats:
            fault = ConntrackFull(max_entries=max_entries, conns=conns, tracker=tracker)
            args = ["diagnose", "--duration", f"{duration:g}", "--no-probes"]
            args += ["--json"] if fmt == "json" else []
            del times[:]
            with Background(None, fault) as bg:
                t0 = time.monotonic()
                # Trigger from the sampler, once the window's first sample is taken: a timer
                # started beside the command can fire before or after a slow (loaded) window.
                after_first.append(lambda bg=bg: bg.trigger(after=delay))  # type: ignore[misc]
                res = run_cli(*args)
                t1 = time.monotonic()
                truth = bg.truth()
            window: Optional[list[float]] = [t - t0 for t in times] if times else None
            rounds.append(
                {
                    "format": fmt,
                    "truth": dataclasses.asdict(truth),
                    "exit_code": res.exit_code,
                    "stdout": res.stdout,
                    "stderr": res.stderr,
                    "seconds": t1 - t0,
                    "samples_at": window,  # sample times after the diagnose started
                }
            )
    finally:
        undo()
    return {"rounds": rounds, "after": conntrack_stats(), "warm_up_exit": warm.exit_code}


def counters_only(max_entries: int = 16, conns: int = 24, tracker: str = "tc") -> dict[str, Any]:
    """The fault alone: conntrack count/max and stat columns before and after the trigger."""
    from tests.netns.faults import ConntrackFull, run_fault

    truth = run_fault(ConntrackFull(max_entries=max_entries, conns=conns, tracker=tracker))
    return dataclasses.asdict(truth)
