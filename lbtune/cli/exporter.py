"""`lbtune exporter`: Prometheus metrics of drops by cause, listen queues, softnet, conntrack,
IPVS, findings and profile drift, over HTTP or into node_exporter's textfile directory.

Parses the options and drives `lbtune.exporter.collect.Exporter`: an HTTP endpoint
(`host/endpoints/http.py`, 127.0.0.1 by default) that collects on scrape, or a loop over
`observe.schedule.stream` that writes `DIR/lbtune.prom` atomically every interval
(`--once`: one write, or one print to stdout without `--textfile`). docs/fleet.md.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Optional

import click

from lbtune.cli import complete
from lbtune.cli.diagnose import parse_duration
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput

if TYPE_CHECKING:
    from lbtune.exporter.collect import Exporter

DEFAULT_PORT = 9178  # beside node_exporter (9100) and the real-server agent (9177)
TEXTFILE_NAME = "lbtune.prom"
PROBE_WAIT = 120.0  # seconds --once waits for the probes' compile before its window opens


def parse_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT`, `[V6]:PORT` or `:PORT` (127.0.0.1) -> (addr, port); BadInput otherwise."""
    addr, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise BadInput(f"--listen {text!r}: expected ADDR:PORT, e.g. 127.0.0.1:{DEFAULT_PORT}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise BadInput(f"--listen {text!r}: port 0 to 65535")
    if addr.startswith("[") and addr.endswith("]"):
        addr = addr[1:-1]
    addr = addr or "127.0.0.1"
    import ipaddress

    try:
        ipaddress.ip_address(addr)
    except ValueError:
        raise BadInput(f"--listen {text!r}: {addr!r} is not an IP address") from None
    return addr, port


def _seconds(text: Optional[str], option: str, default: float, low: float) -> float:
    if text is None:
        return default
    if low == 0 and text.strip() in ("0", "0s", "0ms"):
        return 0.0
    try:
        value = parse_duration(text)
    except BadInput:
        value = -1.0
    if not low <= value <= 3600:
        raise BadInput(f"{option} {text!r}: expected seconds like 15, 500ms or 1m, between "
                       f"{low:g} s and 1h")  # fmt: skip
    return value


@click.command("exporter")
@click.option("--listen", "listen", metavar="ADDR:PORT",
              help=f"Serve /metrics here (default 127.0.0.1:{DEFAULT_PORT}).")
@click.option("--textfile", metavar="DIR", shell_complete=complete.directories,
              help="Write DIR/lbtune.prom (atomically) every --interval for node_exporter's "
                   "textfile collector, instead of serving.")
@click.option("--once", is_flag=True, help="One collection over one --interval, then exit: "
              "written to --textfile DIR, else printed.")
@click.option("--interval", metavar="TIME", help="Textfile/--once window (default 15s).")
@click.option("--min-interval", metavar="TIME", help="Scrapes closer together than this get "
              "the previous answer (default 1s).")
@click.option("--listeners", type=int, default=10, show_default=True,
              help="Listeners exported (fullest accept queue first), 0 to 100.")
@click.option("--queues", "queues", metavar="IF[,IF]", shell_complete=complete.interface_lists,
              help="Per-queue packets/drops of "
              "these interfaces (opt-in).")
@click.option("--softnet-all", is_flag=True, help="Per CPU also RPS IPIs and flow-limit "
              "drops (2 series per CPU more).")
@click.option("--host-series", is_flag=True, help="In a namespace, the host-wide series "
              "too (softnet per CPU, the cpu_backlog cause); left out by default.")
@click.option("--ipvs-real-servers", is_flag=True, help="IPVS series per real server too "
              "(3 each; default: per virtual service only).")
@click.option("--probes", is_flag=True, help="Load the drops probe (root, bcc): "
              "lbtune_kernel_drops_total{reason} and the probe's self-cost.")
@click.option("--drop-locations", is_flag=True, help="With --probes: kernel drops by "
              "location too (capped).")
@click.option("--profile", "profiles", multiple=True, metavar="NAME",
              shell_complete=complete.profiles,
              help="Verify this profile (repeatable): lbtune_profile_in_sync{profile}.")
@click.option("--iface", metavar="IF", shell_complete=complete.interfaces,
              help="The data interface --profile resolves against.")
@click.option("--verify-interval", metavar="TIME", help="Seconds between verifies "
              "(default 60s).")
@click.option("--duration", metavar="TIME", help="Stop after this long (default: never).")
@common_options
@click.pass_context
def command(
    ctx: click.Context, listen: Optional[str], textfile: Optional[str], once: bool,
    interval: Optional[str], min_interval: Optional[str], listeners: int,
    queues: Optional[str], softnet_all: bool, host_series: bool, ipvs_real_servers: bool,
    probes: bool,
    drop_locations: bool,
    profiles: tuple[str, ...],
    iface: Optional[str], verify_interval: Optional[str], duration: Optional[str],
) -> int:  # fmt: skip
    """Prometheus exporter: drops by cause, kernel drop reasons (probes), listen queues,
    NIC and softnet counters, conntrack, IPVS, current findings and profile drift, within a
    bounded series budget (docs/fleet.md)."""
    from lbtune.exporter.collect import Exporter, require_client
    from lbtune.exporter.series import MAX_LISTENERS, Options

    s = runtime_of(ctx)
    if not 0 <= listeners <= MAX_LISTENERS:
        raise BadInput(f"--listeners {listeners}: 0 to {MAX_LISTENERS}")
    if drop_locations and not probes:
        raise BadInput("--drop-locations needs --probes")
    if textfile is not None and listen is not None:
        raise BadInput("--textfile writes a file instead of serving: no --listen with it")
    addr, port = parse_listen(listen or f"127.0.0.1:{DEFAULT_PORT}")
    window = _seconds(interval, "--interval", 15.0, 0.1)
    spacing = _seconds(min_interval, "--min-interval", 1.0, 0.0)
    every = _seconds(verify_interval, "--verify-interval", 60.0, 1.0)
    until = None if duration is None else time.monotonic() + parse_duration(duration)
    out_path = None
    if textfile is not None:
        if not os.path.isdir(textfile):
            raise BadInput(f"--textfile {textfile}: not a directory")
        out_path = os.path.join(textfile, TEXTFILE_NAME)
        from lbtune.host.outfile import check_output

        check_output(out_path, force=True, option="--textfile")
    names = tuple(q.strip() for q in (queues or "").split(",") if q.strip())
    require_client()
    host = s.host()
    known = set(host.fs.listdir("/sys/class/net")) if names else set()
    for q in names:
        if q not in known:
            raise BadInput(f"--queues {q}: no such interface")
    opts = Options(listeners=listeners, queues_of=names, drop_locations=drop_locations,
                   softnet_all=softnet_all, ipvs_real_servers=ipvs_real_servers,
                   host_series=host_series)  # fmt: skip
    exp = Exporter(s, opts, profiles, iface, probes, spacing, every)
    from lbtune.host.signals import until_stopped

    try:
        with until_stopped():  # `systemctl stop`, `kill`: the normal end of a daemon (exit 0)
            if once or out_path is not None:
                return _textfile(exp, out_path, window, once, until)
            return _serve(exp, addr, port, until, s.json)
    finally:
        exp.close()
    return 0


def _write(out_path: Optional[str], text: bytes) -> None:
    if out_path is None:
        sys.stdout.write(text.decode("utf-8"))
        sys.stdout.flush()
        return
    from lbtune.host.outfile import write_output

    write_output(out_path, text, force=True, option="--textfile")


def _textfile(exp: Exporter, out_path: Optional[str], window: float, once: bool,
              until: Optional[float]) -> int:  # fmt: skip
    from lbtune.observe.schedule import stream

    if not exp.host.is_live:  # a recorded tree: one collection, since boot
        _write(out_path, exp.scrape().text)
        return 0
    if once:
        exp.wait_probes(PROBE_WAIT)
    from lbtune.host.sdnotify import ready

    for n, w in enumerate(stream(exp.sampler, window)):
        _write(out_path, exp.collect(w).text)
        if n == 0 and not once:
            ready(f"writing {out_path}")  # Type=notify: the first file is written
        if once or (until is not None and time.monotonic() >= until):
            break
    return 0


def _settle_heap() -> None:
    """Everything start-up made (modules, rules, the first sample) moved out of the garbage
    collector's sight: its full collections, which a scrape's thousands of short-lived
    objects set off, otherwise walk all of it again (a tenth of a scrape's CPU on a 48-CPU
    host). Nothing of it is freed later anyway."""
    import gc

    gc.collect()
    gc.freeze()


def _serve(exp: Exporter, addr: str, port: int, until: Optional[float], as_json: bool) -> int:
    from lbtune.exporter.collect import CONTENT_TYPE, index_page
    from lbtune.host.endpoints.http import HttpEndpoint, Reply

    exp.prime()
    _settle_heap()

    def route(path: str) -> Reply:
        if path == "/metrics":
            return Reply(200, CONTENT_TYPE, exp.scrape().text.decode("utf-8"))
        if path == "/":
            return Reply(200, "text/plain; charset=utf-8", index_page())
        return Reply(404, "text/plain; charset=utf-8", "not found: /metrics\n")

    try:
        endpoint = HttpEndpoint(addr, port, route)
    except OSError as e:
        raise BadInput(f"exporter cannot listen on {addr}:{port}: {e.strerror or e}") from None
    endpoint.start()
    shown = f"[{addr}]" if ":" in addr else addr
    where = f"http://{shown}:{endpoint.port}/metrics"
    if as_json:
        sys.stdout.write(json.dumps({"listening": where, "port": endpoint.port}) + "\n")
    else:
        sys.stdout.write(f"lbtune exporter on {where}\n")
    sys.stdout.flush()
    from lbtune.host.sdnotify import ready

    ready(f"serving {where}")  # Type=notify units (packaging/systemd/): started once it listens
    try:
        # Asleep between scrapes (SIGTERM and Ctrl-C interrupt the sleep): no timer wakes an
        # idle exporter, whose CPU between scrapes is part of what it costs per scrape.
        while until is None or time.monotonic() < until:
            time.sleep(3600.0 if until is None else max(0.0, until - time.monotonic()))
    finally:
        endpoint.close()
    return 0
