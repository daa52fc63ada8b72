"""`lbtune lab failover`: a keepalived director pair in the lab, the master killed N times."""

from __future__ import annotations

from typing import Any

import click

from lbtune.cli.lab.common import run_with_progress
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput, ExitCode


@click.command("failover")
@click.option("--kills", type=int, default=5, show_default=True,
              help="Times the master is killed (and brought back).")
@click.option("--advert-int", type=float, default=1.0, show_default=True,
              help="VRRP advert interval, s (keepalived's default 1; below 1: VRRPv3).")
@click.option("--sync/--no-sync", default=True, show_default=True,
              help="IPVS connection sync between the directors (lvs_sync_daemon).")
@click.option("--preempt-delay", type=float, default=3.0, show_default=True,
              help="Seconds a returning master stays backup (receiving the sync) first.")
@click.option("--servers", type=int, default=2, show_default=True, help="Real servers (1-8).")
@click.option("--keepalive", type=int, default=4, show_default=True,
              help="Long-lived keep-alive connections of the client.")
@click.option("--settle", type=float, default=2.0, show_default=True,
              help="Seconds of steady traffic after each switch.")
@common_options
@click.pass_context
def failover_command(ctx: click.Context, /, kills: int, advert_int: float, sync: bool,
                     preempt_delay: float, servers: int, keepalive: int, settle: float) -> int:
    """Two directors with Debian's keepalived (config from `ipvs export --peer`), DR real
    servers, a client probing all along; kill the master like a dead host, bring it back.

    Reports per switch the client-visible loss window, failed requests and the keep-alive
    connections that survived. Exit 0 when every switch moved the VIP (and, with sync, no
    established connection broke), 1 otherwise, 3 when the lab kernel is unavailable.
    """
    from lbtune.lab.experiments.failover import FailoverConfig
    from lbtune.lab.launch import run_failover_lab

    s = runtime_of(ctx)
    if s.netns or s.root != "/":
        raise BadInput(
            "lab failover builds its own namespaces in the lab kernel: no --netns/--root"
        )
    config = FailoverConfig(kills=kills, advert_int=advert_int, sync=sync,
                            preempt_delay=preempt_delay, servers=servers, keepalive=keepalive,
                            settle=settle)  # fmt: skip
    result = run_with_progress(run_failover_lab, config)
    if s.json:
        emit_json(result.to_json())
    else:
        render(result)
    return 0 if result.ok else int(ExitCode.FINDINGS)


def render(result: Any) -> None:
    out = console()
    c = result.config
    out.print(f"lab failover: keepalived pair dir1/dir2, advert_int {c['advert_int']:g} s, "
              f"sync {'on' if c['sync'] else 'off'}, preempt_delay {c['preempt_delay']:g} s, "
              f"{c['kills']} kill(s), lab kernel {result.kernel}",
              markup=False, soft_wrap=True)  # fmt: skip
    out.print(f"{'#':>2}  {'switch':<8} {'to':<4} {'VIP moved':>9} {'loss':>7} {'failed':>6} "
              f"{'probes':>6} {'max gap':>7} {'kept conns':>10}",
              markup=False, soft_wrap=True)  # fmt: skip
    for w in result.windows:
        moved = "never" if w.took_s is None else f"{w.took_s:.2f} s"
        kept = f"{w.established - w.lost}/{w.established}"
        out.print(f"{w.switch:>2}  {w.kind:<8} {w.to:<4} {moved:>9} {w.loss_s:>5.2f} s "
                  f"{w.failed:>6} {w.probes:>6} {w.max_gap_s * 1000:>4.0f} ms {kept:>10}",
                  markup=False, soft_wrap=True)  # fmt: skip
    for sm in result.summary:
        kept = sm.established - sm.lost
        out.print(f"  {sm.kind:<8} x{sm.switches}: loss window median {sm.loss_median_s:.2f} s, "
                  f"max {sm.loss_max_s:.2f} s; {sm.failed} failed requests; established "
                  f"connections kept {kept} of {sm.established}",
                  markup=False, soft_wrap=True)  # fmt: skip
    out.print("  loss window: first failed to first good fresh-connection probe (one every "
              f"{c['interval'] * 1000:g} ms)",
              markup=False, soft_wrap=True)  # fmt: skip
    out.print("  max gap: the longest pause between probes (the resolution reached)",
              markup=False, soft_wrap=True)
    out.print("OK" if result.ok else f"FAILED: {result.reason}", markup=False, soft_wrap=True)
