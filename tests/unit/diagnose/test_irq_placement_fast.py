"""irq-placement's two shortcuts change none of its findings: its misplaced IRQs, cleared
from the isolated and local CPUs' counts alone (`_fired_on`), are those the per-IRQ way
(`Window.irq` of every queue IRQ) finds; and a NIC whose queue IRQs are all placed now
(`_placed_now`) is left out only where it would have had no finding. Random windows of hosts
with one or two nodes, no, one or many isolated CPUs (some not in the counts), rows that
appear, vanish, lose a CPU, reset or go negative, and affinities in and out of place."""

from __future__ import annotations

import dataclasses
import random
from itertools import compress
from typing import Any, Optional

import pytest

from lbtune.diagnose.context import Context
from lbtune.diagnose.rules import cpu as rules_cpu
from lbtune.host.kernel.cmdline import KernelCmdline
from lbtune.host.kernel.cputopology import Cpu, CpuTopology, NumaNode
from lbtune.host.kernel.interrupts import CpuCounts, IrqLine
from lbtune.host.net.nic import Nic, QueueIrq
from lbtune.observe.model import Sample, SnmpCounters
from lbtune.observe.window import Window


def per_irq(ctx: Context, topo: Any, nic: Any, local: frozenset[int]) -> tuple[list[Any], ...]:
    """The misplaced IRQs as found before `_fired_on`: every queue IRQ's `Window.irq`."""
    isolated: list[Any] = []
    remote: list[Any] = []
    for qi in nic.irqs:
        fired = ctx.window.irq(qi.irq)
        counts = fired.values()
        if not any(counts):
            continue
        busy = set(compress(fired, counts)) if min(counts) >= 0 else {
            c for c, n in fired.items() if n > 0}  # fmt: skip
        if not busy:
            continue
        if busy & topo.isolated:
            isolated.append((qi, sum(counts), busy & topo.isolated))
        elif len(topo.nodes) > 1 and local and not (busy & local):
            remote.append((qi, sum(counts), busy))
    return isolated, remote


def _sample(t: float, interrupts: dict[int, IrqLine]) -> Sample:
    return Sample(monotonic=t, wallclock=t, uptime=1000.0 + t, snmp=SnmpCounters({}),
                  softnet=(), softirqs=None, interrupts=interrupts, nics={}, listen=(), udp=(),
                  sockstat=None, conntrack=None, qdiscs=(), ipvs=None, missing={},
                  config={})  # fmt: skip


