"""The findings' probe evidence over the sliding window is worked out without the probes'
queue rows (`FrameBuilder._judged_merge`): `pe.explain` gives every rule's finding the same
evidence with or without them, each kept sample is stripped once (the merge slides instead
of summing the window again), and the frames' findings are those of the whole merge."""

from __future__ import annotations

import dataclasses
import random

import pytest

from lbtune.diagnose import probe_evidence as pe
from lbtune.diagnose.finding import Evidence, Finding
from lbtune.diagnose.rules import RULES
from lbtune.observe.probes import ProbeSample, SlidingMerge, merge_samples
from lbtune.tui.frame import FrameBuilder
from lbtune.vocab import Level
from tests.conftest import KVM
from tests.tui.conftest import Script, tick
from tests.unit.observe.test_sliding_merge import _sample


def _findings(rng: random.Random) -> list[Finding]:
    """A finding of every rule, on a CPU, a port or a NIC."""
    out = []
    for r in RULES:
        for obj in (f"cpu {rng.randrange(3)}", "udp 10.0.0.1:53", "eth0"):
            out.append(Finding(r.id, f"{r.id} on {obj}", Level.FAIL, obj, "it dropped.",
                               rng.randint(1, 99), "packets", 1.0,
                               (Evidence("a counter", 5, 1.0, "/proc/net/snmp"),), ()))  # fmt: skip
    return out


@pytest.mark.parametrize("seed", range(6))
def test_explain_reads_no_queue_row(seed: int) -> None:
    rng = random.Random(seed)  # noqa: S311 (test data)
    findings = _findings(rng)
    for _ in range(20):
        s = merge_samples([_sample(rng) for _ in range(rng.randint(1, 4))])
        assert s.queues  # (there are rows to leave out)
        assert pe.explain(findings, s) == pe.explain(findings, dataclasses.replace(s, queues=()))


def _probes(rng: random.Random, seconds: float) -> ProbeSample:
    return dataclasses.replace(_sample(rng), seconds=seconds)


def test_each_kept_sample_is_stripped_once_and_the_merge_slides(monkeypatch) -> None:
    script = Script(KVM)
    builder = FrameBuilder(script.host)
    rng = random.Random(5)  # noqa: S311 (test data)
    cleared = []
    real_clear = SlidingMerge._clear

    def clear(self: SlidingMerge) -> None:
        cleared.append(len(self._parts))
        real_clear(self)

    monkeypatch.setattr(SlidingMerge, "_clear", clear)
    stripped: list[ProbeSample] = []
    real_replace = dataclasses.replace

    def counting_replace(obj, **changes):
        if isinstance(obj, ProbeSample) and changes == {"queues": ()}:
            stripped.append(obj)
        return real_replace(obj, **changes)

    monkeypatch.setattr("lbtune.tui.frame.replace", counting_replace)
    fed = []
    for _ in range(25):
        p = _probes(rng, 1.0)
        fed.append(p)
        builder.frame(tick(script.step(), p, "on"))
    assert [id(p) for p in stripped] == [id(p) for p in fed]  # each once, in order
    assert all(n == 0 for n in cleared)  # never summed anew once under way
    assert len(builder._bare) <= 11  # only the window's samples are kept stripped


def test_the_frames_findings_are_those_of_the_whole_merge(monkeypatch) -> None:
    """Over ticks that overflow an accept queue and drop on closed ports, with probe counts:
    the same findings, evidence and all, as with every row of the probes merged."""

    def run(whole: bool) -> list[tuple[object, ...]]:
        script = Script(KVM)
        builder = FrameBuilder(script.host)
        if whole:
            monkeypatch.setattr(builder, "_judged_merge", merge_samples)
        rng = random.Random(9)  # noqa: S311 (test data)
        out = []
        for i in range(15):
            step = script.step(snmp={"TcpExt.ListenOverflows": 50 * (i % 3),
                                     "Udp.NoPorts": 400 * (i % 2)},
                               listen={80: (129, 50 * (i % 3))},
                               softnet={0: (100_000, 20, 400), 1: (90_000, 0, 300)})  # fmt: skip
            frame = builder.frame(tick(step, _probes(rng, 1.0), "on"))
            out.append(tuple(v.finding for v in frame.findings))
        monkeypatch.undo()
        return out

    whole, bare = run(True), run(False)
    rules = {f.rule for frame in whole for f in frame}
    assert {"time-squeeze", "udp-no-port", "accept-queue-overflow"} <= rules, rules
    assert any("napi" in e.counter for frame in whole for f in frame for e in f.evidence)
    assert whole == bare
