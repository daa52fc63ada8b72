"""The collector as the monitor runs it (`lbtune.tui.app.Collections`): no passes by
allocation counts while the monitor runs, a full pass a minute after the start and then every
GC_EVERY seconds (a cycle made meanwhile is freed then, not leaked), and the collector as it
was before once the block ends."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from lbtune.tui.app import GC_EVERY, GC_SETTLE, Collections, FrameReady, MonitorApp
from tests.conftest import KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Node:
    """A container that can be in a reference cycle and be watched with a weak reference."""

    def __init__(self) -> None:
        self.other: Any = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def full_passes():
    """The collector's passes of the oldest generation while the test runs."""
    seen: list[int] = []

    def cb(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(info["collected"])

    gc.callbacks.append(cb)
    try:
        yield seen
    finally:
        gc.callbacks.remove(cb)


def test_no_pass_by_allocation_counts_while_the_monitor_runs(full_passes):
    clock = Clock()
    with Collections(clock) as c:
        passes_at_start = len(full_passes)
        kept = [[i] for i in range(200_000)]  # kept containers: Python's rule would pass
        gone = cycle()
        gen0_before = gc.get_count()[0]
        for _ in range(50_000):
            cycle()  # garbage in cycles: 100,000 containers no pass frees yet
        assert gc.get_count()[0] > gen0_before + 50_000  # counted, and no pass started
        assert gone() is not None
        assert len(full_passes) == passes_at_start
        assert c.passes == 0
        del kept


def test_a_full_pass_after_settle_then_every_period_frees_what_was_left_in_cycles(full_passes):
    clock = Clock()
    with Collections(clock, settle=GC_SETTLE, every=GC_EVERY) as c:
        start = len(full_passes)
        gone = cycle()
        clock.now += GC_SETTLE - 1
        c.tick()
        assert gone() is not None and c.passes == 0  # not due yet
        clock.now += 1
        c.tick()
        assert gone() is None and c.passes == 1  # the pass a minute after the start
        assert len(full_passes) == start + 1 and full_passes[-1] >= 2
        later = cycle()
        clock.now += GC_EVERY - 1
        c.tick()
        c.tick()
        assert later() is not None and c.passes == 1
        clock.now += 1
        c.tick()
        assert later() is None and c.passes == 2
        c.tick()
        assert c.passes == 2  # one pass a period, however many frames


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_as_it_was_after_the_block(enabled):
    was_enabled, was_threshold = gc.isenabled(), gc.get_threshold()
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(RuntimeError), Collections(Clock()):
            assert not gc.isenabled()
            assert gc.get_freeze_count() > 0  # the start-up's objects out of the passes
            raise RuntimeError("the app failed")
        assert gc.isenabled() is enabled
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == was_threshold
    finally:
        (gc.enable if was_enabled else gc.disable)()


def test_a_tick_outside_the_block_does_nothing(full_passes):
    clock = Clock()
    c = Collections(clock, settle=0.0)
    c.tick()
    with c:
        pass  # (entering runs one pass of its own: the start-up's garbage, before freezing)
    after = len(full_passes)
    clock.now += GC_EVERY * 2
    c.tick()
    assert c.passes == 0 and len(full_passes) == after


async def test_the_monitor_runs_the_pass_when_a_frame_comes():
    clock = Clock()
    script = Script(KVM)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    messages: list[Any] = []

    async def frame(pilot: Any, n: int) -> None:
        feed.push(tick(script.step()))
        for _ in range(200):
            if app.frames == n:
                return
            await pilot.pause(0.02)
        raise AssertionError(f"frame {n} not shown")

    with Collections(clock, settle=0.0, every=60.0) as c:
        app._collections = c  # what `MonitorApp.run` sets (run_test does not call it)
        async with app.run_test(size=(140, 48), message_hook=messages.append) as pilot:
            await frame(pilot, 1)
            assert c.passes == 1
            await frame(pilot, 2)
            assert c.passes == 1  # the next is a minute away
            clock.now += 60
            await frame(pilot, 3)
            assert c.passes == 2
    assert sum(isinstance(m, FrameReady) for m in messages) == 3
