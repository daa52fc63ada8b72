"""Rules for receive-side scaling: a hash that ignores the ports, an indirection table that
leaves queues unused or feeds the control queue.

RSS picks a receive queue per packet from a hash of the fields `ethtool -n DEV rx-flow-hash
FLOW` names (s, d: IP addresses; f, n: the L4 ports) through the indirection table (`ethtool
-x`: hash bucket -> queue). Many drivers hash UDP on the addresses only (`sd`): all the flows
between a client and a VIP (DNS, QUIC) then land on one queue and one CPU. After `ethtool -L`
a driver may keep its old table, so queues that have an IRQ and a CPU get no packets; and a
queue that flow rules reserve for control traffic (VRRP, BGP, ssh) should not be in the
table. The settings come from `Context.nic_settings`; the per-queue packet counts from the
driver's statistics over the window. Without either the rules stay quiet.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Evidence, Finding, Fix
from lbtune.diagnose.nicsettings import NicSettings
from lbtune.diagnose.rules.base import finding, moved, nic_setting, reading, since
from lbtune.diagnose.rules.registry import rule
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.window import NicDelta
from lbtune.vocab import Level

# Received packets in the window below which the spread over the queues says nothing.
MIN_RX_PACKETS = 10_000
# One queue's share of the received packets that is a skew: half (from 3 queues on), and for
# 2 queues 1.5 times the even share (75 %).
SKEW_SHARE = 0.5
SKEW_OVER_EVEN = 1.5
FULL_HASH = "sdfn"  # addresses and both ports


def _rx_counts(d: NicDelta) -> list[tuple[int, int]]:
    """(queue, packets) of every rx queue with a packet counter, in queue order."""
    return sorted(
        (q.queue, q.packets) for q in d.queues if q.direction == "rx" and q.packets is not None
    )


def skewed(counts: Sequence[tuple[int, int]]) -> Optional[tuple[int, int, int]]:
    """(queue, its packets, all packets) when one of 2+ queues carried a skewed share of at
    least MIN_RX_PACKETS packets, else None."""
    total = sum(p for _, p in counts)
    if len(counts) < 2 or total < MIN_RX_PACKETS:
        return None
    q, top = max(counts, key=lambda c: c[1])
    if top < max(SKEW_SHARE, SKEW_OVER_EVEN / len(counts)) * total:
        return None
    return q, top, total


def _queue_packets(ctx: Context, dev: str, queue: int, packets: int) -> Evidence:
    return moved(
        ctx,
        f"ethtool {dev} rx queue {queue} packets",
        packets,
        f"ethtool -S {dev}",
        CounterRef(C.NIC_QUEUE, (dev, "rx", queue, "packets")),
    )


def _hash_fix(dev: str, narrow: Sequence[str], s: NicSettings) -> Fix:
    """One fix for every flow type that leaves out a port: one profile line (`rss_hash`
    takes them together), the command of the first and the others' in the note."""
    others = "; ".join(f"ethtool -N {dev} rx-flow-hash {ft} {FULL_HASH}" for ft in narrow[1:])
    return Fix(
        knob=f"rx-flow-hash {dev} {', '.join(narrow)}",
        current=", ".join(f"{ft} {s.hash_fields(ft) or 'none'}" for ft in narrow),
        desired=FULL_HASH,
        settings=(nic_setting(dev, "rss_hash", *((ft, FULL_HASH) for ft in narrow)),),
        command=f"ethtool -N {dev} rx-flow-hash {narrow[0]} {FULL_HASH}",
        note="hash on addresses and ports, so the flows of one client spread over the queues"
        + (f"; and {others}" if others else ""),
    )


