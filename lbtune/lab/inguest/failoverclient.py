"""The failover lab's client: fresh connections on a schedule and long-lived keep-alive ones.

``python -m lbtune.lab.inguest.failoverclient --vip VIP --stop FILE --out FILE [...]`` runs in
the client's namespace until FILE `--stop` exists, then writes what it saw as JSON to `--out`
(its "probes" are the fresh connections, a name kept in that JSON):

* a fresh connection every `--interval` seconds (20 ms): a new TCP connection, `GET /` with
  `Connection: close`, a `200` within `--timeout` (0.5 s) is a success; a refused, reset or
  silent connection is a failure. They start on their schedule whether or not the earlier
  ones finished (one event loop, no threads), so a dead director shows as a run of failures
  exactly as long as the outage, not as one long wait;
* `--keepalive N` connections, each sending a request every `--ka-interval` seconds on the
  same connection. One that is reset, closed or unanswered for `--ka-timeout` (10 s, longer
  than any failover, so TCP retransmission gets its chance) is recorded as broken, with the
  time, and replaced by a new one. With `--ports FILE` the client ports of the keep-alive
  connections that are serving are written there (JSON, renamed into place) whenever that
  set changes: the orchestrator asks each director's connection table for exactly these,
  not for any established connection (a fresh one is established for a few ms too).

Times are CLOCK_MONOTONIC, which every namespace of the guest shares with the orchestrator
(lbtune.lab.experiments.failover), so its kill times and these connections are on one time
line.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import selectors
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

from lbtune.host.atomic import write_json_atomic

FRESH_REQUEST = b"GET / HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n"
KA_REQUEST = b"GET / HTTP/1.1\r\nHost: lab\r\n\r\n"
SERVER_HEADER = b"x-lab-server:"


@dataclass
class KeepAlive:
    """One keep-alive connection's life: when it answered first, when it broke, and why."""

    conn: int
    opened: float = 0.0  # first complete response (an established, serving connection)
    broken: Optional[float] = None
    reason: str = ""
    requests: int = 0
    server: str = ""
    port: int = 0  # the client's local port


@dataclass(eq=False)  # hashed by identity: flows live in a set
class _Flow:
    sock: socket.socket
    started: float
    deadline: float
    request: bytes
    buf: bytes = b""
    sent: bool = False
    ka: Optional[KeepAlive] = None
    next_at: float = 0.0  # keep-alive: when the next request goes out
    busy: bool = True  # keep-alive: a request is outstanding
    results: list[list[float]] = field(default_factory=list)


