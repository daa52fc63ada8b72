"""`lbtune lab cluster`: a scale-out director cluster behind an ECMP router in the lab."""

from __future__ import annotations

from typing import Any

import click

from lbtune.cli.lab.common import run_with_progress
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput, ExitCode


@click.command("cluster")
@click.option("--directors", type=int, default=3, show_default=True,
              help="Active directors (2-3); one more is added later.")
@click.option("--kills", type=int, default=3, show_default=True,
              help="Directors killed like a dead host (in turn) and brought back.")
@click.option("--scheduler", type=click.Choice(["mh", "wlc"]), default="mh", show_default=True,
              help="The service's scheduler (wlc with --no-sloppy: the control).")
@click.option("--sloppy/--no-sloppy", default=True, show_default=True,
              help="net.ipv4.vs.sloppy_tcp on every director.")
@click.option("--sync/--no-sync", default=False, show_default=True,
              help="The IPVS sync daemon between the directors.")
@click.option("--bfd/--no-bfd", default=True, show_default=True,
              help="BFD on the BGP sessions (without: the 3 s hold time detects a death).")
@click.option("--add-drain/--no-add-drain", default=True, show_default=True,
              help="After the kills, add a director and drain one.")
@click.option("--keepalive", type=int, default=12, show_default=True,
              help="Long-lived keep-alive connections of the client.")
@click.option("--settle", type=float, default=2.0, show_default=True,
              help="Seconds of steady traffic after each event.")
@click.option("--throughput", type=float, default=5.0, show_default=True,
              help="Seconds of wrk through all directors, then through one (0: none).")
@common_options
@click.pass_context
def cluster_command(ctx: click.Context, /, directors: int, kills: int, scheduler: str,
                    sloppy: bool, sync: bool, bfd: bool, add_drain: bool, keepalive: int,
                    settle: float, throughput: float) -> int:  # fmt: skip
    """N directors with BIRD, `ipvs apply`, `ipvs export --format bird` and `ipvs gate`, an
    ECMP router (BIRD, L4 hash) and a client behind it; kill a director like a dead host and
    bring it back, add one, drain one.

    Reports per event how long until the router's table changed, the failed new connections,
    and the established keep-alive connections the event's director and the others carried,
    broken and moved. Exit 0 when every event changed the router's table (and, with mh and
    sloppy TCP, no established connection broke), 1 otherwise, 3 when the lab kernel is
    unavailable.
    """
    from lbtune.lab.experiments.cluster import ClusterLabConfig
    from lbtune.lab.launch import run_cluster_lab

    s = runtime_of(ctx)
    if s.netns or s.root != "/":
        raise BadInput("lab cluster builds its own namespaces in the lab kernel: no --netns/--root")
    config = ClusterLabConfig(directors=directors, kills=kills, scheduler=scheduler,
                              sloppy=sloppy, sync=sync, bfd=bfd, add_drain=add_drain,
                              keepalive=keepalive, settle=settle,
                              throughput=throughput)  # fmt: skip
    result = run_with_progress(run_cluster_lab, config)
    if s.json:
        emit_json(result.to_json())
    else:
        render(result)
    return 0 if result.ok else int(ExitCode.FINDINGS)


def render(result: Any) -> None:
    out = console()
    c = result.config

    def say(text: str) -> None:
        out.print(text, markup=False, soft_wrap=True)

    say(f"lab cluster: {c['directors']} directors, {c['scheduler']}, sloppy_tcp "
        f"{'on' if c['sloppy'] else 'off'}, sync {'on' if c['sync'] else 'off'}, "
        f"{'BFD 100 ms x 5' if c['bfd'] else 'no BFD (hold time 3 s)'}, {c['keepalive']} "
        f"keep-alive connections, lab kernel {result.kernel}")
    say(f"{'#':>2}  {'event':<6} {'dir':<4} {'router':>8} {'paths':>6} {'failed new':>10} "
        f"{'broken: its':>11} {'others':>7} {'moved':>5}")
    for r in result.rows:
        took = "never" if r.took_s is None else f"{r.took_s:.2f} s"
        say(f"{r.n:>2}  {r.kind:<6} {r.director:<4} {took:>8} {r.paths:>6} "
            f"{f'{r.failed}/{r.probes}':>10} {f'{r.broken_dir}/{r.carried_dir}':>11} "
            f"{f'{r.broken_others}/{r.carried_others}':>7} {r.moved:>5}")
    say("  router: event -> the router's kernel route without (kill, drain) or with (return, "
        "add) the director")
    say("  broken: its = of the keep-alive connections the event's director carried, others = "
        "of those the other directors carried; moved: sent to another director after the event")
    tp = result.throughput
    if tp.get("one_rps"):
        say(f"  throughput (wrk, a new connection per request): {tp['rps']:.0f} req/s through "
            f"{tp['directors']:.0f} directors, {tp['one_rps']:.0f} through one (an active/backup "
            f"pair's master): {tp['rps'] / tp['one_rps']:.2f}x; the guest's one CPU runs them "
            "all, the client and the servers")
    say("OK" if result.ok else f"FAILED: {result.reason}")
