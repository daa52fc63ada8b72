"""`lbtune plan|apply|verify|rollback|history` and `lbtune profile list|show|lint`."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import click

from lbtune.cli.main import common_options, settings_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput, ExitCode, NeedsPrivilege

IFACE = click.option(
    "--iface", metavar="IF", help="The data interface the profile's [nic.data] sections tune."
)


def _targets(ctx: click.Context, name: str, iface: Optional[str]) -> tuple[Any, Any, list[Any]]:
    from lbtune.host.inventory import discover_host
    from lbtune.tune.profile import load_profile, resolve

    s = settings_of(ctx)
    host = s.host()
    profile = load_profile(name, root=host.fs.root)
    inv = discover_host(host)
    return host, profile, resolve(profile, inv, iface)


def _state(host: Any) -> Any:
    from lbtune.tune.journal import StateDir

    return StateDir(host)


def _cur(value: Optional[str]) -> str:
    return "(absent)" if value is None else " ".join(value.split())


def _plan_rows(plan: Any) -> list[dict[str, Any]]:
    return [
        {
            "kind": c.knob.kind,
            "object": c.knob.obj,
            "current": c.current,
            "desired": c.desired,
            "action": c.action.value,
            "note": c.knob.note,
            "reason": c.target.reason,
            "key": c.target.key,
        }
        for c in plan.changes
    ]


def _print_plan(plan: Any, verbose: int) -> None:
    from rich.table import Table

    t = Table(box=None, pad_edge=False, title=f"plan: {plan.profile}", title_justify="left")
    for col in ("knob", "object", "current", "", "target", "note"):
        t.add_column(col, overflow="fold")
    shown = 0
    for c in plan.changes:
        if c.action.value in ("ok", "skipped") and not verbose:
            continue
        shown += 1
        arrow = {"change": "->", "ok": "==", "missing": "??", "skipped": "--"}[c.action.value]
        note = c.knob.note or {
            "missing": "not on this host",
            "skipped": "host-global: not changed from a namespace",
        }.get(c.action.value, "")
        t.add_row(c.knob.kind, c.knob.obj, _cur(c.current), arrow, c.desired, note)
    out = console()
    if shown:
        out.print(t)
    n_ok = sum(1 for c in plan.changes if c.action.value == "ok")
    out.print(
        f"{len(plan.to_apply)} change(s), {n_ok} already in place"
        + (", reboot required for kernel command line changes" if plan.needs_reboot else "")
    )


@click.command("plan")
@click.argument("profile")
@IFACE
@common_options
@click.pass_context
def plan_command(ctx: click.Context, profile: str, iface: Optional[str]) -> int:
    """Show what applying PROFILE would change: knob, object, current -> target, note."""
    from lbtune.tune.plan import make_plan

    host, prof, targets = _targets(ctx, profile, iface)
    plan = make_plan(host, prof.name, targets)
    if settings_of(ctx).json:
        emit_json({"profile": prof.name, "needs_reboot": plan.needs_reboot,
                   "changes": _plan_rows(plan)})  # fmt: skip
    else:
        _print_plan(plan, settings_of(ctx).verbose)
    return 0


def _guard_management_link(host: Any, plan: Any, yes: bool) -> None:
    from lbtune.host.mgmt import management_interfaces

    risky = sorted(
        {c.knob.interface for c in plan.to_apply if c.knob.disruptive and c.knob.interface}
        & management_interfaces(host)
    )
    if not risky or yes:
        return
    what = ", ".join(risky)
    if sys.stdin.isatty():
        if click.confirm(
            f"Ring/channel changes reset the link on {what}, which carries the default route "
            "or this SSH session. Continue?",
            default=False,
        ):
            return
        raise click.exceptions.Abort()
    raise BadInput(f"ring/channel changes would reset the management link {what}: pass --yes")


@click.command("apply")
@click.argument("profile")
@IFACE
@click.option("--persist", is_flag=True, help="Also write sysctl.d, a boot unit, bootloader.")
@click.option("--yes", is_flag=True, help="Do not ask before resetting the management link.")
@click.option("--boot", is_flag=True, hidden=True, help="Run by lbtune-boot.service.")
@common_options
@click.pass_context
def apply_command(
    ctx: click.Context, profile: str, iface: Optional[str], persist: bool, yes: bool, boot: bool
) -> int:
    """Apply PROFILE: journal the current values, change them, verify; undo all on failure."""
    from lbtune.tune.engine import apply_plan
    from lbtune.tune.plan import make_plan

    s = settings_of(ctx)
    host, prof, targets = _targets(ctx, profile, iface)
    if host.is_live and os.geteuid() != 0:
        raise NeedsPrivilege("apply changes kernel settings: run as root")
    plan = make_plan(host, prof.name, targets)
    if plan.needs_reboot and not persist and not boot:
        raise BadInput(
            "the plan changes the kernel command line, which only takes effect through the "
            "bootloader: add --persist (or remove [cmdline] from the profile)"
        )
    if boot:  # at boot the bootloader already has the command line; never rewrite it
        from lbtune.tune.plan import Plan

        plan = Plan(plan.profile, tuple(c for c in plan.changes if c.knob.kind != "cmdline"))
    _guard_management_link(host, plan, yes or boot)
    hook = None
    if persist:
        from lbtune.tune.persist import persist_plan

        hook = persist_plan
    journal = apply_plan(host, plan, _state(host), persist=hook)
    result = {
        "profile": prof.name,
        "journal": journal.id if journal else None,
        "changed": len(plan.to_apply),
        "persisted": bool(persist and journal),
        "needs_reboot": plan.needs_reboot,
        "changes": _plan_rows(plan),
    }
    if s.json:
        emit_json(result)
    elif not boot:
        if journal is None:
            console().print(f"{prof.name}: nothing to change")
        else:
            _print_plan(plan, s.verbose)
            console().print(f"applied as {journal.id}; undo with `lbtune rollback`")
    return 0


@click.command("verify")
@click.argument("profile", required=False)
@IFACE
@common_options
@click.pass_context
def verify_command(ctx: click.Context, profile: Optional[str], iface: Optional[str]) -> int:
    """Check that PROFILE (default: the last apply) is in effect. Exit 1 on drift.

    Knobs this host does not have (an older kernel, a driver without rings) are listed as
    missing but are not drift.
    """
    from lbtune.tune.engine import last_applied, verify_journal, verify_targets

    s = settings_of(ctx)
    if profile:
        host, prof, targets = _targets(ctx, profile, iface)
        verdicts = verify_targets(host, targets)
        name = prof.name
    else:
        host = s.host()
        journal = last_applied(_state(host))
        if journal is None:
            raise BadInput("nothing applied yet: name a profile (`lbtune verify PROFILE`)")
        verdicts = verify_journal(host, journal)
        name = f"{journal.profile} ({journal.id})"
    bad = [v for v in verdicts if v.status.value == "drift"]
    missing = [v for v in verdicts if v.status.value == "missing"]
    if s.json:
        emit_json({"profile": name, "in_sync": not bad, "knobs": verdicts})
    else:
        from rich.table import Table

        t = Table(box=None, pad_edge=False)
        for col in ("status", "knob", "object", "current", "target"):
            t.add_column(col, overflow="fold")
        for v in verdicts:
            if v in bad or v in missing or s.verbose:
                t.add_row(v.status.value, v.kind, v.obj, _cur(v.current), v.desired)
        out = console()
        if bad or missing or s.verbose:
            out.print(t)
        n_ok = sum(1 for v in verdicts if v.status.value == "ok")
        out.print(
            f"{name}: {n_ok} ok, {len(bad)} drifted, {len(missing)} missing (not on this host)"
        )
    return int(ExitCode.FINDINGS) if bad else 0


@click.command("rollback")
@click.option("--to", "to", metavar="ID", help="Undo every apply back to and including ID.")
@common_options
@click.pass_context
def rollback_command(ctx: click.Context, to: Optional[str]) -> int:
    """Restore the values (and files) the last apply replaced, exactly."""
    from lbtune.tune.engine import rollback

    s = settings_of(ctx)
    host = s.host()
    if host.is_live and os.geteuid() != 0:
        raise NeedsPrivilege("rollback changes kernel settings: run as root")
    done = rollback(host, _state(host), to=to)
    if s.json:
        emit_json({"rolled_back": [j.id for j in done]})
    else:
        for j in done:
            console().print(f"rolled back {j.id} ({j.profile}): {len(j.knobs)} value(s) restored")
    return 0


@click.command("history")
@common_options
@click.pass_context
def history_command(ctx: click.Context) -> int:
    """List applies (journals), newest last, with their state."""
    import time

    s = settings_of(ctx)
    journals = _state(s.host()).journals()
    if s.json:
        emit_json({"journals": journals})
        return 0
    if not journals:
        console().print("no applies recorded")
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        console().print(f"{j.id}  {when}  {j.state:<20} {j.profile}  {len(j.knobs)} knob(s)")
    return 0


@click.group("profile")
def profile_group() -> None:
    """List, show and lint tuning profiles."""


@profile_group.command("list")
@common_options
@click.pass_context
def profile_list(ctx: click.Context) -> int:
    """The profiles lbtune can apply."""
    from lbtune.tune.profile import list_profiles

    s = settings_of(ctx)
    infos = list_profiles(root=s.root)
    if s.json:
        emit_json({"profiles": infos})
    else:
        for p in infos:
            console().print(f"{p.name:<20} {p.description}")
    return 0


@profile_group.command("show")
@click.argument("name")
@click.option("--resolved", is_flag=True, help="Resolve against this host (values and CPUs).")
@IFACE
@common_options
@click.pass_context
def profile_show(ctx: click.Context, name: str, resolved: bool, iface: Optional[str]) -> int:
    """Print a profile, with inherited values merged (and resolved for this host)."""
    from lbtune.tune.profile import load_profile

    s = settings_of(ctx)
    if resolved:
        _, prof, targets = _targets(ctx, name, iface)
        rows = [
            {
                "key": t.key,
                "kind": t.knob.kind,
                "object": t.knob.obj,
                "value": t.value,
                "mode": t.mode.value,
                "reason": t.reason,
            }
            for t in targets
        ]
        if s.json:
            emit_json({"profile": prof.name, "targets": rows})
        else:
            for r in rows:
                console().print(f"{r['kind']:<12} {r['object']:<40} {r['value']:<16} {r['reason']}")
        return 0
    prof = load_profile(name, root=s.root)
    if s.json:
        emit_json(prof.as_dict())
    else:
        console().print(prof.to_text(), markup=False)
    return 0


@profile_group.command("lint")
@click.argument("name")
@common_options
@click.pass_context
def profile_lint(ctx: click.Context, name: str) -> int:
    """Flag harmful or pointless values in a profile, with the reason. Exit 1 on findings."""
    from lbtune.tune.lint import lint_profile
    from lbtune.tune.profile import load_profile

    s = settings_of(ctx)
    prof = load_profile(name, root=s.root)
    findings = lint_profile(prof)
    if s.json:
        emit_json({"profile": prof.name, "findings": findings})
    else:
        for f in findings:
            console().print(f"{f.severity:<5} {f.key} = {f.value}: {f.reason}", markup=False)
        console().print(f"{prof.name}: {len(findings)} finding(s)")
    return int(ExitCode.FINDINGS) if findings else 0
