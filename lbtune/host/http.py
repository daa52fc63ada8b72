"""Small HTTP and line servers and an HTTP client, for the node agent and the adapt loop.

The agent (`lbtune ipvs agent`) answers read-only GETs with documents its engine renders;
HAProxy's agent-check speaks a one-line TCP protocol (connect, read one line, close); the
director (`lbtune ipvs adapt`) fetches agent documents. Sockets live here because only
host/ may import them (import-linter). Everything is the standard library: `http.server`
(threading, so one slow client does not hold the others) and `urllib`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional

MAX_BODY = 1 << 20  # an agent document is a few hundred bytes; refuse anything absurd
MAX_CLIENTS = 64  # connections served at once; more are closed at once (a flood holds no threads)
REQUEST_DEADLINE = 10.0  # seconds a connection may take in all (a byte-by-byte drip included)


@dataclass(frozen=True)
class Reply:
    status: int
    content_type: str
    body: str


Route = Callable[[str], Reply]  # path (without query) -> reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # listen() backlog: 5 by default, a burst of scrapes SYN-retried

    def __init__(self, address: tuple[str, int], route: Route, family: int) -> None:
        self.address_family = family
        self.route = route
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # too many at once: this one is closed, not queued
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        # A drip-feeding client would keep a thread for ever (the timeout is per read):
        # the connection is shut down at the deadline, whatever it is doing.
        timer = threading.Timer(REQUEST_DEADLINE, _cut, (request,))
        timer.daemon = True
        timer.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            timer.cancel()
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that resets or sends garbage is not worth a traceback on stderr


def _cut(request: socket.socket) -> None:
    with contextlib.suppress(OSError):
        request.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    timeout = 5.0  # a client that connects and sends nothing must not hold a thread forever
    server: _Server
    server_version = "lbtune-agent"

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        try:
            reply = self.server.route(self.path.split("?", 1)[0])
        except Exception as e:  # a collector failing must not kill the endpoint
            reply = Reply(500, "text/plain; charset=utf-8", f"error: {e}\n")
        self._send(reply)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _refuse(self) -> None:
        self._send(Reply(405, "text/plain; charset=utf-8", "read-only: GET only\n"))

    do_POST = do_PUT = do_DELETE = do_PATCH = _refuse

    def _send(self, reply: Reply) -> None:
        data = reply.body.encode("utf-8")
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if reply.status == 405:
            self.send_header("Allow", "GET, HEAD")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape per second would flood stderr


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class HttpEndpoint:
    """A threading HTTP server on (host, port) answering GETs with `route(path)`."""

    def __init__(self, host: str, port: int, route: Route) -> None:
        self._server = _Server((host, port), route, _family(host))
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.2})  # fmt: skip
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _LineHandler(socketserver.BaseRequestHandler):
    server: _LineServer

    def handle(self) -> None:
        with contextlib.suppress(OSError):
            self.request.sendall(self.server.line().encode("ascii", "replace"))


class _LineServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], line: Callable[[], str], family: int) -> None:
        self.address_family = family
        self.line = line
        super().__init__(address, _LineHandler)


class LineEndpoint:
    """A TCP server that writes `line()` to every client and closes (HAProxy agent-check)."""

    def __init__(self, host: str, port: int, line: Callable[[], str]) -> None:
        self._server = _LineServer((host, port), line, _family(host))

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True,
                         kwargs={"poll_interval": 0.2}).start()  # fmt: skip

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FetchError(Exception):
    """An agent could not be reached or did not answer with a document."""


# Agents are polled directly: an http_proxy in the director's environment (systemd
# Environment=, sudo -E) would make every agent look unreachable.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch_json(url: str, timeout: float = 1.0) -> Any:
    """GET url and parse its JSON body; FetchError (one line) on any failure."""
    if not url.startswith(("http://", "https://")):
        raise FetchError(f"{url}: not an http:// URL")
    req = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
    try:
        with _DIRECT.open(req, timeout=timeout) as resp:
            raw = resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as e:
        raise FetchError(f"{url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise FetchError(f"{url}: {reason}") from None
    if len(raw) > MAX_BODY:
        raise FetchError(f"{url}: answer larger than {MAX_BODY} bytes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FetchError(f"{url}: not JSON ({e})") from None
