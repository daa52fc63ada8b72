"""`lbtune plan|apply|verify|rollback|history` and `lbtune profile list|show|lint`.

Parse, call `lbtune.tune.service`, render. Every policy (root, capture roots, --persist,
--boot, the management-link guard, the lock) is the service's.
"""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import echo, emit_json, text_table
from lbtune.errors import BadInput, ExitCode

IFACE = click.option(
    "--iface",
    metavar="IF",
    shell_complete=complete.interfaces,
    help="The data interface the profile's [nic.data] sections tune.",
)


def _cur(value: Optional[str]) -> str:
    return "(absent)" if value is None else " ".join(value.split())


def _plan_rows(plan: Any) -> list[dict[str, Any]]:
    return [
        {
            "kind": c.knob.kind,
            "object": c.knob.obj,
            "key": c.target.key,
            "current": c.current,
            "desired": c.desired,
            "action": c.action.value,
            "note": c.why or c.knob.note,
            "reason": c.target.reason,
        }
        for c in plan.changes
    ]


def _print_plan(plan: Any, verbose: int) -> None:
    rows = []
    for c in plan.changes:
        if c.action.value in ("ok", "skipped") and not verbose:
            continue
        arrow = {"change": "->", "ok": "==", "missing": "??", "skipped": "--"}[c.action.value]
        note = c.why or c.knob.note or {
            "missing": "not on this host",
            "skipped": "host-global: judged on the host",
        }.get(c.action.value, "")
        if c.action.value == "change" and c.current is None:
            note = "created by the channel change"
        rows.append((c.knob.kind, c.knob.obj, _cur(c.current), arrow, c.desired, note))
    if rows:
        echo(f"plan: {plan.profile}")
        echo(text_table(("knob", "object", "current", "", "target", "note"), rows))
    n_ok = sum(1 for c in plan.changes if c.action.value == "ok")
    echo(
        f"{len(plan.to_apply)} change(s), {n_ok} already in place"
        + (", reboot required for kernel command line changes" if plan.needs_reboot else "")
    )


@click.command("plan")
@click.argument("profile", shell_complete=complete.profiles)
@IFACE
@common_options
@click.pass_context
def plan_command(ctx: click.Context, profile: str, iface: Optional[str]) -> int:
    """Show what applying PROFILE would change: knob, object, current -> target, note."""
    from lbtune.tune.service import plan_profile

    s = runtime_of(ctx)
    plan = plan_profile(s, profile, iface)
    if s.json:
        emit_json({"profile": plan.profile, "needs_reboot": plan.needs_reboot,
                   "changes": _plan_rows(plan)})  # fmt: skip
    else:
        _print_plan(plan, s.verbose)
        _print_skipped(s, plan)
    return 0


def _print_skipped(s: Any, plan: Any) -> None:
    """The host-global values a namespace run left alone, always (not only with -v)."""
    from lbtune.tune.service import skipped_line

    line = skipped_line(s.host(), plan)
    if line:
        echo(line)


