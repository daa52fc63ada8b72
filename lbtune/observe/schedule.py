"""When samples are taken: one window, a stream of windows, or recorded captures.

`window(source, duration, progress, tick=...)` is a diagnosis: a sample, `duration`
seconds of waiting (with progress reports, and a sample every `tick` seconds kept for the
report's per-second series), a sample. `stream(source, interval)` is the monitor: a
`Window` per tick, each from the previous tick's sample to this one, for as long as the
consumer iterates (a TUI runs it in a worker thread and sets `stop` to end it). Both wait on
the source's `Clock`, so tests run them with a fake clock. `capture_window` reads recorded
trees instead: one capture is a window since boot, two captures of the same boot are the
window between them.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterator, Optional, Protocol

from lbtune.errors import BadInput
from lbtune.host.identity import mismatch, tree_identity
from lbtune.observe.clock import Clock
from lbtune.observe.model import Sample
from lbtune.observe.sampler import Sampler
from lbtune.observe.window import Window

Progress = Callable[[float, float], None]  # (elapsed, total) seconds
PROGRESS_STEP = 0.25  # seconds between progress reports of a window
MAX_TICKS = 120  # samples a diagnose window keeps in between at most (see tick_for)
_EPSILON = 1e-6  # seconds: closer than this to a due time is on time


class SampleSource(Protocol):
    """What the schedules need: a sample on demand and the clock to wait on (a `Sampler`)."""

    @property
    def clock(self) -> Clock: ...

    def take(self) -> Sample: ...


def tick_for(duration: float) -> float:
    """The tick of a diagnose window: a second, or longer for a long window so that it
    keeps at most MAX_TICKS samples."""
    return max(1.0, duration / MAX_TICKS)


def window(
    source: SampleSource,
    duration: float,
    progress: Optional[Progress] = None,
    stop: Optional[threading.Event] = None,
    tick: Optional[float] = None,
) -> Window:
    """Two samples `duration` seconds apart, and with `tick` one every `tick` seconds in
    between (`Window.ticks`, for per-second series), on a fixed grid from the first.

    `progress(elapsed, duration)` is called when the window opens, every PROGRESS_STEP
    seconds, and once with elapsed == duration when it closes. Setting `stop` closes the
    window early (the window is then shorter, and says so in its `seconds`). A tick closer
    than half a tick to the end is left out: the closing sample follows.
    """
    if duration <= 0:
        raise BadInput("--duration must be more than 0 seconds")
    if tick is not None and tick <= 0:
        raise BadInput("the sampling tick must be more than 0 seconds")
    clock = source.clock
    before = source.take()
    start = clock.monotonic()
    ticks: list[Sample] = []
    due = tick if tick is not None else duration
    last = duration - (tick / 2 if tick is not None else 0.0)
    while True:
        elapsed = clock.monotonic() - start
        if elapsed >= duration - _EPSILON:  # a wait shorter than a float step never ends
            break
        if tick is not None and elapsed >= due - _EPSILON and due <= last:
            ticks.append(source.take())
            now = clock.monotonic() - start
            while due <= now:  # a slow sample skips the ticks it missed
                due += tick
            continue
        if progress is not None:
            progress(elapsed, duration)
        wake = due if tick is not None and due <= last else duration
        if clock.wait(min(PROGRESS_STEP, wake - elapsed), stop):
            break
    after = source.take()
    if progress is not None:
        progress(duration, duration)
    return Window(before, after, tuple(ticks))


def stream(
    source: SampleSource, interval: float, stop: Optional[threading.Event] = None
) -> Iterator[Window]:
    """A `Window` every `interval` seconds, from one tick's sample to the next, until `stop`
    is set (or the consumer stops iterating).

    Ticks are kept on a fixed grid: a slow sample or a slow consumer skips the ticks it
    missed instead of sampling in a burst to catch up, so every window is at least
    `interval` long and `Window.seconds` says how long it really was.
    """
    if interval <= 0:
        raise BadInput("the sampling interval must be more than 0 seconds")
    clock = source.clock
    due = clock.monotonic() + interval  # the grid starts when the first sample does
    previous = source.take()
    while True:
        if clock.wait(due - clock.monotonic(), stop):
            return
        current = source.take()
        yield Window(previous, current)
        previous = current
        now = clock.monotonic()
        due += interval
        if due <= now:
            missed = int((now - due) // interval) + 1
            due += missed * interval


def capture_window(sampler: Sampler, baseline: Optional[Sampler] = None) -> Window:
    """The window of a recorded tree: since boot, or since an earlier capture `baseline`.

    BadInput when the two captures cannot be compared: another machine, host, network
    namespace or boot, no uptime in either, or a baseline that is not older.
    """
    after = sampler.take()
    if baseline is None:
        return Window(None, after)
    why = mismatch(tree_identity(baseline.host.fs), tree_identity(sampler.host.fs))
    if why is not None:
        raise BadInput(f"--baseline cannot be compared with the capture: {why}")
    before = baseline.take()
    for which, sample in (("baseline capture", before), ("capture", after)):
        if sample.uptime is None:
            why = sample.missing.get("uptime", "no /proc/uptime")
            raise BadInput(f"the {which} has no readable /proc/uptime ({why}): cannot compare")
    assert before.uptime is not None and after.uptime is not None
    if after.uptime <= before.uptime:
        raise BadInput(
            f"the baseline capture (uptime {before.uptime:.0f} s) is not older than the "
            f"capture (uptime {after.uptime:.0f} s) of the same boot"
        )
    return Window(before, after)
