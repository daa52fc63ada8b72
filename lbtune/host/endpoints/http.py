"""Small HTTP and line servers and an HTTP client, for the node agent and the adapt loop.

The agent (`lbtune ipvs agent`) answers read-only GETs with documents its engine renders;
HAProxy's agent-check speaks a one-line TCP protocol (connect, read one line, close); the
director (`lbtune ipvs adapt`, and keepalived's MISC_CHECK through `agent --misc-check`)
fetches agent documents. Sockets live here because only host/ may import them
(import-linter).

Both sides are written for hostile peers and bounded resources, not on top of `http.server`
and `urllib`, whose limits are per read (a client that drips one byte a second holds a
server thread, or a fetch, for ever) and whose parse errors escape as exceptions of their
own:

- **servers**: one accept loop per port and at most `WORKERS` connections in service at a
  time; the rest wait in the kernel's accept queue (`BACKLOG`, capped by
  `net.core.somaxconn`), so a flood costs neither threads nor memory. A peer outside the
  allow-list is closed at once; a request must arrive whole (at most `MAX_REQUEST` bytes)
  within `REQUEST_DEADLINE` seconds. Every refusal is one line through a rate-limited
  log (`RefusalLog`), never a traceback. Answers are HTTP/1.0 with `Connection: close`.
- **client** (`fetch_json`): one total deadline over name resolution, connect, request and
  answer; at most `MAX_ANSWER` bytes (head and body); a strict status line; every failure
  is a one-line `FetchError`. Agents are polled directly (no `http_proxy`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
import os
import re
import select
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Union
from urllib.parse import urlsplit

# An accept queue for a director polling many servers plus scrapes and checks: 500 peers
# connecting at once all fit (the kernel caps it at net.core.somaxconn, 4096 since 5.4).
BACKLOG = 1024
WORKERS = 32  # connections served at once; more wait in the accept queue, not in threads
REQUEST_DEADLINE = 3.0  # seconds for a whole request to arrive and its answer to leave
MAX_REQUEST = 8192  # bytes of request line and headers
MAX_ANSWER = 1 << 16  # bytes of an agent's answer, head and body (a report is ~1.5 KB)
MAX_TIMEOUT = 30.0  # the longest total deadline a fetch accepts

Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: str


Route = Callable[[str], Reply]  # path (without query) -> reply
Log = Callable[[str], None]  # one line, no newline


# ------------------------------------------------------------------------ access and log


def parse_networks(text: str) -> tuple[Network, ...]:
    """`10.0.0.0/24,192.0.2.7,::1` as networks (a bare address is a /32 or /128); `any`
    is every address. ValueError naming the first bad entry."""
    out: list[Network] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item == "any":
            out += [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
            continue
        try:
            out.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an address or network (CIDR)") from None
    if not out:
        raise ValueError("no network given")
    return tuple(out)


def peer_allowed(addr: str, networks: Optional[Sequence[Network]]) -> bool:
    """Whether a peer address is inside one of `networks` (None: every peer is)."""
    if networks is None:
        return True
    try:
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # an IPv4 peer of a dual-stack socket
    return any(ip.version == n.version and ip in n for n in networks)


class RefusalLog:
    """One line per refused or failed request, at most `burst` lines per `window` seconds;
    what was held back is counted in the next line that gets out."""

    def __init__(self, write: Optional[Log], burst: int = 10, window: float = 10.0) -> None:
        self._write = write
        self.burst, self.window = burst, window
        self._lock = threading.Lock()
        self._start = -math.inf
        self._shown = 0
        self.held = 0
        self.total = 0

    def __call__(self, line: str) -> None:
        with self._lock:
            self.total += 1
            now = time.monotonic()
            if now - self._start >= self.window:
                self._start, self._shown = now, 0
            if self._shown >= self.burst:
                self.held += 1
                return
            self._shown += 1
            held, self.held = self.held, 0
        if self._write is not None:
            more = f" ({held} more not shown)" if held else ""
            line = line.replace("\r", "\\r").replace("\n", "\\n")  # one line, always
            # stderr gone (a closed pipe): the server keeps serving
            with contextlib.suppress(OSError, ValueError):
                self._write(line + more)


# ------------------------------------------------------------------------------ servers


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _print_peer(addr: Any) -> str:
    host, port = str(addr[0]), addr[1]
    if host.startswith("::ffff:") and "." in host:
        host = host[7:]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


Serve = Callable[[socket.socket, str, RefusalLog], None]  # connection, peer text, log


class _Listener:
    """A listening socket, its accept loop and a bounded pool of connection workers."""

    def __init__(self, host: str, port: int, serve: Serve,
                 allow: Optional[Sequence[Network]], log: RefusalLog) -> None:  # fmt: skip
        self._serve, self._allow, self._log = serve, allow, log
        self._sock = socket.socket(_family(host), socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((host, port))
            self._sock.listen(BACKLOG)
            self._sock.setblocking(False)  # a peer gone between select and accept
        except BaseException:
            self._sock.close()
            raise
        self._slots = threading.BoundedSemaphore(WORKERS)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="lbtune-conn")
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # close() writes here: the accept loop sleeps in select() until a peer or this comes,
        # instead of waking 5 times a second to look at _stop (an idle exporter's CPU)
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="lbtune-accept")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.2):
                continue  # every worker busy: peers wait in the accept queue
            try:
                ready, _, _ = select.select([self._sock.fileno(), self._wake_r], [], [])
                if self._stop.is_set():
                    self._slots.release()
                    break
                peer_waits = self._sock.fileno() in ready
                conn, addr = self._sock.accept() if peer_waits else (None, ("", 0))
            except (OSError, ValueError):  # closed under us, or a peer gone before accept
                conn, addr = None, ("", 0)
            if conn is None:
                self._slots.release()
                continue
            if not peer_allowed(str(addr[0]), self._allow):
                self._log(f"refused {_print_peer(addr)}: not in --allow")
                _close(conn)
                self._slots.release()
                continue
            try:
                self._pool.submit(self._one, conn, _print_peer(addr))
            except RuntimeError:  # the pool is shutting down
                _close(conn)
                self._slots.release()

    def _one(self, conn: socket.socket, peer: str) -> None:
        try:
            self._serve(conn, peer, self._log)
        except Exception as e:  # a peer must never kill the server
            self._log(f"{peer}: {type(e).__name__}: {e}")
        finally:
            _close(conn)
            self._slots.release()

    def close(self) -> None:
        if self._stop.is_set():
            return  # closed already (the pipe's descriptors may belong to another file now)
        self._stop.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join()
        self._sock.close()
        self._pool.shutdown(wait=False)
        os.close(self._wake_r)
        os.close(self._wake_w)


def _close(conn: socket.socket) -> None:
    with contextlib.suppress(OSError):
        conn.close()


def _drain_and_close(conn: socket.socket, deadline: float) -> None:
    """Half-close, then read what the peer still sends (a request body) until it closes, so
    closing does not reset the connection before the peer has read the answer."""
    try:
        conn.shutdown(socket.SHUT_WR)
        got = 0
        while got < MAX_REQUEST:
            left = min(deadline - time.monotonic(), 0.5)
            if left <= 0:
                break
            conn.settimeout(left)
            chunk = conn.recv(4096)
            if not chunk:
                break
            got += len(chunk)
    except OSError:
        pass


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")


def _read_head(conn: socket.socket, deadline: float) -> tuple[Optional[bytes], str]:
    """The request head (up to the blank line), or None and why not."""
    buf = b""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            end = buf.find(b"\n\n")
        if end >= 0:
            return buf[:end], ""
        if len(buf) > MAX_REQUEST:
            return None, f"request head over {MAX_REQUEST} bytes"
        left = deadline - time.monotonic()
        if left <= 0:
            return None, f"no complete request within {REQUEST_DEADLINE:g} s"
        conn.settimeout(left)
        try:
            chunk = conn.recv(4096)
        except socket.timeout:
            continue
        if not chunk:
            return None, "closed before a complete request" if buf else ""
        buf += chunk


def _answer(conn: socket.socket, method: bytes, reply: Reply, deadline: float) -> None:
    data = reply.body.encode("utf-8")
    head = [f"HTTP/1.0 {reply.status} {_REASONS.get(reply.status, 'Error')}",
            "Server: lbtune-agent", f"Content-Type: {reply.content_type}",
            f"Content-Length: {len(data)}", "Cache-Control: no-store",
            "Connection: close"]  # fmt: skip
    if reply.status == 405:
        head.append("Allow: GET, HEAD")
    out = ("\r\n".join(head) + "\r\n\r\n").encode("ascii")
    if method != b"HEAD":
        out += data
    conn.settimeout(max(0.001, deadline - time.monotonic()))
    conn.sendall(out)
    _drain_and_close(conn, deadline)


_TEXT = "text/plain; charset=utf-8"


def _serve_http(route: Route) -> Serve:
    def serve(conn: socket.socket, peer: str, log: RefusalLog) -> None:
        deadline = time.monotonic() + REQUEST_DEADLINE
        try:
            head, problem = _read_head(conn, deadline)
        except OSError as e:
            log(f"{peer}: {e.strerror or type(e).__name__}")
            return
        if head is None:
            if problem:
                log(f"{peer}: {problem}")
                if "over" in problem:
                    _answer(conn, b"GET", Reply(431, _TEXT, "request too large\n"), deadline)
            return
        first = head.split(b"\n", 1)[0].rstrip(b"\r")
        parts = first.split(b" ")
        ok = (len(parts) == 3 and _TOKEN.fullmatch(parts[0]) is not None
              and _TARGET.fullmatch(parts[1]) is not None
              and re.fullmatch(rb"HTTP/1\.[01]", parts[2]) is not None)  # fmt: skip
        if not ok:
            log(f"{peer}: bad request line {first[:80]!r}")
            _answer(conn, b"GET", Reply(400, _TEXT, "bad request\n"), deadline)
            return
        method, target = parts[0], parts[1].decode("ascii")
        if method not in (b"GET", b"HEAD"):
            _answer(conn, method, Reply(405, _TEXT, "read-only: GET only\n"), deadline)
            return
        try:
            reply = route(target.split("?", 1)[0])
        except Exception as e:  # a collector failing must not kill it
            log(f"{peer}: {target}: {type(e).__name__}: {e}")
            reply = Reply(500, _TEXT, f"error: {type(e).__name__}\n")
        _answer(conn, method, reply, deadline)

    return serve


def _serve_line(line: Callable[[], str]) -> Serve:
    def serve(conn: socket.socket, peer: str, log: RefusalLog) -> None:
        deadline = time.monotonic() + REQUEST_DEADLINE
        text = line()
        if text:
            conn.settimeout(REQUEST_DEADLINE)
            conn.sendall(text.encode("ascii", "replace"))
        _drain_and_close(conn, deadline)

    return serve


class _Endpoint:
    """A started-on-demand listener: its port, start and close (the two endpoints below)."""

    _listener: _Listener

    @property
    def port(self) -> int:
        return self._listener.port

    def start(self) -> None:
        self._listener.start()

    def close(self) -> None:
        self._listener.close()


class HttpEndpoint(_Endpoint):
    """An HTTP server on (host, port) answering GETs with `route(path)`; peers outside
    `allow` (None: all) are refused, refusals go to `log`."""

    def __init__(self, host: str, port: int, route: Route,
                 allow: Optional[Sequence[Network]] = None,
                 log: Optional[RefusalLog] = None) -> None:  # fmt: skip
        self._listener = _Listener(host, port, _serve_http(route), allow,
                                   log or RefusalLog(None))  # fmt: skip


class LineEndpoint(_Endpoint):
    """A TCP server that writes `line()` to every client and closes (HAProxy agent-check);
    an empty line() closes without a word."""

    def __init__(self, host: str, port: int, line: Callable[[], str],
                 allow: Optional[Sequence[Network]] = None,
                 log: Optional[RefusalLog] = None) -> None:  # fmt: skip
        self._listener = _Listener(host, port, _serve_line(line), allow,
                                   log or RefusalLog(None))  # fmt: skip


# ------------------------------------------------------------------------------- client


class FetchError(Exception):
    """An agent could not be reached or did not answer with a document."""


@dataclass(frozen=True)
class _Target:
    tls: bool
    host: str  # without brackets
    port: int
    path: str  # path and query
    authority: str  # for the Host header


def parse_url(url: str) -> _Target:
    """An http:// or https:// URL of an agent; FetchError (one line) for anything else."""
    shown = url.encode("ascii", "backslashreplace").decode("ascii")[:200]
    if any(not 0x21 <= ord(c) <= 0x7E for c in url):
        raise FetchError(f"{shown!r}: not a URL (spaces, control or non-ASCII characters)")
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname
    except ValueError as e:
        raise FetchError(f"{shown}: not a URL ({e})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise FetchError(f"{shown}: not an http:// URL")
    if parts.username is not None or parts.password is not None:
        raise FetchError(f"{shown}: user information is not supported")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise FetchError(f"{shown}: bad IPv6 address {host!r}") from None
    tls = parts.scheme == "https"
    port = port if port is not None else (443 if tls else 80)
    if port == 0:
        raise FetchError(f"{shown}: port 0")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Target(tls, host, port, path, parts.netloc.rsplit("@", 1)[-1])


def _resolve(host: str, port: int, deadline: float) -> list[tuple[Any, ...]]:
    """getaddrinfo bounded by the deadline (a name lookup can hang on a dead resolver)."""
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        literal = True
    except ValueError:
        literal = False
    if literal:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    box: dict[str, Any] = {}

    def lookup() -> None:
        try:
            box["ok"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError, ValueError) as e:
            box["err"] = e

    t = threading.Thread(target=lookup, daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
    if "ok" in box:
        return list(box["ok"])
    if "err" in box:
        e = box["err"]
        raise FetchError(f"cannot resolve {host}: {getattr(e, 'strerror', None) or e}")
    raise FetchError(f"cannot resolve {host} in time")


def _left(deadline: float, timeout: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(f"no complete answer within {timeout:g} s")
    return left


def _exchange(t: _Target, timeout: float, deadline: float) -> bytes:
    infos = _resolve(t.host, t.port, deadline)
    if not infos:
        raise FetchError(f"cannot resolve {t.host}")
    family, stype, proto, _name, addr = infos[0]
    sock = socket.socket(family, stype, proto)
    try:
        sock.settimeout(_left(deadline, timeout))
        sock.connect(addr)
        conn: socket.socket = sock
        if t.tls:
            import ssl

            conn = ssl.create_default_context().wrap_socket(
                sock, server_hostname=t.host, do_handshake_on_connect=False)
            conn.settimeout(_left(deadline, timeout))
            conn.do_handshake()
        req = (f"GET {t.path} HTTP/1.0\r\nHost: {t.authority}\r\nAccept: application/json\r\n"
               "User-Agent: lbtune\r\nConnection: close\r\n\r\n").encode("ascii")
        conn.settimeout(_left(deadline, timeout))
        conn.sendall(req)
        buf = b""
        want: Optional[int] = None  # head + Content-Length, once the head is in
        while want is None or len(buf) < want:
            conn.settimeout(_left(deadline, timeout))
            try:
                chunk = conn.recv(16384)
            except socket.timeout:
                continue  # _left() says when the deadline is gone
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_ANSWER:
                raise FetchError(f"answer larger than {MAX_ANSWER} bytes")
            if want is None:
                want = _expected_size(buf)
        return buf
    finally:
        sock.close()


_CL = re.compile(rb"\r?\ncontent-length:[ \t]*(\d{1,9})[ \t]*\r?\n", re.IGNORECASE)


def _expected_size(buf: bytes) -> Optional[int]:
    end = buf.find(b"\r\n\r\n")
    sep = 4
    if end < 0:
        end, sep = buf.find(b"\n\n"), 2
    if end < 0:
        return None
    m = _CL.search(buf[: end + 2])
    return end + sep + int(m.group(1)) if m else None


_STATUS = re.compile(rb"HTTP/1\.[01] ([1-5][0-9][0-9])(?: [\x20-\x7e\t]*)?")


def _body(raw: bytes) -> bytes:
    """The body of a complete 200 answer; FetchError naming what is wrong."""
    end, sep = raw.find(b"\r\n\r\n"), 4
    if end < 0:
        end, sep = raw.find(b"\n\n"), 2
    if end < 0:
        raise FetchError("no complete HTTP answer (headers never ended)")
    lines = raw[:end].split(b"\n")
    status = _STATUS.fullmatch(lines[0].rstrip(b"\r"))
    if status is None:
        raise FetchError(f"not an HTTP answer (status line {lines[0][:60]!r})")
    if len(lines) > 101:
        raise FetchError(f"{len(lines) - 1} header lines: more than 100")
    length: Optional[int] = None
    for line in lines[1:]:
        name, colon, value = line.rstrip(b"\r").partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            raise FetchError(f"bad header line {line[:60]!r}")
        key = name.lower()
        if key == b"transfer-encoding":
            raise FetchError("chunked answer to an HTTP/1.0 request")
        if key == b"content-length":
            v = value.strip()
            if not v.isdigit() or len(v) > 9:
                raise FetchError(f"bad Content-Length {v[:20]!r}")
            length = int(v)
    code = int(status.group(1))
    if code != 200:
        raise FetchError(f"HTTP {code}")
    body = raw[end + sep:]
    if length is not None and len(body) < length:
        raise FetchError(f"answer cut short ({len(body)} of {length} bytes)")
    return body if length is None else body[:length]


def fetch_json(url: str, timeout: float = 1.0) -> Any:
    """GET url and parse its JSON body within `timeout` seconds in total (resolution,
    connect, request, answer); FetchError (one line) on any failure."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout)
            and 0 < timeout <= MAX_TIMEOUT):  # fmt: skip
        raise FetchError(f"timeout {timeout!r}: more than 0 and at most {MAX_TIMEOUT:g} s")
    t = parse_url(url)
    deadline = time.monotonic() + timeout
    try:
        raw = _exchange(t, timeout, deadline)
    except FetchError as e:
        raise FetchError(f"{url}: {e}") from None
    except (OSError, ValueError, UnicodeError) as e:  # ssl.SSLError is an OSError
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise FetchError(f"{url}: {reason}") from None
    try:
        body = _body(raw)
    except FetchError as e:
        raise FetchError(f"{url}: {e}") from None
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:
        raise FetchError(f"{url}: not JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise FetchError(f"{url}: not JSON ({e})") from None
