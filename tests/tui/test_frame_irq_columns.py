"""The CPUs panel's share of NIC queue interrupts, from the per-CPU sums of the queue IRQs'
rows (`FrameBuilder._irq_cpu`), is what adding up each IRQ's counts over the window gives
(`_sum_by_cpu` of `Window.irq`): on the 48-CPU fixture with IRQs that move, counts that
go down (a reset), a CPU that goes offline, an IRQ that goes, a row in another order,
and since boot."""

from __future__ import annotations

import dataclasses
import random

import pytest

from lbtune.host.kernel.interrupts import CpuCounts
from lbtune.observe.model import Sample
from lbtune.observe.window import Window
from lbtune.tui.frame import FrameBuilder, _sum_by_cpu
from tests.conftest import DELL
from tests.tui.conftest import Script


def _moved(rng: random.Random, s: Sample, irqs: tuple[int, ...], what: str) -> Sample:
    lines = dict(s.interrupts)
    for irq in irqs:
        line = lines.get(irq)
        if line is None:
            continue
        counts = {c: n + rng.choice((0, 0, rng.randrange(10**4))) for c, n in line.counts.items()}
        lines[irq] = dataclasses.replace(line, counts=CpuCounts.of(counts))
    one = rng.choice(irqs)
    if what == "reset":
        reset = CpuCounts.of(dict.fromkeys(lines[one].counts, 3))
        lines[one] = dataclasses.replace(lines[one], counts=reset)
    elif what == "cpu offline":
        lines = {i: dataclasses.replace(v, counts=CpuCounts.of(
                     {c: n for c, n in v.counts.items() if c != 5}))
                 for i, v in lines.items()}  # fmt: skip
    elif what == "irq gone":
        del lines[one]
    elif what == "other order":
        lines[one] = dataclasses.replace(
            lines[one], counts=CpuCounts.of(dict(reversed(list(lines[one].counts.items()))))
        )
    return dataclasses.replace(s, monotonic=s.monotonic + 1, interrupts=lines)


@pytest.mark.parametrize("what", ["moves", "reset", "cpu offline", "irq gone", "other order"])
def test_irq_shares_from_column_sums_are_those_of_each_irq(what):
    script = Script(DELL)
    builder = FrameBuilder(script.host)
    irqs = builder._irqs
    assert len(irqs) > 50  # (the fixture's queue IRQs: the rows the sums are for)
    rng = random.Random(what)  # noqa: S311 (test data)
    samples = [script.sample]
    for i in range(6):
        samples.append(_moved(rng, samples[-1], irqs, what if i == 3 else "moves"))
    assert builder._irq_cpu(Window(None, samples[0])) == _sum_by_cpu(
        [Window(None, samples[0]).irq(i) for i in irqs]
    )
    for a, b in zip(samples, samples[1:]):
        w = Window(a, b)
        expected = _sum_by_cpu([Window(a, b).irq(i) for i in irqs])
        assert builder._irq_cpu(w) == expected
        assert sum(expected.values()) > 0


def test_each_sample_is_summed_once(monkeypatch):
    """A tick sums the newest sample's rows; the older one's are those kept from the tick
    before (the two kept must be the window's two, whichever is asked for first)."""
    from lbtune.tui import frame as frame_mod

    script = Script(DELL)
    builder = FrameBuilder(script.host)
    rng = random.Random(7)  # noqa: S311 (test data)
    samples = [script.sample]
    for _ in range(6):
        samples.append(_moved(rng, samples[-1], builder._irqs, "moves"))
    summed: list[Sample] = []
    real = frame_mod._columns

    def columns(sample, irqs):
        summed.append(sample)
        return real(sample, irqs)

    monkeypatch.setattr(frame_mod, "_columns", columns)
    for a, b in zip(samples, samples[1:]):
        builder._irq_cpu(Window(a, b))
    assert [id(s) for s in summed] == [id(s) for s in samples]
