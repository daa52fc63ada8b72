"""DRAFT, NEVER RUN: the VM fix loop of `rss-hash-l3-only` on the guest's virtio-net with
`rss=on,hash=on`, for tests/vm/test_fix_loop_vm.py's LOOPS once it has passed in the VM.

It is not declared in any LOOPS list (tests/fixloops.py counts a fix as proven from those
declarations, and this one has not run), so nothing imports it. To adopt it: run it once in
the VM (holding /work/wt/vm.lock), then add `VmLoop("rss-hash-l3-only",
rss_hash_l3_only_loop)` to LOOPS before irq-placement (which reboots) and drop the rule from
tests/fixloops.UNPROVEN.

The loop, as the others in test_fix_loop_vm.py: the fault (`udp4` hashed on `sd`), the host
floods FLOWS UDP flows from one address to one port (distinct source ports), so every
datagram lands on one rx queue; `diagnose --write-profile` names the rule and writes
`nic."eth0".rss_hash = { udp4 = "sdfn" }`; the control (the same flood without the fix, no
window) lands on one queue again; `apply`, the same flood: no queue takes more than half,
every queue receives (the positive control: the flood arrived), the rule is quiet; `verify`
and `rollback` put `sd` back (read with the ethtool binary, not lbtune).
"""

from __future__ import annotations

import time
from typing import Any

from lbtune.lab.guests.vm import VmGuest
from tests.vm.test_fix_loop_vm import (
    CONTROL_S,
    FLOWS,
    GUEST0,
    RATE,
    WINDOW,
    apply_profile,
    host_flood,
    lbtune,
    rules_found,
    verify_and_rollback,
)

G = "tests.vm.apply_guest"
ONE_QUEUE = 0.9  # the fault: one queue's share of the flood (all of it, with sd)
SPREAD = 0.5  # after the fix no queue takes more than this (64 flows over 4 queues)


def _flood(vm: VmGuest, window: bool, *extra: str) -> tuple[Any, dict[int, int]]:
    """The host's flood into eth0 around a diagnose window (with `extra` options), or for
    CONTROL_S seconds without one; the packets each rx queue received meanwhile."""
    diag = ["diagnose", "--duration", WINDOW, "--json", "--no-probes", "--rule",
            "rss-hash-l3-only", "--iface", "eth0", *extra]  # fmt: skip
    before = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    res = None
    with host_flood(vm, GUEST0, flows=FLOWS, rate=RATE) as sent:
        if window:
            res = lbtune(vm, *diag)
        else:
            time.sleep(CONTROL_S)
    after = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    assert sent["sent"] > 0, sent
    return res, {int(q): after[q] - before[q] for q in after}


def _top_share(per_queue: dict[int, int]) -> float:
    total = sum(per_queue.values())
    assert total > 0, per_queue  # the flood arrived
    return max(per_queue.values()) / total


def rss_hash_l3_only_loop(net: VmGuest) -> None:
    vm, profile = net, "/tmp/rss-hash-fix.toml"
    r = vm.call(f"{G}:ethtool", ["-N", "eth0", "rx-flow-hash", "udp4", "sd"])
    assert r.startswith("rc=0"), r

    # 1. the fault: one queue takes the flood, and the rule names it and the hash fix
    res, q = _flood(vm, True, "--write-profile", profile, "--force")
    assert _top_share(q) >= ONE_QUEUE, q
    found = rules_found(res, "rss-hash-l3-only")
    assert found and found[0]["object"].startswith("eth0 rx-queue "), found
    keys = {fx["key"] for f in found for fx in f["fixes"] if fx["scope"] == "profile"}
    assert "nic.eth0.rss_hash" in keys, found

    # 2. the control: the same flood without the fix lands on one queue again
    assert _top_share(_flood(vm, False)[1]) >= ONE_QUEUE

    # 3. apply: udp4 hashed on the ports too, read back with the ethtool binary
    apply_profile(vm, profile)
    text = vm.call(f"{G}:ethtool", ["-n", "eth0", "rx-flow-hash", "udp4"])
    assert "L4 bytes 0 & 1" in text and "L4 bytes 2 & 3" in text, text

    # 4. the same flood: every queue receives, none takes more than half; the rule is quiet
    res2, q2 = _flood(vm, True)
    assert all(n > 0 for n in q2.values()) and _top_share(q2) <= SPREAD, q2
    assert rules_found(res2, "rss-hash-l3-only") == []

    # 5. verify; rollback puts sd back
    verify_and_rollback(vm, profile)
    text = vm.call(f"{G}:ethtool", ["-n", "eth0", "rx-flow-hash", "udp4"])
    assert "L4 bytes" not in text, text
