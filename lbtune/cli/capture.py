"""`lbtune capture`: save what lbtune reads from this host as a tarball for `--root` elsewhere."""

from __future__ import annotations

import os

import click

from lbtune.cli import complete
from lbtune.cli.main import common_options, runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import BadInput


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1 << 20):.1f} MiB"


@click.command("capture")
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE.tar.gz",
    shell_complete=complete.paths,
    help="Where to write the capture (gzip tarball).",
)
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@common_options
@click.pass_context
def capture_command(ctx: click.Context, output: str, force: bool) -> int:
    """Save the /proc, /sys and /etc files lbtune reads, plus ethtool/ss/tc/ip output.

    Unpack the tarball anywhere and pass the directory as `--root` to diagnose, show or plan
    for this host on another machine. Two captures a while apart give counter deltas.
    Reads only; secrets (tcp_fastopen_key, stable_secret) and unreadable files are skipped
    and listed in the tarball's lbtune-capture.json.
    """  # fmt: skip
    from lbtune.host.capture.write import write_capture

    s = runtime_of(ctx)
    if s.root != "/" and os.path.realpath(s.root) != "/":
        raise BadInput("capture reads the running host: --root cannot be used with it")
    result = write_capture(s.host(), output, force=force)
    if s.json:
        emit_json(result)
        return 0
    where = f" (netns {result.netns})" if result.netns else ""
    out = console()
    out.print(
        f"wrote {result.output}{where}: {result.files} files, {result.links} links, "
        f"{_size(result.bytes)}"
        + (f"; {len(result.skipped)} skipped (listed in lbtune-capture.json)"
           if result.skipped else ""),
        markup=False,
    )  # fmt: skip
    if s.verbose:
        for sk in result.skipped:
            out.print(f"  skipped {sk.path}: {sk.reason}", markup=False)
    return 0
