"""Rules for drops in the NIC: full rings and FIFOs per queue, port buffers, cloud policers.

The fix must exist on the device: rings only where the driver reports a maximum above the
current size, channels likewise; a device without queue IRQs (veth, most virtual devices)
gets RPS, not IRQ affinity; a cloud allowance has no host setting at all (PLATFORM).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, PLATFORM, Evidence, Finding, Fix, ProfileSetting
from lbtune.diagnose.rules.base import finding, moved, nic_setting, since
from lbtune.diagnose.rules.cpu import IRQBALANCE_STOPPED
from lbtune.diagnose.rules.registry import rule
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.nicmaps import OTHER, POLICER, PORT_BUFFER, driver_map
from lbtune.observe.window import NicDelta
from lbtune.vocab import Level


def _ring_fix(ctx: Context, dev: str) -> list[Fix]:
    nic = ctx.nics.get(dev)
    rings = nic.rings if nic else None
    fixes: list[Fix] = []
    if rings and rings.rx is not None and rings.rx_max and rings.rx < rings.rx_max:
        fixes.append(
            Fix(
                knob=f"ring {dev} rx",
                current=str(rings.rx),
                desired=str(rings.rx_max),
                settings=(nic_setting(dev, "rings", ("value", "max")),),
                command=f"ethtool -G {dev} rx {rings.rx_max}",
                note="most drivers reset the link when rings change",
            )
        )
    ch = nic.channels if nic else None
    if ch and ch.combined is not None and ch.combined_max and ch.combined < ch.combined_max:
        fixes.append(
            Fix(
                knob=f"channels {dev} combined",
                current=str(ch.combined),
                desired=str(ch.combined_max),
                settings=(
                    nic_setting(dev, "channels", ("value", ch.combined_max), ("mode", "raise")),
                ),
                command=f"ethtool -L {dev} combined {ch.combined_max}",
                note="more queues spread receive work over more CPUs",
            )
        )
    if fixes:
        return fixes
    settings: tuple[ProfileSetting, ...]
    if nic is not None and not nic.irqs:
        settings = (nic_setting(dev, "rps", ("cpus", "local")),)
        note = (
            f"{dev} has no queue interrupts to spread: spread its receive work with RPS, and "
            "make sure the CPUs that drain it are not saturated"
        )
    else:
        settings = (nic_setting(dev, "irq_affinity", ("strategy", "local")), IRQBALANCE_STOPPED)
        note = (
            "rings and queues are at their maximum (or unknown): spread queue IRQs over more "
            "NUMA-local cores and raise net.core.netdev_budget"
        )
    return [
        Fix(knob=f"receive CPUs of {dev}", current=None, desired=None, settings=settings, note=note)
    ]


def _ethtool(ctx: Context, dev: str, name: str, count: int) -> Evidence:
    ref = CounterRef(C.NIC_DROP, (dev, name))
    return moved(ctx, f"ethtool {dev} {name}", count, f"ethtool -S {dev}", ref)


def _queue_share(deltas: Iterable[tuple[int, int]]) -> Optional[tuple[int, float]]:
    items = [(q, p) for q, p in deltas if p > 0]
    total = sum(p for _, p in items)
    if len(items) < 2 or total <= 0:
        return None
    q, p = max(items, key=lambda x: x[1])
    return q, p / total


def _skew(d: NicDelta) -> str:
    """The sentence blaming RSS when one rx queue carried most packets ("" otherwise)."""
    share = _queue_share((q.queue, q.packets or 0) for q in d.queues if q.direction == "rx")
    if share and share[1] >= 0.4:
        return (
            f" rx queue {share[0]} carried {share[1]:.0%} of the received packets: "
            "RSS puts too many flows on one queue/CPU."
        )
    return ""


def _queue_drops(ctx: Context, d: NicDelta, skew: str) -> Iterator[Finding]:
    """One finding per rx queue whose ring overflowed (per-queue driver counters)."""
    for q in d.queues:
        if q.direction != "rx" or not q.drops:
            continue
        count = q.drops or 0
        yield finding(
            ctx,
            "nic-rx-drop",
            f"{d.dev} rx queue {q.queue} dropping packets",
            Level.FAIL,
            f"{d.dev} rx-queue {q.queue}",
            f"{count} packets dropped {since(ctx)} by {d.driver or 'the driver'} on rx "
            f"queue {q.queue} of {d.dev}: the queue's ring was full when they arrived "
            f"(its CPU did not drain it in time).{skew}",
            count,
            "packets",
            [
                moved(
                    ctx,
                    f"ethtool {d.dev} rx queue {q.queue} drops",
                    count,
                    f"ethtool -S {d.dev}",
                    CounterRef(C.NIC_QUEUE, (d.dev, "rx", q.queue, "drops")),
                )
            ],
            _ring_fix(ctx, d.dev),
        )


def _driver_drops(ctx: Context, d: NicDelta, skew: str) -> Iterator[Finding]:
    """One finding per driver drop counter that moved, with its meaning from the driver map
    (policer counters are nic-policer's)."""
    dmap = driver_map(d.driver)
    for name, count in sorted(d.nic_drops.items()):
        if count <= 0:
            continue
        info = dmap.drop(name) if dmap else None
        meaning = info.meaning if info else None
        where = info.where if info else OTHER
        if where == POLICER:
            continue  # reported by nic-policer
        fixes = _ring_fix(ctx, d.dev)
        if where == PORT_BUFFER:
            fixes.append(
                Fix(
                    knob=f"flow control on {d.dev}",
                    current=None,
                    desired=None,
                    command=f"ethtool -a {d.dev}",
                    note="drops in the NIC's port buffer before any ring: the host as a "
                    "whole is too slow or pause frames are off",
                    scope=MANUAL,
                )
            )
        yield finding(
            ctx,
            "nic-rx-drop",
            f"{d.dev} dropping received packets ({name})",
            Level.FAIL,
            d.dev,
            f"{count} packets dropped {since(ctx)} by {d.driver or 'the NIC'} "
            f"({name}: {meaning or 'driver drop counter'}).{skew}",
            count,
            "packets",
            [_ethtool(ctx, d.dev, name, count)],
            fixes,
        )


def _netdev_drops(ctx: Context, d: NicDelta, skew: str) -> Iterator[Finding]:
    """Drivers without a map: the generic netdev counters."""
    for name in ("rx_missed_errors", "rx_fifo_errors", "rx_over_errors"):
        count = d.stats.get(name, 0)
        if count <= 0:
            continue
        yield finding(
            ctx,
            "nic-rx-drop",
            f"{d.dev} dropping received packets ({name})",
            Level.FAIL,
            d.dev,
            f"{count} packets lost {since(ctx)} in the NIC ({name}: ring or "
            f"FIFO full).{skew}",
            count,
            "packets",
            [
                moved(
                    ctx,
                    f"{d.dev} statistics/{name}",
                    count,
                    f"/sys/class/net/{d.dev}/statistics/{name}",
                    CounterRef(C.NIC_STAT, (d.dev, name)),
                )
            ],
            _ring_fix(ctx, d.dev),
        )


@rule("nic-rx-drop", "NIC dropped received packets (ring, FIFO, port buffer) per queue")
def nic_rx_drop(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        skew = _skew(d)
        yield from _queue_drops(ctx, d, skew)
        yield from _driver_drops(ctx, d, skew)
        per_queue = any(q.direction == "rx" and q.drops for q in d.queues)
        nic = ctx.nics.get(d.dev)
        stacked = nic is not None and nic.kind in ("bond", "vlan", "bridge", "team")
        if not d.nic_drops and not per_queue and not stacked:
            yield from _netdev_drops(ctx, d, skew)


@rule(
    "nic-policer",
    "cloud NIC allowance exceeded: packets shaped or dropped by the platform",
    profile_fix=False,
)
def nic_policer(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        dmap = driver_map(d.driver)
        if not dmap:
            continue
        for name, count in sorted(d.nic_drops.items()):
            info = dmap.drop(name)
            if count <= 0 or info is None or info.where != POLICER:
                continue
            yield finding(
                ctx,
                "nic-policer",
                f"{d.dev}: {name}",
                Level.FAIL,
                d.dev,
                f"{count} packets queued or dropped {since(ctx)} by the cloud platform "
                f"({name}: {info.meaning}). No host setting lifts this limit.",
                count,
                "packets",
                [_ethtool(ctx, d.dev, name, count)],
                [
                    Fix(
                        knob="instance type / network allowance",
                        current=None,
                        desired=None,
                        note="a larger instance type, or spread the load over more instances",
                        scope=PLATFORM,
                    )
                ],
            )
