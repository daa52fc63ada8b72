"""Rules for the receive path on the CPUs: backlog drops, time squeeze, IRQ spread/placement.

softnet_stat, /proc/softirqs and /proc/interrupts are per host even inside a network
namespace, and so are the sysctls that size this path (netdev_max_backlog, netdev_budget*):
a namespace does not even show them, so from one these fixes are HOST fixes.
"""

from __future__ import annotations

from itertools import compress
from operator import ge, gt
from typing import Any, Callable, Iterable, Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Finding, Fix, ProfileSetting
from lbtune.diagnose.rules.base import finding, moved, nic_setting, shown, since, sysctl_fix
from lbtune.diagnose.rules.registry import rule
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.kernel.interrupts import CpuCounts
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.softnet import SOFTNET
from lbtune.observe.window import SoftnetDelta
from lbtune.tune.lint import NETDEV_BUDGET_MAX, NETDEV_MAX_BACKLOG_MAX
from lbtune.vocab import Level

# The kernel's defaults, used to size a fix when the value cannot be read (a namespace).
_NETDEV_MAX_BACKLOG = 1000
_NETDEV_BUDGET = 300
_NETDEV_BUDGET_USECS = 2000


@rule(
    "cpu-backlog-drop",
    "per-CPU input backlog full (netdev_max_backlog): packets dropped",
    sysctls=("net.core.netdev_max_backlog",),
)
def cpu_backlog_drop(ctx: Context) -> Iterator[Finding]:
    current = ctx.sysctl_int("net.core.netdev_max_backlog")
    for d in ctx.window.softnet():
        if d.dropped <= 0:
            continue
        yield finding(
            ctx,
            "cpu-backlog-drop",
            f"CPU {d.cpu} input backlog overflow",
            Level.FAIL,
            f"cpu {d.cpu}",
            f"{d.dropped} packets dropped {since(ctx)} on CPU {d.cpu} because its input "
            f"backlog (RPS/RFS, veth, loopback, non-NAPI drivers) held "
            f"net.core.netdev_max_backlog = {shown(current)} packets; it processed "
            f"{d.processed}.",
            d.dropped,
            "packets",
            [
                moved(
                    ctx,
                    f"softnet[cpu{d.cpu}].dropped",
                    d.dropped,
                    SOFTNET,
                    CounterRef(C.SOFTNET, (d.cpu, "dropped")),
                )
            ],
            [_backlog_fix(ctx, current, d.cpu)],
        )


def _backlog_fix(ctx: Context, current: Optional[int], cpu: int) -> Fix:
    """A deeper backlog, up to what `profile lint` accepts; beyond that depth only adds
    latency, and the fix is to give the CPU less to do."""
    needed = min(NETDEV_MAX_BACKLOG_MAX, max(4 * (current or _NETDEV_MAX_BACKLOG), 16384))
    if current is not None and needed <= current:
        return Fix(
            knob=f"receive work on CPU {cpu}",
            current=None,
            desired=None,
            note=f"net.core.netdev_max_backlog is already {current}: a deeper queue only adds "
            "latency; spread the receive work (RPS, more queues) or make the CPU less busy",
            scope=MANUAL,
        )
    return sysctl_fix(ctx, "net.core.netdev_max_backlog", needed)


_MIN_SQUEEZE = 10


def squeezed(d: SoftnetDelta) -> bool:
    """The CPU's receive softirq ran out of budget or time with packets waiting, more than
    scheduling noise: ten or more squeezes, and at least one per 10,000 packets processed."""
    return d.time_squeeze >= _MIN_SQUEEZE and d.time_squeeze * 10000 >= d.processed


