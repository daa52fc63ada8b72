"""host/http.py: agents are polled directly (never through an http_proxy of the
environment), and a client that connects and says nothing is dropped after the handler's
timeout instead of holding a server thread for ever."""

from __future__ import annotations

import socket

from lbtune.host.http import HttpEndpoint, Reply, _Handler, fetch_json


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
    monkeypatch.setattr(_Handler, "timeout", 0.3)
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

    import lbtune.host.http as http

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


def test_connections_beyond_the_cap_are_closed_and_the_rest_served(monkeypatch):
    import lbtune.host.http as http

    monkeypatch.setattr(http, "MAX_CLIENTS", 2, raising=False)
    monkeypatch.setattr(_Handler, "timeout", 30.0)  # the silent ones stay, held by the cap
    ep = HttpEndpoint("127.0.0.1", 0, lambda path: Reply(200, "application/json", '{"ok": 1}'))
    ep.start()
    try:
        silent = [socket.create_connection(("127.0.0.1", ep.port), timeout=10) for _ in range(2)]
        with socket.create_connection(("127.0.0.1", ep.port), timeout=10) as third:
            assert third.recv(1) == b""  # closed at once: the two silent ones hold the slots
        for s in silent:
            s.close()
        ok = None
        for _ in range(50):  # the slots free as the handlers see the closes
            try:
                ok = fetch_json(f"http://127.0.0.1:{ep.port}/", timeout=5)
                break
            except Exception:
                import time

                time.sleep(0.1)
        assert ok == {"ok": 1}
    finally:
        ep.close()
