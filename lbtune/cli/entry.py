"""The console entry point (`lbtune`, `python -m lbtune`).

`lbtune ipvs apply CONFIG [--json]` is handed to a running `lbtune ipvs serve` when there
is one (lbtune.host.endpoints.serve). A repeated `lbtune ipvs apply CONFIG [--json]` (or `ipvs
plan CONFIG [--json]`) that the last full apply recorded as a no-op is answered by
lbtune.host.ipvs.memo. Both come before the command line (click) and the planner are
imported; every other command, and every run the record cannot
vouch for, runs lbtune.cli.main."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if "apply" in args[:4] or "plan" in args[:4]:  # `ipvs apply|plan`, maybe after --json
        try:
            from lbtune.host.endpoints.serve import try_serve

            code = try_serve(args)  # a running `lbtune ipvs serve` answers it
            if code is None:
                from lbtune.host.ipvs.memo import try_noop

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
