"""The `lbtune` click group: global options, error-to-exit-code mapping, command registry.

Only click, lbtune.errors and the runtime context are imported at module level so that
`lbtune --help` stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import click

from lbtune import __version__
from lbtune.cli import complete
from lbtune.errors import ExitCode, LbtuneError
from lbtune.host.runtime import Runtime


def _setter(attr: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False and value != 0:
            obj = ctx.find_root().obj
            if attr == "verbose":  # `lbtune -v show -v` is -vv
                value += obj.verbose
            setattr(obj, attr, value)

    return callback


def common_options(f: Any) -> Any:
    """The global options, accepted after the subcommand too (`lbtune show --json -v`)."""
    opts = [
        click.option("--root", metavar="DIR", expose_value=False, callback=_setter("root"),
                     shell_complete=complete.paths, help="Read /proc, /sys and /etc below DIR."),
        click.option("--netns", metavar="NAME", expose_value=False, callback=_setter("netns"),
                     shell_complete=complete.namespaces,
                     help="Operate inside network namespace NAME."),
        click.option("--json", is_flag=True, default=None, expose_value=False,
                     callback=_setter("json"), help="Machine-readable JSON on stdout."),
        click.option("-v", "--verbose", count=True, expose_value=False,
                     callback=_setter("verbose"), help="More detail (repeat for more)."),
        click.option("--debug", is_flag=True, default=None, expose_value=False,
                     callback=_setter("debug"), help="Show tracebacks on errors."),
    ]  # fmt: skip
    for opt in opts:
        f = opt(f)
    return f


# Commands are registered lazily: name -> "module:function" under lbtune.cli.
COMMANDS: dict[str, tuple[str, str]] = {
    "show": ("lbtune.cli.show", "Show CPU/NUMA topology, NICs, queue IRQs and irqbalance."),
    "doctor": ("lbtune.cli.doctor", "Say what this host can do (root, bcc, tracefs, IPVS, lab)."),
    "profile": ("lbtune.cli.tune:profile_group", "List, show and lint tuning profiles."),
    "plan": ("lbtune.cli.tune:plan_command", "Show what applying a profile would change."),
    "apply": ("lbtune.cli.tune:apply_command", "Apply a profile (journaled, all-or-nothing)."),
    "verify": ("lbtune.cli.tune:verify_command", "Check a profile is in effect (exit 1 on drift)."),
    "rollback": ("lbtune.cli.tune:rollback_command", "Restore what the last apply replaced."),
    "history": ("lbtune.cli.tune:history_command", "List applies and their state."),
    "diagnose": ("lbtune.cli.diagnose:diagnose_command", "Find where packets die and the fix."),
    "capture": ("lbtune.cli.capture:capture_command", "Save what lbtune reads, for --root."),
    "compare": ("lbtune.cli.compare:compare_command",
                "Which hosts differ from a template host or a profile (captures)."),
    "checklist": ("lbtune.cli.checklist:checklist_command", "Is this host ready for a load test?"),
    "lab": (
        "lbtune.cli.lab.commands:lab_group",
        "The IPVS DR lab (UML kernel): load, spread, diagnosis.",
    ),
    "probe": ("lbtune.cli.probe", "Count drops by kernel reason, per-queue packets, NAPI (eBPF)."),
    "ipvs": ("lbtune.cli.ipvs.commands:ipvs_group", "IPVS DR director, real servers, self-test."),
    "monitor": ("lbtune.cli.monitor", "Live TUI: drops by cause, queues, CPUs, findings."),
    "exporter": ("lbtune.cli.exporter", "Prometheus metrics: drops by cause, findings, drift."),
    "completion": ("lbtune.cli.complete:completion_command",
                   "Print the Tab-completion script for bash, zsh or fish."),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when invoked (fast --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in COMMANDS:
            return None
        import importlib

        module, _, attr = COMMANDS[name][0].partition(":")
        cmd = getattr(importlib.import_module(module), attr or "command")
        assert isinstance(cmd, click.Command)
        return cmd

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[Any]:
        """Command names with their one-line help from COMMANDS (no command is imported to
        list them), then the group's options."""
        from click.shell_completion import CompletionItem

        names = [n for n in self.list_commands(ctx) if n.startswith(incomplete)]
        items = [CompletionItem(n, help=COMMANDS[n][1]) for n in names]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    default="/",
    metavar="DIR",
    envvar="LBTUNE_ROOT",
    shell_complete=complete.paths,
    help="Read /proc, /sys and /etc below DIR (a fixture, capture or sosreport).",
)
@click.option("--netns", metavar="NAME", shell_complete=complete.namespaces,
              help="Operate inside network namespace NAME.")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON on stdout.")
@click.option("-v", "--verbose", count=True, help="More detail (repeat for more).")
@click.option("--debug", is_flag=True, envvar="LBTUNE_DEBUG", help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="lbtune")
@click.pass_context
def cli(
    ctx: click.Context, root: str, netns: Optional[str], as_json: bool, verbose: int, debug: bool
) -> None:
    """Tune and diagnose Linux load-balancer and web-server hosts.

    Exit codes: 0 ok, 1 findings or drift, 2 bad input, 3 needs root or a kernel
    capability, 4 a change failed (or was interrupted) and everything was restored,
    5 restoring failed too (`lbtune rollback` retries), 6 another run holds the lock,
    70 internal error, 130 interrupted (Ctrl-C) outside a change. A daemon (exporter,
    ipvs agent, adapt, serve) stopped by SIGTERM exits 0.
    """
    runtime = Runtime(root=root, netns=netns, json=as_json, verbose=verbose, debug=debug)
    if isinstance(ctx.obj, _Slot):
        ctx.obj.runtime = runtime  # invoke() maps errors with it after the context closed
    ctx.obj = runtime
    ctx.call_on_close(runtime.close)


