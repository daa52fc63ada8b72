"""`lbtune ipvs export`: the DR table as `ipvsadm -R` input, keepalived blocks, (with
`--peer`) a complete keepalived.conf for one director of a VRRP pair, or (`--format bird
--director NAME`) a complete BIRD 2 config for one director of a `[cluster]`."""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput, NeedsPrivilege

_PAIR_ONLY = ("role", "priority", "interface", "advert_int", "vrid", "src", "vip", "no_sync",
              "preempt_delay", "pair")  # fmt: skip


@click.command("export")
@click.argument("config", required=False, shell_complete=complete.configs)
@click.option("--format", "fmt", type=click.Choice(["ipvsadm", "keepalived", "bird"]),
              default="ipvsadm", show_default=True)
@click.option("--director", metavar="NAME",
              help="bird: the [[cluster.director]] whose BIRD config to print.")
@click.option("--check-port", type=click.IntRange(1, 65535), default=None,
              help="keepalived: TCP_CHECK port for fwmark services' real servers.")
@click.option("--peer", metavar="ADDR",
              help="keepalived: the other director; prints a whole VRRP-pair keepalived.conf.")
@click.option("--role", type=click.Choice(["master", "backup"]), default="master",
              show_default=True, help="With --peer: this director's role (sets the priority).")
@click.option("--priority", type=int, default=None,
              help="With --peer: VRRP priority 1-254 (default 150 master, 100 backup).")
@click.option("--interface", metavar="IFACE", default="eth0", show_default=True,
              shell_complete=complete.interfaces,
              help="With --peer: the interface of VRRP, the VIPs and the sync daemon.")
@click.option("--advert-int", type=float, default=1.0, show_default=True,
              help="With --peer: VRRP advert interval, s (below 1: VRRPv3).")
@click.option("--vrid", type=int, default=51, show_default=True,
              help="With --peer: virtual_router_id (and sync daemon id).")
@click.option("--src", metavar="ADDR", help="With --peer: this director's address.")
@click.option("--vip", multiple=True, metavar="ADDR[/PREFIX]",
              help="With --peer: a VIP to move besides the services' addresses (repeatable).")
@click.option("--no-sync", is_flag=True, help="With --peer: no IPVS connection sync daemon.")
@click.option("--preempt-delay", type=float, default=0.0, show_default=True,
              help="With --peer: seconds a returning master stays backup before preempting.")
@click.option("--pair", is_flag=True,
              help="With --peer and --src: print both directors' configs (--src is master).")
