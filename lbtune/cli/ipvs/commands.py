"""`lbtune ipvs ...`: the IPVS DR director, its real servers, and the self-test."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import click

from lbtune.cli import complete
from lbtune.cli.ipvs import render
from lbtune.cli.ipvs.common import bulk, director_config, emit_json, ipvs_host, ipvs_state
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console
from lbtune.errors import BadInput, ExitCode


class _IpvsGroup(click.Group):
    """`lbtune ipvs`: the commands of _LAZY are imported only when asked for (a no-op
    `ipvs apply` pays for no module it does not run)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY})

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name in _LAZY and name not in self.commands:
            import importlib

            module, attr = _LAZY[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return super().get_command(ctx, name)


@click.group("ipvs", cls=_IpvsGroup)
def ipvs_group() -> None:
    """IPVS direct-routing director, real servers and self-test (docs/ipvs.md)."""


# ------------------------------------------------------------------------------ plans

_NOUN = {"ipvs_service": "service", "ipvs_dest": "real server", "ipvs_drain": "real server",
         "ipvs_timeout": "timeout", "sysctl": "sysctl", "address": "address"}


def op_word(kind: str, current: Optional[str], desired: str) -> str:
    """What a change does, in an operator's words: add, edit, drain, delete, set."""
    if kind == "ipvs_drain":
        return "drain"
    if kind in ("ipvs_service", "ipvs_dest"):
        if current in (None, "absent"):
            return "add"
        return "delete" if desired == "absent" else "edit"
    if kind == "address":
        return "add" if desired == "present" else "remove"
    return "set"


def _rows(plan: Any) -> list[dict[str, Any]]:
    """Plan rows for JSON: what changes (and what is missing); objects already as wanted
    are only counted (`unchanged`), a 10,000-server table would bury the changes."""
    return [
        {
            "op": op_word(c.knob.kind, c.current, c.desired) if c.action.value == "change" else "",
            "kind": c.knob.kind,
            "object": c.knob.obj,
            "current": c.current,
            "desired": c.desired,
            "action": c.action.value,
            "reason": c.target.reason,
            "key": c.target.key,
        }
        for c in plan.changes
        if c.action.value != "ok"
    ]


# A plan longer than this is summarised (counts per operation, then the first rows); -v
# prints every row. 10,000 rows help nobody read, and rendering them costs seconds.
_LONG = 100
_HEAD = 20


def _print_plan(plan: Any, verbose: int, title: str, in_place: int = 0) -> None:
    from rich.table import Table

    t = Table(box=None, pad_edge=False, title=title, title_justify="left")
    for col in ("op", "what", "object", "current", "", "desired"):
        t.add_column(col, overflow="fold")
    rows = [c for c in plan.changes
            if c.action.value == "change" or (verbose and c.action.value in ("ok", "missing"))]
    out = console()
    if len(rows) > _LONG and not verbose:
        counts: dict[str, int] = {}
        for c in rows:
            noun = _NOUN.get(c.knob.kind, c.knob.kind)
            what = f"{op_word(c.knob.kind, c.current, c.desired)} {noun}"
            counts[what] = counts.get(what, 0) + 1
        out.print(", ".join(f"{what}: {n}" for what, n in counts.items()), markup=False)
        rows = rows[:_HEAD]
    for c in rows:
        act = c.action.value
        word = op_word(c.knob.kind, c.current, c.desired) if act == "change" else act
        cur = "(absent)" if c.current is None else c.current
        t.add_row(word, _NOUN.get(c.knob.kind, c.knob.kind), c.knob.obj, cur,
                  "->" if act == "change" else "==", c.desired)
    if rows:
        out.print(t)
    if len(rows) < len(plan.to_apply) and not verbose:
        out.print(f"... {len(plan.to_apply) - len(rows)} more (-v lists every one)")
    n_ok = sum(1 for c in plan.changes if c.action.value == "ok") + in_place
    missing = sum(1 for c in plan.changes if c.action.value == "missing")
    out.print(render.plan_summary(len(plan.to_apply), n_ok, missing))


@ipvs_group.command("plan")
@click.argument("config", shell_complete=complete.configs)
@click.option("--teardown", is_flag=True,
              help="Plan what `ipvs teardown CONFIG` would do instead of `apply`.")
@common_options
@click.pass_context
def plan_command(ctx: click.Context, config: str, teardown: bool) -> int:
    """Show the operations `apply` (or `teardown`) would make: add, edit, drain, delete."""
    from lbtune.ipvs.reconcile import desired_targets, plan_director, teardown_targets

    with bulk():
        cfg = director_config(config)
        host = ipvs_host(ctx)
        verbose = runtime_of(ctx).verbose
        planned = plan_director(host, cfg, every_row=bool(verbose),
                                targets_of=teardown_targets if teardown else desired_targets)
    if runtime_of(ctx).json:
        emit_json(render.plan_document(cfg.source, len(planned.plan.to_apply),
                                       planned.plan.unchanged + planned.in_place,
                                       _rows(planned.plan), planned.warnings))
    else:
        _print_plan(planned.plan, verbose, f"plan: {cfg.source}", planned.in_place)
        _print_warnings(planned.warnings)
    return 0


def _print_warnings(warnings: Sequence[str]) -> None:
    for w in warnings:
        console().print(f"warning: {w}", markup=False)


def _applied(ctx: click.Context, done: Any, source: str, verb: str) -> int:
    from lbtune.tune.journal import lbtune_command

    s = runtime_of(ctx)
    cut = [{"object": k, "active": v} for k, v in done.cut.items()]
    if s.json:
        emit_json(render.apply_document(source, done.journal.id if done.journal else None,
                                        len(done.plan.to_apply),
                                        done.plan.unchanged + done.in_place,
                                        _rows(done.plan), cut, done.warnings))
        return 0
    out = console()
    if done.journal is None:
        out.print(render.nothing_to_change(source))
        return 0
    _print_plan(done.plan, s.verbose, f"{verb}: {source}", done.in_place)
    _print_warnings(done.warnings)
    for c in cut:
        out.print(f"warning: {c['object']} deleted at the drain timeout with {c['active']} "
                  "active connection(s)")
    out.print(f"{verb} as {done.journal.id}; undo with `{lbtune_command(s.host(), 'rollback')}`")
    return 0


def _reconcile(ctx: click.Context, config: str, teardown: bool) -> int:
    from lbtune.ipvs.reconcile import apply_director, desired_targets, teardown_targets

    with bulk():
        cfg = director_config(config)
        host = ipvs_host(ctx, changes=True)
        targets_of = teardown_targets if teardown else desired_targets
        runtime = runtime_of(ctx)
        # the record a repeated no-op is answered from (lbtune.host.ipvs.memo) is for the exact
        # run lbtune.cli.ipvs.fast answers: `ipvs apply CONFIG [--json]` on the host itself
        memo = not teardown and runtime.netns is None and not runtime.verbose
        done = apply_director(host, cfg, ipvs_state(ctx, host), targets_of=targets_of,
                              every_row=bool(runtime.verbose), memo=memo)
    return _applied(ctx, done, cfg.source, "torn down" if teardown else "applied")


@ipvs_group.command("apply")
@click.argument("config", shell_complete=complete.configs)
@common_options
@click.pass_context
def apply_command(ctx: click.Context, config: str) -> int:
    """Reconcile IPVS with CONFIG: journaled, all-or-nothing, drains before deleting."""
    return _reconcile(ctx, config, teardown=False)


@ipvs_group.command("teardown")
@click.argument("config", shell_complete=complete.configs)
@common_options
@click.pass_context
def teardown_command(ctx: click.Context, config: str) -> int:
    """Remove CONFIG's services (drained first) and VIPs; sysctls and timeouts stay."""
    return _reconcile(ctx, config, teardown=True)


@ipvs_group.command("status")
@click.argument("config", required=False, shell_complete=complete.configs)
@common_options
@click.pass_context
def status_command(ctx: click.Context, config: Optional[str]) -> int:
    """Services, real servers, weights, connections and rates; with CONFIG, drift (exit 1)."""
    from lbtune.ipvs.status import director_status

    cfg = director_config(config) if config else None
    st = director_status(ipvs_host(ctx), cfg)
    if runtime_of(ctx).json:
        doc: dict[str, Any] = {"loaded": st.loaded, "info": st.info, "timeouts": st.timeouts,
                               "daemons": st.daemons, "services": [
                                   dict(_svc_json(s)) for s in st.services]}
        if cfg is not None:
            doc["config"] = cfg.source
            doc["in_sync"] = st.in_sync
            doc["knobs"] = st.knobs
        emit_json(doc)
    else:
        _print_status(st, cfg)
    return int(ExitCode.FINDINGS) if cfg is not None and not st.in_sync else 0


def _svc_json(s: Any) -> dict[str, Any]:
    from lbtune.cli.output import jsonable

    d: dict[str, Any] = jsonable(s)
    d["active"], d["inactive"] = s.active, s.inactive
    return d


def _print_status(st: Any, cfg: Any) -> None:
    from rich.table import Table

    out = console()
    if not st.loaded:
        out.print("IPVS is not loaded in this kernel (no services)")
        return
    t = Table(box=None, pad_edge=False)
    for col in ("service", "sched/fwd", "weight", "active", "inactive", "conns", "cps",
                "in pps", "out pps", "in B/s"):
        t.add_column(col, overflow="fold", justify="left" if col.startswith(("serv", "sch"))
                     else "right")
    for s in st.services:
        flags = ",".join(s.flags)
        sched = s.scheduler + (f" {flags}" if flags else "") + \
            (f" persistent {s.persistence}s" if s.persistence else "")
        c = s.counters
        t.add_row(s.service, sched, "", str(s.active), str(s.inactive), str(c.conns),
                  str(c.cps), str(c.inpps), str(c.outpps), str(c.inbps))
        for r in s.real_servers:
            rc = r.counters
            w = str(r.weight) + (f" [{r.lower}-{r.upper}]" if r.upper else "")
            t.add_row(f"  -> {r.address}", r.forward, w, str(r.active), str(r.inactive),
                      str(rc.conns), str(rc.cps), str(rc.inpps), str(rc.outpps), str(rc.inbps))
    if st.services:
        out.print(t)
    tm = st.timeouts
    out.print(f"{len(st.services)} service(s); IPVS {st.info.version if st.info else '?'}"
              + (f"; timeouts tcp {tm.tcp} s, tcpfin {tm.tcpfin} s, udp {tm.udp} s" if tm else ""))
    for d in st.daemons:
        out.print(f"sync daemon: {d.state} on {d.ifname}, syncid {d.syncid}")
    if cfg is not None:
        for v in st.drift:
            cur = "(absent)" if v.current is None else v.current
            out.print(f"{v.status.value}: {v.kind} {v.object}: {cur} (config: {v.desired})",
                      markup=False)
        out.print(f"{cfg.source}: " + ("in sync" if st.in_sync else
                                       f"{len(st.drift)} object(s) differ: `lbtune ipvs apply`"))


@ipvs_group.command("selftest")
@click.argument("config", shell_complete=complete.configs)
@click.option("--from-netns", metavar="NS", shell_complete=complete.namespaces,
              help="Run the client side in namespace NS.")
@click.option("-n", "count", type=click.IntRange(1, 100000), default=10, show_default=True,
              help="Exchanges per service.")
@click.option("--send", type=click.Choice(["http", "none"]), default="http", show_default=True,
              help="What the client sends: an HTTP/1.0 GET, or nothing (banner services).")
@click.option("--timeout", type=click.FloatRange(0.1, 60), default=2.0, show_default=True)
@common_options
@click.pass_context
def selftest_command(ctx: click.Context, config: str, from_netns: Optional[str], count: int,
                     send: str, timeout: float) -> int:
    """Connect to every VIP service like a client: who answered, failures, DR path. Exit 1
    on any failure."""
    from lbtune.ipvs.selftest import run_selftest

    cfg = director_config(config)
    host = runtime_of(ctx).host()
    report = run_selftest(host, cfg, count, from_netns, None if send == "http" else b"",
                          timeout)
    if runtime_of(ctx).json:
        emit_json({"config": report.source, "client": report.client,
                   "level": report.level.value, "services": report.results})
    else:
        out = console()
        for r in report.results:
            dist = ", ".join(f"{a} {c}" for a, c in r.distribution) or "-"
            out.print(f"{r.level.value:<5} {r.service}: {r.reason}", markup=False)
            out.print(f"      answered by: {dist}" + (f"; unattributed {r.unattributed}"
                                                       if r.unattributed else ""), markup=False)
            for err, n in r.errors:
                out.print(f"      {n} x {err}", markup=False)
            for u in r.unanswered:
                who = f"real server {u.address}" if u.address else "not scheduled"
                out.print(f"      {who}: {u.failed} failed: {u.cause}", markup=False)
            if r.arp:
                out.print(f"      ARP for the VIP answered by: {', '.join(r.arp)}", markup=False)
        out.print(f"self-test from {report.client}: {report.level.value}")
    return int(ExitCode.FINDINGS) if report.level.value == "fail" else 0


# ------------------------------------------------------------------------------ real servers


@ipvs_group.group("realserver")
def realserver_group() -> None:
    """The DR real-server side: VIP on lo, ARP settings, verification."""


def _rs_options(f: Any) -> Any:
    opts = [
        click.option("--vip", "vips", multiple=True, required=True, metavar="VIP",
                     help="A VIP the director forwards here (repeat for more)."),
        click.option("--iface", metavar="IF", shell_complete=complete.interfaces,
                     help="Interface facing the director (default: the default route's)."),
        click.option("--dev", default="lo", show_default=True, metavar="IF",
                     shell_complete=complete.interfaces,
                     help="Where the VIP lives (lo, or an existing dummy interface)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _spec(host: Any, vips: Sequence[str], iface: Optional[str], dev: str,
          rp_filter: bool = True) -> Any:
    from lbtune.host.net.mgmt import default_route_interfaces
    from lbtune.ipvs.realserver import check_interfaces, make_spec

    if iface is None:
        found = sorted(default_route_interfaces(host) - {"lo"})
        if len(found) != 1:
            raise BadInput("--iface IF: cannot tell the director-facing interface "
                           f"(default routes via: {', '.join(found) or 'none'})")
        iface = found[0]
    spec = make_spec(vips, iface, dev, rp_filter)
    check_interfaces(host, spec)
    return spec


def _rs_apply(ctx: click.Context, spec: Any, targets: list[Any], verb: str) -> int:
    from lbtune.tune.engine import apply_plan
    from lbtune.tune.journal import lbtune_command
    from lbtune.tune.plan import make_plan

    host = runtime_of(ctx).host()
    state = ipvs_state(ctx, host)
    with state.lock():  # lock first, then read the current values and plan
        plan = make_plan(host, spec.name, targets)
        journal = apply_plan(host, plan, state)
    if runtime_of(ctx).json:
        emit_json({"vips": spec.vips, "iface": spec.iface, "dev": spec.dev,
                   "journal": journal.id if journal else None,
                   "operations": len(plan.to_apply), "unchanged": plan.unchanged,
                   "changes": _rows(plan)})
    elif journal is None:
        console().print(f"{spec.name}: nothing to change")
    else:
        _print_plan(plan, runtime_of(ctx).verbose, f"{verb}: {spec.name}")
        console().print(f"{verb} as {journal.id}; undo with `{lbtune_command(host, 'rollback')}`")
    return 0


@realserver_group.command("apply")
@_rs_options
@click.option("--keep-rp-filter", is_flag=True, help="Leave a strict rp_filter as it is.")
@common_options
@click.pass_context
def rs_apply(ctx: click.Context, vips: tuple[str, ...], iface: Optional[str], dev: str,
             keep_rp_filter: bool) -> int:
    """VIP /32 on lo, arp_ignore=1 and arp_announce=2 on all and IF, rp_filter loose if
    strict. Journaled."""
    from lbtune.ipvs.realserver import realserver_targets

    host = ipvs_host(ctx, changes=True)
    spec = _spec(host, vips, iface, dev, not keep_rp_filter)
    return _rs_apply(ctx, spec, realserver_targets(host, spec), "applied")


@realserver_group.command("teardown")
@_rs_options
@common_options
@click.pass_context
def rs_teardown(ctx: click.Context, vips: tuple[str, ...], iface: Optional[str],
                dev: str) -> int:
    """Remove the VIPs from lo (ARP settings stay; `lbtune rollback` restores them)."""
    from lbtune.ipvs.realserver import teardown_targets

    host = ipvs_host(ctx, changes=True)
    spec = _spec(host, vips, iface, dev)
    return _rs_apply(ctx, spec, teardown_targets(spec), "torn down")


@realserver_group.command("verify")
@_rs_options
@click.option("--arp-from", metavar="NS", shell_complete=complete.namespaces,
              help="Send a real ARP request for the VIP from namespace NS on the segment.")
@click.option("--client", metavar="ADDR",
              help="An IPv4 client whose packets rp_filter must pass (default: a stand-in "
                   "for clients beyond the default route).")
@common_options
@click.pass_context
def rs_verify(ctx: click.Context, vips: tuple[str, ...], iface: Optional[str], dev: str,
              arp_from: Optional[str], client: Optional[str]) -> int:
    """Check VIP placement, effective ARP values, that rp_filter passes the VIP's traffic
    from clients (the kernel's own route lookup) and (with --arp-from) that this host does
    not answer ARP for the VIP. Exit 1 on any failure."""
    from lbtune.host.endpoints.arp import arp_who_has
    from lbtune.host.net.netns import NetnsThread
    from lbtune.ipvs.realserver import check_client, verify_realserver

    host = ipvs_host(ctx)
    spec = _spec(host, vips, iface, dev)
    if client is not None:
        client = check_client(client)
    arp = None
    if arp_from is not None and spec.v4:
        with NetnsThread(arp_from) as peer:
            arp = peer.call(arp_who_has, spec.v4[0], None, 1.0)
    checks = verify_realserver(host, spec, arp, f"from netns {arp_from}" if arp_from else "",
                               client)
    failed = any(c.level.value == "fail" for c in checks)
    if runtime_of(ctx).json:
        emit_json({"vips": spec.vips, "iface": spec.iface, "dev": spec.dev, "ok": not failed,
                   "checks": checks})
    else:
        out = console()
        for c in checks:
            out.print(f"{c.level.value:<5} {c.name}: {c.reason}", markup=False)
            if c.fix and c.level.value in ("fail", "warn"):
                out.print(f"      fix: {c.fix}", markup=False)
    return int(ExitCode.FINDINGS) if failed else 0


# `agent` and `adapt` (adaptive weights), `export` (ipvsadm lines, keepalived blocks, a
# VRRP pair, a cluster director's BIRD config) and `gate` (the cluster's health gate) live in
# modules of their own, imported when one of them runs (or for help).
_LAZY = {"agent": ("lbtune.cli.ipvs.adapt", "agent_command"),
         "adapt": ("lbtune.cli.ipvs.adapt", "adapt_command"),
         "export": ("lbtune.cli.ipvs.export", "export_command"),
         "serve": ("lbtune.cli.ipvs.serve", "serve_command"),
         "gate": ("lbtune.cli.ipvs.gate", "gate_command")}  # fmt: skip
