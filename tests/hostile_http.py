"""Hostile and honest HTTP servers for the agent's client side (`ipvs agent --misc-check`,
`adapt`): each KIND answers every connection the same way, from a good agent report to a
status line that is not one, 200,000 headers, JSON nested 400,000 deep, or one byte at a
time for ever.

In-process: `Hostile(kind)` (a context manager; `.url`). As a program (the lab runs it in a
namespace): `python -m tests.hostile_http KIND:PORT ...` prints "ready" once all listen.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from typing import Callable, Optional

from lbtune.ipvs.nodereport import AgentReport, judge

# egress 25 of 100 Mbit/s, nothing else in use: headroom 75 %, misc-check exit 2 + 190
REPORT = judge(AgentReport(
    node="rs1", port=80, time=0.0, interval=1.0, cpu_util=0.1, cpus=1, runq=0,
    mem_available=1 << 30, mem_total=2 << 30, connections=3, listening=True, listen_queue=0,
    listen_backlog=511, listen_drops=0, listen_drops_delta=0, egress_dev="eth0",
    egress_bps=25e6, egress_capacity_bps=100e6, max_conns=None,
    signals=("listen", "egress"), load=0.0, bottleneck="", pressure=0.0, health="ok",
    reason="",
))  # fmt: skip
GOOD_WEIGHT = 190  # keepalived weight = exit code - 2 = round(253 x 0.75)


def _doc(**changes: object) -> bytes:
    d = REPORT.to_json()
    d.update(changes)
    return json.dumps(d).encode()


def _ok(body: bytes) -> bytes:
    return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + \
        str(len(body)).encode() + b"\r\n\r\n" + body


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# kind -> the whole answer (bytes), or a callable that writes to the connection itself
ANSWERS: dict[str, object] = {
    "good": _ok(_doc()),
    "unknown": _ok(_doc(health="unknown", reason="cannot tell: listeners: sock_diag: "
                        "Operation not permitted",
                        errors=["listeners: sock_diag: Operation not permitted"])),
    "down": _ok(_doc(health="down", listening=False, reason="nothing listens on port 80")),
    "bad_status": b"HTTP/1.1 abc\r\nContent-Length: 2\r\n\r\n{}",
    "http09": _doc(),  # an HTTP/0.9 answer: the body alone, no status line
    "huge_headers": b"HTTP/1.0 200 OK\r\n" + b"X-Filler: x\r\n" * 200_000 + b"\r\n" + _doc(),
    "deep_json": _ok(_nested(400_000)),
    "deep_json_small": _ok(_nested(30_000)),  # under the size cap: the parser's depth limit
    "not_json": _ok(b"<html>hello</html>"),
    "status_500": b"HTTP/1.0 500 Oops\r\nContent-Length: 0\r\n\r\n",
}


def _drip(prefix: bytes) -> Callable[[socket.socket], None]:
    """Send `prefix`, then one byte every 0.2 s for as long as the peer stays."""

    def write(conn: socket.socket) -> None:
        conn.sendall(prefix)
        while True:
            conn.sendall(b"x")
            time.sleep(0.2)

    return write


ANSWERS["drip_header"] = _drip(b"HTTP/1.0 200 OK\r\nX-Slow: ")
ANSWERS["drip_body"] = _drip(b"HTTP/1.0 200 OK\r\nContent-Length: 100000\r\n\r\n[")

KINDS = tuple(ANSWERS)


def _serve(sock: socket.socket, kind: str) -> None:
    answer = ANSWERS[kind]

    def one(conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            conn.recv(4096)  # the request (one segment is enough for these clients)
            if callable(answer):
                answer(conn)
            else:
                assert isinstance(answer, bytes)
                conn.sendall(answer)
        except OSError:
            pass
        finally:
            conn.close()

    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        threading.Thread(target=one, args=(conn,), daemon=True).start()


class Hostile:
    """A server of one KIND on 127.0.0.1 (a free port) for the life of the `with`."""

    def __init__(self, kind: str, port: int = 0) -> None:
        self.kind = kind
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> Hostile:
        self._thread = threading.Thread(target=_serve, args=(self.sock, self.kind), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def main(argv: list[str]) -> None:
    servers = []
    for item in argv:
        kind, _, port = item.partition(":")
        servers.append(Hostile(kind, int(port)).__enter__())
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes our stdin


if __name__ == "__main__":
    main(sys.argv[1:])