@click.command("apply")
@click.argument("profile", shell_complete=complete.profiles)
@IFACE
@click.option("--persist", is_flag=True, help="Also write sysctl.d, a boot unit, bootloader.")
@click.option("--yes", is_flag=True, help="Do not ask before resetting the management link.")
@click.option("--boot", is_flag=True, hidden=True, help="Run by lbtune-boot.service.")
@common_options
@click.pass_context
def apply_command(
    ctx: click.Context, profile: str, iface: Optional[str], persist: bool, yes: bool, boot: bool
) -> int:
    """Apply PROFILE: journal the current values, change them, verify; undo all on failure.

    Ctrl-C or SIGTERM during the apply restores everything (exit 4); once the apply is
    committed it stays (exit 0, one line on stderr).
    """
    from lbtune.tune.journal import lbtune_command
    from lbtune.tune.service import NeedsConfirmation, apply_profile

    s = runtime_of(ctx)
    result = apply_profile(s, profile, iface, persist=persist, yes=yes, boot=boot)
    if isinstance(result, NeedsConfirmation):
        if not s.interactive or s.json:
            raise BadInput(result.refusal)
        if not click.confirm(result.question, default=False):
            raise BadInput("not applied: the management link was not confirmed")
        result = apply_profile(s, profile, iface, persist=persist, yes=True, boot=boot)
        assert not isinstance(result, NeedsConfirmation)
    plan, journal = result.plan, result.journal
    if s.json:
        emit_json({
            "profile": result.profile,
            "journal": journal.id if journal else None,
            "changed": len(plan.to_apply),
            "persisted": result.persisted,
            "needs_reboot": plan.needs_reboot,
            "changes": _plan_rows(plan),
        })  # fmt: skip
    elif not boot:
        if journal is None:
            echo(f"{result.profile}: nothing to change")
        else:
            _print_plan(plan, s.verbose)
            echo(f"applied as {journal.id}; undo with `{lbtune_command(s.host(), 'rollback')}`")
        _print_skipped(s, plan)
    from lbtune.host.signals import late_signals

    late = late_signals()
    if late and journal is not None:
        undo = lbtune_command(s.host(), "rollback")
        click.echo(f"lbtune: {late[0]} arrived after apply {journal.id} was committed: it "
                   f"stays applied (`{undo}` undoes it)", err=True)  # fmt: skip
    return 0


@click.command("verify")
@click.argument("profile", required=False, shell_complete=complete.profiles)
@IFACE
@common_options
@click.pass_context
def verify_command(ctx: click.Context, profile: Optional[str], iface: Optional[str]) -> int:
    """Check that PROFILE (default: the last apply) is in effect. Exit 1 on drift.

    Knobs this host does not have (an older kernel, a driver without rings) are listed as
    missing but are not drift. In a namespace (--netns, or a namespace's capture) host-global
    knobs are counted apart: judged on the host, neither missing nor drift.
    """
    from lbtune.tune.service import verify_profile

    s = runtime_of(ctx)
    name, checks = verify_profile(s, profile, iface)
    bad = [v for v in checks if v.status.value == "drift"]
    missing = [v for v in checks if v.status.value == "missing"]
    if s.json:
        emit_json({"profile": name, "in_sync": not bad, "knobs": checks})
    else:
        rows = [(v.status.value, v.kind, v.object, _cur(v.current), v.desired)
                for v in checks if v in bad or v in missing or s.verbose]  # fmt: skip
        if rows:
            echo(text_table(("status", "knob", "object", "current", "target"), rows))
        n_ok = sum(1 for v in checks if v.status.value == "ok")
        n_global = sum(1 for v in checks if v.status.value == "skipped")
        echo(f"{name}: {n_ok} ok, {len(bad)} drifted, {len(missing)} missing (not on this host)"
             + (f", {n_global} host-global (judged on the host)" if n_global else ""))
    return int(ExitCode.FINDINGS) if bad else 0


@click.command("rollback")
@click.option("--to", "to", metavar="ID", help="Undo every apply back to and including ID.")
@common_options
@click.pass_context
def rollback_command(ctx: click.Context, to: Optional[str]) -> int:
    """Restore the values (and files) the last apply replaced, exactly."""
    from lbtune.tune.service import rollback_applies

    s = runtime_of(ctx)
    done = rollback_applies(s, to)
    if s.json:
        emit_json({"rolled_back": [j.id for j in done]})
    else:
        for j in done:
            echo(f"rolled back {j.id} ({j.profile}): {len(j.knobs)} value(s) restored")
    return 0


