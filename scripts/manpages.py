"""Man pages generated from the command definitions: lbtune(8) and lbtune-COMMAND(8) for every
top-level command, a group's page (lbtune-ipvs(8), lbtune-lab(8), lbtune-profile(8)) holding
each of its subcommands, so that they cannot drift from `--help`.

Usage: python scripts/manpages.py [--out DIR]   (`make man`: build/man)

The click tree is walked as `--help` renders it: NAME from each command's short help,
SYNOPSIS from its usage, DESCRIPTION from its help text, OPTIONS from each parameter's help
record (the same pair of columns `--help` prints, defaults included), COMMANDS for groups,
EXIT STATUS from lbtune.errors.EXIT_MEANINGS, ENVIRONMENT from lbtune.environ, SEE ALSO. The
roff is plain man(7) macros: `man -l`, groff and lintian read it without warnings
(tests/unit/test_manpages.py). The date is SOURCE_DATE_EPOCH's (reproducible builds), else
the last commit's, else none.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import subprocess
import sys
from typing import Iterator

import click

TOP = pathlib.Path(__file__).resolve().parents[1]
SECTION = "8"
WIDE = 10_000  # help records unwrapped: the page is filled by the man reader


def escape(text: str) -> str:
    """Text as roff prints it: backslashes, hyphens (as the ASCII minus that options are
    typed with), quotes, and a control character at a line's start made literal."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = text.replace("'", "\\(aq").replace("`", "\\(ga")
    return "\n".join("\\&" + line if line.startswith(".") else line for line in text.split("\n"))


def paragraphs(help_text: str) -> list[str]:
    """click's help text as roff paragraphs: blank lines separate them, lines inside one are
    refilled (a `\\b` paragraph keeps its lines, as click keeps them)."""
    help_text = help_text.split("\f", 1)[0].strip()
    out = []
    for para in help_text.split("\n\n"):
        if not para.strip():
            continue
        if para.startswith("\b\n"):
            out.append(".nf\n" + escape(para[2:]) + "\n.fi")
        else:
            out.append(escape(" ".join(line.strip() for line in para.splitlines())))
    return out


def walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """`cmd` and every command below it (visible ones), each with its context."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            sub_ctx = context(sub, name, ctx)
            yield from walk(sub, sub_ctx)


def context(cmd: click.Command, name: str, parent: click.Context | None = None) -> click.Context:
    """The context `lbtune ... NAME --help` renders in (the command's own settings, such as
    `-h` for help), unwrapped."""
    settings = {**cmd.context_settings, "max_content_width": WIDE, "terminal_width": WIDE}
    return click.Context(cmd, info_name=name, parent=parent, **settings)


def root_context(cli: click.Command) -> click.Context:
    return context(cli, "lbtune")


def synopsis(cmd: click.Command, ctx: click.Context) -> str:
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    return f"\\fB{escape(ctx.command_path)}\\fR {escape(usage)}".rstrip()


def options(cmd: click.Command, ctx: click.Context) -> list[str]:
    out = []
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or isinstance(param, click.Argument):  # as click's format_options
            continue
        opts, help_text = record
        out.append(f".TP\n\\fB{escape(opts)}\\fR\n{escape(help_text) if help_text else ''}")
    return [o.rstrip("\n") for o in out]


def page_name(path: str) -> str:
    """`lbtune ipvs` -> `lbtune-ipvs`: a page per top-level command."""
    return path.replace(" ", "-")


def _header(name: str, version: str, date: str) -> list[str]:
    return [
        f'.TH "{name.upper()}" "{SECTION}" "{date}" "lbtune {version}" "System Administration"',
        ".nh",  # no hyphenation: options and names stay whole
        ".ad l",
    ]


def _exit_status() -> list[str]:
    from lbtune.errors import EXIT_MEANINGS, ExitCode

    out = [".SH EXIT STATUS"]
    for code in ExitCode:
        out.append(f".TP\n.B {int(code)}\n{escape(EXIT_MEANINGS[code])}")
    out.append(".PP")
    out.append(escape("lbtune ipvs agent --misc-check exits 0 (keep the weight), 1 (the check "
                      "failed, on every error) or 2 + weight: keepalived reads it as a "
                      "weight."))  # fmt: skip
    return out


def _environment() -> list[str]:
    from lbtune import environ

    out = [".SH ENVIRONMENT"]
    for name, choices in environ.CHOICES.items():
        allowed = ", ".join(c for c in choices if c)
        out.append(f".TP\n.B {escape(name)}\nOne of: {escape(allowed)}.")
    for name in environ.PATHS:
        out.append(f".TP\n.B {escape(name)}\nAn absolute path.")
    out.append(".TP\n.B LBTUNE_ROOT\nThe default of \\-\\-root.")
    out += [".PP", escape("Any other value of these is one line on stderr and exit 2.")]
    return out


def _command_section(cmd: click.Command, ctx: click.Context) -> list[str]:
    out = [f'.SS "{escape(ctx.command_path)}"', ".PP", synopsis(cmd, ctx)]
    for para in paragraphs(cmd.help or ""):
        out += [".PP", para]
    if not isinstance(cmd, click.Group):
        out += options(cmd, ctx)
    return out


def top_page(cli: click.Command, version: str, date: str) -> str:
    ctx = root_context(cli)
    assert isinstance(cli, click.Group)
    help_paras = paragraphs(cli.help or "")
    names = cli.list_commands(ctx)
    first = (cli.help or "").split("\n\n")[0].strip()
    lines = [*_header("lbtune", version, date), ".SH NAME",
             f"lbtune \\- {escape(_lower_first(first))}",
             ".SH SYNOPSIS", synopsis(cli, ctx), ".SH DESCRIPTION"]  # fmt: skip
    for para in help_paras:
        lines += [".PP", para]
    lines += [".PP", escape("The global options are accepted after the command too "
                            "(lbtune show --json -v).")]  # fmt: skip
    lines += [".SH OPTIONS", *options(cli, ctx), ".SH COMMANDS"]
    for name in names:
        sub = cli.get_command(ctx, name)
        assert sub is not None
        lines.append(f".TP\n.BR {page_name('lbtune ' + name)} ({SECTION})\n"
                     f"{escape(short_help(cli, name, sub))}")  # fmt: skip
    lines += _exit_status() + _environment()
    lines += [".SH FILES", ".TP", ".I /etc/lbtune/profiles",
              escape("The host's own profiles, found by name before the shipped ones."),
              ".SH SEE ALSO"]  # fmt: skip
    lines.append(",\n".join(f".BR {page_name('lbtune ' + n)} ({SECTION})" for n in names))
    return "\n".join(lines) + "\n"


def _lower_first(text: str) -> str:
    """A NAME line's description: lower case first (`Apply a profile.` -> `apply a profile`),
    unless it starts with an acronym (IPVS)."""
    text = text.rstrip(".")
    if len(text) > 1 and text[1].isupper():
        return text
    return text[:1].lower() + text[1:]


def short_help(cli: click.Command, name: str, cmd: click.Command) -> str:
    """A top-level command's line in `lbtune --help` (lbtune.cli.main.COMMANDS)."""
    from lbtune.cli.main import COMMANDS

    if name in COMMANDS:
        return COMMANDS[name][1]
    return cmd.get_short_help_str(WIDE)


def command_page(cli: click.Command, name: str, version: str, date: str) -> str:
    assert isinstance(cli, click.Group)
    root = root_context(cli)
    cmd = cli.get_command(root, name)
    assert cmd is not None
    ctx = context(cmd, name, root)
    title = page_name(ctx.command_path)
    lines = [*_header(title, version, date), ".SH NAME",
             f"{escape(title)} \\- {escape(_lower_first(short_help(cli, name, cmd)))}",
             ".SH SYNOPSIS"]  # fmt: skip
    below = list(walk(cmd, ctx))
    runnable = [(c, x) for c, x in below if not isinstance(c, click.Group)]
    lines.append("\n.br\n".join(synopsis(c, x) for c, x in (runnable or below)))
    lines.append(".SH DESCRIPTION")
    for para in paragraphs(cmd.help or ""):
        lines += [".PP", para]
    if isinstance(cmd, click.Group):
        lines += [".SH COMMANDS"]
        for sub, sub_ctx in below[1:]:
            lines += _command_section(sub, sub_ctx)
        lines += [".SH OPTIONS", *options(cmd, ctx)]
    else:
        lines += [".SH OPTIONS", *options(cmd, ctx)]
    lines += _exit_status()
    lines += [".SH SEE ALSO", f".BR lbtune ({SECTION})"]
    return "\n".join(lines) + "\n"


def build_date() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime(
            "%Y-%m-%d"
        )
    try:
        r = subprocess.run(["git", "-C", str(TOP), "log", "-1", "--format=%cs"],
                           capture_output=True, text=True, check=False)  # fmt: skip
    except OSError:
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def pages(cli: click.Command, date: str = "") -> dict[str, str]:
    """File name -> roff: lbtune.8 and lbtune-COMMAND.8 for each top-level command."""
    from lbtune import __version__

    assert isinstance(cli, click.Group)
    out = {f"lbtune.{SECTION}": top_page(cli, __version__, date)}
    for name in cli.list_commands(root_context(cli)):
        out[f"{page_name('lbtune ' + name)}.{SECTION}"] = command_page(cli, name, __version__,
                                                                       date)  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(TOP / "build" / "man"), help="directory (build/man)")
    args = ap.parse_args(argv)
    from lbtune.cli.main import cli

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    made = pages(cli, build_date())
    for stale in out.glob(f"lbtune*.{SECTION}"):
        if stale.name not in made:
            stale.unlink()
    for name, text in made.items():
        (out / name).write_text(text, encoding="utf-8")
    print(f"{len(made)} man pages in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