@rule(
    "time-squeeze",
    "NAPI ran out of budget or time with work left (per CPU)",
    sysctls=("net.core.netdev_budget", "net.core.netdev_budget_usecs"),
)
def time_squeeze(ctx: Context) -> Iterator[Finding]:
    budget = ctx.sysctl_int("net.core.netdev_budget")
    usecs = ctx.sysctl_int("net.core.netdev_budget_usecs")
    for d in ctx.window.softnet():
        if not squeezed(d):  # a rare squeeze is normal scheduling noise
            continue
        yield finding(
            ctx,
            "time-squeeze",
            f"CPU {d.cpu} softirq time squeeze",
            Level.WARN,
            f"cpu {d.cpu}",
            f"{d.time_squeeze} times {since(ctx)} the receive softirq on CPU {d.cpu} stopped "
            f"with packets still waiting (net.core.netdev_budget = {shown(budget)} packets or "
            f"netdev_budget_usecs = {shown(usecs)} us used up); the rest waits for ksoftirqd "
            "and the NIC ring fills meanwhile.",
            d.time_squeeze,
            "squeezes",
            [
                moved(
                    ctx,
                    f"softnet[cpu{d.cpu}].time_squeeze",
                    d.time_squeeze,
                    SOFTNET,
                    CounterRef(C.SOFTNET, (d.cpu, "time_squeeze")),
                )
            ],
            [
                sysctl_fix(
                    ctx,
                    "net.core.netdev_budget",
                    min(NETDEV_BUDGET_MAX, max(600, 2 * (budget or _NETDEV_BUDGET))),
                ),
                sysctl_fix(
                    ctx,
                    "net.core.netdev_budget_usecs",
                    max(4000, 2 * (usecs or _NETDEV_BUDGET_USECS)),
                ),
            ],
        )


_MIN_NET_RX = 2000  # NET_RX softirqs in the window below which balance does not matter


@rule("irq-imbalance", "one CPU takes most of the receive softirq work")
def irq_imbalance(ctx: Context) -> Iterator[Finding]:
    per_cpu = ctx.window.softirq("NET_RX")
    total = sum(per_cpu.values())
    if len(per_cpu) < 4 or total < _MIN_NET_RX:
        return
    cpu, top = max(per_cpu.items(), key=lambda kv: kv[1])
    share = top / total
    if share < 0.5:
        return  # the common case, decided before any per-NIC walk (a rule runs every tick)
    fired = _irqs_on(ctx, cpu)
    nics = sorted(fired)
    reach = _spread_reach(ctx, max(nics, key=fired.__getitem__) if nics else None)
    if reach and share < _IMBALANCE_OVER_EVEN / reach:
        return
    yield finding(
        ctx,
        "irq-imbalance",
        f"CPU {cpu} handles {share:.0%} of NET_RX softirqs",
        Level.WARN,
        f"cpu {cpu}",
        f"{top} of {total} receive softirqs {since(ctx)} ran on CPU {cpu} out of "
        f"{len(per_cpu)} CPUs: receive work is not spread (single queue, IRQs pinned to one "
        "core, or RSS hashing few flows to one queue).",
        top,
        "softirqs",
        [
            moved(
                ctx,
                f"softirqs NET_RX cpu{cpu}",
                top,
                "/proc/softirqs",
                CounterRef(C.SOFTIRQ, ("NET_RX", cpu)),
            )
        ],
        [
            Fix(
                knob="queue IRQ affinity / RPS",
                current=None,
                desired=None,
                settings=_local_irqs(nics or ["data"]),
                note="one queue per core with IRQs spread over NUMA-local cores; RPS when the "
                "NIC has a single queue"
                + ("" if nics else " (the NIC is not known here: --iface IF)"),
            )
        ],
    )


# A share this many times the even share over the CPUs the fix can use is an imbalance: with
# 2 node-local CPUs (even: 50 %) from 75 %; from 3 CPUs on, 50 % decides.
_IMBALANCE_OVER_EVEN = 1.5


def _spread_reach(ctx: Context, nic: Optional[str]) -> int:
    """How many CPUs the fix spreads this NIC's receive work over: its NUMA node's CPUs
    (every online CPU for a NIC without a node) minus the isolated ones. 0: not known (no
    topology or no NIC), and 50 % alone decides. Without it a NIC whose node has 2 CPUs,
    spread evenly by the fix, would be reported again at 50 % on each."""
    topo = ctx.topology
    if topo is None or nic is None:
        return 0
    return len(_node_cpus(topo, ctx.nics[nic].numa_node)[1])


def _node_cpus(topo: Any, node: Optional[int]) -> tuple[frozenset[int], frozenset[int]]:
    """(a NIC's node-local CPUs, empty without a node; the CPUs its queue IRQs may use: the
    local ones, or every online CPU without a node, minus the isolated ones)."""
    local = topo.node_cpus(node) if node is not None and node >= 0 else frozenset()
    return local, (local or topo.online) - topo.isolated


