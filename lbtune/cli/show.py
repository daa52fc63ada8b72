"""`lbtune show`: the host's CPU/NUMA topology, NICs with queue -> IRQ -> CPU, irqbalance."""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, cpus, emit_json
from lbtune.errors import BadInput


@click.command("show")
@click.option("--iface", "ifaces", multiple=True, metavar="IF", shell_complete=complete.interfaces,
              help="Only these interfaces.")
@click.option("--all", "show_all", is_flag=True, help="Include loopback and down interfaces.")
@common_options
@click.pass_context
def command(ctx: click.Context, ifaces: tuple[str, ...], show_all: bool) -> int:
    """Show CPU/NUMA topology, each NIC's queues -> IRQ -> CPUs, rings, channels, irqbalance."""
    from lbtune.host.inventory import discover_host
    from lbtune.host.net.ifname import check_ifname

    for name in ifaces:
        check_ifname(name, "--iface")
    s = runtime_of(ctx)
    inv = discover_host(s.host(), only=list(ifaces) or None)
    missing = sorted(set(ifaces) - {n.name for n in inv.nics})
    if missing:
        raise BadInput(f"--iface {missing[0]}: no such interface")
    params = {n.name: _nic_params(s.host(), n.name) for n in inv.nics}
    if s.json:
        from lbtune.cli.output import jsonable

        data = jsonable(inv)
        for nic in data["nics"]:
            nic.update(_params_json(*params[nic["name"]]))
        emit_json(data)
        return 0
    _render(inv, show_all or bool(ifaces), params)
    return 0


def _nic_params(host: Any, dev: str) -> tuple[Any, Any, Any]:
    """(coalescing, features, pause) of `dev`, each None where the driver has none."""
    eth = host.ethtool
    return eth.coalesce(dev), eth.features(dev), eth.pause(dev)


def _params_json(c: Any, k: Any, a: Any) -> dict[str, Any]:
    """`coalesce` {parameter: value} (on/off as true/false), `features` {kernel name:
    {active, fixed, requested}}, `pause` {autoneg, rx, tx}; null where unsupported."""
    from lbtune.host.net.nicparams import COALESCE_FLAGS

    return {
        "coalesce": None
        if c is None
        else {n: bool(v) if n in COALESCE_FLAGS else v for n, v in c.values},
        "features": None
        if k is None
        else {
            f.name: {"active": f.active, "fixed": f.fixed, "requested": f.requested}
            for f in k.entries
        },
        "pause": None if a is None else {"autoneg": a.autoneg, "rx": a.rx, "tx": a.tx},
    }


def _ring(cur: Optional[int], mx: Optional[int]) -> str:
    if cur is None and mx is None:
        return "n/a"
    return f"{cur if cur is not None else '?'}/{mx if mx is not None else '?'}"


def _render(inv: Any, show_all: bool, params: dict[str, tuple[Any, Any, Any]]) -> None:
    out = console()
    _render_cpus(out, inv)
    for nic in inv.nics:
        if not show_all and (nic.kind == "loopback"):
            continue
        _render_nic(out, nic, params.get(nic.name, (None, None, None)))
    _render_irqbalance(out, inv.irqbalance)


def _render_cpus(out: Any, inv: Any) -> None:
    """The host line, CPUs per NUMA node, and the CPU parameters of the command line."""
    from rich.table import Table

    topo = inv.cpus
    where = f" netns {inv.netns}" if inv.netns else ""
    out.print(
        f"[bold]{inv.hostname or '?'}[/bold]{where}  kernel {inv.kernel or '?'}  "
        f"{len(topo.online)} CPUs online ({cpus(topo.online)}), "
        f"{len(topo.nodes)} NUMA node(s), SMT {'on' if topo.smt_active else 'off'}"
    )
    offline = topo.possible - topo.online
    cpu_table = Table(title="CPUs", title_justify="left", box=None, pad_edge=False)
    for col in ("node", "cpus", "isolated", "housekeeping"):
        cpu_table.add_column(col)
    for node in topo.nodes:
        online = node.cpus & topo.online
        cpu_table.add_row(
            str(node.id),
            cpus(online),
            cpus(online & topo.isolated),
            cpus(online - topo.isolated),
        )
    out.print(cpu_table)
    notes = []
    if offline:
        notes.append(f"offline: {cpus(offline)}")
    if topo.nohz_full:
        notes.append(f"nohz_full: {cpus(topo.nohz_full)}")
    for key in ("isolcpus", "rcu_nocbs", "irqaffinity"):
        v = topo.cmdline.get(key)
        if v is not None:
            notes.append(f"{key}={v}")
    if notes:
        out.print("  " + "  ".join(notes))


