"""`lbtune ipvs serve`: the resident reconciler (docs/ipvs.md, "The resident reconciler").

The command, and the server it runs.

A one-shot `lbtune ipvs apply` of a 1,000-service config pays, every time, for the
interpreter, the imports of the engine, reading and validating 11,000 objects and decoding
the table. This process pays once: it keeps the engine imported, the config's `[[service]]`
sections validated (lbtune.ipvs.config.SectionCache) and the services it found in place
decoded (lbtune.ipvs.resident.ResidentTable), and runs each `lbtune ipvs apply CONFIG
[--json]` that a client hands it (the console entry point, lbtune.cli.ipvs.fast; the
protocol and the socket: lbtune.host.endpoints.serve) as the command line runs it:
`lbtune.cli.main.invoke`, with the client's environment, working directory and output
streams' kind, under the apply's own lock. What changes is only what is read again: the
table is still read whole for every request (drift anywhere is still found and repaired),
the config's changed sections and the table's changed services are decoded, and the rest
comes from what the last request left.

One request at a time, in the order they come. The socket is root's (`ipvs.sock` in the
0700 state directory, mode 0600), and a peer that is not root is closed on without a word.
A request that does not follow the protocol in every byte, within REQUEST_DEADLINE, is
declined or dropped; a declined request runs in the client as if there were no server.
When lbtune's code on disk changes, the server declines and exits: a supervisor restarts
it with the new code (a client never gets an answer from old code).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import time
from typing import Any, Callable, Iterator, Optional

import click

from lbtune.cli.ipvs.common import ipvs_host, ipvs_state
from lbtune.cli.ipvs.fast import SAFE
from lbtune.cli.main import common_options, runtime_of
from lbtune.errors import BadInput, Busy, NeedsPrivilege
from lbtune.host.endpoints import serve as proto
from lbtune.host.ipvs.memo import files_signature
from lbtune.host.signals import hold_after_decided

WAKE = 0.5  # seconds between looks at a stop signal while no client comes
REQUEST_DEADLINE = 5.0  # seconds for a client to send its request and say go, and to read
_ENV_OWN = ("LBTUNE_",)  # what the server's own run depends on: a client's must be the same


class _Captured(io.StringIO):
    """A command's stdout or stderr as a pipe would take it (not a terminal)."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("captured by lbtune ipvs serve")


@contextlib.contextmanager
def _as_client(req: proto.Request) -> Iterator[tuple[_Captured, _Captured]]:
    """The client's environment and working directory, stdout and stderr captured."""
    saved_env = dict(os.environ)
    saved_out, saved_err = sys.stdout, sys.stderr
    out, err = _Captured(), _Captured()
    os.chdir(req.cwd)  # before anything else changes: a directory gone is Declined
    try:
        os.environ.clear()
        os.environ.update(req.env)
        sys.stdout, sys.stderr = out, err
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved_out, saved_err
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir("/")


def _code_files() -> tuple[str, ...]:
    """The files of every lbtune module this process has loaded (the whole apply path once
    `serve` imported it)."""
    files = {getattr(m, "__file__", None) for name, m in list(sys.modules.items())
             if name == "lbtune" or name.startswith("lbtune.")}
    return tuple(sorted(f for f in files if f))


def _own_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_ENV_OWN)}