def _journal_json(j: Any) -> dict[str, Any]:
    return {
        "id": j.id,
        "profile": j.profile,
        "created": j.created,
        "state": j.state,
        "hostname": j.hostname,
        "netns": j.netns,
        "root": j.root,
        "verified": j.verified,  # False: no digest (an older lbtune's), never restored
        "error": j.error,
        "knobs": [
            {
                "kind": k.kind,
                "object": k.obj,
                "key": k.key,
                "original": k.original,
                "desired": k.desired,
            }
            for k in j.knobs
        ],
        "files": [f.path for f in j.files],
    }


@click.command("history")
@common_options
@click.pass_context
def history_command(ctx: click.Context) -> int:
    """List applies (journals), newest last, with their state."""
    import time

    from lbtune.tune.service import history

    s = runtime_of(ctx)
    journals = history(s)
    if s.json:
        emit_json({"journals": [_journal_json(j) for j in journals]})
        return 0
    if not journals:
        echo("no applies recorded")
    for j in journals:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j.created))
        echo(f"{j.id}  {when}  {j.state:<20} {j.profile}  {len(j.knobs)} knob(s)")
    return 0


@click.group("profile")
def profile_group() -> None:
    """List, show and lint tuning profiles."""


def _profile_root(ctx: click.Context) -> str:
    """Where profiles are looked up: the host tree --root names (a capture unpacked)."""
    return runtime_of(ctx).tree.path


@profile_group.command("list")
@common_options
@click.pass_context
def profile_list(ctx: click.Context) -> int:
    """The profiles lbtune can apply."""
    from lbtune.tune.profile import list_profiles

    s = runtime_of(ctx)
    infos = list_profiles(root=_profile_root(ctx))
    if s.json:
        emit_json({"profiles": infos})
    else:
        for p in infos:
            text = p.description if p.error is None else f"(broken: {p.error})"
            echo(f"{p.name:<20} {text}")
    return 0


@profile_group.command("show")
@click.argument("name", shell_complete=complete.profiles)
@click.option("--resolved", is_flag=True, help="Resolve against this host (values and CPUs).")
@IFACE
@common_options
@click.pass_context
def profile_show(ctx: click.Context, name: str, resolved: bool, iface: Optional[str]) -> int:
    """Print a profile, with inherited values merged (and resolved for this host)."""
    from lbtune.tune.profile import load_profile

    s = runtime_of(ctx)
    if resolved:
        from lbtune.tune.service import targets

        prof, tgts = targets(s, name, iface)
        rows = [
            {"kind": t.knob.kind, "object": t.knob.obj, "key": t.key, "desired": t.value,
             "mode": t.mode.value, "reason": t.reason}
            for t in tgts
        ]  # fmt: skip
        if s.json:
            emit_json({"profile": prof.name, "targets": rows})
        else:
            for r in rows:
                echo(f"{r['kind']:<12} {r['object']:<40} {r['desired']:<16} {r['reason']}")
        return 0
    prof = load_profile(name, root=_profile_root(ctx))
    if s.json:
        emit_json(prof.as_dict())
    else:
        echo(prof.to_text())  # echo shows a capture's name, not its temporary directory
    return 0


@profile_group.command("lint")
@click.argument("name", shell_complete=complete.profiles)
@IFACE
@common_options
@click.pass_context
def profile_lint(ctx: click.Context, name: str, iface: Optional[str]) -> int:
    """Flag harmful or pointless values in a profile, with the reason, checked against the
    host (--root) too: ring maximums, CPUs left for housekeeping. Exit 1 on findings."""
    from lbtune.host.inventory import LazyInventory
    from lbtune.tune.lint import lint_profile
    from lbtune.tune.profile import load_profile

    s = runtime_of(ctx)
    prof = load_profile(name, root=_profile_root(ctx))
    findings = lint_profile(prof, LazyInventory(s.host()), iface)
    if s.json:
        emit_json({"profile": prof.name, "findings": findings})
    else:
        for f in findings:
            echo(f"{f.level.value:<5} {f.key} = {f.desired}: {f.reason}")
        echo(f"{prof.name}: {len(findings)} finding(s)")
    return int(ExitCode.FINDINGS) if findings else 0
