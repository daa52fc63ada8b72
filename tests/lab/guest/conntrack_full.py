"""Runs inside the UML lab kernel: a full conntrack table, for real, under `lbtune diagnose`.

nf_conntrack_max is host-global (read-only in a child namespace of the host kernel), so the
fault runs in the guest's init namespace: tests.netns.faults.ConntrackFull makes conntrack
track, lowers nf_conntrack_max and opens more connections over lo than the table holds. Each
round runs the fault in a forked child, triggered once the first sample of `lbtune diagnose
--duration D` (which runs in this process) is in; the window's later samples wait for the
fault's result (tests.netns.faults.trigger_in_window), so the loss lies inside the window by
construction, not by timing.

The guest has one CPU and imports are slow there: a first, short diagnose run warms the
imports up.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def run(
    max_entries: int = 16,
    conns: int = 24,
    duration: float = 2.0,
    formats: tuple[str, ...] = ("json", "text"),
    tracker: str = "tc",
) -> dict[str, Any]:
    """One round per output format; returns the fault's truth, what diagnose printed and the
    order of the window's samples and the fault (`events`).

    tracker "tc": Debian's UML 6.1 kernel has no nf_tables ip/inet family
    (CONFIG_NF_TABLES_IPV4/INET off), so `nft add table ip` fails there with EOPNOTSUPP.
    """
    from tests.conftest import run_cli
    from tests.netns.faults import Background, ConntrackFull, conntrack_stats, trigger_in_window

    warm = run_cli("diagnose", "--duration", "0.1", "--json", "--no-probes")
    rounds = []
    for fmt in formats:
        fault = ConntrackFull(max_entries=max_entries, conns=conns, tracker=tracker)
        args = ["diagnose", "--duration", f"{duration:g}", "--no-probes"]
        args += ["--json"] if fmt == "json" else []
        with Background(None, fault, timeout=30) as bg:
            with trigger_in_window(bg) as events:
                res = run_cli(*args)
            truth = bg.truth()
        rounds.append(
            {
                "format": fmt,
                "truth": dataclasses.asdict(truth),
                "exit_code": res.exit_code,
                "stdout": res.stdout,
                "stderr": res.stderr,
                "events": list(events),
            }
        )
    return {"rounds": rounds, "after": conntrack_stats(), "warm_up_exit": warm.exit_code}


def counters_only(max_entries: int = 16, conns: int = 24, tracker: str = "tc") -> dict[str, Any]:
    """The fault alone: conntrack count/max and stat columns before and after the trigger."""
    from tests.netns.faults import ConntrackFull, run_fault

    truth = run_fault(ConntrackFull(max_entries=max_entries, conns=conns, tracker=tracker))
    return dataclasses.asdict(truth)


def tracking_in_netns(conns: int = 24, tracker: str = "tc") -> dict[str, Any]:
    """The tracking half of the fault (`max_entries=None`) in a namespace of the guest: the
    fault's truth (a namespace's conntrack count rises by one per connection)."""
    import subprocess

    from tests.netns.faults import Background, ConntrackFull

    ns = "lbtune-ct-track"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        fault = ConntrackFull(max_entries=None, conns=conns, tracker=tracker)
        # set-up loads nf_conntrack, act_ct and the tc classifiers: slow on the one-CPU guest
        with Background(ns, fault, timeout=60) as bg:
            bg.trigger(0.0)
            truth = bg.truth()
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
    return dataclasses.asdict(truth)
