"""The console entry point (`lbtune`, `python -m lbtune`).

`lbtune ipvs apply CONFIG [--json]` is handed to a running `lbtune ipvs serve` when there
is one, and a repeated `lbtune ipvs apply CONFIG [--json]` (or `ipvs plan CONFIG [--json]`)
that the last full apply recorded as a no-op is answered from that record: both by
lbtune.cli.ipvs.fast, before the command line (click) and the planner are imported; so is
`lbtune --help` (lbtune.cli.tophelp: the group's help as click renders it). A shell asking for
Tab completions (`_LBTUNE_COMPLETE` set) goes to lbtune.cli.complete. Every other command, and
every run none of them can answer, runs lbtune.cli.main."""

from __future__ import annotations

import os
import sys


def main() -> None:
    args = sys.argv[1:]
    instruction = os.environ.get("_LBTUNE_COMPLETE")
    if instruction:  # the shell asks for completions (lbtune.cli.complete)
        from lbtune.cli.complete import run
        from lbtune.cli.main import cli

        sys.exit(run(cli, instruction))
    if args and args[0] in ("--help", "-h"):
        from lbtune.cli.tophelp import try_help

        code = try_help(args)
        if code is not None:
            sys.exit(code)
    if "apply" in args[:4] or "plan" in args[:4]:  # `ipvs apply|plan`, maybe after --json
        try:
            from lbtune.cli.ipvs.fast import try_noop, try_serve

            code = try_serve(args)  # a running `lbtune ipvs serve` answers it
            if code is None:
                code = try_noop(args)
        except KeyboardInterrupt:
            from lbtune.cli.main import _fail
            from lbtune.errors import ExitCode

            sys.exit(_fail(int(ExitCode.INTERRUPTED), "interrupted", "interrupted",
                           "--json" in args))
        if code is not None:
            sys.exit(code)
    from lbtune.cli.main import main as cli_main

    cli_main()
