"""Rules for NIC parameters behind ethtool: LRO on a host that forwards, interrupt
coalescing too low for the packet rate, pause frames.

- LRO merges received TCP segments into one large buffer that is not a valid packet to
  send on: the kernel drops such packets in ip_forward (the "received packets cannot be
  forwarded while LRO is enabled" warning) and IPVS sends them on oversized. Setting
  ip_forward disables LRO once; a driver reset, a device added later to a bond, or an
  `ethtool -K lro on` turns it back on. GRO merges in a way that can be undone and is fine.
- Coalescing: without it (rx-usecs near 0, adaptive off) a NIC raises an interrupt per few
  packets; at tens of thousands a second per queue the interrupt work itself eats the cores
  that must run the receive softirq, which then runs out of budget (time squeeze).
  e1000/e1000e (1, 3, 4), igb (1, 3) and ixgbe (1) report their dynamic interrupt
  throttling modes as small rx-usecs values.
- Pause frames (IEEE 802.3x): a NIC that sends them asks the switch to hold traffic because
  its own buffer is filling; the loss then happens in the switch, where this host's drop
  counters never see it. One that receives them is told to stop sending: congestion
  upstream. The counters' names differ per driver (`observe/nicmaps.PAUSE_COUNTERS`).

The settings come from `Context.nic_settings`; without them these rules stay quiet.
"""

from __future__ import annotations

from typing import Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Evidence, Finding, Fix, ProfileSetting
from lbtune.diagnose.nicsettings import NicSettings
from lbtune.diagnose.rules.base import finding, moved, nic_group_setting, shown, since
from lbtune.diagnose.rules.cpu import squeezed
from lbtune.diagnose.rules.registry import rule
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.net.nicparams import Feature
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.nicmaps import RX_PAUSE, TX_PAUSE, pause_counters
from lbtune.observe.softnet import SOFTNET
from lbtune.observe.window import NicDelta
from lbtune.vocab import Level

# ------------------------------------------------------------------------------- LRO

LRO = "rx-lro"  # the kernel's name (netdev_features_strings); `ethtool -k`: large-receive-offload
_LRO_NAMES = (LRO, "large-receive-offload", "lro")


def lro_feature(s: NicSettings) -> Optional[Feature]:
    """The NIC's LRO feature, under whichever name its source gave it."""
    for name in _LRO_NAMES:
        f = s.features.get(name) if s.features else None
        if f is not None:
            return f
    return None


def _rx_packets(ctx: Context, d: NicDelta) -> Evidence:
    return moved(
        ctx,
        f"{d.dev} statistics/rx_packets",
        d.stats.get("rx_packets", 0),
        f"/sys/class/net/{d.dev}/statistics/rx_packets",
        CounterRef(C.NIC_STAT, (d.dev, "rx_packets")),
    )


def _ipvs_packets(ctx: Context) -> int:
    after = ctx.window.after.ipvs
    if after is None:
        return 0
    before = ctx.window.before.ipvs if ctx.window.before else None
    n = after.in_packets - (before.in_packets if before else 0)
    return n if n >= 0 else after.in_packets


@rule(
    "lro-on-forwarding-host",
    "LRO is on where the host forwards (ip_forward = 1, or an IPVS director)",
    sysctls=("net.ipv4.ip_forward",),
    nic_settings=True,
)
def lro_on_forwarding_host(ctx: Context) -> Iterator[Finding]:
    forward = ctx.sysctl_int("net.ipv4.ip_forward") == 1
    ipvs = _ipvs_packets(ctx)
    if not forward and ipvs <= 0:
        return
    why = "net.ipv4.ip_forward = 1" if forward else ""
    if ipvs > 0:
        why += (" and " if why else "") + f"IPVS forwarded {ipvs:,} packets {since(ctx)}"
    for d in ctx.window.nics():
        s = ctx.nic_settings.get(d.dev)
        lro = lro_feature(s) if s else None
        received = d.stats.get("rx_packets", 0)
        if lro is None or not lro.active or received <= 0:
            continue
        yield finding(
            ctx,
            "lro-on-forwarding-host",
            f"{d.dev}: LRO on while the host forwards",
            Level.FAIL,
            d.dev,
            f"{d.dev} has large-receive-offload on ({LRO}), and this host forwards ({why}): "
            f"LRO merges the {received:,} packets it received {since(ctx)} into buffers that "
            "cannot be sent on as they are; the kernel drops them in ip_forward and IPVS sends "
            "them on oversized. GRO gives the same saving and can be undone.",
            received,
            "packets received with LRO on",
            [_rx_packets(ctx, d)],
            [
                Fix(
                    knob=f"feature {d.dev} {LRO}",
                    current="on",
                    desired="off",
                    settings=(nic_group_setting(d.dev, "features", "lro", "off"),),
                    command=f"ethtool -K {d.dev} lro off",
                    note="keep GRO (rx-gro) on",
                )
            ]
            if not lro.fixed
            else [
                Fix(
                    knob=f"feature {d.dev} {LRO}",
                    current="on [fixed]",
                    desired="off",
                    note=f"the driver does not let LRO be turned off on {d.dev}: forward "
                    "on another NIC, or update the driver/firmware",
                    scope=MANUAL,
                )
            ],
        )


