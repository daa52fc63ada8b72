"""The `lbtune` click group: global options, error-to-exit-code mapping, command registry.

Only click and lbtune.errors are imported at module level so that `lbtune --help` stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import click

from lbtune import __version__
from lbtune.errors import BadInput, ExitCode, LbtuneError


class Settings:
    """Global options, shared by every command through the click context.

    A plain class, not a dataclass: importing dataclasses costs `lbtune --help` ~8 ms.
    """

    def __init__(
        self,
        root: str = "/",
        netns: Optional[str] = None,
        json: bool = False,
        verbose: int = 0,
        debug: bool = False,
    ) -> None:
        self.root = root
        self.netns = netns
        self.json = json
        self.verbose = verbose
        self.debug = debug
        self._host: Any = None
        self._entered = False
        self._tempdirs: list[str] = []

    def tree(self, path: str, what: str = "--root") -> str:
        """A host tree directory for `path`: the directory itself, or a capture/sosreport
        tarball unpacked (safely) into a temporary directory removed when the command ends."""
        if os.path.isdir(path):
            return path
        if not os.path.isfile(path):
            raise BadInput(f"{what} {path}: no such directory or capture file")
        import tempfile

        from lbtune.observe.capture import unpack_capture

        tmp = tempfile.mkdtemp(prefix="lbtune-root-")
        self._tempdirs.append(tmp)
        return unpack_capture(path, os.path.join(tmp, "root"))

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
        import shutil

        for d in self._tempdirs:
            shutil.rmtree(d, ignore_errors=True)
        self._tempdirs.clear()

    def host(self) -> Any:
        """The `Host` these options name, opened on first use (joining --netns then)."""
        if self._host is None:
            from lbtune.host.host import Host

            root = self.tree(self.root) if self.root != "/" else "/"
            if self.netns is not None and not self._entered:
                from lbtune.host.netns import enter_netns

                enter_netns(self.netns)
                self._entered = True
            self._host = Host.open(root, netns=self.netns)
        return self._host


def _setter(attr: str) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False and value != 0:
            setattr(ctx.find_root().obj, attr, value)

    return callback


def common_options(f: Any) -> Any:
    """The global options, accepted after the subcommand too (`lbtune show --json`)."""
    opts = [
        click.option("--root", metavar="DIR", expose_value=False, callback=_setter("root"),
                     help="Read /proc, /sys and /etc below DIR."),
        click.option("--netns", metavar="NAME", expose_value=False, callback=_setter("netns"),
                     help="Operate inside network namespace NAME."),
        click.option("--json", is_flag=True, default=None, expose_value=False,
                     callback=_setter("json"), help="Machine-readable JSON on stdout."),
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
    "checklist": ("lbtune.cli.checklist:checklist_command", "Is this host ready for a load test?"),
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
    help="Read /proc, /sys and /etc below DIR (a fixture, capture or sosreport).",
)
@click.option("--netns", metavar="NAME", help="Operate inside network namespace NAME.")
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
    capability, 4 a change failed and was rolled back, 70 internal error.
    """
    settings = Settings(root=root, netns=netns, json=as_json, verbose=verbose, debug=debug)
    ctx.obj = settings
    ctx.call_on_close(settings.close)


def settings_of(ctx: click.Context) -> Settings:
    obj = ctx.find_root().obj
    assert isinstance(obj, Settings)
    return obj


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: run the CLI and map every error to a documented exit code."""
    sys.exit(invoke(argv))


def invoke(argv: Optional[list[str]] = None) -> int:
    """Run the CLI and return its exit code instead of exiting (used by tests and main)."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in args or os.environ.get("LBTUNE_DEBUG") == "1"
    try:
        rv = cli.main(args=args, prog_name="lbtune", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("lbtune: aborted", err=True)
        return int(ExitCode.USAGE)
    except click.ClickException as e:
        e.show()
        return int(ExitCode.USAGE)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except LbtuneError as e:
        if debug:
            _print_traceback()
        click.echo(f"lbtune: {e}", err=True)
        return int(e.exit_code)
    except KeyboardInterrupt:
        click.echo("lbtune: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if debug:
            _print_traceback()
        else:
            click.echo(
                f"lbtune: internal error: {type(e).__name__}: {e} (run with --debug for details)",
                err=True,
            )
        return int(ExitCode.INTERNAL)
    return int(rv) if isinstance(rv, int) else 0


def _print_traceback() -> None:
    import traceback  # only on the error path: it costs start-up time

    traceback.print_exc()
