"""observe/ owns the clock: a diagnose window and the monitor's stream, on a fake clock (no
sleeping), plus the sampler reading the configuration the rules declared at sampling time."""

from __future__ import annotations

import threading
from typing import Optional

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.observe.clock import SYSTEM_CLOCK
from lbtune.observe.config import read_config
from lbtune.observe.model import Sample, SnmpCounters
from lbtune.observe.sampler import Sampler, SampleSpec
from lbtune.observe.schedule import PROGRESS_STEP, stream, window
from tests.conftest import HOSTS, KVM, copy_host


class FakeClock:
    """Time moves only when someone waits (or a sample takes `cost` seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000.0 + self.now

    def wait(self, seconds: float, stop: Optional[threading.Event] = None) -> bool:
        self.waits.append(seconds)
        if stop is not None and stop.is_set():
            return True
        self.now += max(0.0, seconds)
        return False


class FakeSource:
    """A sample source whose counter counts the samples taken; each costs `cost` seconds."""

    def __init__(self, clock: FakeClock, cost: float = 0.0) -> None:
        self.clock = clock
        self.cost = cost
        self.taken: list[float] = []

    def take(self) -> Sample:
        self.clock.now += self.cost
        self.taken.append(self.clock.now)
        n = len(self.taken)
        return Sample(
            monotonic=self.clock.now, wallclock=self.clock.time(), uptime=None,
            snmp=SnmpCounters({"TcpExt.ListenOverflows": 10 * n}), softnet=(), softirqs=None,
            interrupts={}, nics={}, listen=(), udp=(), sockstat=None, conntrack=None,
            qdiscs=(), ipvs=None, missing={},
        )  # fmt: skip


def test_window_samples_twice_duration_apart_and_reports_progress() -> None:
    clock = FakeClock()
    src = FakeSource(clock)
    seen: list[tuple[float, float]] = []
    w = window(src, 2.0, lambda e, t: seen.append((e, t)))
    assert len(src.taken) == 2 and w.seconds == pytest.approx(2.0)
    assert w.snmp("TcpExt.ListenOverflows") == 10
    assert seen[0] == (0.0, 2.0) and seen[-1] == (2.0, 2.0)
    assert [e for e, _ in seen] == sorted(e for e, _ in seen)
    assert len(seen) == int(2.0 / PROGRESS_STEP) + 1  # every step while open, and the close
    assert all(0 < s <= PROGRESS_STEP for s in clock.waits)


def test_window_stops_early_when_asked() -> None:
    clock = FakeClock()
    stop = threading.Event()
    stop.set()
    w = window(FakeSource(clock), 10.0, stop=stop)
    assert w.seconds == 0.0 and clock.waits == [PROGRESS_STEP]


def test_window_needs_a_duration() -> None:
    with pytest.raises(BadInput):
        window(FakeSource(FakeClock()), 0)


def test_stream_gives_a_window_per_tick_on_a_fixed_grid() -> None:
    clock = FakeClock()
    src = FakeSource(clock, cost=0.1)  # each sample takes 0.1 s
    ticks = stream(src, 1.0)
    windows = [next(ticks) for _ in range(3)]
    # one sample per tick plus the first one; windows chain (each starts where the last ended)
    assert len(src.taken) == 4
    assert [w.before.monotonic for w in windows[1:]] == [w.after.monotonic for w in windows[:-1]]
    # ticks stay on the 1 s grid even though sampling costs time
    starts = [t - 0.1 for t in src.taken]
    assert [round(b - a, 6) for a, b in zip(starts, starts[1:])] == [1.0, 1.0, 1.0]
    assert all(w.snmp("TcpExt.ListenOverflows") == 10 for w in windows)


def test_stream_skips_ticks_a_slow_consumer_missed() -> None:
    clock = FakeClock()
    src = FakeSource(clock)
    ticks = stream(src, 1.0)
    first = next(ticks)
    clock.now += 3.5  # the consumer (a TUI redraw) took 3.5 s
    second = next(ticks)
    assert first.seconds == pytest.approx(1.0)
    assert second.seconds == pytest.approx(4.0)  # no burst of catch-up samples
    assert len(src.taken) == 3


def test_stream_ends_when_stopped() -> None:
    clock = FakeClock()
    stop = threading.Event()
    ticks = stream(FakeSource(clock), 0.5, stop)
    next(ticks)
    stop.set()
    assert list(ticks) == []


def test_stream_with_the_real_clock_and_a_stop_event() -> None:
    """The monitor's shape: a worker thread iterates, the UI thread sets stop."""
    src = Sampler(Host.open(str(HOSTS / KVM)))
    assert src.clock is SYSTEM_CLOCK
    stop = threading.Event()
    got = []

    def worker() -> None:
        for w in stream(src, 0.05, stop):
            got.append(w)
            if len(got) == 2:
                stop.set()

    t = threading.Thread(target=worker)
    t.start()
    t.join(5)
    assert not t.is_alive() and len(got) == 2