# ------------------------------------------------------------------------- coalescing

STORM_PER_SECOND = 20_000  # interrupts a second on one queue vector: every 50 us
LOW_RX_USECS = 10  # rx-usecs below this is (nearly) an interrupt per packet
FIX_RX_USECS = 50  # at most 20,000 interrupts a second per queue, 50 us added latency
# rx-usecs values that name a driver's interrupt throttling mode, not microseconds: e1000(e)
# 1 dynamic, 3 dynamic conservative, 4 simplified; igb 1 and 3 likewise; ixgbe 1 dynamic.
_DYNAMIC_ITR = {"e1000": (1, 3, 4), "e1000e": (1, 3, 4), "igb": (1, 3), "ixgbe": (1,)}


def dynamic_itr(driver: Optional[str], usecs: Optional[int]) -> bool:
    """`usecs` is the driver's name for a dynamic interrupt throttling mode, not a time."""
    return usecs is not None and usecs in _DYNAMIC_ITR.get(driver or "", ())


def _low_coalescing(s: NicSettings, driver: Optional[str]) -> Optional[int]:
    """The rx-usecs when it is low and nothing adapts it, else None."""
    co = s.coalesce
    usecs = co.get("rx-usecs") if co else None
    if co is None or usecs is None or co.get("adaptive-rx") == 1:
        return None
    if dynamic_itr(driver, usecs):
        return None
    return usecs if usecs < LOW_RX_USECS else None


def _coalesce_fix(dev: str, s: NicSettings, usecs: int) -> Fix:
    co = s.coalesce
    if co is not None and "adaptive-rx" in co.names:
        return Fix(
            knob=f"coalesce {dev} adaptive-rx",
            current="off",
            desired="on",
            settings=(nic_group_setting(dev, "coalesce", "adaptive-rx", "on"),),
            command=f"ethtool -C {dev} adaptive-rx on",
            note="the driver raises rx-usecs as the packet rate rises and lowers it when idle",
        )
    return Fix(
        knob=f"coalesce {dev} rx-usecs",
        current=str(usecs),
        desired=str(FIX_RX_USECS),
        settings=(nic_group_setting(dev, "coalesce", "rx-usecs", FIX_RX_USECS),),
        command=f"ethtool -C {dev} rx-usecs {FIX_RX_USECS}",
        note=f"at most {1_000_000 // FIX_RX_USECS:,} interrupts a second per queue; "
        f"{FIX_RX_USECS} us is the latency it adds at low rates",
    )


@rule(
    "coalescing",
    "interrupt storm: a queue takes tens of thousands of interrupts a second with its CPU "
    "out of softirq budget, and coalescing is (nearly) off",
    nic_settings=True,
)
def coalescing(ctx: Context) -> Iterator[Finding]:
    secs = ctx.window.seconds
    if not secs:
        return
    squeezed_cpus = {d.cpu: d for d in ctx.window.softnet() if squeezed(d)}
    if not squeezed_cpus:
        return  # the common case: no CPU saturated in softirq
    for nic in ctx.nics.values():
        s = ctx.nic_settings.get(nic.name)
        usecs = _low_coalescing(s, nic.driver) if s else None
        if s is None or usecs is None:
            continue
        storms = []
        for qi in nic.irqs:
            fired = ctx.window.irq(qi.irq)
            n = sum(fired.values())
            hit = sorted(c for c, k in fired.items() if k > 0 and c in squeezed_cpus)
            if n / secs >= STORM_PER_SECOND and hit:
                storms.append((qi, n, hit))
        if not storms:
            continue
        total = sum(n for _, n, _ in storms)
        cpus = sorted({c for _, _, hit in storms for c in hit})
        worst = max(n for _, n, _ in storms)
        yield finding(
            ctx,
            "coalescing",
            f"{nic.name}: {len(storms)} queue(s) at {worst / secs:,.0f} interrupts/s, "
            "coalescing off",
            Level.WARN,
            f"{nic.name} irqs",
            f"{len(storms)} queue vector(s) of {nic.name} took {total:,} interrupts {since(ctx)} "
            f"(up to {worst / secs:,.0f} a second on one) with rx-usecs = {usecs} and no "
            f"adaptive coalescing (ethtool -c {nic.name}); their CPU(s) "
            f"{format_cpulist(frozenset(cpus))} ran out of softirq budget "
            f"{sum(squeezed_cpus[c].time_squeeze for c in cpus):,} times: interrupt work eats "
            "the cores the receive path needs.",
            total,
            "interrupts",
            [
                *(
                    moved(
                        ctx,
                        f"/proc/interrupts irq {qi.irq}",
                        n,
                        "/proc/interrupts",
                        CounterRef(C.IRQ, (qi.irq,)),
                    )
                    for qi, n, _ in storms[:4]
                ),
                *(
                    moved(
                        ctx,
                        f"softnet[cpu{c}].time_squeeze",
                        squeezed_cpus[c].time_squeeze,
                        SOFTNET,
                        CounterRef(C.SOFTNET, (c, "time_squeeze")),
                    )
                    for c in cpus[:4]
                ),
            ],
            [_coalesce_fix(nic.name, s, usecs)],
        )


