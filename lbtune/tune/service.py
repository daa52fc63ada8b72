"""The tuning commands as engine calls: plan, apply, verify, rollback and history of a
profile on the host a `Runtime` names, with every policy decided here, not in a front end.

Policy: a capture (tarball) root is read-only; `--netns` with `--persist` is refused (the
boot-time files are the host's, not the namespace's); changing the live host needs root;
kernel command line changes need `--persist`; at boot (`--boot`) the command line is left to
the bootloader; link-resetting changes on the management interface need a confirmation,
returned as `NeedsConfirmation` for the front end to ask (or refuse). Apply takes the lock
FIRST, then reads state, discovers, plans, journals and applies, so two runs never both
apply. Front ends (CLI, TUI, tests) parse, call and render; nothing here prompts.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

from lbtune.errors import BadInput, NeedsPrivilege
from lbtune.host.host import Host
from lbtune.host.runtime import Runtime
from lbtune.tune.engine import (
    KnobCheck,
    PersistHook,
    apply_plan,
    last_applied,
    rollback,
    verify_journal,
    verify_targets,
)
from lbtune.tune.journal import Journal, StateDir, lbtune_command
from lbtune.tune.plan import Action, Plan, Target, make_plan

if TYPE_CHECKING:
    from lbtune.tune.profile import Profile


@dataclass(frozen=True)
class NeedsConfirmation:
    """Apply stopped before changing anything: a person must agree first (or pass --yes)."""

    question: str  # for an interactive front end
    refusal: str  # the one-line error when nobody can be asked
    interfaces: tuple[str, ...]


@dataclass(frozen=True)
class ApplyResult:
    profile: str
    plan: Plan
    journal: Optional[Journal]  # None: nothing to change
    persisted: bool


def _writable_host(runtime: Runtime, verb: str) -> Host:
    """The host `verb` may change: never a capture, root privilege for the live one."""
    if runtime.tree.is_capture:
        raise BadInput(
            f"{verb}: {runtime.tree.source} is a capture, which is read-only: "
            "unpack it to a directory to experiment on a copy"
        )
    host: Host = runtime.host()  # refuses --netns with a --root tree
    if host.is_live and os.geteuid() != 0:
        raise NeedsPrivilege(f"{verb} changes kernel settings: run as root")
    return host


def state_dir(runtime: Runtime, host: Host) -> StateDir:
    return StateDir(host, runtime.state_dir)


def targets(runtime: Runtime, name: str, iface: Optional[str]) -> tuple[Profile, list[Target]]:
    """The profile and its targets on the runtime's host (discovering only what it needs)."""
    from lbtune.host.inventory import LazyInventory
    from lbtune.tune.profile import load_profile, resolve

    host = runtime.host()
    profile = load_profile(name, root=host.fs.root)
    tgts = resolve(profile, LazyInventory(host), iface, in_netns=host.view_netns is not None)
    return profile, refuse_unknown_sysctls(host, tgts)


def refuse_unknown_sysctls(host: Host, tgts: list[Target]) -> list[Target]:
    """`tgts`, or BadInput naming the first sysctl this host's kernel does not have (see
    SysctlKnob.unknown): refused at once, before anything is read or planned."""
    from lbtune.tune.knobs.sysctl import SysctlKnob

    for t in tgts:
        if isinstance(t.knob, SysctlKnob):
            problem = t.knob.unknown(host)
            if problem is not None:
                raise BadInput(problem)
    return tgts


def plan_profile(runtime: Runtime, name: str, iface: Optional[str]) -> Plan:
    """The plan of profile `name`; NeedsPrivilege when a namespace can take none of it."""
    host = runtime.host()
    profile, tgts = targets(runtime, name, iface)
    plan = make_plan(host, profile.name, tgts)
    _refuse_all_skipped(host, plan)
    return plan


def skipped_line(host: Host, plan: Plan) -> str:
    """The host-global values a namespace's view skipped, and what to do about each on the
    host ("" when none). A value the host already has in the profile's terms (its mode: at
    least/at most) is "in place"; a command to paste is given only for a value that must
    change, at the value the mode makes of the host's (never below a higher host value); a
    value the view cannot read is given as a bound, never as a command."""
    from lbtune.tune.plan import Mode, in_place

    skipped = [c for c in plan.changes if c.action is Action.SKIPPED]
    if not skipped:
        return ""
    names = []
    for c in skipped:
        what = c.knob.ident
        if c.knob.kind == "sysctl":
            obj = c.knob.obj
            if in_place(c):
                what = f"{obj} (in place on the host: {_quoted(_one_line(c.current))})"
            elif c.current is None and c.target.mode is not Mode.SET:
                bound = "at least" if c.target.mode is Mode.RAISE else "at most"
                what = f"{obj} (on the host: {bound} {_quoted(c.desired)}; not readable here)"
            else:
                what = f"{obj} (on the host: sysctl -w {obj}={_quoted(c.desired)})"
        names.append(what)
    where = f"namespace {host.view_netns}" if host.view_netns else "a namespace"
    return (
        f"{len(skipped)} skipped: host-global, {where} cannot change "
        f"{'it' if len(skipped) == 1 else 'them'}: " + "; ".join(names)
    )


def _one_line(value: Optional[str]) -> str:
    return " ".join((value or "").split())