@rule(
    "rss-hash-l3-only",
    "one rx queue takes most packets while RSS hashes TCP/UDP on the addresses only",
    nic_settings=True,
)
def rss_hash_l3_only(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        s = ctx.nic_settings.get(d.dev)
        narrow = s.l3_only() if s else ()
        if s is None or not narrow:
            continue
        counts = _rx_counts(d)
        skew = skewed(counts)
        if skew is None:
            continue
        queue, top, total = skew
        hashes = ", ".join(f"{ft} {s.hash_fields(ft)}" for ft in narrow)
        yield finding(
            ctx,
            "rss-hash-l3-only",
            f"{d.dev}: rx queue {queue} takes {top / total:.0%} of the packets, RSS ignores ports",
            Level.WARN,
            f"{d.dev} rx-queue {queue}",
            f"rx queue {queue} of {d.dev} received {top:,} of the {total:,} packets {since(ctx)} "
            f"over its {len(counts)} rx queues, and the RSS hash leaves out the ports for "
            f"{hashes} (ethtool -n {d.dev} rx-flow-hash): every flow between the same two "
            "addresses (one client and a VIP: DNS, QUIC, a proxy's connections) lands on one "
            "queue and one CPU while the others idle.",
            top,
            "packets",
            [_queue_packets(ctx, d.dev, q, p) for q, p in counts if q == queue or p == 0][:8],
            [_hash_fix(d.dev, narrow, s)],
        )


def _rx_queue_count(ctx: Context, dev: str) -> Optional[int]:
    """How many rx queues the NIC uses now: its channels, else its rx queues in sysfs."""
    nic = ctx.nics.get(dev)
    if nic is None:
        return None
    ch = nic.channels
    if ch is not None:
        n = (ch.combined or 0) + (ch.rx or 0)
        if n > 0:
            return n
    return len(nic.rx_queues) or None


def _irq_queues(ctx: Context, dev: str, n: int) -> frozenset[int]:
    nic = ctx.nics.get(dev)
    return frozenset(
        qi.queue
        for qi in (nic.irqs if nic else ())
        if qi.direction in ("combined", "rx") and qi.queue < n
    )


def _indir_fix(dev: str, n: int, control: frozenset[int], current: str) -> Fix:
    """Every data queue in the table. Without a control queue that is the profile's
    `rss_indir = "data-queues"` (equal over the queues the channel count leaves; a fixed
    `equal N` would stop a later `ethtool -L` below N). A control queue that rules made by
    hand reserve is not one a profile knows: `data-queues` leaves out only the control queue
    of the profile's own `flow_rules`, so the table is set by hand (or the rules move into
    the profile, as lb-dr's)."""
    data = [q for q in range(n) if q not in control]
    if not control:
        return Fix(
            knob=f"rss indirection {dev}",
            current=current,
            desired=f"queues {_queues(data)}",
            settings=(nic_setting(dev, "rss_indir", ("value", "data-queues")),),
            command=f"ethtool -X {dev} equal {n}",
            note="spread the hash buckets over every queue the channel count leaves",
        )
    weights = " ".join("0" if q in control else "1" for q in range(n))
    return Fix(
        knob=f"rss indirection {dev}",
        current=current,
        desired=f"queues {_queues(data)} (not control queue(s) {_queues(sorted(control))})",
        command=f"ethtool -X {dev} weight {weights}",
        note="the control queue's flow rules were added by hand, so no profile value leaves "
        "it out: set the table by hand, or give the rules to the profile (flow_rules with "
        'queue = "control" and rss_indir = "data-queues", as lb-dr does)',
        scope=MANUAL,
    )


def _queues(qs: Sequence[int]) -> str:
    return format_cpulist(frozenset(qs)) if qs else "none"


@rule(
    "rss-indirection-gap",
    "RSS indirection table leaves rx queues with an IRQ unused, or feeds the control queue",
    nic_settings=True,
)
def rss_indirection_gap(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        s = ctx.nic_settings.get(d.dev)
        n = _rx_queue_count(ctx, d.dev)
        if s is None or s.rxfh is None or not s.rxfh.indir or n is None or n < 2:
            continue
        received = d.stats.get("rx_packets", 0)
        if received < MIN_RX_PACKETS:
            continue  # an idle NIC: nothing lands anywhere
        fed = frozenset(s.rxfh.indir)
        control = s.control_queues()
        unused = sorted(_irq_queues(ctx, d.dev, n) - fed - control)
        on_control = sorted(fed & control)
        if not unused and not on_control:
            continue
        counts = dict(_rx_counts(d))
        evidence: list[Evidence] = [
            moved(
                ctx,
                f"{d.dev} statistics/rx_packets",
                received,
                f"/sys/class/net/{d.dev}/statistics/rx_packets",
                CounterRef(C.NIC_STAT, (d.dev, "rx_packets")),
            )
        ]
        evidence += [  # the first few: a 64-queue NIC would list them all
            _queue_packets(ctx, d.dev, q, counts[q])
            for q in [q for q in (*unused, *on_control) if q in counts][:4]
        ]
        evidence.append(
            reading(f"ethtool -x {d.dev} queues in the table", len(fed), f"ethtool -x {d.dev}")
        )
        problems = []
        if unused:
            problems.append(
                f"rx queue(s) {_queues(unused)} have an IRQ but are not in the indirection "
                f"table (ethtool -x {d.dev}: {len(s.rxfh.indir)} entries over queue(s) "
                f"{_queues(sorted(fed))} of {n}): RSS never feeds them, so their CPUs idle "
                "while the others take every flow (a table kept from before `ethtool -L`)"
            )
        if on_control:
            problems.append(
                f"control queue(s) {_queues(on_control)}, which flow rules reserve for "
                "control-plane traffic (VRRP, BGP, BFD, ssh), are also in the indirection "
                "table: data flows land on the housekeeping CPU that serves them"
            )
        title = (
            f"{d.dev}: {len(unused)} rx queue(s) get no RSS traffic"
            if unused
            else f"{d.dev}: RSS sends data traffic to control queue(s) {_queues(on_control)}"
        )
        yield finding(
            ctx,
            "rss-indirection-gap",
            title,
            Level.WARN,
            f"{d.dev} rss",
            "; ".join(problems) + f". {d.dev} received {received:,} packets {since(ctx)}.",
            len(unused) + len(on_control),
            "rx queues misfed by RSS",
            evidence,
            [_indir_fix(d.dev, n, control, f"queues {_queues(sorted(fed))}")],
            gauge=True,
        )