def _response_done(buf: bytes, closing: bool) -> Optional[tuple[int, str, int]]:
    """(status, server, bytes used) once a whole response is in buf, else None."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    head = buf[:head_end].decode("latin-1").split("\r\n")
    try:
        status = int(head[0].split()[1])
    except (IndexError, ValueError):
        return (0, "", len(buf))
    length: Optional[int] = None
    server = ""
    for line in head[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "x-lab-server":
            server = value.strip()
    if length is None:
        return (status, server, len(buf)) if closing else None
    end = head_end + 4 + length
    return (status, server, end) if len(buf) >= end else None


def _write_json(path: str, doc: object) -> None:
    """Written whole and renamed into place: the orchestrator never reads half a file."""
    write_json_atomic(path, doc, fsync=False)


class FailoverClient:
    """The event loop: fresh connections on a fixed schedule plus the keep-alive ones."""

    def __init__(self, vip: str, port: int, interval: float, timeout: float, keepalive: int,
                 ka_interval: float, ka_timeout: float, ports_file: str = "") -> None:  # fmt: skip
        self.addr = (vip, port)
        self.interval, self.timeout = interval, timeout
        self.ka_interval, self.ka_timeout = ka_interval, ka_timeout
        self.sel = selectors.DefaultSelector()
        self.probes: list[list[float]] = []  # [start, ok (1/0), seconds or errno]
        self.conns: list[KeepAlive] = []
        self.flows: set[_Flow] = set()
        self.want_ka = keepalive
        self.reopen_at: list[float] = []
        self.ports_file = ports_file

    def _write_ports(self) -> None:
        """The serving keep-alive connections' client ports, for the orchestrator."""
        if not self.ports_file:
            return
        ports = sorted(c.port for c in self.conns if c.opened and c.broken is None)
        _write_json(self.ports_file, {"ports": ports})

    def _connect(self, now: float, request: bytes, deadline: float) -> _Flow:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        err = s.connect_ex(self.addr)
        flow = _Flow(s, now, deadline, request)
        self.sel.register(s, selectors.EVENT_WRITE, flow)
        self.flows.add(flow)
        if err not in (0, errno.EINPROGRESS):  # unreachable at once: a failure now
            flow.deadline = now
        return flow

    def _close(self, flow: _Flow) -> None:
        self.flows.discard(flow)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(flow.sock)
        flow.sock.close()

    def _open_ka(self, now: float) -> None:
        ka = KeepAlive(len(self.conns))
        self.conns.append(ka)
        flow = self._connect(now, KA_REQUEST, now + self.ka_timeout)
        flow.ka = ka

    def _fail(self, flow: _Flow, now: float, reason: str) -> None:
        self._close(flow)
        if flow.ka is None:
            self.probes.append([round(flow.started, 4), 0, 0.0])
            return
        ka = flow.ka
        if ka.opened:  # an established connection broke: what failover must not do
            ka.broken, ka.reason = round(now, 4), reason
            self._write_ports()
        else:  # never served: count as a failed fresh connection, drop it
            self.probes.append([round(flow.started, 4), 0, 0.0])
            self.conns.remove(ka)
        self.reopen_at.append(now + 0.2)

    def _done(self, flow: _Flow, now: float, status: int, server: str) -> None:
        if status != 200:
            self._fail(flow, now, f"status {status}")
            return
        if flow.ka is None:
            self.probes.append([round(flow.started, 4), 1, round(now - flow.started, 4)])
            self._close(flow)
            return
        ka = flow.ka
        ka.requests += 1
        if not ka.opened:
            ka.opened = round(now, 4)
            ka.port = flow.sock.getsockname()[1]
            self._write_ports()
        ka.server = ka.server or server
        flow.busy, flow.next_at = False, now + self.ka_interval
        self.sel.modify(flow.sock, selectors.EVENT_READ, flow)

    def _io(self, flow: _Flow, mask: int, now: float) -> None:
        if not flow.sent:
            err = flow.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._fail(flow, now, os.strerror(err))
                return
            try:
                flow.sock.send(flow.request)
            except OSError as e:
                self._fail(flow, now, e.strerror or str(e))
                return
            flow.sent = True
            self.sel.modify(flow.sock, selectors.EVENT_READ, flow)
            return
        try:
            chunk = flow.sock.recv(65536)
        except OSError as e:
            self._fail(flow, now, e.strerror or str(e))
            return
        if not chunk and (flow.ka is not None and not flow.busy):
            self._fail(flow, now, "closed by the server")
            return
        flow.buf += chunk
        res = _response_done(flow.buf, closing=not chunk)
        if res is None:
            if not chunk:
                self._fail(flow, now, "closed mid-response")
            return
        status, server, used = res
        flow.buf = flow.buf[used:]
        self._done(flow, now, status, server)

    def _tick(self, now: float) -> None:
        for flow in list(self.flows):
            if flow.ka is not None and not flow.busy:
                if now >= flow.next_at:
                    try:
                        flow.sock.send(flow.request)
                    except OSError as e:
                        self._fail(flow, now, e.strerror or str(e))
                        continue
                    flow.busy, flow.started, flow.deadline = True, now, now + self.ka_timeout
            elif now >= flow.deadline:
                self._fail(flow, now, "no answer")
        due = [t for t in self.reopen_at if t <= now]
        self.reopen_at = [t for t in self.reopen_at if t > now]
        for _ in due:
            self._open_ka(now)

    def run(self, stop_file: str) -> None:
        start = time.monotonic()
        for _ in range(self.want_ka):
            self._open_ka(start)
        next_fresh = start
        next_stop_check = start
        while True:
            now = time.monotonic()
            if now >= next_stop_check:
                if os.path.exists(stop_file):
                    break
                next_stop_check = now + 0.1
            if now >= next_fresh:
                self._connect(now, FRESH_REQUEST, now + self.timeout)
                next_fresh += self.interval
                if next_fresh < now:  # the loop fell behind: skip, do not burst
                    next_fresh = now + self.interval
            self._tick(now)
            wait = max(0.0, min(next_fresh, next_stop_check) - time.monotonic())
            for key, mask in self.sel.select(min(wait, 0.01)):
                self._io(key.data, mask, time.monotonic())
        for flow in list(self.flows):
            self._close(flow)

    def result(self) -> dict[str, object]:
        return {"probes": self.probes, "conns": [asdict(c) for c in self.conns]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lbtune.lab.inguest.failoverclient")
    p.add_argument("--vip", required=True)
    p.add_argument("--port", type=int, default=80)
    p.add_argument("--interval", type=float, default=0.02)
    p.add_argument("--timeout", type=float, default=0.5)
    p.add_argument("--keepalive", type=int, default=4)
    p.add_argument("--ka-interval", type=float, default=0.1)
    p.add_argument("--ka-timeout", type=float, default=10.0)
    p.add_argument("--stop", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ports", default="", help="keep the serving keep-alive connections' "
                   "client ports in this file (JSON)")
    a = p.parse_args(argv)
    client = FailoverClient(a.vip, a.port, a.interval, a.timeout, a.keepalive, a.ka_interval,
                    a.ka_timeout, a.ports)  # fmt: skip
    client.run(a.stop)
    _write_json(a.out, client.result())
    return 0


if __name__ == "__main__":
    sys.exit(main())