class _Slot:
    """Carries the Runtime out of click, so errors can be shown the way it says (paths of
    unpacked captures replaced by the capture's name)."""

    runtime: Optional[Runtime] = None


def runtime_of(ctx: click.Context) -> Runtime:
    """The runtime context the global options built (root, netns, streams, options)."""
    obj = ctx.find_root().obj
    assert isinstance(obj, Runtime)
    return obj


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: run the CLI and map every error to a documented exit code."""
    from lbtune.host.signals import hold_after_decided

    # Once an apply is committed (or restored) a SIGTERM must not turn its documented exit
    # code into death by signal: held until exit (host/signals.py).
    hold_after_decided()
    sys.exit(invoke(argv))


def _wants_json(args: list[str]) -> bool:
    """--json anywhere among the options (before a `--`), even when parsing failed."""
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _error_type(e: BaseException) -> str:
    """`BadInput` -> "bad-input": the JSON error's `type`."""
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "-", type(e).__name__).lower()


def _fail(code: int, kind: str, message: str, as_json: bool) -> int:
    if as_json:
        import json

        doc = {"error": {"code": code, "type": kind, "message": message}}
        sys.stdout.write(json.dumps(doc) + "\n")
    click.echo(f"lbtune: {message}", err=True)
    return code


def _misc_check_mode(args: list[str]) -> bool:
    """`lbtune ... ipvs agent --misc-check URL`: keepalived reads the exit code as a weight."""
    words = args[: args.index("--")] if "--" in args else args
    return ("ipvs" in words and "agent" in words
            and any(w == "--misc-check" or w.startswith("--misc-check=") for w in words))


def check_environment(environ: Any) -> None:
    """LbtuneError (one line, exit 2) for an LBTUNE_* variable lbtune cannot use."""
    from lbtune.environ import problem

    why = problem(environ)
    if why is not None:
        raise LbtuneError(why)


def invoke(argv: Optional[list[str]] = None) -> int:
    """Run the CLI and return its exit code instead of exiting (used by tests and main).

    Every error becomes its documented exit code and one line on stderr; under --json also
    `{"error": {"code", "type", "message"}}` on stdout. Under `ipvs agent --misc-check`
    every error exits 1 instead: keepalived's misc_dynamic reads exit 2..255 as the weight
    plus 2 (an internal error's 70 would set weight 68 on a server that failed its check).
    """
    args = sys.argv[1:] if argv is None else list(argv)
    if _misc_check_mode(args):
        ok, code = _invoke(args)
        return code if ok else int(ExitCode.FINDINGS)
    return _invoke(args)[1]


def _invoke(args: list[str]) -> tuple[bool, int]:
    """(whether the command ran to its end, the exit code)."""
    debug = "--debug" in args or os.environ.get("LBTUNE_DEBUG", "").strip().lower() in (
        "1", "true", "yes", "on", "t", "y")  # fmt: skip
    as_json = _wants_json(args)
    slot = _Slot()

    def shown(text: str) -> str:
        return slot.runtime.display(text) if slot.runtime is not None else text

    try:
        check_environment(os.environ)
        rv = cli.main(args=args, prog_name="lbtune", standalone_mode=False, obj=slot)
    except click.exceptions.Abort as e:
        # click turns Ctrl-C into Abort; a "no" at a confirmation prompt is an Abort too.
        if isinstance(e.__cause__, KeyboardInterrupt):
            return False, _fail(int(ExitCode.INTERRUPTED), "interrupted", "interrupted",
                                as_json)  # fmt: skip
        return False, _fail(int(ExitCode.USAGE), "aborted", "aborted", as_json)
    except click.ClickException as e:
        if as_json:
            return False, _fail(int(ExitCode.USAGE), "usage", e.format_message(), True)
        from lbtune.host.sdnotify import stderr_is_journal

        if stderr_is_journal():
            # a unit with a bad option says so in one journal line, not click's usage block
            # (docs/install.md)
            ctx = getattr(e, "ctx", None)
            where = ctx.command_path if ctx is not None else "lbtune"
            message = e.format_message().rstrip(".").replace("\n", " ")
            sys.stderr.write(f"{where}: {message} (see {where} --help)\n")
            return False, int(ExitCode.USAGE)
        e.show()
        return False, int(ExitCode.USAGE)
    except click.exceptions.Exit as e:
        return e.exit_code == 0, int(e.exit_code)
    except LbtuneError as e:
        if debug:
            _print_traceback()
        return False, _fail(int(e.exit_code), _error_type(e), shown(str(e)), as_json)
    except KeyboardInterrupt:
        return False, _fail(int(ExitCode.INTERRUPTED), "interrupted", "interrupted", as_json)
    except BrokenPipeError:
        return False, 0
    except Exception as e:
        if debug:
            _print_traceback()
            return False, int(ExitCode.INTERNAL)
        message = shown(f"internal error: {type(e).__name__}: {e} (run with --debug for details)")
        return False, _fail(int(ExitCode.INTERNAL), "internal", message, as_json)
    return True, int(rv) if isinstance(rv, int) else 0


def _print_traceback() -> None:
    import traceback  # only on the error path: it costs start-up time

    traceback.print_exc()