def _quoted(value: str) -> str:
    value = _one_line(value)
    return f'"{value}"' if " " in value else value


def _refuse_all_skipped(host: Host, plan: Plan) -> None:
    """A namespace run of a profile of which nothing is the namespace's: every value is
    host-global (skipped) or absent, none changes or is already in place. Exit 3 (needs a
    capability this host does not have) rather than "nothing to change" while the fault the
    profile was written for goes on."""
    from lbtune.tune.plan import in_place

    pending = [c for c in plan.changes if c.action is Action.SKIPPED and not in_place(c)]
    if host.view_netns is None or not pending:
        return  # (host-global values the host already has in the profile's terms are done)
    if any(c.action in (Action.CHANGE, Action.OK) for c in plan.changes):
        return
    raise NeedsPrivilege(
        f"{plan.profile}: nothing in it can be applied from a namespace; "
        f"{skipped_line(host, plan)}"
    )


def _management_guard(host: Host, plan: Plan) -> Optional[NeedsConfirmation]:
    from lbtune.host.net.mgmt import management_interfaces

    risky = {c.knob.interface for c in plan.to_apply if c.knob.disruptive and c.knob.interface}
    if not risky:
        return None
    hit = tuple(sorted(str(i) for i in risky & management_interfaces(host)))
    if not hit:
        return None
    what = ", ".join(hit)
    return NeedsConfirmation(
        question=f"Ring, channel or pause changes reset the link on {what}, which carries the "
        "default route or this SSH session. Continue?",
        refusal=f"ring, channel or pause changes would reset the management link {what}: "
        "pass --yes",
        interfaces=hit,
    )


def apply_profile(
    runtime: Runtime,
    name: str,
    iface: Optional[str] = None,
    persist: bool = False,
    yes: bool = False,
    boot: bool = False,
) -> Union[ApplyResult, NeedsConfirmation]:
    """Apply profile `name` on the runtime's host, or say why a person must confirm first.

    Raises BadInput (capture root, --netns with --persist, cmdline without --persist, a bad
    profile), NeedsPrivilege, Busy (another run holds the lock), Interrupted (an earlier apply
    must be rolled back first), RolledBack / RollbackIncomplete (a change failed).
    """
    if persist and runtime.netns is not None:
        raise BadInput(
            "--persist cannot be used with --netns: the boot-time files (sysctl.d, the boot "
            "unit, the bootloader) belong to the host, and a namespace does not outlive a "
            "reboot; re-apply in the namespace when it is created instead"
        )
    from lbtune.host.inventory import LazyInventory
    from lbtune.tune.profile import load_profile, resolve

    host = _writable_host(runtime, "apply")
    profile = load_profile(name, root=host.fs.root)
    state = state_dir(runtime, host)
    with state.lock():  # before reading anything the plan depends on
        stale = state.interrupted()
        if stale is not None:
            from lbtune.tune.engine import Interrupted

            raise Interrupted(
                f"apply {stale.id} ({stale.profile}) was interrupted; run "
                f"`{lbtune_command(host, 'rollback')}` first"
            )
        tgts = resolve(profile, LazyInventory(host), iface, in_netns=host.view_netns is not None)
        tgts = refuse_unknown_sysctls(host, tgts)
        plan = make_plan(host, profile.name, tgts)
        _refuse_all_skipped(host, plan)
        if plan.needs_reboot and not persist and not boot:
            raise BadInput(
                "the plan changes the kernel command line, which only takes effect through the "
                "bootloader: add --persist (or remove [cmdline] from the profile)"
            )
        if boot:  # at boot the bootloader already has the command line; never rewrite it
            plan = Plan(plan.profile, tuple(c for c in plan.changes if c.knob.kind != "cmdline"))
        if persist:  # every file --persist touches, checked before the first change
            from lbtune.tune.persist import check_persist_paths

            check_persist_paths(host, plan)
        if not (yes or boot):
            confirm = _management_guard(host, plan)
            if confirm is not None:
                return confirm
        hook: Optional[PersistHook] = None
        if persist:
            from lbtune.tune.persist import persist_plan

            hook = functools.partial(persist_plan, iface=iface, profile_ref=name)
        journal = apply_plan(host, plan, state, persist=hook)
    return ApplyResult(profile.name, plan, journal, bool(persist and journal))


def verify_profile(
    runtime: Runtime, name: Optional[str], iface: Optional[str]
) -> tuple[str, list[KnobCheck]]:
    """(what was checked, one check per knob): profile `name`, else the last apply."""
    host = runtime.host()
    if name:
        profile, tgts = targets(runtime, name, iface)
        return profile.name, verify_targets(host, tgts)
    journal = last_applied(state_dir(runtime, host))
    if journal is None:
        raise BadInput("nothing applied yet: name a profile (`lbtune verify PROFILE`)")
    return f"{journal.profile} ({journal.id})", verify_journal(host, journal)


def rollback_applies(runtime: Runtime, to: Optional[str] = None) -> list[Journal]:
    """Restore what the newest apply (or every apply back to `to`) replaced."""
    host = _writable_host(runtime, "rollback")
    return rollback(host, state_dir(runtime, host), to=to)


def history(runtime: Runtime) -> list[Journal]:
    host = runtime.host()
    return state_dir(runtime, host).journals()
