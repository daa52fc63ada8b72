"""The one layout of a diagnose report, shared by every renderer (text, Markdown, HTML, JSON,
the TUI): which facts head it, the table columns, how a count, a rate and a fix read.

Renderers only escape and style what a view gives them; none decides what a finding shows.
The pictures are data here too: each evidence counter's per-second series (or its rate
before and between two captures), and bar charts of the per-CPU softnet counts and the
per-queue counts where the rules about them fired.
Every string here is data: a renderer must escape all of it for its format (an IPv6 object
`tcp [fd77::2]:9443` is not rich markup, `<` is not HTML).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import lbtune
from lbtune.diagnose.finding import Evidence, Finding, Fix
from lbtune.diagnose.report import CAPTURES, LIVE, Report
from lbtune.observe.counters import BeforeAfter, Series

COLUMNS = ("#", "level", "object", "finding", "count", "rate")
NUMERIC_COLUMNS = frozenset({"#", "count", "rate"})
# The kernel drops the probes saw (host-wide), listed after the findings.
DROP_COLUMNS = ("count", "rate", "reason", "location", "protocol")
DROPS_HEADING = "Kernel drops by reason (probe, host-wide)"
NO_FINDINGS = "No packet loss or limit reached in the window."


def rate_text(r: Optional[float]) -> str:
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:,.0f}/s"
    return f"{r:.2f}/s"


def fix_text(fx: Fix) -> str:
    """`knob: current -> desired` (or the knob alone when neither value is known)."""
    if fx.current is None and fx.desired is None:
        return fx.knob
    current = fx.current if fx.current is not None else "?"
    desired = fx.desired if fx.desired is not None else "?"
    return f"{fx.knob}: {current} -> {desired}"


def describe_window(report: Report) -> str:
    if report.mode == LIVE:
        return f"live, {report.seconds or 0:.1f} s window"
    if report.mode == CAPTURES:
        return f"two captures {report.seconds or 0:.0f} s apart"
    up = report.seconds
    return "one capture: counters since boot" + (f" ({up / 3600:.1f} h)" if up else "")


SPARK = "▁▂▃▄▅▆▇█"


def spark_text(values: tuple[Optional[float], ...]) -> str:
    """A terminal sparkline: one block per tick, the tallest the window's maximum."""
    top = max((v for v in values if v is not None), default=0.0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(
        " " if v is None else SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))]
        for v in values
    )


def ticks_text(s: Series) -> str:
    """`4 x 1 s` (the ticks of a series), `5 ticks, 4.6 s` when they differ."""
    if s.seconds and max(s.seconds) - min(s.seconds) < 0.05:
        return f"{len(s.seconds)} x {s.seconds[0]:g} s"
    return f"{len(s.seconds)} ticks, {sum(s.seconds):.1f} s"


@dataclass(frozen=True)
class EvidenceView:
    evidence: Evidence
    counter: str
    value: str  # "1,234"
    rate: str  # "12.00/s", "-" for a gauge
    source: str
    series: Optional[Series] = None  # per tick over a live window
    spark: str = ""  # the series as a terminal sparkline
    before_after: Optional[BeforeAfter] = None  # with --baseline: before vs between


def before_text(e: EvidenceView) -> str:
    """`; before: 1.20/s since boot to the baseline capture` (with --baseline), else ""."""
    b = e.before_after
    if b is None:
        return ""
    if b.ref.gauge:
        return f"; at the baseline capture: {b.before if b.before is not None else '-'}"
    return f"; before: {rate_text(b.before_rate)} since boot to the baseline capture"


@dataclass(frozen=True)
class Bar:
    label: str  # "cpu 3", "q 5"
    value: int
    highlight: bool = False  # the CPU or queue a finding names


@dataclass(frozen=True)
class BarChart:
    title: str  # "softnet dropped per CPU"
    unit: str  # "packets"
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class FixView:
    fix: Fix
    summary: str  # fix_text
    scope: str  # who makes it: profile, host, application, platform, manual
    details: tuple[tuple[str, str], ...]  # ("profile", line), ("now", command), ("", note)


