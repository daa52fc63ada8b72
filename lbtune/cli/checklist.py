"""`lbtune checklist`: is this host ready for a load test in its role? Exit 1 on any fail."""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput, ExitCode

ROLES = "client|lb-dr|lb-proxy|web|realserver"
_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


@click.command("checklist")
@click.option("--role", metavar=ROLES, help="What this host is in the test (required).")
@click.option("--vip", metavar="IP", help="The virtual IP (required for --role realserver).")
@click.option("--load", "load", metavar='"CMD"', help="The planned load command, to lint.")
@click.option("--iface", metavar="IF", shell_complete=complete.interfaces,
              help="The data interface (default: chosen from the host).")
@common_options
@click.pass_context
def checklist_command(
    ctx: click.Context,
    role: Optional[str],
    vip: Optional[str],
    load: Optional[str],
    iface: Optional[str],
) -> int:
    """Pre-benchmark checks for ROLE: profile in sync, irqbalance, rings, leftover sockets,
    conntrack, file limits, ports, listen backlogs, DR real-server ARP/VIP, clock, governor.

    --load "CMD" lints the load command (ab, wrk, wrk2, httperf, vegeta, hey, h2load, oha)
    without running it. Exit 1 when any check fails, 2 on bad input.
    """
    from lbtune.diagnose.checklist import ROLES as KNOWN
    from lbtune.diagnose.checklist import run_checklist

    if role is None:
        raise BadInput(f"--role is required (one of {', '.join(KNOWN)})")
    s = runtime_of(ctx)
    result = run_checklist(s.host(), role, vip=vip, load=load, iface=iface)
    if s.json:
        emit_json(
            {
                "role": result.role,
                "profile": result.profile,
                "iface": result.iface,
                "checks": [
                    {"name": c.name, "level": c.level.value, "reason": c.reason, "fix": c.fix}
                    for c in result.checks
                ],
                "summary": result.summary(),
            }
        )
    else:
        _render(result)
    return int(ExitCode.FINDINGS) if result.failed else 0


def _render(result: Any) -> None:
    """The checklist table; every data string goes in as a `Text`, never as markup."""
    from rich.table import Table
    from rich.text import Text

    t = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    t.add_column("level", no_wrap=True)
    t.add_column("check", no_wrap=True)
    t.add_column("reason", overflow="fold", ratio=3)
    t.add_column("fix", overflow="fold", ratio=2)
    for c in result.checks:
        lv = c.level.value
        t.add_row(Text(lv.upper(), style=_STYLE[lv]), Text(c.name), Text(c.reason), Text(c.fix))
    out = console()
    iface = f", data interface {result.iface}: {result.iface_how}" if result.iface else ""
    head = Text("checklist", style="bold")
    head.append(f" role {result.role} (profile {result.profile}{iface})")
    out.print(head)
    out.print(t)
    n = result.summary()
    verdict = "NOT READY" if result.failed else "ready"
    out.print(f"{verdict}: {n['pass']} pass, {n['warn']} warn, {n['fail']} fail, {n['skip']} skip")
