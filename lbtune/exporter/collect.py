"""The exporter's engine: sample, judge, map to series, render the Prometheus text.

`Exporter` owns one `Sampler` (the sampler `diagnose` and the monitor use, with the
monitor's rules and its configuration cadence), the probes when asked for
(`BackgroundProbes`, as the monitor loads them), the profiles to verify and the counter
`Totals`. Two ways to drive it, one code path:

* `scrape()` -- an HTTP scrape: a sample now, the window since the previous scrape, rules,
  series, text. Scrapes closer together than `min_interval` get the previous text (a client
  hammering /metrics cannot make lbtune sample faster), and one lock serialises them.
* `collect(window)` -- the textfile loop: windows from `observe.schedule.stream`.

A recorded tree (`--root`) is read as one capture (counters since boot), like `monitor
--root`. The mapping itself is `series.py` (pure); rendering uses `prometheus_client`'s
exposition writer, imported only here so that lbtune runs without it.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from math import copysign
from typing import Callable, Iterator, Optional, Sequence, cast

from lbtune.diagnose import probe_evidence as pe
from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Finding
from lbtune.diagnose.nicsettings import NicSettings, read_nic_settings
from lbtune.diagnose.rules import RULES, Rule, run_rules, sample_spec
from lbtune.errors import BadInput, LbtuneError, NeedsPrivilege
from lbtune.exporter.series import (
    COUNTER_FAMILIES,
    Collection,
    Family,
    Options,
    ProfileCheck,
    Totals,
    counter_deltas,
    families,
)
from lbtune.host.inventory import discover_host
from lbtune.host.ipvs.table import ipvs_loaded, ipvs_of
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.net.nic import Nic
from lbtune.host.runtime import Runtime
from lbtune.host.trace.bpf import probe_problem
from lbtune.ipvs.status import ServiceRow, service_row
from lbtune.observe.clock import SYSTEM_CLOCK, Clock
from lbtune.observe.model import Sample
from lbtune.observe.probe_loader import BackgroundProbes
from lbtune.observe.probes import ProbeSample
from lbtune.observe.sampler import Sampler
from lbtune.observe.schedule import capture_window
from lbtune.observe.window import Window

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
CONFIG_EVERY = 10.0  # seconds between reads of the limits the rules judge by (as the monitor)
PROBES = ("drops",)  # kernel drop reasons; napi would add per-queue series nobody asked for
INSTALL_HINT = "pip install 'lbtune[exporter]' (Debian: apt install python3-prometheus-client)"
# A source whose kernel file is absent is one this host does not have (not a director, no
# nf_conntrack): no lbtune_source_up series, rather than a 0 that reads as a failure.
SOURCE_FILES = {"ipvs": "/proc/net/ip_vs_stats", "conntrack": "/proc/net/stat/nf_conntrack"}


def require_client() -> None:
    """NeedsPrivilege (exit 3, one line) when prometheus_client is not importable."""
    try:  # an optional dependency (lbtune[exporter]): imported only by the exporter's paths
        import prometheus_client  # noqa: F401
    except ImportError:
        raise NeedsPrivilege(f"the exporter needs prometheus_client: {INSTALL_HINT}") from None


def exporter_rules() -> list[Rule]:
    """The monitor's rules: all but those that walk every TCP connection (`receivers`),
    too costly to repeat on every scrape."""
    return [r for r in RULES if not r.receivers]


# Names the text format takes as they are (prometheus_client's legacy character sets).
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _plain(f: Family) -> bool:
    """`f` has names the text format writes unescaped, and a counter's name ends in _total."""
    return (
        _METRIC_NAME.fullmatch(f.name) is not None
        and all(_LABEL_NAME.fullmatch(n) for n in f.labels)
        and (f.kind != "counter" or f.name.endswith("_total"))
        and len(set(f.labels)) == len(f.labels)
    )


def _label_value(v: str) -> str:
    if "\\" not in v and "\n" not in v and '"' not in v:
        return v  # (most values: nothing to escape)
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


