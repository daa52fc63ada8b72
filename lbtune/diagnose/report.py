"""A diagnosis run and its report: sample a window (or read captures), apply the rules.

`diagnose()` is what `lbtune diagnose` calls. The clock belongs to `lbtune.observe.schedule`
(the window, or the captures); this module only chooses the rules, asks the sampler for what
they declared, and runs them on the window. The report keeps what the pictures of a report
need from the window: each evidence counter tick by tick (a live window samples every
second), or before and between two captures, and the per-CPU and per-queue counts.
Rendering is elsewhere: `lbtune.diagnose.view` (the one layout) feeding
`lbtune.diagnose.render` (JSON, Markdown, HTML) and the terminal renderer in
`lbtune.cli.diagnose`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence

from lbtune.diagnose import probe_evidence as pe
from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Finding
from lbtune.diagnose.nicsettings import NicSettings, read_nic_settings
from lbtune.diagnose.rules import run_rules, sample_spec, select
from lbtune.errors import MalformedHostFile
from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.net.nic import Nic
from lbtune.host.signals import interruptible
from lbtune.host.trace.bpf import probe_problem
from lbtune.observe.clock import SYSTEM_CLOCK, Clock
from lbtune.observe.counters import BeforeAfter, CounterRef, Series, before_after, series
from lbtune.observe.probe_loader import BackgroundProbes
from lbtune.observe.probe_plan import Status
from lbtune.observe.probes import ProbeSample
from lbtune.observe.sampler import Sampler
from lbtune.observe.schedule import Progress, capture_window, tick_for, window
from lbtune.observe.window import QueueDelta, SoftnetDelta, Window
from lbtune.vocab import Level

LIVE = "live"  # a sampled window
CAPTURE = "capture"  # one recorded tree: counters since boot
CAPTURES = "captures"  # two recorded trees: the window between them


@dataclass(frozen=True)
class Report:
    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    root: str  # what the user named: "/", a directory, the capture tarball
    mode: str  # LIVE, CAPTURE or CAPTURES
    seconds: Optional[float]
    findings: tuple[Finding, ...]
    missing: Mapping[str, str] = field(default_factory=dict)
    ifaces: tuple[str, ...] = ()
    generated: float = 0.0
    probes: Optional[pe.ProbeRun] = None  # whether the eBPF probes ran, what they saw
    # Evidence counters tick by tick over a live window, and before/between two captures.
    series: Mapping[CounterRef, Series] = field(default_factory=dict)
    before_after: Mapping[CounterRef, BeforeAfter] = field(default_factory=dict)
    softnet: tuple[SoftnetDelta, ...] = ()  # per CPU over the window
    queues: Mapping[str, tuple[QueueDelta, ...]] = field(default_factory=dict)  # per NIC

    @property
    def counts(self) -> dict[str, int]:
        """Findings per level word (fail, warn, info)."""
        out = {lv.value: 0 for lv in (Level.FAIL, Level.WARN, Level.INFO)}
        for f in self.findings:
            out[f.level.value] += 1
        return out


def _inventory(
    host: Host, ifaces: Optional[Sequence[str]]
) -> tuple[Optional[CpuTopology], dict[str, Nic], dict[str, str]]:
    """Topology and NICs for the placement and ring rules; absent pieces are not fatal."""
    try:
        inv = discover_host(host, only=list(ifaces) if ifaces else None)
    except (MalformedHostFile, OSError) as e:
        return None, {}, {"topology": str(e)}
    return inv.cpus, {n.name: n for n in inv.nics}, {}


def diagnose(
    host: Host,
    duration: float = 10.0,
    ifaces: Optional[Sequence[str]] = None,
    baseline: Optional[Host] = None,
    progress: Optional[Progress] = None,
    rules: Optional[Sequence[str]] = None,
    source: Optional[str] = None,
    display: Callable[[str], str] = str,
    clock: Clock = SYSTEM_CLOCK,
    probes: bool = True,
    probe_status: Optional[Status] = None,
) -> Report:
    """Sample `host` for `duration` seconds (live) or read it as a capture, and run the rules.

    A host tree (`--root`) is read once: its counters count since boot. With `baseline` (an
    earlier capture of the same namespace, boot and host) the window is the time between the
    two captures. `rules` limits the rules (BadInput for an unknown id). `source` is what the
    user named as the root (a capture's tarball, shown instead of its unpack directory) and
    `display` rewrites any other text that may carry such a temporary path.

    On the live host, as root with bcc, the drops and napi probes (`probes=False` skips
    them) are compiled and attached in the background while the window already runs; what
    they count until the window closes is added to the findings it explains
    (`probe_evidence.explain`). `probe_status` hears their progress ("attached" when
    they count). Without root or bcc the report says what is missing and how to get it.
    """
    chosen = select(rules)
    spec = sample_spec(chosen)
    sampler = Sampler(host, ifaces, spec, clock)
    run: Optional[pe.ProbeRun] = pe.ProbeRun(pe.NOT_APPLICABLE)
    sample = None
    if host.is_live:
        run, loader = _start_probes(host, probes, ifaces, probe_status)
        try:
            with interruptible():  # Ctrl-C and SIGTERM stop the window (exit 130)
                win = window(sampler, duration, progress, tick=tick_for(duration))
            if loader is not None:
                sample = loader.read()
                run = _finish_probes(loader, sample, win.seconds)
        except BaseException:
            # Ctrl-C or SIGTERM must not wait for a compile in progress (seconds, more on a
            # loaded host): the process is leaving, and the kernel detaches every program
            # whose file descriptors close with it.
            if loader is not None:
                loader.close(wait=0)
            raise
        if loader is not None:
            loader.close()
        mode = LIVE
    else:
        base = None if baseline is None else Sampler(baseline, ifaces, spec, clock)
        win = capture_window(sampler, base)
        mode = CAPTURE if baseline is None else CAPTURES
    return report_of(host, win, mode, rules, ifaces, source, display, clock, run, sample)


def report_of(
    host: Host,
    win: Window,
    mode: str,
    rules: Optional[Sequence[str]] = None,
    ifaces: Optional[Sequence[str]] = None,
    source: Optional[str] = None,
    display: Callable[[str], str] = str,
    clock: Clock = SYSTEM_CLOCK,
    run: Optional[pe.ProbeRun] = None,
    sample: Optional[ProbeSample] = None,
) -> Report:
    """The report of a window already taken on `host` (LIVE, CAPTURE or CAPTURES): the
    rules' findings and what the pictures need. `diagnose()` samples, then calls this.
    `run` says whether the probes ran; what they counted (`sample`) is added to the
    findings it explains."""
    chosen = select(rules)
    topology, nics, missing = _inventory(host, ifaces)
    settings: dict[str, NicSettings] = {}
    if any(r.nic_settings for r in chosen):
        settings, unread = read_nic_settings(host.ethtool, nics)
        missing.update(unread)
    ctx = Context(
        window=win, topology=topology, nics=nics, netns=host.netns, nic_settings=settings
    )
    findings = run_rules(ctx, chosen)
    if sample is not None:
        findings = list(pe.explain(findings, sample))
    missing.update(win.missing())
    refs = list(dict.fromkeys(e.ref for f in findings for e in f.evidence if e.ref is not None))
    return Report(
        hostname=host.fs.read("/proc/sys/kernel/hostname"),
        kernel=host.fs.read("/proc/sys/kernel/osrelease"),
        netns=host.netns,
        root=display(source if source is not None else host.fs.root),
        mode=mode,
        seconds=None if win.seconds is None else round(win.seconds, 3),
        findings=tuple(findings),
        missing={k: display(v) for k, v in missing.items()},
        ifaces=tuple(ifaces or ()),
        generated=clock.time(),
        probes=run,
        series={r: s for r in refs for s in [series(r, win)] if s is not None},
        before_after=_compared(win, refs) if mode == CAPTURES else {},
        softnet=tuple(win.softnet()),
        queues={d.dev: d.queues for d in win.nics() if d.queues},
    )


def _start_probes(
    host: Host, wanted: bool, ifaces: Optional[Sequence[str]], status: Optional[Status]
) -> tuple[pe.ProbeRun, Optional[BackgroundProbes]]:
    """Start loading the probes (when wanted and possible) without waiting for them."""
    if not wanted:
        return pe.ProbeRun(pe.OFF), None
    problem = probe_problem()
    if problem is not None:
        return pe.ProbeRun(pe.UNAVAILABLE, missing=problem.missing, fix=problem.fix), None
    loader = BackgroundProbes.start(host, pe.DIAGNOSE_PROBES, ifaces, status)
    return pe.ProbeRun(pe.NOT_READY), loader


def _finish_probes(
    loader: BackgroundProbes, sample: Optional[ProbeSample], seconds: Optional[float]
) -> pe.ProbeRun:
    """How the probes' part of the window went, read right after it closed."""
    if sample is not None:
        return pe.ran(sample, None if seconds is None else round(seconds, 3))
    if loader.failure is not None:
        return pe.ProbeRun(
            pe.FAILED, missing=loader.failure, fix="`lbtune doctor` shows what the probes need"
        )
    return pe.ProbeRun(
        pe.NOT_READY,
        missing=f"the probes were still compiling when the {seconds or 0:.1f} s window closed",
        fix="a longer --duration (compiling takes seconds)",
    )


def _compared(win: Window, refs: Sequence[CounterRef]) -> dict[CounterRef, BeforeAfter]:
    """Each evidence counter since boot up to the baseline capture and between the two."""
    if win.before is None or win.before.uptime is None:
        return {}
    return {r: c for r in refs for c in [before_after(r, win)] if c is not None}
