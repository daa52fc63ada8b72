"""`lbtune lab up|run|down|status`: the embedded IPVS DR lab in the User-Mode-Linux kernel;
`lab up --vm` keeps the VM guest (Debian's kernel under qemu) up instead."""

from __future__ import annotations

from typing import Optional

import click

from lbtune.cli.lab.common import int_list, run_with_progress
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput, ExitCode


@click.group("lab")
def lab_group() -> None:
    """The embedded lab: client, IPVS DR director and nginx real servers in the UML kernel."""


@lab_group.command("run")
@click.option("--mode", type=click.Choice(["dr", "proxy"]), default="dr", show_default=True,
              help="dr: IPVS direct routing; proxy: HAProxy in the director's place.")
@click.option("--scheduler", default="rr", show_default=True, metavar="NAME",
              help="IPVS scheduler (rr, wrr, lc, wlc, sh, ...).")
@click.option("--servers", type=int, default=3, show_default=True, help="Real servers (1-32).")
@click.option("--weights", metavar="W1,W2,..", help="One weight per real server (default 1).")
@click.option("--duration", type=float, default=10.0, show_default=True,
              help="Seconds of load.")
@click.option("--threads", type=int, default=1, show_default=True, help="wrk threads.")
@click.option("--connections", type=int, default=12, show_default=True,
              help="Concurrent keep-alive connections.")
@click.option("--keepalive/--no-keepalive", default=True, show_default=True,
              help="Keep connections open; --no-keepalive: a new connection per request, so "
                   "the balancer schedules every request.")
@click.option("--tool", type=click.Choice(["auto", "wrk", "ab"]), default="auto",
              show_default=True, help="Load tool (auto: wrk, else ab).")
@click.option("--fault", type=click.Choice(["wrong-arp"]),
              help="Break something on purpose: wrong-arp resets the last real server's ARP "
                   "sysctls (the checklist stops the run before any load).")
@click.option("--no-diagnose", is_flag=True, help="Skip `lbtune diagnose` of the director.")
@click.option("--adaptive", is_flag=True,
              help="The adaptive-weights experiment instead: rr, wlc and `lbtune ipvs adapt` "
                   "on real servers of unequal capacity with a mixed workload "
                   "(docs/ipvs.md); --duration is per scheme.")
@click.option("--rates", metavar="M1,M2,..",
              help="--adaptive: egress limit per real server in Mbit/s (default 60,60,15).")
@click.option("--schemes", metavar="LIST",
              help="--adaptive: schemes to compare (default rr,wlc,adapt).")
@click.option("--vm", is_flag=True, hidden=True)  # refused in one line: runs are UML-only
@common_options
@click.pass_context
def run_command(
    ctx: click.Context, mode: str, scheduler: str, servers: int, weights: Optional[str],
    duration: float, threads: int, connections: int, keepalive: bool, tool: str,
    fault: Optional[str], no_diagnose: bool, adaptive: bool, rates: Optional[str],
    schemes: Optional[str], vm: bool,
) -> int:  # fmt: skip
    """Build the lab, prepare and check every role, run a bounded load, report.

    Exit 0 when every real server served and no request failed, 1 when a check, the
    self-test or the load failed, 3 when the lab kernel is unavailable.
    """
    from lbtune.lab.experiments.scenario import ScenarioConfig
    from lbtune.lab.launch import run_lab

    s = runtime_of(ctx)
    if vm:
        raise BadInput("lab run runs in the UML guest only (IPVS built in); --vm is for lab up")
    if s.netns or s.root != "/":
        raise BadInput("lab run builds its own namespaces in the lab kernel: no --netns/--root")
    if adaptive:
        from click.core import ParameterSource

        from lbtune.cli.lab.adaptive import run_adaptive_command

        own = ("mode", "scheduler", "servers", "weights", "threads", "keepalive", "tool",
               "fault", "no_diagnose")  # fmt: skip
        given = [n for n in own if ctx.get_parameter_source(n) is ParameterSource.COMMANDLINE]
        if given:
            raise BadInput(f"--adaptive runs its own experiment: --{given[0].replace('_', '-')} "
                           "does not apply (it takes --rates, --schemes, --duration, "
                           "--connections)")  # fmt: skip
        return run_adaptive_command(ctx, rates, schemes, duration, connections)
    if rates or schemes:
        raise BadInput("--rates and --schemes belong to --adaptive")
    config = ScenarioConfig(
        mode=mode, scheduler=scheduler, servers=servers,
        weights=int_list(weights, "--weights", "1,3"),
        duration=duration, threads=threads, connections=connections, keepalive=keepalive,
        tool=tool, fault=fault, diagnose=not no_diagnose,
    )  # fmt: skip
    result = run_with_progress(run_lab, config)
    if s.json:
        emit_json(result.to_json())
    else:
        from lbtune.cli.lab.report import render_result

        render_result(console(), result)
    return 0 if result.ok else int(ExitCode.FINDINGS)