def render(fams: Sequence[Family]) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of `fams`, byte for byte what
    prometheus_client's generate_latest writes for them (tests/unit/exporter holds the two
    equal), written here without building its metric objects on every scrape: that was a
    sixth of a scrape's CPU. Families with names it would escape go through it."""
    if not all(_plain(f) for f in fams):
        return _render_with_client(fams)
    # Imported here: prometheus_client is optional (see require_client).
    from prometheus_client import utils

    go = cast(Callable[[float], str], utils.floatToGoString)  # its way of writing a float
    # The values of this collection as written, by value: small counts repeat (zero, the
    # commonest, is written here: 0.0 and -0.0 would be one key of two texts).
    written: dict[float, str] = {}
    out: list[str] = []
    add = out.append
    for f in fams:
        name = f.name
        kind = "counter" if f.kind == "counter" else "gauge"
        doc = f.help.replace("\\", r"\\").replace("\n", r"\n")
        add(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        order = sorted(range(len(f.labels)), key=lambda i: f.labels[i])  # by label name
        one = f'{name}{{{f.labels[0]}="' if len(order) == 1 else ""
        for values, value in f.samples:
            if not value:  # (NaN is true)
                number = "0.0" if copysign(1.0, value) > 0 else "-0.0"
            else:
                known = written.get(value)
                number = known if known is not None else written.setdefault(value, go(value))
            if one:
                v = values[0]
                if "\\" in v or "\n" in v or '"' in v:
                    v = _label_value(v)
                add(f'{one}{v}"}} {number}\n')
            elif order:
                text = ",".join(f'{f.labels[i]}="{_label_value(values[i])}"' for i in order)
                add(f"{name}{{{text}}} {number}\n")
            else:
                add(f"{name} {number}\n")
    return "".join(out).encode("utf-8")


def _render_with_client(fams: Sequence[Family]) -> bytes:
    """render() through prometheus_client's own objects (any name it must escape)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import Collector, CollectorRegistry

    class _Once(Collector):
        def collect(self) -> Iterator[Metric]:
            for f in fams:
                m: Metric
                if f.kind == "counter":
                    m = CounterMetricFamily(f.name[: -len("_total")], f.help,
                                            labels=list(f.labels))  # fmt: skip
                else:
                    m = GaugeMetricFamily(f.name, f.help, labels=list(f.labels))
                for labels, value in f.samples:
                    m.add_metric(list(labels), value)
                yield m

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return bytes(generate_latest(registry))


@dataclass(frozen=True)
class Result:
    text: bytes
    series: int
    seconds: float  # how long the collection took
    up: bool


class Exporter:
    """See the module docstring. `profiles` are verified every `verify_every` seconds."""

    def __init__(
        self,
        runtime: Runtime,
        options: Optional[Options] = None,
        profiles: Sequence[str] = (),
        iface: Optional[str] = None,
        probes: bool = False,
        min_interval: float = 1.0,
        verify_every: float = 60.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.runtime = runtime
        self.host = runtime.host()
        self.options = options or Options()
        self.profiles = tuple(profiles)
        self.iface = iface
        self.min_interval = min_interval
        self.verify_every = verify_every
        self.clock = clock
        # The SYN queues (a walk of the whole connection table) only at a scrape whose window
        # saw a SYN overflow counter move, the only windows whose rules read them: every
        # scrape is a TCP connection, so the sampler's Tcp.InSegs gate never closes. The
        # live /proc counter files stay open between scrapes, as the monitor's do (samples
        # are taken under self._lock, one at a time).
        self.sampler = Sampler(self.host, None, sample_spec(exporter_rules()), clock,
                               config_every=CONFIG_EVERY, syn_walk_hold=0.0,
                               keep_files=True)  # fmt: skip
        self.totals = Totals()
        self._lock = threading.Lock()
        self._previous: Optional[Sample] = None
        self._last: Optional[tuple[float, Result]] = None
        self._checks: tuple[ProfileCheck, ...] = ()
        self._nic_settings: dict[str, NicSettings] = {}
        self._nic_settings_at: Optional[float] = None
        self._verified_at: Optional[float] = None
        self.last_error = ""  # why the last collection failed (lbtune_up 0)
        self.topology: Optional[CpuTopology]
        self.nics: dict[str, Nic]
        try:
            inv = discover_host(self.host)
            self.topology, self.nics = inv.cpus, {n.name: n for n in inv.nics}
        except Exception:  # a namespace or a partial tree: the rules that need them stay quiet
            self.topology, self.nics = None, {}
        for check in self._verify():  # a typo in --profile is the user's to know at once
            if check.checks is None:
                raise BadInput(f"--profile {check.profile}: {check.error}")
        self.want_probes = probes and self.host.is_live
        self._probes: Optional[BackgroundProbes] = None
        self._probe_problem = ""
        if self.want_probes:
            problem = probe_problem()
            if problem is not None:
                self._probe_problem = f"{problem.missing}: {problem.fix}"
            else:
                self._probes = BackgroundProbes.start(self.host, PROBES)

    # ------------------------------------------------------------------ driving

    def prime(self) -> None:
        """The first sample: counters since boot seed the totals; the first scrape's window
        starts here (so its findings judge the time since start, not since boot)."""
        with self._lock:
            if self.host.is_live and self._previous is None:
                first = self.sampler.take()
                self._add(Window(None, first), None)
                self._previous = first

    def scrape(self) -> Result:
        """A collection now (or the previous one, if it is younger than min_interval)."""
        with self._lock:
            now = self.clock.monotonic()
            if self._last is not None and now - self._last[0] < self.min_interval:
                return self._last[1]
            started = time.perf_counter()
            try:
                if self.host.is_live:
                    current = self.sampler.take()
                    window = Window(self._previous, current)
                    self._previous = current
                else:
                    # a recorded tree: every scrape reads the same capture since boot, so
                    # its counters are that capture's totals, not added to the last scrape's
                    self.totals.values.clear()
                    window = capture_window(self.sampler)
                result = self._collect(window, started)
            except (LbtuneError, OSError) as e:
                result = self._down(started, str(e))
            self._last = (now, result)
            return result

    def collect(self, window: Window) -> Result:
        """A collection of a window the caller sampled (the textfile loop's stream)."""
        with self._lock:
            started = time.perf_counter()
            if self._previous is None and window.before is not None:
                self._add(Window(None, window.before), None)  # seed: since boot
                self._previous = window.before
            try:
                return self._collect(window, started)
            except (LbtuneError, OSError) as e:
                return self._down(started, str(e))

    def wait_probes(self, timeout: float) -> None:
        """Wait until the probes are attached (or failed), at most `timeout` seconds: a
        single collection (`--once`) should count with them from its first second."""
        if self._probes is not None:
            self._probes.attached.wait(timeout)

    def close(self) -> None:
        loader, self._probes = self._probes, None
        if loader is not None:
            loader.close()

    # ------------------------------------------------------------------ one collection

    def _probe_read(self) -> Optional[ProbeSample]:
        loader = self._probes
        if loader is None:
            return None
        if loader.failure is not None:
            self._probe_problem = f"probes failed: {loader.failure}"
            return None
        if loader.loading:
            self._probe_problem = "probes loading (bcc compile)"
            return None
        sample = loader.read()
        self._probe_problem = "" if sample is not None else "probes not attached"
        return sample

    def _ipvs(self) -> tuple[Optional[list[ServiceRow]], str]:
        """The IPVS table with counters, read afresh (live hosts with ip_vs loaded)."""
        if not self.host.is_live or not ipvs_loaded(self.host.fs):
            return None, ""
        try:
            session = ipvs_of(self.host)
            session.invalidate()  # the session caches the table for plans: not here
            return [service_row(s) for s in session.table(counters=True).values()], ""
        except (LbtuneError, OSError) as e:
            return None, str(e) or type(e).__name__

    def _verify(self) -> tuple[ProfileCheck, ...]:
        if not self.profiles:
            return ()
        now = self.clock.monotonic()
        if self._verified_at is not None and now - self._verified_at < self.verify_every:
            return self._checks
        # Imported here: the journal and the engine are only needed with --verify profiles.
        from lbtune.tune.service import verify_profile

        checks = []
        for name in self.profiles:
            try:
                _, rows = verify_profile(self.runtime, name, self.iface)
                checks.append(ProfileCheck(name, tuple(rows)))
            except (LbtuneError, OSError) as e:
                checks.append(ProfileCheck(name, None, str(e)))
        self._checks, self._verified_at = tuple(checks), now
        return self._checks

    def _settings(self) -> dict[str, NicSettings]:
        """The physical NICs' ethtool settings (for the NIC rules and the RSS spread), read
        again every CONFIG_EVERY seconds as the limits are: an operator changes them by hand,
        and reading them costs a dozen ethtool requests per NIC."""
        now = self.clock.monotonic()
        at = self._nic_settings_at
        if at is None or now - at >= CONFIG_EVERY:
            physical = [n.name for n in self.nics.values() if n.kind == "physical"]
            self._nic_settings, _ = read_nic_settings(self.host.ethtool, physical)
            self._nic_settings_at = now
        return self._nic_settings

    def _findings(self, window: Window, probes: Optional[ProbeSample]) -> list[Finding]:
        ctx = Context(window=window, topology=self.topology, nics=self.nics,
                      netns=self.host.netns, nic_settings=self._settings())  # fmt: skip
        found = run_rules(ctx, exporter_rules())
        if probes is not None:
            found = list(pe.explain(found, probes))
        return found

    def _absent(self) -> frozenset[str]:
        return frozenset(src for src, path in SOURCE_FILES.items()
                         if not self.host.fs.exists(path))  # fmt: skip

    def _add(self, window: Window, probes: Optional[ProbeSample]) -> Collection:
        c = Collection(window, (), probes, self.want_probes, self._probe_problem,
                       in_netns=self.host.view_netns is not None)  # fmt: skip
        self.totals.add(counter_deltas(c, self.options, self.totals), COUNTER_FAMILIES)
        return c

    def _collect(self, window: Window, started: float) -> Result:
        probes = self._probe_read()
        self._add(window, probes)
        services, ipvs_problem = self._ipvs()
        c = Collection(window, self._findings(window, probes), probes, self.want_probes,
                       self._probe_problem, self._verify(), services, ipvs_problem,
                       self._absent(), self.host.view_netns is not None,
                       self._settings())  # fmt: skip
        fams = families(c, self.options, self.totals)
        return self._result(fams, started, up=True)

    def _down(self, started: float, why: str) -> Result:
        self.last_error = why
        return self._result([], started, up=False)

    def _result(self, fams: list[Family], started: float, up: bool) -> Result:
        seconds = time.perf_counter() - started
        fams = [
            Family("lbtune_up", "gauge", "1 when the collection worked, 0 when it failed", (),
                   (((), 1.0 if up else 0.0),)),
            *fams,
            Family("lbtune_scrape_duration_seconds", "gauge", "Seconds this collection took "
                   "(sample, rules, series)", (), (((), seconds),)),
        ]  # fmt: skip
        text = render(fams)
        return Result(text, sum(len(f.samples) for f in fams), seconds, up)


def index_page() -> str:
    return ("lbtune exporter: the metrics are at /metrics (docs/fleet.md)\n")

