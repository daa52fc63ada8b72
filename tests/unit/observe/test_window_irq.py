"""Per-CPU interrupts of one IRQ over a window, and their sum over a NIC's IRQs."""

from __future__ import annotations

import random

import pytest

from lbtune.host.kernel.interrupts import CpuCounts, IrqLine
from lbtune.observe.model import Sample, SnmpCounters
from lbtune.observe.window import Window
from lbtune.tui.frame import _sum_by_cpu


def _sample(t: float, rows: dict[int, dict[int, int]]) -> Sample:
    lines = {irq: IrqLine(irq, CpuCounts.of(c), "PCI-MSIX", (f"eth0-{irq}",))
             for irq, c in rows.items()}  # fmt: skip
    return Sample(t, 0.0, t, SnmpCounters({}), (), None, lines, {}, (), (), None, None, (), None,
                  {})  # fmt: skip


def _reference(after: dict[int, int], before: dict[int, int]) -> dict[int, int]:
    """The delta as the kernel's counters mean it: a count that went down was reset."""
    out = {}
    for cpu, v in after.items():
        b = before.get(cpu)
        out[cpu] = v if b is None else (v - b if v >= b else v)
    return out


@pytest.mark.parametrize(
    "before, after",
    [
        ({0: 5, 1: 7}, {0: 9, 1: 7}),  # moved on one CPU
        ({0: 5, 1: 7}, {0: 5, 1: 7}),  # did not fire
        ({0: 5, 1: 7}, {0: 9, 1: 2}),  # one counter went down (reset): its count as it is
        ({0: 5, 1: 7}, {0: 9, 1: 8, 2: 4}),  # a CPU came online
        ({0: 5, 1: 7, 2: 1}, {0: 9, 2: 4}),  # a CPU went offline
        ({1: 7, 0: 5}, {0: 9, 1: 8}),  # the same CPUs in another order
    ],
)
def test_an_irqs_counts_over_a_window(before, after):
    w = Window(_sample(1.0, {30: before}), _sample(2.0, {30: after}))
    assert w.irq(30) == _reference(after, before)
    assert w.irq(31) == {}


def test_a_big_hosts_irq_rows_over_a_window_and_their_sum():
    rng = random.Random(7)  # noqa: S311 (test data)
    cpus = list(range(48))
    rows = {irq: {c: rng.choice([0, 0, 0, rng.randrange(10**9)]) for c in cpus}
            for irq in range(100, 200)}  # fmt: skip
    later = {irq: {c: n + rng.choice([0, rng.randrange(10**5)]) for c, n in r.items()}
             for irq, r in rows.items()}  # fmt: skip
    w = Window(_sample(1.0, rows), _sample(2.0, later))
    deltas = [w.irq(irq) for irq in rows]
    assert deltas == [_reference(later[irq], rows[irq]) for irq in rows]
    expected = {c: sum(d[c] for d in deltas) for c in cpus}
    assert _sum_by_cpu(deltas) == expected
    # rows of other CPUs, or in another order, are added up by CPU all the same
    odd = [{0: 3, 1: 4}, {}, {1: 10, 5: 2}, dict(reversed(list({0: 1, 1: 1}.items())))]
    assert _sum_by_cpu(odd) == {0: 4, 1: 15, 5: 2}


def test_since_boot_the_counts_are_as_read():
    s = _sample(1.0, {30: {0: 5, 1: 7}})
    assert Window(None, s).irq(30) == {0: 5, 1: 7}