class Server:
    """The listening socket, the caches, and the loop (`serve`)."""

    def __init__(self, state_path: str, log: Callable[[str], None]) -> None:
        self.path = os.path.join(state_path, proto.SOCKET)
        self.log = log
        self._code_files = _code_files()
        self.code = files_signature(self._code_files)
        self.env = _own_env(dict(os.environ))
        self.stopping = False
        self.served = 0
        self._listener = proto.Listener(state_path)

    # -- life ----------------------------------------------------------------------------

    def open(self) -> None:
        """Take the serve lock (one server per state directory), then listen."""
        if not self._listener.open():
            raise Busy(f"another lbtune ipvs serve listens on {self.path}")

    def close(self) -> None:
        self._listener.close()

    def serve(self, requests: Optional[int] = None) -> None:
        """Answer clients until stopped (SIGTERM, SIGINT) or `requests` were answered."""
        while not self.stopping and (requests is None or self.served < requests):
            conn = self._listener.accept(WAKE)
            if conn is not None:
                with conn:
                    self.handle(conn)

    # -- one client ----------------------------------------------------------------------

    def handle(self, conn: Any) -> None:
        t0 = time.monotonic()
        deadline = t0 + REQUEST_DEADLINE
        try:
            uid = proto.peer_uid(conn)
        except OSError:
            return
        if uid != 0:
            self.log(f"refused a client of uid {uid}: root's only")
            return
        try:
            req = proto.read_request(conn, deadline, SAFE)
            self._check(req)
        except proto.Declined as e:
            self.log(f"declined: {e}")
            self._send(conn, proto.declined(str(e)))
            return
        except (proto.Gone, OSError) as e:
            self.log(f"dropped a client: {e}")
            return
        try:
            proto.claim(conn, deadline)
        except (proto.Gone, OSError) as e:
            self.log(f"{req.source}: the client gave up before go ({e}): not run")
            return
        code, out, err, note = self.run(req)
        self.served += 1
        # logged before the answer goes out: a client that has its answer finds the line
        ms = (time.monotonic() - t0) * 1000
        self.log(f"{req.command} {req.source}: exit {code} in {ms:.0f} ms ({note})")
        if not self._send(conn, proto.answer(code, out, err)):
            self.log(f"{req.command} {req.source}: the client went away before the answer")

    def _check(self, req: proto.Request) -> None:
        if _own_env(req.env) != self.env:
            raise proto.Declined("the client's LBTUNE_* variables are not the server's")
        if files_signature(self._code_files) != self.code:
            self.stopping = True
            raise proto.Declined("lbtune's code changed since the server started: it exits")
        try:
            st = os.stat(req.cwd)
        except OSError as e:
            raise proto.Declined(f"working directory: {e.strerror}") from None
        if (st.st_mode & 0o170000) != 0o040000:
            raise proto.Declined("the working directory is not a directory")

    def run(self, req: proto.Request) -> tuple[int, bytes, bytes, str]:
        """The command as the command line runs it: (exit code, stdout, stderr, a note)."""
        from lbtune.cli.main import invoke
        from lbtune.ipvs import config, reconcile

        sections, table = config.resident, reconcile.resident
        assert sections is not None and table is not None
        sections.read = sections.kept = table.reused = table.decoded = 0
        try:
            with _as_client(req) as (out, err):
                code = invoke(req.argv)
        except OSError as e:  # the directory went away between the check and now
            return 2, b"", f"lbtune: {req.cwd}: {e.strerror}\n".encode(), "not run"
        note = (f"config sections read {sections.read} of {sections.read + sections.kept}, "
                f"services decoded {table.decoded} of {table.decoded + table.reused}")
        enc = ("utf-8", "surrogateescape")
        return code, out.getvalue().encode(*enc), err.getvalue().encode(*enc), note

    def _send(self, conn: Any, data: bytes) -> bool:
        try:
            conn.settimeout(REQUEST_DEADLINE)
            conn.sendall(data)
        except OSError:
            return False
        return True


def _on_stop(server: Server) -> Callable[[int, object], None]:
    """SIGTERM and SIGINT: stop once no request runs (within WAKE seconds when idle).
    Inside a change the engine's own handler is the one installed (lbtune.host.signals):
    the signal stops the change and restores, as it stops a one-shot apply, and the
    server answers that and exits; one that comes after the change is decided is handed
    here, and only stops the server."""
    def handler(signum: int, frame: object) -> None:
        server.stopping = True
    return handler


def serve(state_path: str, log: Callable[[str], None], requests: Optional[int] = None) -> int:
    """Run the server until SIGTERM or SIGINT (exit 0). `requests`: stop after that many
    (tests)."""
    if os.geteuid() != 0:
        raise NeedsPrivilege("lbtune ipvs serve changes IPVS for its clients: it needs root")
    # the whole apply path, imported once (and the code whose change stops the server)
    from lbtune.cli.ipvs import commands as _cli_ipvs  # noqa: F401
    from lbtune.ipvs import config, reconcile
    from lbtune.ipvs.resident import ResidentTable
    from lbtune.tune import engine as _engine  # noqa: F401

    server = Server(state_path, log)
    server.open()
    # The command line holds a signal that comes after a change is decided until the
    # process exits (lbtune.host.signals); this process goes on after each request, so such
    # a signal comes here, once the change's block ends, and stops the server.
    hold_after_decided(False)
    previous = {s: signal.signal(s, _on_stop(server)) for s in (signal.SIGTERM, signal.SIGINT)}
    config.resident, reconcile.resident = config.SectionCache(), ResidentTable()
    try:
        log(f"listening on {server.path} (pid {os.getpid()})")
        from lbtune.host.sdnotify import ready

        ready(f"listening on {server.path}")  # Type=notify (packaging/systemd/)
        server.serve(requests)
    finally:
        config.resident = reconcile.resident = None
        server.close()
        for s, h in previous.items():
            signal.signal(s, h)
    log(f"stopped after {server.served} request(s)")
    return 0


@click.command("serve")
@common_options
@click.pass_context
def serve_command(ctx: click.Context) -> int:
    """Keep the engine and the config loaded; answer `ipvs apply CONFIG` runs from it.

    `lbtune ipvs apply CONFIG [--json]` then hands its work to this process and prints its
    answer (the same output and exit code), so an edit of a large table costs the change,
    not the start-up and a full read. One line per request on stderr. Stop with SIGTERM.
    """
    runtime = runtime_of(ctx)
    if runtime.netns is not None:
        raise BadInput("lbtune ipvs serve serves the host's own IPVS: no --netns")
    host = ipvs_host(ctx, changes=True)
    state = ipvs_state(ctx, host)
    state.fs.makedirs(state.journal_kdir, 0o700)

    def log(line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        sys.stderr.write(f"{stamp} lbtune ipvs serve: {line}\n")
        sys.stderr.flush()

    return serve(state.fs.path(state.base), log)