def _render_params(out: Any, c: Any, k: Any, a: Any) -> None:
    """Coalescing, the main features (`*` fixed: the driver cannot change it) and pause."""
    from rich.markup import escape

    from lbtune.host.net.nicparams import COALESCE_FLAGS, feature_summary, on_off

    if c is None:
        coal = "coalesce n/a"
    else:
        vals = [f"{n} {on_off(bool(v)) if n in COALESCE_FLAGS else v}" for n, v in c.values]
        coal = "coalesce " + (", ".join(vals) if vals else "none")
    pause = "pause n/a" if a is None else (
        f"pause autoneg {on_off(a.autoneg)} rx {on_off(a.rx)} tx {on_off(a.tx)}"
    )
    out.print(escape(f"  {coal}"), soft_wrap=True)
    out.print(escape(f"  {pause}"), soft_wrap=True)
    if k is None:
        out.print("  features n/a", soft_wrap=True)
        return
    feats = [f"{n} {on_off(on)}{'*' if fixed else ''}" for n, on, fixed in feature_summary(k)]
    out.print(escape("  features " + ", ".join(feats) + "  (* fixed)"), soft_wrap=True)


def _render_nic(out: Any, nic: Any, params: tuple[Any, Any, Any] = (None, None, None)) -> None:
    """One NIC: its header line, rings and channels, coalescing, features and pause, and
    the queue -> IRQ -> CPU table."""
    from rich.table import Table

    numa = "?" if nic.numa_node is None else ("none" if nic.numa_node < 0 else nic.numa_node)
    out.print()
    out.print(
        f"[bold]{nic.name}[/bold]  {nic.kind}  driver {nic.driver or '?'}"
        + (f"  pci {nic.bus}" if nic.bus else "")
        + f"  numa {numa}"
        + (f"  local cpus {cpus(nic.local_cpus)}" if nic.local_cpus else "")
        + f"  {nic.operstate or '?'}"
        + (f"  {nic.speed_mbps} Mb/s" if nic.speed_mbps else "")
        + f"  mtu {nic.mtu}  txqueuelen {nic.txqueuelen}"
    )
    r, c = nic.rings, nic.channels
    rings = f"rings rx {_ring(r.rx, r.rx_max)} tx {_ring(r.tx, r.tx_max)}" if r else "rings n/a"
    if c:
        parts = [
            f"{k} {_ring(getattr(c, k), getattr(c, k + '_max'))}"
            for k in ("combined", "rx", "tx", "other")
            if getattr(c, k + "_max")
        ]
        chans = "channels " + (" ".join(parts) if parts else "none")
    else:
        chans = "channels n/a"
    out.print(
        f"  {rings}  {chans}  queues rx {len(nic.rx_queues)} tx {len(nic.tx_queues)}"
        + (f"  lower {','.join(nic.lower)}" if nic.lower else "")
    )
    _render_params(out, *params)
    if nic.rss is not None:
        _render_rss(out, nic.rss)
    if not nic.irqs:
        out.print("  no per-queue IRQs")
        return
    t = Table(box=None, pad_edge=False, padding=(0, 2, 0, 2))
    for col in ("queue", "irq", "name", "affinity", "effective", "hint", "count"):
        t.add_column(col, justify="right" if col in ("irq", "count") else "left")
    for q in nic.irqs:
        t.add_row(
            f"{q.direction}-{q.queue}",
            str(q.irq),
            q.name.split("@pci:")[0],  # the PCI address is in the NIC's header line
            cpus(q.affinity),
            cpus(q.effective),
            cpus(q.hint),
            str(q.count),
        )
    out.print(t)


def _render_rss(out: Any, v: Any) -> None:
    """Hash fields per flow type, the indirection table as queue -> share of entries, and the
    flow rules (`ethtool -n` / `-x` in a line or two)."""
    from rich.markup import escape

    from lbtune.host.net.rss import rule_text, shares_text

    fields = " ".join(f"{f} {h or 'none'}" for f, h in v.hash_fields.items())
    line = f"  rss hash {fields or 'n/a'}  table {shares_text(v)}"
    if v.hfunc:
        line += f"  {v.hfunc}"
    out.print(escape(line))
    if v.rules is None:
        out.print("  flow rules n/a")
    elif not v.rules:
        out.print("  flow rules none")
    for r in v.rules or ():
        out.print(escape(f"  flow rule {r.location}: {rule_text(r.flow_type, r.match, r.action)}"))


def _render_irqbalance(out: Any, ib: Any) -> None:
    """Whether irqbalance runs, starts at boot, and what it leaves alone."""
    out.print()
    state = f"running (pid {ib.pid})" if ib.running else "not running"
    enabled = {True: "enabled", False: "disabled", None: "boot state unknown"}[ib.enabled]
    out.print(
        f"irqbalance: {state}, {enabled} at boot"
        + (f", banned CPUs {cpus(ib.banned_cpus)}" if ib.banned_cpus else "")
        + (f", banned IRQs {cpus(ib.banned_irqs)}" if ib.banned_irqs else "")
        + (f"  ({ib.config_file})" if ib.config_file else "")
    )
