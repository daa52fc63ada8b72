"""`lbtune ipvs gate CONFIG --director NAME`: the cluster director's health gate, which
announces each VIP through BIRD only while the director can serve it (lbtune.ipvs.gate)."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Optional

import click

from lbtune.cli import complete
from lbtune.cli.ipvs.common import director_config, emit_json, ipvs_host
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput, ExitCode

DEFAULT_SOCKET = "/run/bird/bird.ctl"  # Debian's bird2


@click.command("gate")
@click.argument("config", shell_complete=complete.configs)
@click.option("--director", metavar="NAME", required=True,
              help="This director's [[cluster.director]] name.")
@click.option("--socket", "sock", metavar="PATH", default=DEFAULT_SOCKET, show_default=True,
              help="BIRD's control socket.")
@click.option("--once", is_flag=True,
              help="Check every VIP once, print the verdicts and exit (1: any fails); "
                   "BIRD is not touched.")
@click.option("--duration", type=float, default=None, metavar="SECONDS",
              help="Stop after this long (default: run until SIGTERM).")
@common_options
@click.pass_context
def gate_command(ctx: click.Context, config: str, director: str, sock: str, once: bool,
                 duration: Optional[float]) -> int:
    """Check the director every [cluster.gate] interval (IPVS table in sync with CONFIG,
    enough real servers reachable) and enable each VIP's BIRD protocol after `rise` passing
    checks, disable it after `fall` failing ones. On exit every VIP is withdrawn."""
    from lbtune.host.endpoints.bird import BirdControl
    from lbtune.host.signals import until_stopped
    from lbtune.ipvs.gate import GateEvent, GateRun, check_vips, run

    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise BadInput(f"--duration {duration:g}: a positive number of seconds")
    s = runtime_of(ctx)
    cfg = director_config(config)
    if cfg.cluster is None:
        raise BadInput(f"{cfg.source}: no [cluster] section: the gate is a cluster director's")
    me = cfg.cluster.director(director, cfg.source)
    host = ipvs_host(ctx)
    from lbtune.host.net.addr import local_addresses

    if me.address not in local_addresses(host):
        raise BadInput(f"{cfg.source}: director {me.name}'s address {me.address} is not an "
                       "address of this host: --director names the director it runs on")
    if once:
        checks = check_vips(host, cfg, cfg.cluster.gate)
        if s.json:
            emit_json({"config": cfg.source, "director": director, "vips": [
                {"vip": c.vip.address, "protocol": c.vip.protocol, "ok": c.ok,
                 "reason": c.reason} for c in checks]})
        else:
            for c in checks:
                click.echo(f"{'pass' if c.ok else 'fail'} {c.vip.address}"
                           + ("" if c.ok else f": {c.reason}"))
        return 0 if all(c.ok for c in checks) else int(ExitCode.FINDINGS)

    def log(e: GateEvent) -> None:
        if s.json:
            sys.stdout.write(json.dumps(e.to_json()) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(e.time))
            sys.stdout.write(f"{stamp} {e.kind} {e.vip + ': ' if e.vip else ''}{e.reason}\n")
        sys.stdout.flush()

    gate = GateRun(host, cfg, BirdControl(sock), log)
    try:
        with until_stopped():  # SIGTERM (`systemctl stop`): withdraw, then exit 0
            from lbtune.host.sdnotify import ready

            ready(f"gating {cfg.source} as {director}")
            run(gate, duration)
    finally:
        gate.stop()
    return 0