def test_sampler_reads_declared_configuration_at_sampling_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = copy_host(tmp_path, KVM)
    spec = SampleSpec(
        config=("/proc/sys/net/core/somaxconn", "/proc/sys/net/ipv4/conf/*/rp_filter")
    )
    sampler = Sampler(Host.open(str(root)), spec=spec)
    before = sampler.take()
    (root / "proc/sys/net/core/somaxconn").write_text("8192\n")
    after = sampler.take()
    assert before.config["/proc/sys/net/core/somaxconn"] == "4096"
    assert after.config["/proc/sys/net/core/somaxconn"] == "8192"
    conf = {p for p in after.config if p.endswith("/rp_filter")}
    assert "/proc/sys/net/ipv4/conf/all/rp_filter" in conf and len(conf) >= 3
    assert after.tcp_receivers is None  # not asked for


def test_a_monitor_sampler_reads_configuration_again_only_every_config_every(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Counters every take, limits at most every `config_every` seconds (the monitor)."""
    root = copy_host(tmp_path, KVM)
    clock = FakeClock()
    spec = SampleSpec(config=("/proc/sys/net/core/somaxconn",))
    sampler = Sampler(Host.open(str(root)), spec=spec, clock=clock, config_every=10.0)
    first = sampler.take()
    (root / "proc/sys/net/core/somaxconn").write_text("8192\n")
    (root / "proc/uptime").write_text("5000.00 100.00\n")
    clock.now += 9.0
    kept = sampler.take()
    assert kept.uptime == 5000.0  # the counters are new
    assert kept.config["/proc/sys/net/core/somaxconn"] == "4096"  # the limit is not yet
    assert kept.config is first.config
    clock.now += 1.0
    again = sampler.take()
    assert again.config["/proc/sys/net/core/somaxconn"] == "8192"


def test_read_config_marks_read_only_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = copy_host(tmp_path, KVM)
    p = root / "proc/sys/net/core/rmem_max"
    p.chmod(0o444)
    values = read_config(Host.open(str(root)).fs, ["/proc/sys/net/core/rmem_max",
                                                  "/proc/sys/net/core/nope"])  # fmt: skip
    assert set(values.values) == {"/proc/sys/net/core/rmem_max"}
    assert values.readonly == {"/proc/sys/net/core/rmem_max"}


def test_window_keeps_a_sample_every_tick_for_per_second_series() -> None:
    clock = FakeClock()
    src = FakeSource(clock)
    seen: list[float] = []
    w = window(src, 3.0, lambda e, t: seen.append(e), tick=1.0)
    # the two ends and the ticks at 1 s and 2 s, on the grid from the first sample
    assert [round(t - src.taken[0], 6) for t in src.taken] == [0.0, 1.0, 2.0, 3.0]
    assert len(w.ticks) == 2 and w.seconds == pytest.approx(3.0)
    steps = w.steps()
    assert [s.seconds for s in steps] == [1.0, 1.0, 1.0]
    assert [s.snmp("TcpExt.ListenOverflows") for s in steps] == [10, 10, 10]
    assert sum(s.snmp("TcpExt.ListenOverflows") for s in steps) == w.snmp(
        "TcpExt.ListenOverflows"
    )
    assert seen[-1] == 3.0 and seen == sorted(seen)  # progress as without ticks


def test_window_ticks_skip_what_a_slow_sample_missed_and_leave_out_a_last_half_tick() -> None:
    clock = FakeClock()
    src = FakeSource(clock, cost=1.5)  # every sample takes 1.5 s
    w = window(src, 4.2, tick=1.0)
    ends = [round(t - src.taken[0], 6) for t in src.taken]
    # ticks due at 1 s (taken, ends at 2.5 s: the 2 s tick is skipped), then 3 s (ends at
    # 4.5 s: the window is over), the closing sample: no burst of catch-up samples
    assert ends == [0.0, 2.5, 4.5, 6.0] and len(w.ticks) == 2
    clock2 = FakeClock()
    src2 = FakeSource(clock2)
    w2 = window(src2, 2.4, tick=1.0)
    assert len(w2.ticks) == 1  # 2 s is within half a tick of the end (2.4 s)


def test_a_capture_window_has_no_steps() -> None:
    clock = FakeClock()
    w = window(FakeSource(clock), 1.0)
    assert w.ticks == () and len(w.steps()) == 1
    assert type(w)(None, w.after).steps() == []
