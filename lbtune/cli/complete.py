"""Shell completion for bash, zsh and fish through click's own protocol, and `lbtune completion`.

The shell's script (click's own: `lbtune completion bash|zsh|fish` prints it, `make completion`
writes the three for a package) runs `lbtune` with `_LBTUNE_COMPLETE=bash_complete` (or
`zsh_complete`, `fish_complete`) and the words typed so far in COMP_WORDS/COMP_CWORD;
lbtune.cli.entry hands that to `run` before anything else. Command names and their one-line
help come from lbtune.cli.main.COMMANDS (no command module is imported to list them); options
from the click tree; values from the completers below, given to parameters as
`shell_complete=`: profile names (the host's /etc/lbtune/profiles below --root, then the shipped
ones) and profile files, network interfaces (of the --netns namespace typed earlier on the line,
else below --root), namespace names, IPVS config files (*.toml) and paths.

A completer never raises and never prints: a host it cannot read gives no candidates, and
`run` prints nothing at all when completing fails. Completers import what they read when they
run, so naming them costs a command module nothing at start-up.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import TYPE_CHECKING, Callable, Iterable, Optional

import click

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

COMPLETE_VAR = "_LBTUNE_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
LIMIT = 1000  # candidates at most (a directory of many files)
# Where a package installs each script (what `make completion` names its files after).
INSTALL_PATHS = {
    "bash": "/usr/share/bash-completion/completions/lbtune",
    "zsh": "/usr/share/zsh/vendor-completions/_lbtune",
    "fish": "/usr/share/fish/vendor_completions.d/lbtune.fish",
}

Completer = Callable[[click.Context, click.Parameter, str], "list[CompletionItem]"]


class Typed:
    """The root context's object while completing: the global options given after the
    command (`lbtune show --netns NS --iface <TAB>`) are recorded here by their callbacks
    (lbtune.cli.main.common_options), as they are on the Runtime when a command runs."""

    root: Optional[str] = None
    netns: Optional[str] = None
    verbose = 0


def script(cli: click.Command, shell: str) -> str:
    """The completion script click writes for `shell` (bash, zsh or fish)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    if cls is None or shell not in SHELLS:
        raise click.BadParameter(f"{shell!r}: one of {', '.join(SHELLS)}")
    return cls(cli, {}, "lbtune", COMPLETE_VAR).source()


def run(cli: click.Command, instruction: str) -> int:
    """Answer `_LBTUNE_COMPLETE=INSTRUCTION` for `cli` (lbtune.cli.main's group):
    `SHELL_source` prints the script, `SHELL_complete` the candidates for the words in
    COMP_WORDS/COMP_CWORD, in that shell's format. Nothing on stderr and no candidates when
    anything goes wrong (the shell shows stderr mid-line)."""
    shell, _, what = instruction.partition("_")
    if shell not in SHELLS or what not in ("source", "complete"):
        return 1
    import contextlib
    import io

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            if what == "source":
                text = script(cli, shell)
            else:
                from click.shell_completion import get_completion_class

                cls = get_completion_class(shell)
                assert cls is not None
                text = cls(cli, {"obj": Typed()}, "lbtune", COMPLETE_VAR).complete() + "\n"
    except Exception:
        return 1
    try:
        sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
        sys.stdout.flush()
    except OSError:  # the shell went away
        return 1
    return 0


