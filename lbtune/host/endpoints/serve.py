"""The protocol and the socket of `lbtune ipvs serve`: both sides of it.

A running server (the resident reconciler, lbtune.cli.ipvs.serve) listens on the state
directory's socket and runs the applies that clients hand it with the engine and the config
it already holds; the client (the console entry point, through lbtune.cli.ipvs.fast, before
click and the planner are imported) only prints what it answers. A client that finds no
server, one that declines, or one that does not claim the request within CLAIM_TIMEOUT,
runs the apply itself, as it always does: nothing was printed or changed.

The protocol, on a Unix stream socket that only root can open (`ipvs.sock` in root's 0700
state directory, mode 0600; each side checks the other's uid with SO_PEERCRED):

- the client sends MAGIC, then a u32 count of fields, then each field as a u32 length and
  its bytes: the command (`apply`), the config as given, `1` or `0` for --json, the
  working directory, then the environment as `NAME=VALUE` entries (`Request`);
- the server answers `D` + a u32-length reason (declined: the client runs the command
  itself) or `A` (claimed); after `A` the client sends `G` (go): a server never runs a
  request whose client gave up waiting (and runs it itself), so no apply runs twice;
- the server runs the command and answers `R`, the exit code (i32), then stdout and
  stderr, each a u32 length and its bytes.

The client's side: `connect`, `hand_over`, `result`; the server's: `Listener`,
`read_request`, `claim`, `declined`, `answer`. Only the standard library's C modules are
imported here (the point is the client's start-up).
"""

from __future__ import annotations

import _socket
import _struct
import os
import time

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


class Declined(Exception):
    """A request the server will not run (its reason goes to the client)."""


class Request:
    """One `ipvs apply` handed over: the command, the config as given, --json, and the
    client's working directory and environment (which the server runs it in)."""

    __slots__ = ("as_json", "command", "cwd", "env", "source")

    def __init__(self, command: str, source: str, as_json: bool, cwd: str,
                 env: dict[str, str]) -> None:
        self.command = command
        self.source = source
        self.as_json = as_json
        self.cwd = cwd
        self.env = env

    @property
    def argv(self) -> list[str]:
        """The command line the server runs."""
        return ["ipvs", self.command, self.source, *(["--json"] if self.as_json else [])]

    def encode(self) -> bytes:
        enc = ("utf-8", "surrogateescape")
        return encode_request([self.command.encode(), self.source.encode(),
                               b"1" if self.as_json else b"0", self.cwd.encode(*enc),
                               *(f"{k}={v}".encode(*enc) for k, v in self.env.items())])


def peer_uid(sock: _socket.socket) -> int:
    return int(_CRED.unpack(sock.getsockopt(1, _SO_PEERCRED, _CRED.size))[1])  # SOL_SOCKET


def encode_request(fields: list[bytes]) -> bytes:
    """A request's bytes: MAGIC, the count of fields, each field with its length."""
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


def socket_path(base: str | None = None) -> str:
    """The server's socket in state directory `base` (by default the live host's)."""
    if base is None:
        from lbtune.host.ipvs.memo import state_base

        base = state_base()
    return os.path.join(base, SOCKET)


# ------------------------------------------------------------------------------ the client


def connect(base: str) -> _socket.socket | None:
    """A connection to root's server on state directory `base`, or None: no server (the
    common case: one failed connect), a dead one, or one that is not root's (never talked
    to). Its timeout is CLAIM_TIMEOUT until `result`."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        sock.settimeout(CLAIM_TIMEOUT)
        sock.connect(socket_path(base))
        root = peer_uid(sock) == 0
    except Exception:  # no server, no directory: nothing to hand over
        root = False
    if not root:
        sock.close()
        return None
    return sock


def hand_over(sock: _socket.socket, request: Request) -> bool:
    """Send the request; True when the server claimed it and was told to go (it runs it:
    read its `result`), False when it declined (run it here). OSError, Gone: no answer
    within CLAIM_TIMEOUT, or none at all (run it here: nothing ran there)."""
    sock.sendall(request.encode())
    if recv_exact(sock, 1) != b"A":
        return False  # declined (or garbage)
    sock.sendall(b"G")
    return True


def result(sock: _socket.socket) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of the request the server runs, however long it takes
    (an apply may drain for minutes). OSError, Gone: the server took it and went away."""
    sock.settimeout(None)
    if recv_exact(sock, 1) != b"R":
        raise Gone("an answer out of protocol")
    (code,) = I32.unpack(recv_exact(sock, 4))
    out = _blob(sock, 1 << 31)
    err = _blob(sock, 1 << 31)
    return int(code), out, err


# ------------------------------------------------------------------------------ the server


def _text(raw: bytes) -> str:
    if b"\0" in raw:
        raise Declined("a field with a NUL byte")
    return raw.decode("utf-8", "surrogateescape")


def read_request(sock: socket.socket, deadline: float, names: frozenset[str]) -> Request:
    """A request as the protocol frames it, for a config whose name has only `names`'
    characters; Declined for anything else, Gone when the client goes away, TimeoutError
    past `deadline` (time.monotonic)."""
    buf = bytearray()  # read in large pieces: one recv per field would be ~100 syscalls

    def recv(n: int) -> bytes:
        while len(buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request took too long")
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                raise Gone("connection closed")
            buf.extend(chunk)
        out = bytes(buf[:n])
        del buf[:n]
        return out

    if recv(len(MAGIC)) != MAGIC:
        raise Declined("not an lbtune ipvs serve request of this version")
    (count,) = U32.unpack(recv(4))
    if not 4 <= count <= MAX_FIELDS:
        raise Declined(f"{count} fields")
    fields: list[bytes] = []
    total = 0
    for _ in range(count):
        (n,) = U32.unpack(recv(4))
        total += n
        if total > MAX_REQUEST:
            raise Declined("a request larger than the protocol allows")
        fields.append(recv(n))
    command, source, as_json, cwd = (_text(f) for f in fields[:4])
    if command != "apply":
        raise Declined(f"command {command!r}")
    if not source or source.startswith("-") or not set(source) <= names:
        raise Declined("a config name the server does not take")
    if as_json not in ("0", "1"):
        raise Declined("--json is neither 1 nor 0")
    if not cwd.startswith("/"):
        raise Declined("a working directory that is not absolute")
    env: dict[str, str] = {}
    for raw in fields[4:]:
        name, eq, value = _text(raw).partition("=")
        if not eq or not name or name in env:
            raise Declined("an environment entry that is not NAME=VALUE once")
        env[name] = value
    return Request(command, source, as_json == "1", cwd, env)


def claim(sock: socket.socket, deadline: float) -> None:
    """Claim a request and wait for the client's go (Gone: it gave up: do not run it)."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    sock.sendall(b"A")
    if recv_exact(sock, 1) != b"G":
        raise Gone("no go")


def declined(reason: str) -> bytes:
    """The answer to a request the server will not run."""
    raw = reason.encode()
    return b"D" + U32.pack(len(raw)) + raw


def answer(code: int, out: bytes, err: bytes) -> bytes:
    """The answer to a request the server ran: its exit code and output."""
    return b"".join([b"R", I32.pack(code), U32.pack(len(out)), out, U32.pack(len(err)), err])


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
