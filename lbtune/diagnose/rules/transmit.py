"""Rules for transmit: queueing disciplines that drop.

Only pfifo_fast takes its limit from the device's txqueuelen; pfifo and bfifo copy it once
at creation, fq_codel and fq have a `limit` of their own, and a shaper (tbf) drops what
exceeds its rate by design. So txqueuelen is proposed for pfifo_fast only: for the others
raising it would change nothing. Even pfifo_fast sizes its ring at creation: a txqueuelen
change resizes it only where the device's transmit queue holds it directly (the root, or a
child of mq/mqprio); under another parent (a shaper's class) it must be created again.
"""

from __future__ import annotations

import math
from typing import Iterator

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Finding, Fix
from lbtune.diagnose.rules.base import finding, moved, nic_setting, since
from lbtune.diagnose.rules.registry import rule
from lbtune.host.net.qdisc import QdiscStats
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.vocab import Level

_AGGREGATING = frozenset({"mq", "mqprio", "taprio"})  # their counters sum their children
# No queue: their drops come from tc filter actions (policing, `action drop`), not overflow.
_FILTER_ONLY = frozenset({"clsact", "ingress"})
# Queue length limits of their own (packets, or bytes for bfifo), set with `limit`.
_OWN_LIMIT = frozenset({"pfifo", "bfifo", "fq_codel", "fq", "codel", "sfq", "cake", "pie"})


def _bits(bps: float) -> str:
    for unit, scale in (("Gbit", 1e9), ("Mbit", 1e6), ("Kbit", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.4g}{unit}"
    return f"{bps:.0f}bit"


def _tc_parent(q: QdiscStats) -> str:
    return "root" if q.parent in ("root", "") else f"parent {q.parent}"


def _resized_with_txqueuelen(q: QdiscStats, siblings: list[QdiscStats]) -> bool:
    """True when a txqueuelen change resizes this pfifo_fast (the kernel resizes the qdisc
    each transmit queue holds: the root, or mq/mqprio's per-queue children)."""
    if q.parent in ("root", ""):
        return True
    return any(
        _major(p.handle) == _major(q.parent) and p.kind in _AGGREGATING and p.dev == q.dev
        for p in siblings
    )


def _major(handle: str) -> str:
    """The major of a qdisc handle or class id, as tc prints them ("0:", ":1", "8001:2")."""
    return handle.split(":")[0].lstrip("0") or "0"


def _fixes(
    ctx: Context, q: QdiscStats, packets: int, drops: int, siblings: list[QdiscStats]
) -> list[Fix]:
    if q.kind == "pfifo_fast" and not _resized_with_txqueuelen(q, siblings):
        return [
            _by_hand(
                f"pfifo_fast under {q.parent} on {q.dev}",
                f"ip link set dev {q.dev} txqueuelen N; "
                f"tc qdisc replace dev {q.dev} parent {q.parent} pfifo_fast",
                "this pfifo_fast sized its queue from txqueuelen when it was created and a "
                "txqueuelen change does not resize it under this parent: raise txqueuelen, "
                "then create it again",
            )
        ]
    if q.kind == "pfifo_fast":
        txql_text = ctx.path_value(f"/sys/class/net/{q.dev}/tx_queue_len")
        txql = int(txql_text) if txql_text and txql_text.isdigit() else None
        needed = max(10000, 2 * (txql or 1000))
        return [
            Fix(
                knob=f"txqueuelen {q.dev}",
                current=None if txql is None else str(txql),
                desired=str(needed),
                settings=(nic_setting(q.dev, "txqueuelen", ("value", needed), ("mode", "raise")),),
                command=f"ip link set dev {q.dev} txqueuelen {needed}",
                note="pfifo_fast queues up to txqueuelen packets per band",
            )
        ]
    if q.rate_bps:
        offered = packets + drops
        needed_rate = math.ceil(q.rate_bps * offered / max(1, packets))
        return [
            Fix(
                knob=f"{q.kind} rate on {q.dev}",
                current=_bits(q.rate_bps),
                desired=_bits(needed_rate),
                command=f"tc qdisc change dev {q.dev} {_tc_parent(q)} {q.kind} "
                f"rate {_bits(needed_rate)} ...",
                note=f"a {q.kind} shaper drops what exceeds its rate and burst by design; "
                f"the needed rate carries the {offered} packets offered, not only the "
                f"{packets} sent (or remove the shaper)",
                scope=MANUAL,
            )
        ]
    if q.kind in _OWN_LIMIT:
        return [
            _by_hand(
                f"{q.kind} limit on {q.dev}",
                f"tc qdisc change dev {q.dev} {_tc_parent(q)} {q.kind} limit N",
                f"{q.kind} has a queue limit of its own (`tc -s qdisc show dev {q.dev}`); "
                "txqueuelen does not change it. A bigger queue adds latency: first check why "
                "the device drains slower than packets arrive",
            )
        ]
    return [
        _by_hand(
            f"{q.kind} qdisc on {q.dev}",
            f"tc -s qdisc show dev {q.dev}",
            f"a {q.kind} qdisc drops what exceeds its configured rate, burst or limit: raise "
            "them, or remove it",
        )
    ]


def _by_hand(knob: str, command: str, note: str) -> Fix:
    """A change made with tc, whose right value lbtune cannot compute."""
    return Fix(knob=knob, current=None, desired=None, command=command, note=note, scope=MANUAL)


@rule(
    "qdisc-drop",
    "queueing discipline dropped packets on transmit",
    paths=("/sys/class/net/*/tx_queue_len",),
)
def qdisc_drop(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.qdiscs():
        q = d.qdisc
        if d.drops <= 0 or q.kind in _AGGREGATING or q.kind in _FILTER_ONLY:
            continue
        yield finding(
            ctx,
            "qdisc-drop",
            f"{q.kind} qdisc on {q.dev} dropping packets",
            Level.FAIL,
            f"{q.dev} qdisc {q.kind} {q.handle}",
            f"{d.drops} packets dropped {since(ctx)} by the {q.kind} qdisc {q.handle} "
            f"(parent {q.parent}) on {q.dev} ({d.overlimits} over its limits) out of "
            f"{d.packets + d.drops} offered: packets arrive faster than this queue drains.",
            d.drops,
            "packets",
            [
                moved(
                    ctx,
                    f"qdisc {q.dev} {q.handle} drops",
                    d.drops,
                    "rtnetlink" if not ctx.window.cumulative else "tc -s qdisc show",
                    CounterRef(C.QDISC, (q.dev, q.handle, q.parent)),
                )
            ],
            _fixes(ctx, q, d.packets, d.drops, [x.qdisc for x in ctx.window.qdiscs()]),
        )
