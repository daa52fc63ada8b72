"""`SlidingMerge.merged(parts)` is `merge_samples(parts)` for every window the monitor asks
for: one that slides a tick at a time, grows, shrinks, jumps to another run of samples,
holds the same sample twice, and queues and NAPI instances that come and go, change order,
repeat within a sample, and carry size histograms (of another length: summed as
merge_samples sums them)."""

from __future__ import annotations

import random
from typing import Optional

import pytest

from lbtune.observe.probes import (
    DropCount,
    NapiCount,
    PortCount,
    ProbeCost,
    ProbeSample,
    QueueCount,
    SlidingMerge,
    merge_samples,
)


def _sample(rng: random.Random, sizes_len: Optional[int] = 4) -> ProbeSample:
    queues = []
    for dev in ("eth0", "eth1"):
        for q in rng.sample(range(6), rng.randint(0, 6)):  # some queues, in any order
            sizes = None
            if sizes_len is not None and rng.random() < 0.5:
                sizes = tuple(rng.randint(0, 9) for _ in range(sizes_len))
            queues.append(QueueCount(dev, rng.choice(("rx", "tx")), q, rng.randint(0, 10**6),
                                     rng.randint(0, 10**9), sizes, "probe"))  # fmt: skip
    if queues and rng.random() < 0.2:
        queues.append(queues[0])  # the same row twice in one sample
    napi = [
        NapiCount(dev, inst, f"0xffff{inst:04x}", rng.choice((None, inst)), cpu,
                  rng.randint(0, 999), rng.randint(0, 9999), rng.randint(0, 9),
                  rng.randint(0, 9), rng.choice((64, 300)))
        for dev in ("eth0",)
        for inst in rng.sample(range(4), rng.randint(0, 4))
        for cpu in rng.sample(range(3), rng.randint(1, 3))
    ]
    drops = tuple(
        DropCount(r, 2, f"f+0x{i}", "f", "IPv4", rng.randint(1, 50))
        for i, r in enumerate(rng.sample(("NO_SOCKET", "TCP_LISTEN_OVERFLOW", "QDISC_DROP"), 2))
    )
    return ProbeSample(
        ("drops", "queues", "napi"), rng.choice((0.5, 1.0, 1.1)), drops, rng.randint(0, 2),
        "host", tuple(queues), tuple(napi), rng.randint(0, 2),
        (ProbeCost("drops", rng.randint(1, 99), rng.randint(1, 9999), None, 0.0, 1.0),),
        tuple(rng.sample(("a note", "another"), rng.randint(0, 1))),
        (PortCount("udp", 4, "10.0.0.1", 53, rng.randint(1, 9)),),
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_a_sliding_window_merges_as_merge_samples_does(seed):
    rng = random.Random(seed)  # noqa: S311 (test data)
    kept = [_sample(rng) for _ in range(60)]
    kept[30] = kept[29]  # a replayed tick whose counts did not change: the same object
    sliding = SlidingMerge()
    lo, hi = 0, 1
    for _ in range(200):
        move = rng.random()
        if move < 0.6:  # the monitor's tick: the window slides by one (or grows at first)
            hi = min(hi + 1, len(kept))
            lo = max(lo, hi - rng.choice((10, 10, 10, 3)))
        elif move < 0.7:
            lo = min(lo + 2, hi - 1)  # shrinks from the start
        elif move < 0.8:
            lo, hi = sorted(rng.sample(range(len(kept) + 1), 2))  # another run (a report)
        parts = kept[lo:hi]
        if not parts:
            continue
        assert sliding.merged(parts) == merge_samples(parts), (lo, hi)


def test_histograms_of_another_length_are_summed_as_merge_samples_does():
    rng = random.Random(7)  # noqa: S311 (test data)
    parts = [_sample(rng, 4), _sample(rng, 6), _sample(rng, 4)]
    sliding = SlidingMerge()
    for n in range(1, 4):
        assert sliding.merged(parts[:n]) == merge_samples(parts[:n])
    assert sliding.merged(parts[1:]) == merge_samples(parts[1:])


def test_no_parts_is_an_error_as_for_merge_samples():
    with pytest.raises(ValueError):
        SlidingMerge().merged([])