# ----------------------------------------------------------------------- pause frames

MIN_PAUSE_FRAMES = 10  # fewer in the window: link bring-up and noise


def _pause_fix(dev: str, s: Optional[NicSettings], direction: str) -> list[Fix]:
    pause = s.pause if s else None
    on = None if pause is None else (pause.tx if direction == TX_PAUSE else pause.rx)
    manual = Fix(
        knob=f"the switch port of {dev}",
        current=None,
        desired=None,
        note="the link partner's queues and buffers (its own drop and pause counters)"
        if direction == RX_PAUSE
        else "this host receives faster than it drains: nic-rx-drop and time-squeeze name "
        "the host's fix (rings, queues, IRQs) once the loss shows here",
        scope=MANUAL,
    )
    if not on:
        return [manual]
    field = "tx" if direction == TX_PAUSE else "rx"
    # With pause autonegotiation on, some drivers (e1000e) keep the negotiated directions
    # whatever is asked: autoneg goes off with it (as the lb-dr profile does).
    autoneg = pause is not None and pause.autoneg
    settings: tuple[ProfileSetting, ...] = (nic_group_setting(dev, "pause", field, "off"),)
    if autoneg:
        settings = (nic_group_setting(dev, "pause", "autoneg", "off"), *settings)
    fix = Fix(
        knob=f"pause {dev} {field}",
        current="on",
        desired="off",
        settings=settings,
        command=f"ethtool -A {dev} {'autoneg off ' if autoneg else ''}{field} off",
        note="drops then happen where this host counts them, and one slow port no longer "
        "stalls the switch's other traffic"
        if direction == TX_PAUSE
        else "the host keeps sending; the congested link partner drops instead of stalling "
        "this host's transmit queues",
    )
    return [fix, manual]


@rule(
    "pause-frames",
    "pause frames sent or received: flow control hides drops upstream",
    nic_settings=True,
)
def pause_frames(ctx: Context) -> Iterator[Finding]:
    for d in ctx.window.nics():
        counters = pause_counters(d.driver)
        for direction in (TX_PAUSE, RX_PAUSE):
            moved_by = [
                (pc.name, n)
                for pc in counters
                if pc.direction == direction
                for n in [ctx.window.ethtool(d.dev, pc.name)]
                if n
            ]
            count = sum(n for _, n in moved_by)
            if count < MIN_PAUSE_FRAMES:
                continue
            s = ctx.nic_settings.get(d.dev)
            settings = s.pause if s else None
            if direction == TX_PAUSE:
                title = f"{d.dev} sent {count:,} pause frames"
                what = (
                    f"{d.dev} asked its link partner {count:,} times {since(ctx)} to stop sending "
                    "because its receive buffer was filling: the packets wait or die in the "
                    "switch, where this host's drop counters do not see them"
                )
            else:
                title = f"{d.dev} received {count:,} pause frames"
                what = (
                    f"the link partner told {d.dev} {count:,} times {since(ctx)} to stop sending: "
                    "congestion upstream stalls this host's transmit queues"
                )
            yield finding(
                ctx,
                "pause-frames",
                title,
                Level.WARN,
                d.dev,
                f"{what} (ethtool -a {d.dev}: rx {_onoff(settings.rx if settings else None)}, "
                f"tx {_onoff(settings.tx if settings else None)}).",
                count,
                "pause frames",
                [
                    moved(
                        ctx,
                        f"ethtool {d.dev} {name}",
                        n,
                        f"ethtool -S {d.dev}",
                        CounterRef(C.NIC_ETHTOOL, (d.dev, name)),
                    )
                    for name, n in moved_by
                ],
                _pause_fix(d.dev, s, direction),
            )


def _onoff(v: Optional[bool]) -> str:
    return shown(None if v is None else ("on" if v else "off"))
