"""`ipvs apply|plan CONFIG [--json]` answered before click and the planner are imported.

The console entry point (lbtune.cli.entry) calls `try_serve`, then `try_noop`, before it
loads the command line: an apply is handed to a running `lbtune ipvs serve`
(lbtune.host.endpoints.serve), and a repeated apply or plan that the last full apply
recorded as a no-op is answered from that record (lbtune.host.ipvs.memo). Each answers only
the exact command lines below, run by root on the host itself, and prints the full run's
output byte for byte: the server's own, or the words of lbtune.cli.ipvs.render, which the
full commands print with. Anything else returns None before anything was printed or
changed, and the full run goes ahead.

`python -m lbtune.cli.ipvs.fast ARGS` runs `try_serve` alone (exit 99: not served), for
tests.
"""

from __future__ import annotations

import os
import sys

# The characters of a config name the fast paths take: the full run prints the name
# through rich, where `[` starts markup, `:` an emoji code; and the server takes no other.
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./@+=,-")


def parse_argv(argv: list[str]) -> tuple[str, str, bool] | None:
    """(COMMAND, CONFIG, --json) of exactly `ipvs apply CONFIG` or `ipvs plan CONFIG`, with
    `--json` once anywhere (`lbtune --json ipvs apply CONFIG` is how the Ansible collection
    runs it, and `ipvs plan` in check mode); None for anything else (other options, `--`,
    other commands)."""
    rest = [a for a in argv if a != "--json"]
    if len(argv) - len(rest) > 1 or len(rest) != 3 or rest[0] != "ipvs":
        return None
    if rest[1] not in ("apply", "plan") or rest[2].startswith("-") or not rest[2]:
        return None
    return rest[1], rest[2], len(rest) != len(argv)


def _takes(source: str, as_json: bool) -> bool:
    """The name prints as itself (SAFE), and the output goes where the full run prints
    plain text (not a terminal: rich's colours and a terminal's width)."""
    return set(source) <= SAFE and (as_json or not os.isatty(1))


def _environment_refused() -> bool:
    """Another root is refused, garbage in LBTUNE_* reported, by the full run."""
    from lbtune.environ import problem

    return bool(os.environ.get("LBTUNE_ROOT")) or problem(os.environ) is not None


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:  # as the full run: the reader went away, the outcome stands
        pass


def try_serve(argv: list[str]) -> int | None:
    """The exit code of `argv` as a running `lbtune ipvs serve` ran it (its output
    printed), or None when it must run here (nothing printed, nothing changed)."""
    parsed = parse_argv(argv)
    if parsed is None or parsed[0] != "apply" or os.geteuid() != 0:
        return None
    _command, source, as_json = parsed
    if not _takes(source, as_json):
        return None
    from lbtune.host.endpoints import serve
    from lbtune.host.ipvs.memo import state_base

    # first the server (nearly always none: one failed connect, and the record's check
    # goes on), then what the full run checks of the environment
    sock = serve.connect(state_base())
    if sock is None:
        return None
    try:
        try:
            if _environment_refused():
                return None
            request = serve.Request("apply", source, as_json, os.getcwd(), dict(os.environ))
            if not serve.hand_over(sock, request):
                return None
        except Exception:  # a busy or dead server: nothing ran there
            return None
        try:
            code, out, err = serve.result(sock)
        except (OSError, serve.Gone) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            msg = (f"lbtune: lbtune ipvs serve took this apply and stopped before answering "
                   f"({why}): see `lbtune history` for what it did")
            _write(2, (msg + "\n").encode())
            return serve.LOST
        _write(1, out)
        _write(2, err)
        return code
    finally:
        sock.close()


class _Wraps(Exception):
    """A line the console would wrap: the full run prints it."""


def say(command: str, source: str, as_json: bool, unchanged: int) -> None:
    """Print what the full run prints for a no-op `ipvs apply` (`command`) or `ipvs plan`
    of `source` with `unchanged` objects in place. _Wraps (nothing printed) for a line
    wider than the console the full run prints through (lbtune.cli.output.console: a
    pipe's width is $COLUMNS, else 120)."""
    from lbtune.cli.ipvs import render

    if as_json:
        if command == "plan":
            doc = render.plan_document(source, 0, unchanged, [], [])
        else:
            doc = render.apply_document(source, None, 0, unchanged, [], [], [])
        text = render.flat_json(doc)
        if text is None:  # pragma: no cover - every value of these documents is flat
            raise _Wraps("not a flat document")
        os.write(1, text.encode())
        return
    if command == "plan":
        line = render.plan_summary(0, unchanged, 0)
    else:
        line = render.nothing_to_change(source)
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else 120
    if len(line) > width:
        raise _Wraps(line)
    os.write(1, (line + "\n").encode())


def try_noop(argv: list[str]) -> int | None:
    """Exit code 0 when `argv` is an `ipvs apply` (or `ipvs plan`) the record proves a
    no-op (its output printed); None when the full run must decide (nothing printed,
    nothing changed). An apply is answered under the apply's lock, a plan under none, as
    the full commands run (lbtune.host.ipvs.memo.check)."""
    parsed = parse_argv(argv)
    if parsed is None or os.geteuid() != 0:
        return None
    command, source, as_json = parsed
    if _environment_refused() or not _takes(source, as_json):
        return None
    from lbtune.host.ipvs import memo

    vouched = memo.check(source, memo.state_base(), apply=command == "apply")
    if vouched is None:
        return None
    try:
        say(command, source, as_json, vouched.unchanged)
    except BrokenPipeError:
        return 0  # as the full run: the reader went away, the answer stands
    except Exception:  # a line the console wraps, a write that failed: the full run
        return None
    finally:
        vouched.release()
    return 0


def _main() -> None:  # pragma: no cover - `python -m lbtune.cli.ipvs.fast ARGS`, for tests
    code = try_serve(sys.argv[1:])
    sys.exit(99 if code is None else code)


if __name__ == "__main__":  # pragma: no cover
    _main()
