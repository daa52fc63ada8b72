"""Where the monitor's data comes from: the live host, a recording, or a recorded tree.

Every source is a `Feed`: it describes the host (`MonitorHost`: name, kernel, topology,
NICs) and yields a `Tick` per refresh, each a `Window` of counter samples (from
`lbtune.observe.schedule.stream`, the same clock and sampler as `diagnose`) and what the
probes counted over it. The app iterates a feed in a worker thread, so nothing here may
touch a widget; controls (interval, probes on/off) are plain attributes the UI sets and the
feed picks up at its next tick. Nothing here imports textual.

* `LiveFeed`   -- the running host (or `--netns`): counters every interval, and the drops
  and napi probes loaded in the background when root and bcc allow (`BackgroundProbes`);
  `--record` writes every tick to a recording as it goes.
* `ReplayFeed` -- a recording (`--replay FILE`), played at the chosen interval.
* `TreeFeed`   -- `--root` on a capture or host tree: one window, counters since boot.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import IO, Iterator, Mapping, Optional, Protocol, Sequence

from lbtune.diagnose.probe_evidence import DIAGNOSE_PROBES
from lbtune.diagnose.rules import RULES, Rule, sample_spec
from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.net.nic import Nic
from lbtune.host.trace.bpf import probe_problem
from lbtune.observe.clock import SYSTEM_CLOCK, Clock
from lbtune.observe.model import Sample
from lbtune.observe.probe_loader import BackgroundProbes
from lbtune.observe.probes import ProbeSample
from lbtune.observe.recording import RecordingHeader, RecordingWriter, read_recording
from lbtune.observe.sampler import Sampler
from lbtune.observe.schedule import capture_window, stream
from lbtune.observe.window import Window

# Probe states a tick reports (the header shows them).
PROBES_OFF = "off"
PROBES_LOADING = "loading"
PROBES_ON = "on"
PROBES_UNAVAILABLE = "unavailable"
PROBES_FAILED = "failed"
PROBES_RECORDED = "recorded"  # a replay: what the recording holds

# Seconds between two reads of the sysctls and sysfs limits the rules judge by: counters
# change every tick, limits when an operator changes them (docs/monitor.md says so).
CONFIG_EVERY = 10.0
# Seconds the SYN queues are read (walking the connection table) after a SYN overflow
# counter last moved (`Sampler.syn_walk_hold`): the only findings that name a listener by
# its SYN queue need a SYN overflow in their window, which is at most the judge window (10 s,
# tui/frame.py JUDGE_SECONDS) plus one refresh (at most 10 s). Beyond that the queues are
# not read, and a busy host's connection table is not walked every second.
SYN_WALK_HOLD = 30.0


def monitor_rules() -> list[Rule]:
    """The rules the monitor runs each tick: all but those that walk every TCP connection
    (`receivers`), too costly to repeat every second on a busy host (`diagnose` runs them)."""
    return [r for r in RULES if not r.receivers]


@dataclass(frozen=True)
class MonitorHost:
    """What the panels and rules know about the host besides its counters."""

    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    topology: Optional[CpuTopology]
    nics: Mapping[str, Nic]
    source: str  # "live", "replay FILE", "capture DIR"


@dataclass(frozen=True)
class Tick:
    """One refresh: the counters' window and the probes' counts over (about) the same time."""

    window: Window
    probes: Optional[ProbeSample]
    probe_state: str  # PROBES_* constant
    probe_note: str = ""  # why the probes are not on (one line), or their notes
    interval: float = 1.0
    final: bool = False  # no tick follows (a replay's end, a recorded tree)


class Feed(Protocol):
    """A source of ticks for the monitor (see the module docstring)."""

    host: MonitorHost
    interval: float
    want_probes: bool

    def ticks(self, stop: threading.Event) -> Iterator[Tick]: ...

    def set_interval(self, seconds: float) -> None: ...

    def wake(self) -> None: ...

    def close(self) -> None: ...


def describe_host(host: Host, ifaces: Optional[Sequence[str]], source: str) -> MonitorHost:
    try:
        inv = discover_host(host, only=list(ifaces) if ifaces else None)
        topology: Optional[CpuTopology] = inv.cpus
        nics = {n.name: n for n in inv.nics}
    except Exception:  # a namespace or a partial tree: the panels that need them say so
        topology, nics = None, {}
    return MonitorHost(
        hostname=host.fs.read("/proc/sys/kernel/hostname"),
        kernel=host.fs.read("/proc/sys/kernel/osrelease"),
        netns=host.netns,
        topology=topology,
        nics=nics,
        source=source,
    )


@dataclass
class LiveFeed:
    """The running host: a window every `interval` seconds; probes when possible."""

    sys_host: Host
    interval: float = 1.0
    want_probes: bool = True
    ifaces: Optional[Sequence[str]] = None
    record: Optional[IO[str]] = None
    clock: Clock = SYSTEM_CLOCK
    host: MonitorHost = field(init=False)
    _loader: Optional[BackgroundProbes] = field(default=None, init=False)
    _writer: Optional[RecordingWriter] = field(default=None, init=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        self.sampler = Sampler(self.sys_host, self.ifaces, sample_spec(monitor_rules()),
                               self.clock, config_every=CONFIG_EVERY,
                               syn_walk_hold=SYN_WALK_HOLD, keep_files=True)  # fmt: skip
        self.host = describe_host(self.sys_host, self.ifaces, "live")
        if self.record is not None:
            h = self.host
            header = RecordingHeader(
                h.hostname, h.kernel, h.netns, self.interval, h.topology, dict(h.nics),
                self.clock.time(),
            )  # fmt: skip
            self._writer = RecordingWriter(self.record, header)

    def set_interval(self, seconds: float) -> None:
        """A new interval, from the next tick on (the stream restarts on it)."""
        self.interval = seconds
        self._wake.set()

    def _probe_state(self) -> tuple[str, str]:
        if not self.want_probes:
            return PROBES_OFF, "press b to load the probes"
        if self._loader is None:
            problem = probe_problem()
            if problem is not None:
                return PROBES_UNAVAILABLE, f"{problem.missing}: {problem.fix}"
            self._loader = BackgroundProbes.start(self.sys_host, DIAGNOSE_PROBES, self.ifaces)
        if self._loader.failure is not None:
            return PROBES_FAILED, self._loader.failure
        if self._loader.loading:
            return PROBES_LOADING, "compiling the probes (bcc)"
        return PROBES_ON, ""

    def _sync_probes(self) -> tuple[str, str, Optional[ProbeSample]]:
        if not self.want_probes and self._loader is not None:
            loader, self._loader = self._loader, None
            # Closing waits for a compile in progress: not on the sampling thread.
            threading.Thread(target=loader.close, name="lbtune-probe-close", daemon=True).start()
        state, note = self._probe_state()
        sample = self._loader.read() if state == PROBES_ON and self._loader else None
        if sample is not None and sample.notes:
            note = "; ".join(sample.notes)
        return state, note, sample

    def ticks(self, stop: threading.Event) -> Iterator[Tick]:
        """Ticks until `stop` is set (then call `wake()` so a wait ends at once)."""
        self._probe_state()  # start loading at once: the first window runs meanwhile
        while not stop.is_set():
            self._wake.clear()
            for win in stream(self.sampler, self.interval, self._wake):
                state, note, probes = self._sync_probes()
                if self._writer is not None:
                    self._writer.write(win.after, probes)
                yield Tick(win, probes, state, note, self.interval)
                if stop.is_set() or self._wake.is_set():
                    break

    def wake(self) -> None:
        """End the current wait (stop, or a new interval)."""
        self._wake.set()

    def close(self) -> None:
        """Detach the probes (waiting for a compile in progress) and close the recording."""
        loader, self._loader = self._loader, None
        if loader is not None:
            loader.close()
        if self.record is not None:
            self.record.close()


@dataclass
class ReplayFeed:
    """A recording (`lbtune monitor --record`), one tick per `interval` seconds."""

    stream_in: IO[str]
    name: str
    interval: float = 0.0  # 0: the recording's own interval
    clock: Clock = SYSTEM_CLOCK
    want_probes: bool = True
    host: MonitorHost = field(init=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        header, self._ticks = read_recording(self.stream_in, self.name)
        self.interval = self.interval or header.interval
        self.host = MonitorHost(
            header.hostname, header.kernel, header.netns, header.topology, dict(header.nics),
            f"replay {self.name}",
        )  # fmt: skip

    def set_interval(self, seconds: float) -> None:
        self.interval = seconds
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def ticks(self, stop: threading.Event) -> Iterator[Tick]:
        previous: Optional[Sample] = None
        pending: Optional[Tick] = None
        for rec in self._ticks:
            if previous is not None:
                probes = rec.probes if self.want_probes else None
                state = PROBES_RECORDED if probes is not None else PROBES_OFF
                tick = Tick(Window(previous, rec.sample), probes, state, "", self.interval)
                if pending is not None:
                    yield pending
                    self.clock.wait(self.interval, self._wake)
                    self._wake.clear()
                    if stop.is_set():
                        return
                pending = tick
            previous = rec.sample
        if pending is not None:
            yield Tick(pending.window, pending.probes, pending.probe_state, pending.probe_note,
                       pending.interval, final=True)  # fmt: skip

    def close(self) -> None:
        self.stream_in.close()


@dataclass
class TreeFeed:
    """A recorded host tree (`--root`): one window of counters since boot."""

    sys_host: Host
    interval: float = 1.0
    want_probes: bool = False
    host: MonitorHost = field(init=False)

    def __post_init__(self) -> None:
        self.host = describe_host(self.sys_host, None, f"capture {self.sys_host.fs.root}")

    def set_interval(self, seconds: float) -> None:
        self.interval = seconds

    def wake(self) -> None:
        pass

    def ticks(self, stop: threading.Event) -> Iterator[Tick]:
        sampler = Sampler(self.sys_host, None, sample_spec(monitor_rules()))
        win = capture_window(sampler)
        note = "a recorded tree: counters since boot, no probes"
        yield Tick(win, None, PROBES_OFF, note, self.interval, final=True)

    def close(self) -> None:
        pass
