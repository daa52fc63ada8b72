"""`lbtune ipvs agent` for real in a throwaway namespace: JSON, Prometheus text, HAProxy
agent-check, a read-only endpoint, and a listener overflow seen as listen-queue drops."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.netns.conftest import in_netns, ip

AGENT, HAPROXY, SERVED = 19177, 19178, 18080

# A listener with backlog 2 that never accepts, then 20 clients: the accept queue fills
# (3 = backlog + 1) and further SYNs are dropped (the listener's sk_drops grow).
OVERFLOW = textwrap.dedent(f"""
    import socket, sys
    lst = socket.socket(); lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", {SERVED})); lst.listen(2)
    print("listening", flush=True)
    sys.stdin.readline()
    clients = []
    for _ in range(20):
        c = socket.socket(); c.setblocking(False); c.connect_ex(("127.0.0.1", {SERVED}))
        clients.append(c)
    print("flooded", flush=True)
    sys.stdin.readline()
""")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _post(url: str) -> int:
    req = urllib.request.Request(url, data=b"weight=100", method="POST")  # noqa: S310
    try:
        urllib.request.urlopen(req, timeout=2)  # noqa: S310
    except urllib.error.HTTPError as e:
        return e.code
    return 200


def _line(port: int) -> str:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        return s.recv(200).decode()


def _until(ns: str, fn: Callable[..., Any], pred: Callable[[Any], bool], *args: Any) -> Any:
    """Call fn(*args) in ns until pred(result) holds (the agent samples every 0.3 s)."""
    deadline = time.monotonic() + 20
    while True:
        got = in_netns(ns, fn, *args)
        if pred(got) or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def _doc() -> dict[str, Any]:
    """The agent's JSON report (called inside the namespace)."""
    status, body = _get(f"http://127.0.0.1:{AGENT}/")
    assert status == 200
    return json.loads(body)  # type: ignore[no-any-return]


def _report(ns: str) -> dict[str, Any]:
    return in_netns(ns, _doc)  # type: ignore[no-any-return]


@pytest.fixture
def agent(netns: str) -> Iterator[str]:
    ip("-n", netns, "link", "set", "lo", "up")
    argv = [sys.executable, "-m", "lbtune", "--netns", netns, "ipvs", "agent",
            "--listen", "127.0.0.1", "--agent-port", str(AGENT), "--port", str(SERVED),
            "--haproxy-port", str(HAPROXY), "--egress", "lo", "--interval", "0.3",
            "--signals", "listen,egress,conns", "--duration", "120", "--json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline() or "{}")  # type: ignore[union-attr]
        assert first.get("ports") == [AGENT, HAPROXY], proc.stderr.read()  # type: ignore[union-attr]
        yield netns
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_agent_reports_a_listener_overflow(agent: str) -> None:
    ns = agent
    down = _report(ns)
    assert down["health"] == "down" and not down["listening"]
    assert in_netns(ns, _line, HAPROXY).startswith("down #nothing listens")

    app = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", OVERFLOW],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert app.stdout is not None and app.stdin is not None
        assert app.stdout.readline().strip() == "listening"
        ok = _until(ns, _get, lambda r: '"health": "ok"' in r[1], f"http://127.0.0.1:{AGENT}/")
        idle = json.loads(ok[1])
        assert idle["listening"] and idle["listen_backlog"] == 2 and idle["listen_drops"] == 0
        assert in_netns(ns, _line, HAPROXY).startswith("up ")

        app.stdin.write("go\n")
        app.stdin.flush()
        assert app.stdout.readline().strip() == "flooded"
        r = _until(ns, _get, lambda r: json.loads(r[1])["listen_drops"] > 0,
                   f"http://127.0.0.1:{AGENT}/")  # fmt: skip
        full = json.loads(r[1])
        assert full["listen_queue"] == 3  # backlog + 1: the kernel's full accept queue
        assert full["listen_drops"] > 0
        assert full["utilisation"]["listen"] == 1.0

        status, text = in_netns(ns, _get, f"http://127.0.0.1:{AGENT}/metrics")
        assert status == 200
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert fams["lbtune_agent_listen_drops"].samples[0].value >= full["listen_drops"]
        assert fams["lbtune_agent_listen_queue"].samples[0].value == 3
        assert fams["lbtune_agent_listening"].samples[0].value == 1

        # the full queue makes the load 1.0: the agent says overloaded (drain for HAProxy)
        over = _until(ns, _doc, lambda d: d["health"] == "overloaded")
        assert over["load"] == 1.0 and over["bottleneck"] == "listen"
        assert in_netns(ns, _line, HAPROXY).startswith("drain #")
        assert in_netns(ns, _get, f"http://127.0.0.1:{AGENT}/healthz")[0] == 503
    finally:
        app.kill()
        app.wait()


def test_agent_is_read_only(agent: str) -> None:
    assert in_netns(agent, _post, f"http://127.0.0.1:{AGENT}/") == 405
    assert in_netns(agent, _get, f"http://127.0.0.1:{AGENT}/nope")[0] == 404
