"""`lbtune ipvs apply CONFIG [--json]` handed to a running `lbtune ipvs serve`: the client,
the protocol, and the server's socket (`Listener`).

The console entry point calls `try_serve` first, before click and the planner are imported:
when the resident reconciler (lbtune.cli.ipvs.serve) listens on the state directory's socket,
it runs the apply with the engine and the config it already holds, and this process only
prints what it answers. Anything else (no server, a server that declines, one that does
not answer within CLAIM_TIMEOUT) returns None before anything was printed or changed, and
the apply runs here as it always does (the record of a no-op first, then the full run).

The protocol (both sides: this module; the server: lbtune.cli.ipvs.serve), on a Unix stream
socket that only root can open (`ipvs.sock` in root's 0700 state directory, mode 0600;
each side checks the other's uid with SO_PEERCRED):

- the client sends MAGIC, then a u32 count of fields, then each field as a u32 length and
  its bytes: the command (`apply`), the config as given, `1` or `0` for --json, the
  working directory, then the environment as `NAME=VALUE` entries;
- the server answers `D` + a u32-length reason (declined: the client runs the command
  itself) or `A` (claimed); after `A` the client sends `G` (go): a server never runs a
  request whose client gave up waiting (and runs it itself), so no apply runs twice;
- the server runs the command and answers `R`, the exit code (i32), then stdout and
  stderr, each a u32 length and its bytes.

Only the standard library's C modules are imported here (the point is the start-up).
"""

from __future__ import annotations

import _socket
import _struct
import os
import sys

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    import socket

MAGIC = b"LBTUNE-IPVS-SERVE 1\n"
SOCKET = "ipvs.sock"
CLAIM_TIMEOUT = 3.0  # seconds for a server to claim a request; then the client runs it
MAX_REQUEST = 256 << 10  # bytes of one request: a config name, a directory, an environment
MAX_FIELDS = 4096
U32 = _struct.Struct("!I")
I32 = _struct.Struct("!i")
_SO_PEERCRED = 17
_CRED = _struct.Struct("3i")  # struct ucred: pid, uid, gid
LOST = 5  # lbtune.errors.ExitCode.ROLLBACK_INCOMPLETE: what was done is in `lbtune history`


class Gone(Exception):
    """The peer closed the connection or sent less than the protocol says."""


def peer_uid(sock: _socket.socket) -> int:
    return int(_CRED.unpack(sock.getsockopt(1, _SO_PEERCRED, _CRED.size))[1])  # SOL_SOCKET


def encode_request(fields: list[bytes]) -> bytes:
    out = [MAGIC, U32.pack(len(fields))]
    for f in fields:
        out.append(U32.pack(len(f)))
        out.append(f)
    return b"".join(out)


def recv_exact(sock: _socket.socket, n: int) -> bytes:
    parts: list[bytes] = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise Gone("connection closed")
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _blob(sock: _socket.socket, limit: int) -> bytes:
    (n,) = U32.unpack(recv_exact(sock, 4))
    if n > limit:
        raise Gone("a field longer than the protocol allows")
    return recv_exact(sock, n)


def _write(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:  # as the full run: the reader went away, the outcome stands
        pass


def _socket_path() -> str:
    from lbtune.host.ipvs.memo import _state_base

    return os.path.join(_state_base(), SOCKET)


def try_serve(argv: list[str]) -> int | None:
    """The exit code of `argv` as the server ran it (its output printed), or None when it
    must run here (nothing printed, nothing changed)."""
    from lbtune.host.ipvs import memo

    parsed = memo._args(argv)
    if parsed is None or parsed[0] != "apply" or os.geteuid() != 0:
        return None
    _command, source, as_json = parsed
    if not set(source) <= memo._SAFE or (not as_json and os.isatty(1)):
        return None  # rich's markup, emoji codes and a terminal's width: the full run
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(CLAIM_TIMEOUT)
        try:
            # first the server (nearly always none: one failed connect, and the record's
            # check goes on), then what the full run checks of the environment
            sock.connect(_socket_path())
            if peer_uid(sock) != 0:
                return None  # not root's server: never talk to it
            from lbtune.environ import problem

            if os.environ.get("LBTUNE_ROOT") or problem(os.environ) is not None:
                return None  # another root is refused, garbage reported, by the full run
            cwd = os.getcwd()
            env = [f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in os.environ.items()]
            fields = [b"apply", source.encode(), b"1" if as_json else b"0",
                      cwd.encode("utf-8", "surrogateescape"), *env]
            sock.sendall(encode_request(fields))
            answer = recv_exact(sock, 1)
            if answer != b"A":
                return None  # declined (or garbage): the full run
            sock.sendall(b"G")
        except Exception:  # no server, a busy or dead one, no directory: nothing ran there
            return None
        sock.settimeout(None)  # the apply may drain for minutes
        try:
            if recv_exact(sock, 1) != b"R":
                raise Gone("an answer out of protocol")
            (code,) = I32.unpack(recv_exact(sock, 4))
            out = _blob(sock, 1 << 31)
            err = _blob(sock, 1 << 31)
        except (OSError, Gone) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            msg = (f"lbtune: lbtune ipvs serve took this apply and stopped before answering "
                   f"({why}): see `lbtune history` for what it did")
            _write(2, (msg + "\n").encode())
            return LOST
        _write(1, out)
        _write(2, err)
        return int(code)
    finally:
        sock.close()


class Listener:
    """The server's socket: `SOCKET` in the state directory, root's, mode 0600, one server
    per directory (a lock file beside it, held while it listens)."""

    def __init__(self, state_path: str) -> None:
        self.path = os.path.join(state_path, SOCKET)
        self._lock_path = os.path.join(state_path, "ipvs-serve.lock")
        self._lock_fd = -1
        self._sock: _socket.socket | None = None
        self._ino = 0

    def open(self) -> bool:
        """Listen; False when another server holds the lock."""
        import contextlib
        import fcntl

        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead server's: the lock says none is alive
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._ino = os.stat(self.path).st_ino
        sock.listen(16)
        self._sock = sock
        return True

    def accept(self, wait: float) -> socket.socket | None:
        """The next client, or None after `wait` seconds without one. (A timeout, not a
        signal, ends the wait: a signal that lands just before the blocking call would not
        interrupt it.)"""
        import socket

        assert self._sock is not None
        self._sock.settimeout(wait)
        try:
            fd, _addr = self._sock._accept()  # type: ignore[attr-defined]
        except (TimeoutError, InterruptedError):
            return None
        conn = socket.socket(fileno=fd)
        conn.setblocking(True)
        return conn

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            try:
                if os.stat(self.path).st_ino == self._ino:
                    os.unlink(self.path)
            except OSError:
                pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _main() -> None:  # pragma: no cover - `python -m lbtune.host.endpoints.serve ARGS`, for tests
    code = try_serve(sys.argv[1:])
    sys.exit(99 if code is None else code)


if __name__ == "__main__":  # pragma: no cover
    _main()
