"""`lbtune doctor`: what this host can do for lbtune, and how to fix what it cannot."""

from __future__ import annotations

import click

from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import emit_json, print_trimmed
from lbtune.errors import BadInput


def lab_capability() -> object:
    """Whether the User-Mode-Linux lab kernel can be booted here, and whether its modules
    have what the lab needs (IPVS, veth, bridge): read from its modules.dep and
    modules.builtin, said "unknown" when they cannot be read."""
    from lbtune.host.kernel.capabilities import Capability

    fix = "apt-get install user-mode-linux (`make setup`)"
    try:
        from lbtune.lab.guests.uml import find_lab_kernel, kernel_features

        kernel = find_lab_kernel()
    except Exception as e:
        return Capability("UML lab kernel", False, str(e), fix, "lab")
    features = kernel_features(kernel.modules_dir)
    listed = ", ".join(f"{name}: {how}" for name, how in features.items())
    detail = f"{kernel.binary} {kernel.version} ({listed}; from {kernel.modules_dir})"
    missing = [name for name, how in features.items() if how == "missing"]
    if missing:
        return Capability(
            "UML lab kernel", False, detail,
            f"a lab kernel with {', '.join(missing)} ({fix}; or set LBTUNE_LAB_MODULES)", "lab",
        )  # fmt: skip
    return Capability("UML lab kernel", True, detail, "", "lab")


def vm_capability() -> object:
    """Whether the VM lab (Debian's kernel under qemu) can boot here, without booting it: the
    prepared kernel, qemu, root, /dev/net/tun, the accelerator the KVM probe chose, and what
    the last boot saw (multi-queue, drivers); it says what only a boot would prove."""
    from lbtune.host.kernel.capabilities import Capability
    from lbtune.lab.guests.vm import vm_lab_status

    st = vm_lab_status()
    name = "VM lab (qemu)"
    if not st["available"]:
        return Capability(name, False, st["problem"], st["fix"], "lab")
    parts = [f"kernel {st['kernel']}", f"accelerator: {st['accelerator']}"]
    last = st.get("last_boot")
    if last:
        nics = last.get("nics") or {}
        nic_text = ", ".join(
            f"{n} {v.get('driver')} {v.get('rx_queues')} queues" for n, v in sorted(nics.items())
        )
        parts.append(
            f"last boot {last.get('when')}: {last.get('cpus')} CPUs on "
            f"{len(last.get('nodes') or {})} nodes, {nic_text}, {last.get('accelerator')}, "
            f"{last.get('boot_seconds')} s"
        )
    else:
        parts.append("never booted here: multi-queue and drivers not seen yet")
    parts.append(f"not checked: {st['unchecked']}")
    return Capability(name, True, "; ".join(parts), "", "lab")


@click.command("doctor")
@click.option("--no-compile", is_flag=True, help="Skip compiling a test BPF program.")
@common_options
@click.pass_context
def command(ctx: click.Context, no_compile: bool) -> int:
    """Say what this host can do: root, BPF/bcc, headers, tracefs and tracepoints, BTF,
    kprobes, IPVS, sock_diag, ethtool per NIC, the UML lab and the VM lab. Changes nothing."""
    from lbtune.host.kernel.capabilities import check_host

    s = runtime_of(ctx)
    host = s.host()
    if not host.is_live:
        raise BadInput("doctor inspects the running machine; it does not take --root")
    caps = check_host(host, compile_probe=not no_compile)
    caps.append(lab_capability())  # type: ignore[arg-type]
    caps.append(vm_capability())  # type: ignore[arg-type]
    if s.json:
        emit_json({"netns": s.netns, "capabilities": caps})
        return 0
    from rich.table import Table

    t = Table(box=None, pad_edge=False, show_header=False)
    t.add_column("capability", no_wrap=True)
    t.add_column("", no_wrap=True)
    t.add_column("detail", overflow="fold")
    group = None
    for c in caps:
        if c.group != group:
            group = c.group
            t.add_row(f"[bold]{group}[/bold]", "", "")
        mark = "[green]yes[/green]" if c.available else "[red]no[/red]"
        detail = c.detail + (f"\n[dim]fix: {c.fix}[/dim]" if c.fix else "")
        t.add_row("  " + c.name, mark, detail)
    print_trimmed(t)
    return 0
