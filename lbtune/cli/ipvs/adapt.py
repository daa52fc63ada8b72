"""`lbtune ipvs agent` (on a real server) and `lbtune ipvs adapt CONFIG` (on the director).

Registered on the `ipvs` group by lbtune/cli/ipvs/commands.py; docs/ipvs.md, "Adaptive weights".
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.ipvs.common import director_config, emit_json, ipvs_host, ipvs_state
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console
from lbtune.errors import BadInput


def _print_report(r: Any) -> None:
    from lbtune.ipvs.nodereport import CONNECTIONS, LISTENERS, failed

    out = console()
    util = r.utilisations()
    cap = f" of {r.egress_capacity_bps / 1e6:g} Mbit/s" if r.egress_capacity_bps else ""
    # backlog: the kernel's limit (min(application backlog, somaxconn)) as sock_diag and
    # `ss -tln` report it and the JSON carries it; the queue holds up to backlog + 1
    if failed(r, LISTENERS):
        listen = "unknown (cannot read the listeners)"
    elif r.listening:
        listen = (f"queue {r.listen_queue} of backlog {r.listen_backlog}, drops "
                  f"{r.listen_drops} (+{r.listen_drops_delta})")
    else:
        listen = "nothing listens"
    rows = [
        ("node", f"{r.node} (port {r.port}, {r.interval:g} s sample)"),
        ("cpu", f"{r.cpu_util:.0%} of {r.cpus} CPU(s), run queue {r.runq}"),
        ("memory", f"{r.mem_available / 2**20:.0f} MiB available of "
                   f"{r.mem_total / 2**20:.0f} MiB"),
        ("connections", "unknown" if failed(r, CONNECTIONS) else
                        f"{r.connections} established"
                        + (f" (full at {r.max_conns})" if r.max_conns else "")
                        + (f", {r.connections_source}" if r.connections_source else "")
                        + (f", counted {r.connections_age:.1f} s ago"
                           if r.connections_age >= 0.05 else "")),
        ("listen", listen),
        ("egress", f"{r.egress_dev or '?'}: " + (f"{r.egress_bps / 1e6:.2f} Mbit/s{cap}"
                                                 if r.egress_bps is not None else "unknown")),
        ("utilisation", ", ".join(f"{k} {v:.0%}" for k, v in util.items() if v is not None)),
        ("load", f"{r.load:.2f} ({r.bottleneck or 'no signal'}; from "
                 f"{','.join(r.signals)})"),
        ("health", f"{r.health}: {r.reason}"),
        *(("error", e) for e in r.errors),
    ]  # fmt: skip
    for k, v in rows:
        out.print(f"{k:<12} {v}", markup=False)


# The longest total deadline of one agent fetch (host/http.MAX_TIMEOUT): below keepalived's
# default misc_timeout, the checker's delay_loop (60 s unless set).
MISC_TIMEOUT_MAX = 30.0


def _finite(value: Optional[float], name: str, low: float, high: float) -> None:
    if value is not None and not (math.isfinite(value) and low <= value <= high):
        raise BadInput(f"{name} {value:g}: {low:g} to {high:g} seconds")


@click.command("agent")
@click.option("--listen", "listen_addr", metavar="ADDR",
              help="Address the agent binds (default: the first address of the egress "
                   "interface; 0.0.0.0 or :: for every address).")
@click.option("--allow", metavar="CIDR,...",
              help="Client networks that may connect (default: loopback and the networks "
                   "this host is directly connected to; `any` for everyone).")
@click.option("--agent-port", type=int, default=9177, show_default=True,
              help="HTTP port of the agent (GET / JSON, /metrics Prometheus, /haproxy).")
@click.option("--port", type=int, default=80, show_default=True,
              help="The served port the report is about (listener, connections).")
@click.option("--egress", metavar="IF", shell_complete=complete.interfaces,
              help="Interface replies leave from "
              "(default: the default route's).")
@click.option("--signals", metavar="LIST", help="Resources the load is taken from "
              "(default all: cpu,runq,mem,listen,egress,conns).")
@click.option("--max-conns", type=int, help="Established connections that count as full.")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between samples.")
@click.option("--haproxy-port", type=int, help="Also serve HAProxy agent-check on this port.")
@click.option("--once", is_flag=True, help="Print one report and exit (no server).")
@click.option("--duration", type=float, help="Serve this many seconds, then exit.")
@click.option("--misc-check", "misc_url", metavar="URL",
              help="keepalived MISC_CHECK (misc_dynamic) mode: fetch the agent at URL and exit "
                   "1 (fail, on any error) or 2 + weight; nothing is served.")
@click.option("--timeout", type=float, default=2.0, show_default=True,
              help="--misc-check: total seconds for the fetch (at most 30).")
@common_options
@click.pass_context
def agent_command(
    ctx: click.Context, listen_addr: Optional[str], allow: Optional[str], agent_port: int,
    port: int, egress: Optional[str], signals: Optional[str], max_conns: Optional[int],
    interval: float, haproxy_port: Optional[int], once: bool, duration: Optional[float],
    misc_url: Optional[str], timeout: float,
) -> int:  # fmt: skip
    """Node agent on a real server: a read-only HTTP endpoint with CPU, run queue, memory,
    connections, listen queue and drops of the served port, egress use and a health
    verdict (docs/ipvs.md, "Adaptive weights")."""
    from lbtune.ipvs import nodeagent as ag

    s = runtime_of(ctx)
    if misc_url is not None:
        return _misc_check(s, misc_url, timeout)
    for p in (agent_port, haproxy_port):
        if p is not None and not 0 <= p <= 65535:
            raise BadInput(f"port {p}: 0 to 65535")
    if egress is not None:  # it names a sysfs path: the one interface-name rule
        from lbtune.host.net.ifname import check_ifname

        check_ifname(egress, "--egress")
    if haproxy_port is not None and haproxy_port == agent_port and agent_port != 0:
        raise BadInput(f"--haproxy-port {haproxy_port} is the --agent-port: give it a port "
                       "of its own")  # fmt: skip
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise BadInput(f"--duration {duration:g}: a positive number of seconds")
    networks = None
    if allow is not None:
        from lbtune.host.endpoints.http import parse_networks

        try:
            networks = parse_networks(allow)
        except ValueError as e:
            raise BadInput(f"--allow: {e}") from None
    if listen_addr is not None:
        import ipaddress

        try:
            ipaddress.ip_address(listen_addr)
        except ValueError:
            raise BadInput(f"--listen {listen_addr!r}: not an IP address") from None
    opts = ag.AgentOptions(port=port, egress=egress, signals=tuple(ag.parse_signals(signals)),
                           max_conns=max_conns, interval=interval)  # fmt: skip
    host = s.host()
    if not host.is_live:
        raise BadInput("the agent reports the running host: no --root")
    sampler = ag.Sampler(host, opts)
    if once:
        sampler.sample()
        time.sleep(interval)
        r = sampler.sample()
        if s.json:
            emit_json(r.to_json())
        else:
            _print_report(r)
        return 0
    if listen_addr is None:
        listen_addr = ag.default_listen(host, sampler.dev)
    if networks is None:
        networks = ag.default_allow(host)
    agent = ag.Agent(sampler)

    def log(line: str) -> None:
        sys.stderr.write(f"lbtune agent: {line}\n")
        sys.stderr.flush()

    ports = agent.serve(listen_addr, agent_port, haproxy_port, networks, log)
    host_part = f"[{listen_addr}]" if ":" in listen_addr else listen_addr
    where = f"http://{host_part}:{ports[0]}/"
    extra = f", HAProxy agent-check on port {ports[1]}" if len(ports) > 1 else ""
    allowed = ",".join(str(n) for n in networks)
    from lbtune.host.signals import until_stopped

    try:
        # SIGTERM (`systemctl stop`) is the normal end of the agent: exit 0. Caught from
        # before the ready line, so a stop sent as soon as it is printed is a clean one too.
        with until_stopped():
            if s.json:
                doc = {"listening": where, "ports": ports, "allow": [str(n) for n in networks]}
                line = json.dumps(doc)
            else:  # one line, never wrapped
                line = (f"agent for port {port} on {where} (/metrics, /haproxy, /healthz)"
                        f"{extra}; clients from {allowed}")  # fmt: skip
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
            from lbtune.host.sdnotify import ready

            ready(f"serving {where}")  # Type=notify (packaging/systemd/): started once it listens
            agent.run(None if duration is None else time.monotonic() + duration)
    finally:
        agent.close()
    return 0


def _misc_check(s: Any, url: str, timeout: float) -> int:
    """keepalived MISC_CHECK: 1 on any failure (the CLI maps every error of this mode to 1
    as well, lbtune.cli.main), 2 + weight, or 0 (keep the weight) when the agent cannot
    read its listeners."""
    from lbtune.host.endpoints.http import FetchError, fetch_json
    from lbtune.ipvs.nodereport import misc_exit_code, parse_report

    if not (math.isfinite(timeout) and 0.1 <= timeout <= MISC_TIMEOUT_MAX):
        raise BadInput(f"--timeout {timeout:g}: 0.1 to {MISC_TIMEOUT_MAX:g} seconds")
    if s.netns is not None:
        s.host()  # joins the namespace: the agent is fetched from inside it
    try:
        report = parse_report(fetch_json(url, timeout), url)
    except (FetchError, BadInput) as e:
        print(f"lbtune: {e}", file=sys.stderr)
        report = None
    code = misc_exit_code(report)
    if s.json:
        emit_json({"url": url, "exit": code, "report": report.to_json() if report else None})
    return code


@click.command("adapt")
@click.argument("config", shell_complete=complete.configs)
@click.option("--interval", type=float, default=2.0, show_default=True,
              help="Seconds between polls of the agents.")
@click.option("--duration", type=float, help="Stop after this many seconds (default: never).")
@click.option("--timeout", type=float, default=1.0, show_default=True,
              help="Seconds to wait for each agent (total, at most 30).")
@click.option("--dry-run", is_flag=True, help="Print what would be set; change nothing.")
@click.option("--keep", is_flag=True, help="On exit leave the adapted weights (default: "
              "put the configured weights back).")
@common_options
@click.pass_context
def adapt_command(ctx: click.Context, config: str, interval: float, duration: Optional[float],
                  timeout: float, dry_run: bool, keep: bool) -> int:  # fmt: skip
    """Poll the real servers' agents and set IPVS weights from their reports: in-place weight
    edits through the reconcile, under the lock, every change logged with its reason."""
    from lbtune.host.signals import until_stopped
    from lbtune.ipvs.adapt import Adapter, Event, run

    if not 0.2 <= interval <= 3600 or not 0.1 <= timeout <= MISC_TIMEOUT_MAX:
        raise BadInput(f"--interval 0.2..3600 and --timeout 0.1..{MISC_TIMEOUT_MAX:g} seconds")
    if duration is not None and not (math.isfinite(duration) and duration > 0):
        raise BadInput(f"--duration {duration:g}: a positive number of seconds")
    s = runtime_of(ctx)
    cfg = director_config(config)
    if not any(svc.servers for svc in cfg.services):
        raise BadInput(f"{cfg.source}: no real servers to adapt")
    host = ipvs_host(ctx, changes=not dry_run)
    adapter = Adapter(host, cfg, None if dry_run else ipvs_state(ctx, host), timeout=timeout)

    def log(e: Event) -> None:
        if s.json:
            sys.stdout.write(json.dumps(e.to_json()) + "\n")
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(e.time))
            if e.kind == "weight":
                verb = "set" if e.applied else "would set"
                line = (f"{stamp} {verb} {e.service} {e.server} weight {e.previous} -> "
                        f"{e.weight}: {e.reason}")  # fmt: skip
            else:
                line = f"{stamp} {e.reason}"
            sys.stdout.write(line + "\n")
        sys.stdout.flush()

    try:
        with until_stopped():  # SIGTERM (`systemctl stop`): restore, then exit 0
            from lbtune.host.sdnotify import ready

            ready(f"adapting {cfg.source}")  # config read and IPVS open (Type=notify)
            run(adapter, interval, duration, log)
    finally:
        if not keep:
            for e in adapter.restore():
                log(e)
    return 0