def _irqs_on(ctx: Context, cpu: int) -> dict[str, int]:
    """NIC -> interrupts its queue IRQs took on `cpu` in the window (NICs with none left out).
    The busiest is the one whose work piles up there; another NIC's few interrupts (a
    management port's single queue) do not change how far the fix can spread it."""
    counts = {
        nic.name: sum(ctx.window.irq(qi.irq).get(cpu, 0) for qi in nic.irqs)
        for nic in ctx.nics.values()
    }
    return {name: n for name, n in counts.items() if n > 0}


_Fired = tuple[Any, int, set[int]]  # (queue IRQ, interrupts in the window, CPUs it hit)


_Counts = Callable[[CpuCounts], tuple[int, ...]]


def _counts_of(cpus: Iterable[int]) -> Optional[_Counts]:
    """A function giving an IRQ's counts on `cpus` (in C, from the row's numbers: their
    places are worked out once for the CPU columns every row of a read shares), None for
    no CPUs; KeyError for a row without one of them."""
    ids = sorted(cpus)
    if not ids:
        return None
    last: list[Any] = [None, None]  # (the columns, their picker)

    def on(counts: CpuCounts) -> tuple[int, ...]:
        if last[0] is not counts.cpus:
            last[1] = counts.picker(ids)
            last[0] = counts.cpus
        picked: tuple[int, ...] = last[1](counts)
        return picked

    return on


def _fired_on(now: CpuCounts, was: CpuCounts, on: _Counts) -> Optional[bool]:
    """Whether an IRQ whose per-CPU counts went from `was` to `now` fired on the CPUs `on`
    gives; None when that takes `Window.irq`: one of them missing from either sample, or a
    count that went down there (a reset)."""
    try:
        a, b = on(now), on(was)
    except KeyError:
        return None
    if not all(map(ge, a, b)):
        return None
    return any(map(gt, a, b))


def _misplaced(
    ctx: Context, topo: Any, nic: Any, local: frozenset[int]
) -> tuple[list[_Fired], list[_Fired]]:
    """The NIC's queue IRQs that fired on isolated CPUs, and those that fired only on
    another NUMA node's CPUs (on a multi-node host, for a NIC with a node).

    A big host's every tick judges a hundred queue IRQs of 48 CPUs, nearly all of them
    firing where they should: `_fired_on` answers "none on an isolated CPU" and "some on a
    local one" from those CPUs' counts alone, and only an IRQ it cannot clear takes the
    window's per-CPU counts (`Window.irq`, as every IRQ did before)."""
    isolated: list[_Fired] = []
    remote: list[_Fired] = []
    w = ctx.window
    remote_possible = len(topo.nodes) > 1 and bool(local)
    on_isolated, on_local = _counts_of(topo.isolated), _counts_of(local)
    for qi in nic.irqs:
        line = w.after.interrupts.get(qi.irq)
        if line is None:
            continue  # no row at the end of the window: nothing counted
        old = w.before.interrupts.get(qi.irq) if w.before is not None else None
        if old is not None:
            now, was = line.counts, old.counts
            if now == was:
                continue  # (did not fire)
            isolated_hit = _fired_on(now, was, on_isolated) if on_isolated else False
            if isolated_hit is False and (
                not remote_possible or (on_local is not None and _fired_on(now, was, on_local))
            ):
                continue  # none on an isolated CPU, and some on a local one (or no remote)
        fired = w.irq(qi.irq)
        counts = fired.values()
        if not any(counts):
            continue  # (most queues of a short window: not a CPU to collect)
        if min(counts) >= 0:  # the CPUs with a count, picked in C
            busy = set(compress(fired, counts))
        else:
            busy = {cpu for cpu, n in fired.items() if n > 0}
        if not busy:
            continue
        count = sum(counts)
        if busy & topo.isolated:
            isolated.append((qi, count, busy & topo.isolated))
        elif remote_possible and not (busy & local):
            remote.append((qi, count, busy))
    return isolated, remote


