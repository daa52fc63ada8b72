"""`lbtune compare CAPTURE... [--against PROFILE|CAPTURE]`: fleet drift, knob by knob.

Parse, call `lbtune.tune.compare`, render as text, Markdown or JSON. Exit 1 when any host
differs from the template (like `verify`), 0 when every host is in sync.
"""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import echo, emit_json, text_table
from lbtune.errors import ExitCode


def _v(value: Optional[str]) -> str:
    return "(absent)" if value is None else value


def _host(h: Any) -> str:
    return f"{h.source} ({h.hostname})" if h.hostname else h.source


def _summary(h: Any) -> str:
    if h.in_sync:
        return f"in sync ({h.compared} knobs compared)"
    return f"{len(h.differences)} of {h.compared} knobs differ"


def render_text(c: Any) -> str:
    what = "profile" if c.against == "profile" else "template"
    head = c.template + (f" ({c.template_host})" if c.template_host else "")
    lines = [f"{what}: {head}", ""]
    lines.append(text_table(("host", "drift"), [(_host(h), _summary(h)) for h in c.hosts]))
    for h in c.hosts:
        if h.in_sync:
            continue
        lines += ["", f"{_host(h)}: {_summary(h)}"]
        rows = [(d.area, d.object, _v(d.template), _v(d.value)) for d in h.differences]
        lines.append(text_table(("area", "object", what, "this host"), rows))
    return "\n".join(lines)


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(c: Any) -> str:
    what = "profile" if c.against == "profile" else "template"
    head = c.template + (f" ({c.template_host})" if c.template_host else "")
    out = [f"# lbtune compare: {len(c.hosts)} host(s) against {what} `{_md(head)}`", "",
           "| host | drift |", "|---|---|"]
    out += [f"| {_md(_host(h))} | {_summary(h)} |" for h in c.hosts]
    for h in c.hosts:
        if h.in_sync:
            continue
        out += ["", f"## {_md(_host(h))}", "", f"| area | object | {what} | this host |",
                "|---|---|---|---|"]
        out += [f"| {d.area} | {_md(d.object)} | {_md(_v(d.template))} | {_md(_v(d.value))} |"
                for d in h.differences]
    return "\n".join(out)


def as_json(c: Any) -> dict[str, Any]:
    return {
        "against": c.against,
        "template": c.template,
        "template_host": c.template_host,
        "in_sync": c.in_sync,
        "hosts": [
            {"source": h.source, "hostname": h.hostname, "kernel": h.kernel,
             "in_sync": h.in_sync, "compared": h.compared,
             "differences": [{"area": d.area, "object": d.object, "template": d.template,
                              "value": d.value} for d in h.differences]}
            for h in c.hosts
        ],
    }


@click.command("compare")
@click.argument("captures", nargs=-1, required=True, metavar="CAPTURE...",
                shell_complete=complete.paths)
@click.option("--against", metavar="PROFILE|CAPTURE", shell_complete=complete.profiles,
              help="The template: a profile (name or .toml) or a capture. Default: the first "
                   "CAPTURE.")
@click.option("--iface", metavar="IF", shell_complete=complete.interfaces,
              help="The data interface, for a profile's [nic.data].")
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text",
              show_default=True)
@common_options
@click.pass_context
def compare_command(ctx: click.Context, captures: tuple[str, ...], against: Optional[str],
                    iface: Optional[str], fmt: str) -> int:
    """Which hosts differ from a template host or a profile, knob by knob: sysctls, rings,
    channels, txqueuelen, IRQ placement shape, RPS/XPS, isolated CPUs, irqbalance and the
    IPVS table. CAPTURE is a `lbtune capture` tarball or a host tree. Exit 1 on any drift."""
    from lbtune.host.net.ifname import check_ifname
    from lbtune.tune.compare import compare_hosts

    if iface is not None:
        check_ifname(iface, "--iface")
    s = runtime_of(ctx)
    if s.root not in ("/", "") or s.netns:
        from lbtune.errors import BadInput

        raise BadInput("compare reads the captures it is given: --root and --netns do not apply")
    result = compare_hosts(list(captures), against, iface)
    if s.json or fmt == "json":
        emit_json(as_json(result))
    elif fmt == "md":
        echo(render_markdown(result))
    else:
        echo(render_text(result))
    return 0 if result.in_sync else int(ExitCode.FINDINGS)
