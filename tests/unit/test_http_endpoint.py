"""host/endpoints/http.py: agents are polled directly (never through an http_proxy of the
environment), and a client that connects and says nothing is dropped after the handler's
timeout instead of holding a server thread for ever."""

from __future__ import annotations

import socket

from lbtune.host.endpoints import http
from lbtune.host.endpoints.http import HttpEndpoint, Reply, fetch_json


def test_fetch_ignores_the_proxy_environment(monkeypatch):
    ep = HttpEndpoint("127.0.0.1", 0, lambda path: Reply(200, "application/json", '{"ok": 1}'))
    ep.start()
    try:
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        assert fetch_json(f"http://127.0.0.1:{ep.port}/", timeout=5) == {"ok": 1}
    finally:
        ep.close()


def test_a_silent_client_is_dropped_by_the_server(monkeypatch):
    monkeypatch.setattr(http, "REQUEST_DEADLINE", 0.3)
    ep = HttpEndpoint("127.0.0.1", 0, lambda path: Reply(200, "text/plain", "x"))
    ep.start()
    try:
        with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as s:
            assert s.recv(1) == b""  # the server closed the connection without a request
    finally:
        ep.close()


def test_a_dripping_client_is_cut_at_the_deadline(monkeypatch):
    """A client sending a byte at a time, each well within the per-read timeout, used to hold
    a server thread for as long as it liked; now the connection ends at REQUEST_DEADLINE."""
    import time

    import lbtune.host.endpoints.http as http

    monkeypatch.setattr(http, "REQUEST_DEADLINE", 0.5, raising=False)
    ep = HttpEndpoint("127.0.0.1", 0, lambda path: Reply(200, "text/plain", "x"))
    ep.start()
    payload = b"GET /" + b"a" * 300  # 300 drips of 0.1 s: 30 s if nothing cuts it
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as s:
            s.setblocking(False)
            for byte in payload:
                try:
                    s.send(bytes([byte]))
                    if s.recv(1) == b"":
                        break  # the server closed it
                except BlockingIOError:
                    pass
                except OSError:
                    break  # reset by the server
                sent += 1
                time.sleep(0.1)
    finally:
        ep.close()
    assert sent < len(payload)  # cut before the client finished dripping


def test_silent_clients_beyond_the_workers_cannot_starve_a_scrape(monkeypatch):
    """Connections beyond the worker pool wait in the accept queue (no thread each); silent
    ones are cut at the request deadline, so a real request behind them is still served."""
    monkeypatch.setattr(http, "WORKERS", 2)
    monkeypatch.setattr(http, "REQUEST_DEADLINE", 0.5)
    ep = HttpEndpoint("127.0.0.1", 0, lambda path: Reply(200, "application/json", '{"ok": 1}'))
    ep.start()
    try:
        silent = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(4)]
        assert fetch_json(f"http://127.0.0.1:{ep.port}/", timeout=10) == {"ok": 1}
        for s in silent:
            assert s.recv(1) == b""  # each was closed by the server, not left hanging
            s.close()
    finally:
        ep.close()


def test_refusals_are_one_line_each_and_rate_limited(monkeypatch):
    now = {"t": 1000.0}
    monkeypatch.setattr(http.time, "monotonic", lambda: now["t"])
    out: list[str] = []
    log = http.RefusalLog(out.append, burst=3, window=10.0)
    for i in range(8):
        log(f"refused 192.0.2.{i}:1\nforged second line")
    assert len(out) == 3 and all("\n" not in line for line in out)
    now["t"] += 10.0  # the next window: the held-back count goes out with the first line
    log("refused 192.0.2.9:1")
    assert out[-1] == "refused 192.0.2.9:1 (5 more not shown)"
    assert log.total == 9


def test_allow_lists():
    nets = http.parse_networks("10.0.0.0/24, 192.0.2.7,::1")
    assert http.peer_allowed("10.0.0.200", nets) and http.peer_allowed("192.0.2.7", nets)
    assert http.peer_allowed("::ffff:10.0.0.9", nets)  # IPv4 through a dual-stack socket
    assert not http.peer_allowed("10.0.1.1", nets) and not http.peer_allowed("::2", nets)
    assert not http.peer_allowed("garbage", nets)
    assert http.peer_allowed("203.0.113.5", http.parse_networks("any"))
    assert http.peer_allowed("203.0.113.5", None)
    for bad in ("10.0.0.0/33", "eth0", ",", ""):
        try:
            http.parse_networks(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} accepted")