@dataclass(frozen=True)
class FindingView:
    number: int
    finding: Finding
    level: str
    rule: str
    title: str
    object: str
    cause: str
    count: str  # "1,234 SYNs"
    rate: str
    evidence: tuple[EvidenceView, ...]
    fixes: tuple[FixView, ...]

    @property
    def row(self) -> tuple[str, ...]:
        """The table cells, in COLUMNS order."""
        return (str(self.number), self.level, self.object, self.title, self.count, self.rate)


@dataclass(frozen=True)
class ReportView:
    report: Report
    heading: str  # "lbtune diagnose: web-1"
    facts: tuple[tuple[str, str], ...]  # (label, value): kernel, window, namespace, root, ...
    findings: tuple[FindingView, ...]
    not_read: tuple[tuple[str, str], ...]  # (source, why), sorted
    # Rows of the kernel drops the probes counted, in DROP_COLUMNS order (empty: none/not run)
    drops: tuple[tuple[str, ...], ...] = ()
    charts: tuple[BarChart, ...] = ()  # per-CPU and per-queue counts where rules fired

    @property
    def summary(self) -> str:
        c = self.report.counts
        return f"{len(self.findings)} ({c['fail']} fail, {c['warn']} warn, {c['info']} info)"

    def document(self) -> dict[str, Any]:
        """The JSON document of `lbtune diagnose --json` (keys per lbtune.vocab)."""
        r = self.report
        return {
            "lbtune": lbtune.__version__,
            "hostname": r.hostname,
            "kernel": r.kernel,
            "netns": r.netns,
            "root": r.root,
            "mode": r.mode,
            "window_seconds": r.seconds,
            "ifaces": list(r.ifaces),
            "summary": r.counts,
            "findings": [_finding_document(v) for v in self.findings],
            "missing": dict(r.missing),
            "probes": None if r.probes is None else r.probes.document(),
        }


def _evidence_document(e: EvidenceView) -> dict[str, Any]:
    ev = e.evidence
    doc: dict[str, Any] = {
        "counter": ev.counter,
        "value": ev.value,
        "rate": ev.rate,
        "source": ev.source,
    }
    if e.series is not None:
        doc["series"] = {
            "ends": list(e.series.ends),
            "seconds": list(e.series.seconds),
            "values": list(e.series.values),
        }
    if e.before_after is not None:
        b = e.before_after
        doc["before_after"] = {
            "before": b.before,
            "before_seconds": b.before_seconds,
            "after": b.after,
            "after_seconds": b.after_seconds,
        }
    return doc


def _finding_document(v: FindingView) -> dict[str, Any]:
    f = v.finding
    return {
        "rule": f.rule,
        "title": f.title,
        "level": f.level.value,
        "object": f.object,
        "cause": f.cause,
        "count": f.count,
        "unit": f.unit,
        "gauge": f.gauge,
        "rate": f.rate,
        "evidence": [_evidence_document(e) for e in v.evidence],
        "fixes": [
            {
                "knob": x.knob,
                "current": x.current,
                "desired": x.desired,
                "key": x.key,
                "profile": list(x.profile_lines),
                "command": x.command,
                "note": x.note,
                "scope": x.scope,
            }
            for x in f.fixes
        ],
    }


def _fix_view(fx: Fix) -> FixView:
    """The layout of a fix, kept for the next fix equal to it with values of the same types
    (1 and True are equal, but a profile line writes them apart): the monitor lays out its
    findings' fixes every second, and their TOML lines were some 6 % of its frame (cProfile
    of the 48-CPU replay); a fix whose reason (it holds the count) did not change since is
    laid out once (about half of them there)."""
    try:
        key = (fx, tuple(type(v) for s in fx.settings for _, v in s.fields))
        view = _FIX_VIEWS.get(key)
    except TypeError:  # a value that cannot be hashed (a list): laid out every time
        return _lay_out_fix(fx)
    if view is None:
        if len(_FIX_VIEWS) >= _FIX_VIEWS_KEPT:
            _FIX_VIEWS.clear()
        view = _FIX_VIEWS[key] = _lay_out_fix(fx)
    return view


_FIX_VIEWS: dict[tuple[Fix, tuple[type, ...]], FixView] = {}
_FIX_VIEWS_KEPT = 512


def _lay_out_fix(fx: Fix) -> FixView:
    details = []
    details += [("profile", line) for line in fx.profile_lines]
    if fx.command:
        details.append(("now", fx.command))
    if fx.note:
        details.append(("", fx.note))
    return FixView(fx, fix_text(fx), fx.scope, tuple(details))