def _placed_now(nic: Any, usable: frozenset[int]) -> bool:
    """Every queue IRQ of the NIC is placed now within `usable` (its effective affinity,
    else its affinity, known and inside): then any group of them `_placement_finding` is
    given is placed now too and is no finding, and the NIC's counts need not be looked at
    (a well-placed host's every NIC, every tick of the monitor)."""
    for qi in nic.irqs:
        current = qi.effective or qi.affinity
        if not current or not current <= usable:
            return False
    return True


def _placement_finding(
    ctx: Context, nic: Any, group: list[_Fired], problem: str, needed: frozenset[int]
) -> Optional[Finding]:
    """One finding for a group of misplaced IRQs ("isolated" or "remote"), None when they
    are placed within `needed` now."""
    count = sum(c for _, c, _ in group)
    cpus_hit = sorted(set().union(*(b for _, _, b in group)))
    irqs = ", ".join(f"{qi.irq} (queue {qi.queue})" for qi, _, _ in group)
    if problem == "isolated":
        title = f"{nic.name}: {len(group)} queue IRQs run on isolated CPUs"
        cause = (
            f"IRQs {irqs} of {nic.name} fired {count} times {since(ctx)} on isolated "
            f"CPU(s) {_cpus(cpus_hit)}, which should run only the pinned workload."
        )
        note = "and ban the isolated CPUs in irqbalance ([irqbalance] ban)"
    else:
        title = f"{nic.name}: {len(group)} queue IRQs run on a remote NUMA node"
        cause = (
            f"IRQs {irqs} of {nic.name} (NUMA node {nic.numa_node}) fired {count} times "
            f"{since(ctx)} only on CPU(s) {_cpus(cpus_hit)} of another node: every "
            "packet crosses the socket interconnect."
        )
        note = ""
    current = sorted(
        set().union(*((qi.effective or qi.affinity or set()) for qi, _, _ in group))
    )
    if current and set(current) <= needed:
        # Placed right now, where the fix would put them: the interrupts counted
        # elsewhere came before a move (an apply, irqbalance, by hand; since boot, or
        # a stray one in a live window while the move took effect). History: there is
        # nothing to fix. IRQs that keep being moved back show in a window that
        # ends while they are misplaced.
        return None
    return finding(
        ctx,
        "irq-placement",
        title,
        Level.WARN,
        f"{nic.name} irqs",
        cause,
        count,
        "interrupts",
        [
            moved(
                ctx,
                f"/proc/interrupts irq {qi.irq}",
                c,
                "/proc/interrupts",
                CounterRef(C.IRQ, (qi.irq,)),
            )
            for qi, c, _ in group
        ],
        [
            Fix(
                knob=f"{nic.name} queue IRQ affinity",
                current=_cpus(current),
                desired=_cpus(needed),
                settings=_local_irqs([nic.name]),
                note=note,
            )
        ],
    )


@rule("irq-placement", "NIC queue IRQs running on isolated or remote-NUMA CPUs")
def irq_placement(ctx: Context) -> Iterator[Finding]:
    topo = ctx.topology
    if topo is None:
        return
    for nic in ctx.nics.values():
        # Both kinds go to the same CPUs: the node's own (every online one without a
        # node), minus the isolated ones; a remote group implies the node has CPUs.
        local, usable = _node_cpus(topo, nic.numa_node)
        if _placed_now(nic, usable):
            continue  # whatever fired where in the window, no group of it is a finding
        isolated, remote = _misplaced(ctx, topo, nic, local)
        for group, problem in ((isolated, "isolated"), (remote, "remote")):
            if group:
                f = _placement_finding(ctx, nic, group, problem, usable)
                if f is not None:
                    yield f


def _local_irqs(devs: list[str]) -> tuple[ProfileSetting, ...]:
    """Queue IRQs over NUMA-local cores, and irqbalance stopped so it does not move them back
    (`profile lint` flags affinity that irqbalance would undo)."""
    return (
        *(nic_setting(dev, "irq_affinity", ("strategy", "local")) for dev in devs),
        IRQBALANCE_STOPPED,
    )


IRQBALANCE_STOPPED = ProfileSetting(("irqbalance",), "state", (("value", "stopped"),))


def _cpus(cpus: Optional[Iterable[int]]) -> Optional[str]:
    return None if cpus is None else format_cpulist(frozenset(cpus))
