"""host/http.py: agents are polled directly (never through an http_proxy of the
environment), and a client that connects and says nothing is dropped after the handler's
timeout instead of holding a server thread for ever."""

from __future__ import annotations

import socket

from lbtune.host import http
from lbtune.host.http import HttpEndpoint, Reply, fetch_json


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