def _evidence_view(e: Evidence, report: Optional[Report]) -> EvidenceView:
    s = report.series.get(e.ref) if report and e.ref else None
    ba = report.before_after.get(e.ref) if report and e.ref else None
    return EvidenceView(
        e,
        e.counter,
        f"{e.value:,}",
        rate_text(e.rate),
        e.source,
        series=s,
        spark=spark_text(s.rates) if s else "",
        before_after=ba,
    )


def finding_view(number: int, f: Finding, report: Optional[Report] = None) -> FindingView:
    """The layout of one finding (with `report`, its evidence's series and comparisons)."""
    return FindingView(
        number=number,
        finding=f,
        level=f.level.value,
        rule=f.rule,
        title=f.title,
        object=f.object,
        cause=f.cause,
        count=f"{f.count:,} {f.unit}",
        rate=rate_text(f.rate),
        evidence=tuple(_evidence_view(e, report) for e in f.evidence),
        fixes=tuple(_fix_view(x) for x in f.fixes),
    )


def report_view(report: Report) -> ReportView:
    facts = [("kernel", report.kernel or "?"), ("window", describe_window(report))]
    if report.netns:
        facts.append(("network namespace", report.netns))
    if report.root != "/":
        facts.append(("host tree", report.root))
    if report.ifaces:
        facts.append(("interfaces", ", ".join(report.ifaces)))
    drops: tuple[tuple[str, ...], ...] = ()
    if report.probes is not None:
        facts.append(("probes", report.probes.line))
        secs = report.probes.seconds or 0.0
        drops = tuple(
            (f"{d.count:,}", rate_text(d.count / secs if secs else None), d.reason or "-",
             d.location, d.protocol)
            for d in report.probes.drops
        )  # fmt: skip
    return ReportView(
        report=report,
        heading=f"lbtune diagnose: {report.hostname or 'host'}",
        facts=tuple(facts),
        findings=tuple(finding_view(i, f, report) for i, f in enumerate(report.findings, 1)),
        not_read=tuple(sorted(report.missing.items())),
        drops=drops,
        charts=_charts(report),
    )


_SOFTNET_CHARTS = (
    ("cpu-backlog-drop", "dropped", "softnet dropped per CPU (input backlog full)", "packets"),
    ("time-squeeze", "time_squeeze", "softnet time squeeze per CPU", "squeezes"),
)


def _charts(report: Report) -> tuple[BarChart, ...]:
    """Bar charts where the rules about them fired: per-CPU softnet counts (the CPUs the
    findings name highlighted), and per-queue packets and drops of a NIC dropping on rx."""
    fired: dict[str, set[str]] = {}
    for f in report.findings:
        fired.setdefault(f.rule, set()).add(f.object)
    out: list[BarChart] = []
    cpus = {o for r in ("cpu-backlog-drop", "time-squeeze") for o in fired.get(r, ())}
    if cpus and report.softnet:
        for rule_id, attr, title, unit in _SOFTNET_CHARTS:
            if rule_id in fired:
                bars = tuple(
                    Bar(f"cpu {d.cpu}", int(getattr(d, attr)), f"cpu {d.cpu}" in cpus)
                    for d in report.softnet
                )
                out.append(BarChart(title, unit, bars))
        processed = tuple(
            Bar(f"cpu {d.cpu}", d.processed, f"cpu {d.cpu}" in cpus) for d in report.softnet
        )
        out.append(BarChart("softnet packets processed per CPU", "packets", processed))
    devs = sorted({o.split()[0] for o in fired.get("nic-rx-drop", ())})
    for dev in devs:
        rx = [q for q in report.queues.get(dev, ()) if q.direction == "rx"]
        if any(q.packets is not None for q in rx):
            out.append(
                BarChart(
                    f"{dev} rx packets per queue",
                    "packets",
                    tuple(Bar(f"q{q.queue}", q.packets or 0, bool(q.drops)) for q in rx),
                )
            )
        if any(q.drops for q in rx):
            out.append(
                BarChart(
                    f"{dev} rx drops per queue",
                    "packets",
                    tuple(Bar(f"q{q.queue}", q.drops or 0, bool(q.drops)) for q in rx),
                )
            )
    return tuple(out)