def _safe(fn: Completer) -> Completer:
    """A completer that gives no candidates instead of raising."""

    @functools.wraps(fn)
    def complete(
        ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            return fn(ctx, param, incomplete)
        except Exception:
            return []

    return complete


def _items(values: Iterable[str], incomplete: str) -> list[CompletionItem]:
    from click.shell_completion import CompletionItem

    out = [CompletionItem(v) for v in values if v.startswith(incomplete)]
    return out[:LIMIT]


def given(ctx: click.Context, name: str) -> Optional[str]:
    """A global option (`root`, `netns`) as typed so far: after the command (recorded on the
    root's object), else before it (the group's own parameter)."""
    top = ctx.find_root()
    value = getattr(top.obj, name, None)
    if not isinstance(value, str) or not value:
        value = top.params.get(name)
    return value if isinstance(value, str) and value else None


def _names_in(directory: str, suffix: str) -> list[str]:
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    return [e[: -len(suffix)] for e in entries if e.endswith(suffix) and len(e) > len(suffix)]


def _files(incomplete: str, suffix: str) -> list[str]:
    """Files ending in `suffix` and directories (with a trailing /) that complete the path
    typed so far, hidden ones only when a dot was typed."""
    head, sep, tail = incomplete.rpartition("/")
    where = os.path.expanduser((head or "/") if sep else ".")
    prefix = head + sep
    out: list[str] = []
    with os.scandir(where) as entries:
        for e in entries:
            if not e.name.startswith(tail) or (e.name.startswith(".") and not tail.startswith(".")):
                continue
            if e.is_dir():
                out.append(f"{prefix}{e.name}/")
            elif e.name.endswith(suffix):
                out.append(prefix + e.name)
            if len(out) >= LIMIT:
                break
    return sorted(out)


def profile_dirs(root: str) -> list[str]:
    """Where profile names are looked up, as lbtune.tune.profile.load.profile_dirs has them
    (that module costs a tenth of a second to import; tests/cli/test_completion.py keeps the
    two the same)."""
    from lbtune.host.pkgdata import shipped_dir

    dirs = [os.path.join(root, "etc", "lbtune", "profiles")]
    shipped = shipped_dir("profiles")
    if shipped is not None:
        dirs.append(str(shipped))
    return dirs


@_safe
def profiles(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Profile names (the host's below --root, then the shipped ones) and *.toml files."""
    names: set[str] = set()
    if "/" not in incomplete:
        for d in profile_dirs(given(ctx, "root") or "/"):
            names.update(n for n in _names_in(d, ".toml") if n[0].isalnum())
    try:
        files = _files(incomplete, ".toml")
    except OSError:
        files = []
    return _items([*sorted(names), *files], incomplete)


@_safe
def configs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """IPVS config files (*.toml) and the directories on the way to them."""
    return _items(_files(incomplete, ".toml"), incomplete)


def _interfaces(ctx: click.Context) -> list[str]:
    from lbtune.host.net.netns import interface_names

    return interface_names(given(ctx, "netns"), given(ctx, "root") or "/")


@_safe
def interfaces(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """The network interfaces of the --netns namespace given on the line, else of this host
    (or of the --root tree)."""
    return _items(_interfaces(ctx), incomplete)


@_safe
def interface_lists(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """`IF[,IF]`: one more interface after the ones typed."""
    typed, sep, _ = incomplete.rpartition(",")
    done = set(typed.split(",")) if sep else set()
    return _items((typed + sep + n for n in _interfaces(ctx) if n not in done), incomplete)


@_safe
def namespaces(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Named network namespaces (`ip netns list`)."""
    from lbtune.host.net.netns import namespace_names

    return _items(namespace_names(), incomplete)


def _by_shell(kind: str) -> Completer:
    def complete(
        ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type=kind)]

    complete.__doc__ = f"The shell's own {kind} name completion."
    return complete


paths = _by_shell("file")
directories = _by_shell("dir")


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the Tab-completion script for SHELL (bash, zsh or fish).

    For this shell only: `source <(lbtune completion bash)` (zsh the same),
    `lbtune completion fish | source`. For every session write it where the shell looks:
    ~/.local/share/bash-completion/completions/lbtune, a directory on zsh's $fpath as
    _lbtune, or ~/.config/fish/completions/lbtune.fish (a package installs
    /usr/share/bash-completion/completions/lbtune, /usr/share/zsh/vendor-completions/_lbtune
    and /usr/share/fish/vendor_completions.d/lbtune.fish). Completes commands, options,
    profile names, interfaces (of --netns NS when given first), namespaces and IPVS configs.
    """
    sys.stdout.write(script(ctx.find_root().command, shell))