def _host(rng: random.Random) -> tuple[CpuTopology, Nic]:
    ncpu = rng.choice((2, 4, 6, 8))
    nodes = rng.choice((1, 2))
    per = ncpu // nodes
    cpus = tuple(Cpu(i, True, i // per, i // per, i % 2, frozenset({i}), False)
                 for i in range(ncpu))  # fmt: skip
    # isolated: none, one, several; sometimes a CPU no IRQ row shows (offline, 99)
    isolated = set(rng.sample(range(ncpu), rng.choice((0, 0, 1, 2, ncpu // 2))))
    if rng.random() < 0.2:
        isolated.add(99)
    topo = CpuTopology(
        cpus=cpus,
        nodes=tuple(NumaNode(n, frozenset(range(n * per, (n + 1) * per))) for n in range(nodes)),
        possible=frozenset(range(ncpu)), isolated=frozenset(isolated), nohz_full=frozenset(),
        cmdline=KernelCmdline.parse(""), default_irq_affinity=None,
    )  # fmt: skip
    irqs = tuple(QueueIrq(30 + q, "rx", q, f"eth0-rx-{q}", "mlx5", None, None, None, None, 0)
                 for q in range(rng.randint(1, 6)))  # fmt: skip
    node = rng.choice((-1, 0, nodes - 1))
    nic = Nic("eth0", 2, "physical", "mlx5_core", "0000:41:00.0", node, None, None, 1500, "up",
              None, 1000, (), (), None, None, irqs, ())  # fmt: skip
    return topo, nic


def _rows(rng: random.Random, topo: CpuTopology, nic: Nic,
          base: Optional[dict[int, IrqLine]]) -> dict[int, IrqLine]:
    ncpu = len(topo.cpus)
    out = {}
    for qi in nic.irqs:
        if rng.random() < 0.08:
            continue  # the row is not there (the IRQ freed, or not yet requested)
        old = base.get(qi.irq) if base else None
        counts = {}
        blunt = rng.random() < 0.3  # each CPU: as it was, fired, or reset to 0, evenly
        for c in range(ncpu):
            b = old.counts.get(c, 0) if old else rng.randint(0, 50)
            roll = rng.random()
            if blunt:
                counts[c] = (b, b + rng.randint(1, 9), 0)[int(roll * 3)]
                continue
            if roll < 0.5:
                v = b  # did not fire there
            elif roll < 0.85:
                v = b + rng.randint(1, 1000)
            elif roll < 0.93:
                v = rng.choice((0, rng.randint(0, max(0, b - 1))))  # reset: went down
            else:
                v = rng.choice((-3, 0))  # malformed, or zeroed
            counts[c] = v
        if rng.random() < 0.1:
            counts.pop(rng.randrange(ncpu))  # a CPU missing from the row
        if rng.random() < 0.3:  # quiet: the row as it was
            counts = dict(old.counts) if old else {c: 0 for c in range(ncpu)}
        out[qi.irq] = IrqLine(qi.irq, CpuCounts.of(counts), "PCI-MSI", (qi.name,))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_misplaced_irqs_are_those_the_per_irq_way_finds(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (test data)
    for _ in range(250):
        topo, nic = _host(rng)
        first = _rows(rng, topo, nic, None)
        before = None if rng.random() < 0.15 else _sample(0.0, first)
        after = _sample(2.0, _rows(rng, topo, nic, first))
        local, _ = rules_cpu._node_cpus(topo, nic.numa_node)
        want = per_irq(Context(window=Window(before, after)), topo, nic, local)
        got = rules_cpu._misplaced(Context(window=Window(before, after)), topo, nic, local)
        assert got == want, (seed, topo.isolated, nic.numa_node, before, after)


def test_the_check_clears_irqs_without_their_per_cpu_counts() -> None:
    """The point of it: IRQs firing on a local, not isolated CPU take no `Window.irq`."""
    rng = random.Random(1)  # noqa: S311 (test data)
    while True:
        topo, nic = _host(rng)
        if len(topo.nodes) == 2 and nic.numa_node == 1 and topo.isolated <= {0}:
            break
    local, _ = rules_cpu._node_cpus(topo, nic.numa_node)
    cpu = max(local)
    zeros = CpuCounts.of(dict.fromkeys(range(len(topo.cpus)), 0))
    zero = {qi.irq: IrqLine(qi.irq, zeros, "PCI-MSI", ()) for qi in nic.irqs}
    fired = {i: dataclasses.replace(line, counts=CpuCounts.of({**line.counts, cpu: 5}))
             for i, line in zero.items()}  # fmt: skip
    window = Window(_sample(0.0, zero), _sample(1.0, fired))
    asked: list[int] = []
    real = Window.irq

    def irq(self: Window, n: int) -> dict[int, int]:
        asked.append(n)
        return real(self, n)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Window, "irq", irq)
        assert rules_cpu._misplaced(Context(window=window), topo, nic, local) == ([], [])
    assert asked == []


def _placed(rng: random.Random, topo: CpuTopology, nic: Nic) -> Nic:
    """`nic` with each queue IRQ's affinity and effective affinity drawn: unknown, empty,
    within the CPUs the fix would use, or anywhere (isolated and remote CPUs too)."""
    usable = rules_cpu._node_cpus(topo, nic.numa_node)[1]
    everywhere = sorted(topo.online)

    def pick() -> Optional[frozenset[int]]:
        roll = rng.random()
        if roll < 0.1:
            return None
        if roll < 0.15:
            return frozenset()
        pool = sorted(usable) if roll < 0.8 and usable else everywhere
        return frozenset(rng.sample(pool, rng.randint(1, len(pool))))

    placed = rng.random() < 0.5  # half the NICs: every IRQ within the CPUs the fix uses
    irqs = []
    for qi in nic.irqs:
        if placed and usable:
            now = frozenset(rng.sample(sorted(usable), rng.randint(1, len(usable))))
            irqs.append(dataclasses.replace(qi, affinity=now, effective=rng.choice((now, None))))
        else:
            irqs.append(dataclasses.replace(qi, affinity=pick(), effective=pick()))
    return dataclasses.replace(nic, irqs=tuple(irqs))


@pytest.mark.parametrize("seed", range(6))
def test_nics_placed_now_are_left_out_only_where_they_had_no_finding(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (test data)
    shortcut = 0
    for _ in range(300):
        topo, nic = _host(rng)
        nic = _placed(rng, topo, nic)
        first = _rows(rng, topo, nic, None)
        before = None if rng.random() < 0.15 else _sample(0.0, first)
        after = _sample(2.0, _rows(rng, topo, nic, first))
        ctx = Context(window=Window(before, after), topology=topo, nics={"eth0": nic})
        got = list(rules_cpu.irq_placement(ctx))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rules_cpu, "_placed_now", lambda nic, usable: False)
            want = list(rules_cpu.irq_placement(ctx))
        assert got == want, (seed, topo.isolated, nic)
        shortcut += rules_cpu._placed_now(nic, rules_cpu._node_cpus(topo, nic.numa_node)[1])
    assert shortcut > 50  # (the shortcut was taken, on NICs whose IRQs did fire)
