"""The text report of `lbtune lab run`: what was prepared, checked, measured and diagnosed."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from lbtune.lab.experiments.scenario import ScenarioResult


def _num(n: float) -> str:
    return f"{n:,.0f}"


def render_result(out: Any, r: ScenarioResult) -> None:
    """Print r on the rich console out, one section after the other."""
    _render_header(out, r)
    _render_checklists(out, r)
    _render_selftest_and_load(out, r)
    _render_servers(out, r)
    _render_bypass(out, r)
    _render_diagnosis(out, r)
    _render_verdict(out, r)


def _render_header(out: Any, r: ScenarioResult) -> None:
    """What ran, and the profiles applied per node."""
    c = r.config
    what = "IPVS DR" if c.mode == "dr" else "HAProxy proxy"
    weights = ",".join(str(w) for w in c.server_weights)
    out.print(
        f"[bold]lab run[/bold]: {what}, scheduler {c.scheduler}, {c.servers} real servers "
        f"(weights {weights}), VIP {r.vip}, lab kernel {r.kernel}"
    )
    for p in r.profiles:
        skipped = f", {p.skipped} host-global skipped" if p.skipped else ""
        out.print(
            f"  profile    {p.node:<7} {p.profile:<14} {p.changed} changed, "
            f"{p.unchanged} already set{skipped}"
        )


def _render_checklists(out: Any, r: ScenarioResult) -> None:
    """Each node's checklist verdict, its failed checks and what the lab tolerated."""
    for cl in r.checklists:
        n = cl.summary
        verdict = "[red]NOT READY[/red]" if cl.failed or cl.error else "[green]ready[/green]"
        counts = ", ".join(f"{n.get(k, 0)} {k}" for k in ("pass", "warn", "fail", "skip"))
        out.print(f"  checklist  {cl.node:<7} {cl.role:<14} {verdict} ({counts})")
        for f in cl.failed:
            out.print(f"             [red]FAIL[/red] {f.name}: {escape(f.reason)}")
            if f.fix:
                out.print(f"                  fix: {escape(f.fix)}")
        for name, why in cl.tolerated.items():
            out.print(f"             skip {name}: lab: {escape(why)}")
        if cl.error:
            out.print(f"             [red]error[/red]: {escape(cl.error)}")


def _render_selftest_and_load(out: Any, r: ScenarioResult) -> None:
    """The self-test's answers and the load's throughput, latency and errors."""
    st = r.selftest
    if st is not None:
        answers = ", ".join(f"{k} {v}" for k, v in sorted(st.answers.items()))
        arp = f"VIP ARP -> {st.vip_owner} ({st.vip_mac or 'none'})"
        out.print(
            f"  self-test  {st.requests} requests on new connections: {answers or 'none'}; "
            f"{st.failures} failed; {arp}"
        )
    if r.load is not None:
        ld = r.load
        lat = ", ".join(f"{k} {v:.2f} ms" for k, v in ld.latency_ms.items())
        errs = ", ".join(f"{k} {v}" for k, v in ld.errors.items() if v) or "none"
        out.print(
            f"  load       {' '.join(ld.argv)}\n"
            f"             {_num(ld.requests)} requests in {ld.seconds:.1f} s: "
            f"[bold]{ld.rps:,.0f} req/s[/bold]; latency {lat}; errors: {errs}"
        )


def _render_servers(out: Any, r: ScenarioResult) -> None:
    """The per-server table: requests, shares, expected shares, IPVS connections."""
    from rich.table import Table

    if not r.servers:
        return
    c = r.config
    t = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    for col in ("server", "address", "weight", "requests", "share", "expected"):
        t.add_column(col, justify="left" if col in ("server", "address") else "right")
    if c.mode == "dr":
        t.add_column("IPVS conns", justify="right")
    for s in r.servers:
        row = [s.name, s.address, str(s.weight), _num(s.requests), f"{s.share:.1%}",
               "-" if s.expected is None else f"{s.expected:.1%}"]  # fmt: skip
        if c.mode == "dr":
            row.append("-" if s.connections is None else str(s.connections))
        t.add_row(*row)
    out.print(t)
    if c.mode == "dr" and c.keepalive and any(s.expected is not None for s in r.servers):
        # HAProxy balances every request; IPVS only the connections
        out.print(
            "  expected: the weight share of the connections IPVS schedules; with "
            "keep-alive each connection carries many requests, so request shares can "
            "drift from it (IPVS conns: what was scheduled; --no-keepalive schedules "
            "every request)"
        )


def _render_bypass(out: Any, r: ScenarioResult) -> None:
    """How much of the reply bytes crossed the director."""
    if r.bypass is None:
        return
    how = ("DR: the real servers answer the client directly" if r.config.mode == "dr"
           else "proxy: every reply passes through HAProxy")  # fmt: skip
    extra = ""
    if r.bypass.overhead > 0:
        extra = (
            f"; the director also received {r.bypass.overhead:.0%} more: the headers, "
            "handshakes and ACKs of its own connections to the servers, both ways"
        )
    out.print(
        f"  replies through the director: {r.bypass.through_director:.0%} of reply bytes "
        f"({how}{extra})"
    )


def _render_diagnosis(out: Any, r: ScenarioResult) -> None:
    """`lbtune diagnose` of the director under load, and the run's notes."""
    d = r.diagnosis
    if d is not None:
        if d.error:
            out.print(f"  diagnose   {d.node}: [red]{escape(d.error)}[/red]")
        elif not d.findings:
            out.print(f"  diagnose   {d.node} over {d.duration:g} s of load: no findings")
        else:
            out.print(f"  diagnose   {d.node} over {d.duration:g} s of load:")
            for finding in d.findings:
                title, obj = escape(finding.title), escape(finding.object)
                out.print(f"             {finding.level:<8} {title} ({obj})")
    for note in r.notes:
        out.print(f"  [dim]note: {note}[/dim]")


def _render_verdict(out: Any, r: ScenarioResult) -> None:
    """OK, or FAILED with where the run stopped and why."""
    if r.ok:
        serving = sum(1 for s in r.servers if s.requests > 0)
        out.print(f"[green]OK[/green]: {serving} of {len(r.servers)} real servers served, "
                  "0 failed requests")  # fmt: skip
    else:
        where = f" (stopped at {r.stopped})" if r.stopped else ""
        out.print(f"[red]FAILED[/red]{where}: {escape(r.reason)}")
