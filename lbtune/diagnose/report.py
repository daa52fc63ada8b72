"""A diagnosis run and its report: sample a window (or read captures), apply the rules.

`diagnose()` is what `lbtune diagnose` calls; the renderers here (JSON document, Markdown,
HTML) need no UI library. The terminal rendering lives in `lbtune.cli.diagnose`.
"""

from __future__ import annotations

import dataclasses
import html
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

import lbtune
from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Finding, Fix, Severity
from lbtune.diagnose.rules import run_rules
from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.host import Host
from lbtune.host.inventory import discover_host
from lbtune.host.nic import Nic
from lbtune.host.topology import CpuTopology
from lbtune.observe.sampler import Sampler
from lbtune.observe.window import Window

Progress = Callable[[float, float], None]  # (elapsed, total) seconds


@dataclass(frozen=True)
class Report:
    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    root: str
    mode: str  # "live" (a sampled window), "capture" (since boot), "captures" (two captures)
    seconds: Optional[float]
    findings: tuple[Finding, ...]
    missing: Mapping[str, str] = field(default_factory=dict)
    ifaces: tuple[str, ...] = ()
    generated: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings:
            out[f.severity.value] += 1
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
) -> Report:
    """Sample `host` for `duration` seconds (live) or read it as a capture, and run the rules.

    A host tree (`--root`) is read once: its counters count since boot. With `baseline` (an
    earlier capture of the same host) the window is the time between the two captures.
    """
    sampler = Sampler(host, ifaces)
    before = None
    if host.is_live:
        if duration <= 0:
            raise BadInput("--duration must be more than 0 seconds")
        before = sampler.take()
        start = time.monotonic()
        step = min(0.25, duration)
        while True:
            elapsed = time.monotonic() - start
            if progress:
                progress(min(elapsed, duration), duration)
            if elapsed >= duration:
                break
            time.sleep(min(step, duration - elapsed))
        mode = "live"
    elif baseline is not None:
        before = Sampler(baseline, ifaces).take()
        mode = "captures"
    else:
        mode = "capture"
    after = sampler.take()
    if before is not None and not host.is_live:
        assert baseline is not None
        boots = [h.fs.read("/proc/sys/kernel/random/boot_id") for h in (baseline, host)]
        if None not in boots and boots[0] != boots[1]:
            raise BadInput("the two captures are from different boots: counters restarted")
        if before.uptime is None or after.uptime is None:
            raise BadInput("both captures need /proc/uptime to be compared")
        if after.uptime <= before.uptime:
            raise BadInput(
                f"the baseline capture (uptime {before.uptime:.0f} s) is not older than the "
                f"capture (uptime {after.uptime:.0f} s) of the same boot"
            )
    window = Window(before, after)
    topology, nics, missing = _inventory(host, ifaces)
    ctx = Context(window=window, fs=host.fs, topology=topology, nics=nics, netns=host.netns)
    findings = run_rules(ctx, rules)
    missing.update(window.missing())
    return Report(
        hostname=host.fs.read("/proc/sys/kernel/hostname"),
        kernel=host.fs.read("/proc/sys/kernel/osrelease"),
        netns=host.netns,
        root=host.fs.root,
        mode=mode,
        seconds=None if window.seconds is None else round(window.seconds, 3),
        findings=tuple(findings),
        missing=missing,
        ifaces=tuple(ifaces or ()),
        generated=time.time(),
    )


# ---------------------------------------------------------------------------- renderers


def _finding_dict(f: Finding) -> dict[str, Any]:
    d = dataclasses.asdict(f)
    d["severity"] = f.severity.value
    return d


def to_document(report: Report) -> dict[str, Any]:
    """The JSON document of `lbtune diagnose --json` (stable keys, documented)."""
    return {
        "lbtune": lbtune.__version__,
        "hostname": report.hostname,
        "kernel": report.kernel,
        "netns": report.netns,
        "root": report.root,
        "mode": report.mode,
        "window_seconds": report.seconds,
        "ifaces": list(report.ifaces),
        "summary": report.counts,
        "findings": [_finding_dict(f) for f in report.findings],
        "missing": dict(report.missing),
    }


def describe_window(report: Report) -> str:
    if report.mode == "live":
        return f"live, {report.seconds or 0:.1f} s window"
    if report.mode == "captures":
        return f"two captures {report.seconds or 0:.0f} s apart"
    up = report.seconds
    return "one capture: counters since boot" + (f" ({up / 3600:.1f} h)" if up else "")


def rate_text(r: Optional[float]) -> str:
    if r is None:
        return "-"
    if r >= 100:
        return f"{r:,.0f}/s"
    return f"{r:.2f}/s"