@common_options
@click.pass_context
def export_command(ctx: click.Context, /, config: Optional[str], fmt: str,
                   director: Optional[str], check_port: Optional[int], peer: Optional[str],
                   **pair_opts: Any) -> int:
    """Print CONFIG (default: the kernel's table) as `ipvsadm -R` input or keepalived blocks.

    With --format keepalived --peer ADDR: a complete keepalived.conf for this director of a
    VRRP pair (vrrp_instance with the VIPs, unicast to the peer, the IPVS sync daemon, and
    the virtual_server blocks). Check it with `keepalived -t -f FILE`.

    With --format bird --director NAME: a complete BIRD 2 config for that director of
    CONFIG's [cluster] (BGP to the routers, BFD, each VIP announced while `lbtune ipvs gate`
    says it is healthy). Check it with `bird -p -c FILE`."""
    from lbtune.cli.ipvs.common import director_config, emit_json, ipvs_host
    from lbtune.host.ipvs.table import Timeouts, ipvs_of, module_available
    from lbtune.ipvs.export import ipvsadm_lines, keepalived_blocks, services_from_table, unchecked

    if fmt == "bird" or director is not None:
        return _bird(ctx, config, fmt, director, check_port, peer)
    changed = [k for k in _PAIR_ONLY
               if ctx.get_parameter_source(k) is not click.core.ParameterSource.DEFAULT]
    if peer is None and changed:
        raise BadInput(f"--{changed[0].replace('_', '-')} needs --format keepalived --peer ADDR")
    if peer is not None and fmt != "keepalived":
        raise BadInput("--peer writes a keepalived.conf: add --format keepalived")
    if pair_opts["pair"] and ("role" in changed or "priority" in changed):
        raise BadInput("--pair prints both roles with their default priorities: "
                       "no --role/--priority")
    timeouts: Optional[Timeouts] = None
    if config:
        cfg = director_config(config)
        services = cfg.services
        t = dict(cfg.timeouts)
        if t:
            timeouts = Timeouts(t.get("tcp", 0), t.get("tcpfin", 0), t.get("udp", 0))
        source = cfg.source
    else:
        host = ipvs_host(ctx)
        session = ipvs_of(host)
        if not session.available():
            raise NeedsPrivilege(
                "IPVS is not loaded in this kernel: no table to export (give CONFIG to "
                "export a config file)" if module_available(host.fs) else
                "no IPVS in this kernel: no table to export (give CONFIG to export a "
                "config file)")
        services = services_from_table(session.table())
        timeouts = session.timeouts()
        source = "kernel"
    doc: dict[str, Any] = {"source": source, "format": fmt}
    if peer is not None:
        doc.update(_pair(services, peer, check_port or 0, timeouts, pair_opts))
    else:
        doc["lines"] = ipvsadm_lines(services, timeouts) if fmt == "ipvsadm" else \
            keepalived_blocks(services, check_port or 0, timeouts)
    warnings = unchecked(services, check_port or 0) if fmt == "keepalived" else []
    if not services:
        warnings.append(f"{source}: no IPVS services to export")
    doc["warnings"] = warnings
    if runtime_of(ctx).json:
        emit_json(doc)
        return 0
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    if "configs" in doc:
        for role, lines in doc["configs"].items():
            click.echo(f"# ===== keepalived.conf of the {role} =====")
            click.echo("\n".join(lines))
    else:
        click.echo("\n".join(doc["lines"]))
    return 0


def _pair(services: Any, peer: str, check_port: int, timeouts: Any,
          o: dict[str, Any]) -> dict[str, Any]:
    from lbtune.ipvs.keepalived import PairSettings, both_directors, pair_config

    settings = PairSettings(
        peer=peer, interface=o["interface"], role=o["role"], priority=o["priority"],
        advert_int=o["advert_int"], vrid=o["vrid"], src=o["src"], vips=tuple(o["vip"]),
        sync=not o["no_sync"], preempt_delay=o["preempt_delay"],
    )  # fmt: skip
    pair = {"peer": peer, "vrrp_version": settings.version, "advert_int": settings.advert_int,
            "master_down_s": round(settings.master_down_interval(), 3), "sync": settings.sync}
    if o["pair"]:
        return {"pair": pair, "configs": both_directors(services, settings, check_port,
                                                         timeouts)}
    return {"pair": dict(pair, role=settings.role, priority=settings.effective_priority),
            "lines": pair_config(services, settings, check_port, timeouts)}


def _bird(ctx: click.Context, config: Optional[str], fmt: str, director: Optional[str],
          check_port: Optional[int], peer: Optional[str]) -> int:
    from lbtune.cli.ipvs.common import director_config, emit_json
    from lbtune.ipvs.bird import bird_config

    if fmt != "bird":
        raise BadInput("--director writes a BIRD config: add --format bird")
    if director is None:
        raise BadInput("--format bird needs --director NAME (one of CONFIG's "
                       "[[cluster.director]] names)")
    if config is None:
        raise BadInput("--format bird exports a config file: give CONFIG (with a [cluster])")
    if peer is not None or check_port is not None:
        raise BadInput("--peer and --check-port are keepalived options, not --format bird's")
    from lbtune.ipvs.failover import failover_findings

    cfg = director_config(config)
    lines = bird_config(cfg, director)
    warnings = [f.text() for f in failover_findings(cfg)]  # as `ipvs plan` says them
    if runtime_of(ctx).json:
        emit_json({"source": cfg.source, "format": fmt, "director": director,
                   "lines": lines, "warnings": warnings})
        return 0
    for w in warnings:
        click.echo(f"warning: {w}", err=True)
    click.echo("\n".join(lines))
    return 0