@lab_group.command("up")
@click.option("--vm", is_flag=True,
              help="The VM guest (Debian's kernel under qemu, 4 CPUs, 2 NUMA nodes, multi-queue "
                   "NICs) instead of the UML one; `lab run` does not use it. The boot takes "
                   "seconds (KVM) to minutes (TCG); progress on stderr.")
@common_options
@click.pass_context
def up_command(ctx: click.Context, vm: bool) -> int:
    """Boot a lab guest that stays up: later `lab run`s use it without booting.

    Exit 0 when it is up, 6 when a lab is already up or coming up, 3 when the backend
    cannot run here (no lab kernel, VM image, qemu or root), 70 when the boot failed."""
    from lbtune.lab.guests import session

    s = runtime_of(ctx)
    if s.netns or s.root != "/":
        raise BadInput("lab up boots a guest: no --netns/--root")
    reaped = _reap(s.json)
    lab = session.up("vm" if vm else "uml", on_progress=_progress if vm else None)
    if s.json:
        emit_json({"up": True, **lab.to_json(), **reaped})
    elif lab.backend == "vm":
        console().print(
            f"lab is up: vm backend, kernel {lab.kernel}, accelerator {lab.accelerator} "
            f"({lab.accelerator_reason}), booted in {lab.boot_seconds or 0:.0f} s (supervisor "
            f"pid {lab.supervisor}); `lbtune lab down` stops it",
            soft_wrap=True,  # one line per fact, however long the accelerator's reason
        )
    else:
        console().print(
            f"lab is up (supervisor pid {lab.supervisor}); `lbtune lab run` uses it, "
            "`lbtune lab down` stops it"
        )
    return 0


def _progress(line: str) -> None:
    click.echo(f"lbtune lab: {line}", err=True)


def _reap(as_json: bool) -> dict[str, object]:
    """Clean up after a lab supervisor that died; say so in one line (or a JSON field)."""
    from lbtune.lab.guests import session

    reaped = session.reap_dead()
    if reaped is None:
        return {}
    if not as_json:
        console().print(reaped.describe())
    return {"reaped": reaped.to_json()}


@lab_group.command("down")
@common_options
@click.pass_context
def down_command(ctx: click.Context) -> int:
    """Stop the lab guest that `lab up` started (nothing to do when none is up).

    `lab up`, `lab status` and `lab down` first kill the guest of a lab supervisor that died
    (kill -9 of the supervisor) and say so in one line."""
    from lbtune.lab.guests import session

    s = runtime_of(ctx)
    reaped = _reap(s.json)
    was_up = session.down()
    if s.json:
        emit_json({"stopped": was_up, **reaped})
    else:
        console().print("lab stopped" if was_up else "no lab is up")
    return 0


@lab_group.command("status")
@common_options
@click.pass_context
def status_command(ctx: click.Context) -> int:
    """Say whether a lab is up."""
    from lbtune.lab.guests import session

    s = runtime_of(ctx)
    reaped = _reap(s.json)
    lab = session.current()
    if s.json:
        fields = lab.to_json() if lab else {"ready": False, "supervisor": None, "backend": None}
        emit_json({"up": lab is not None, **fields, **reaped})
    elif lab is None:
        console().print("no lab is up")
    else:
        state = "ready" if lab.ready else "booting"
        console().print(f"lab is up ({state}, {lab.backend} backend, supervisor pid "
                        f"{lab.supervisor})")  # fmt: skip
        what = [f"kernel {lab.kernel}" if lab.kernel else ""]
        if lab.accelerator:
            reason = f" ({lab.accelerator_reason})" if lab.accelerator_reason else ""
            what.append(f"accelerator {lab.accelerator}{reason}")
        if lab.boot_seconds is not None:
            what.append(f"booted in {lab.boot_seconds:.0f} s")
        if not lab.ready and lab.phase:
            what.append(lab.phase)
        if any(what):
            console().print("  " + ", ".join(w for w in what if w), soft_wrap=True)
    return 0


# `lab failover` (director pair, keepalived) lives in its own module.
from lbtune.cli.lab.failover import failover_command  # noqa: E402

lab_group.add_command(failover_command)

# `lab cluster` (N active directors behind ECMP, BIRD) likewise.
from lbtune.cli.lab.cluster import cluster_command  # noqa: E402

lab_group.add_command(cluster_command)