def fix_text(fx: Fix) -> str:
    parts = [f"{fx.knob}"]
    if fx.current is not None or fx.needed is not None:
        parts.append(
            f": {fx.current if fx.current is not None else '?'} -> "
            f"{fx.needed if fx.needed is not None else '?'}"
        )
    return "".join(parts)


def render_markdown(report: Report) -> str:
    who = report.hostname or "host"
    lines = [
        f"# lbtune diagnose: {who}",
        "",
        f"- kernel: {report.kernel or '?'}",
        f"- window: {describe_window(report)}",
    ]
    if report.netns:
        lines.append(f"- network namespace: {report.netns}")
    c = report.counts
    lines += [
        f"- findings: {len(report.findings)} ({c['critical']} critical, {c['warning']} "
        f"warning, {c['info']} info)",
        "",
    ]
    if not report.findings:
        lines += ["No packet loss or limit reached in the window.", ""]
    else:
        lines += ["| # | severity | object | finding | count | rate |", "|---|---|---|---|---|---|"]
        for i, f in enumerate(report.findings, 1):
            lines.append(
                f"| {i} | {f.severity.value} | `{f.object}` | {f.title} | {f.count:,} | "
                f"{rate_text(f.rate)} |"
            )
        lines.append("")
        for i, f in enumerate(report.findings, 1):
            lines += [f"## {i}. {f.title}", "", f"**{f.rule}** on `{f.object}`: {f.cause}", ""]
            lines.append("Evidence:")
            for e in f.evidence:
                lines.append(f"- `{e.counter}` = {e.value:,} ({rate_text(e.rate)}) from {e.source}")
            lines += ["", "Fix:"]
            for fx in f.fixes:
                lines.append(f"- {fix_text(fx)}")
                if fx.profile_key:
                    lines.append(f"  - profile: `{fx.profile_key}`")
                if fx.command:
                    lines.append(f"  - now: `{fx.command}`")
                if fx.note:
                    lines.append(f"  - {fx.note}")
            lines.append("")
    if report.missing:
        lines += ["## Not read", ""]
        lines += [f"- {k}: {v}" for k, v in sorted(report.missing.items())]
        lines.append("")
    return "\n".join(lines)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em}"
    ".critical{color:#b00020;font-weight:bold}.warning{color:#a65e00}.info{color:#555}"
    "code{background:#f4f4f4;padding:0 .2em}"
)


def render_html(report: Report) -> str:
    e = html.escape
    who = e(report.hostname or "host")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>lbtune diagnose: {who}</title><style>{_CSS}</style></head><body>",
        f"<h1>lbtune diagnose: {who}</h1>",
        f"<p>kernel {e(report.kernel or '?')}; {e(describe_window(report))}"
        + (f"; netns {e(report.netns)}" if report.netns else "")
        + f"; {len(report.findings)} findings</p>",
    ]
    if not report.findings:
        out.append("<p>No packet loss or limit reached in the window.</p>")
    else:
        out.append(
            "<table><tr><th>#</th><th>severity</th><th>object</th><th>finding</th>"
            "<th>count</th><th>rate</th></tr>"
        )
        for i, f in enumerate(report.findings, 1):
            out.append(
                f'<tr><td>{i}</td><td class="{f.severity.value}">{f.severity.value}</td>'
                f"<td><code>{e(f.object)}</code></td><td>{e(f.title)}</td>"
                f"<td>{f.count:,}</td><td>{e(rate_text(f.rate))}</td></tr>"
            )
        out.append("</table>")
        for i, f in enumerate(report.findings, 1):
            out.append(f'<h2 class="{f.severity.value}">{i}. {e(f.title)}</h2>')
            out.append(f"<p><b>{e(f.rule)}</b> on <code>{e(f.object)}</code>: {e(f.cause)}</p>")
            out.append("<p>Evidence:</p><ul>")
            for ev in f.evidence:
                out.append(
                    f"<li><code>{e(ev.counter)}</code> = {ev.value:,} ({e(rate_text(ev.rate))}) "
                    f"from {e(ev.source)}</li>"
                )
            out.append("</ul><p>Fix:</p><ul>")
            for fx in f.fixes:
                extra = ""
                if fx.profile_key:
                    extra += f"<br>profile: <code>{e(fx.profile_key)}</code>"
                if fx.command:
                    extra += f"<br>now: <code>{e(fx.command)}</code>"
                if fx.note:
                    extra += f"<br>{e(fx.note)}"
                out.append(f"<li>{e(fix_text(fx))}{extra}</li>")
            out.append("</ul>")
    if report.missing:
        out.append("<h2>Not read</h2><ul>")
        out += [f"<li>{e(k)}: {e(v)}</li>" for k, v in sorted(report.missing.items())]
        out.append("</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
