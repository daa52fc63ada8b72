"""`lbtune exporter` serving the running host on loopback: valid Prometheus text on every
scrape (promtool), and hostile clients (garbage, floods, drips, early closes, oversized
requests) neither crash it, hang it nor make it print tracebacks."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest

from lbtune.host.endpoints.http import WORKERS
from tests.fleet.conftest import LBTUNE, check_metrics, parse

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = 10.0) -> tuple[int, str, str]:
    try:
        with DIRECT.open(url, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def wait_for(cond, what: str, timeout: float = 30.0, step: float = 0.1):  # type: ignore[no-untyped-def]
    """Poll `cond()` until it returns a true value (bounded wait; not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


@contextlib.contextmanager
def exporter(*args: str, netns: str = "") -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`lbtune exporter --json --listen 127.0.0.1:0 ARGS` running; yields (process, base URL)."""
    pre = ["--netns", netns] if netns else []
    proc = subprocess.Popen(
        [*LBTUNE, *pre, "exporter", "--json", "--listen", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, f"exporter did not start: {proc.stderr.read() if proc.stderr else ''}"
        port = json.loads(line)["port"]
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _send(port: int, payload: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with contextlib.suppress(OSError):
            s.sendall(payload)
        if not read:
            return b""
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_WR)
        chunks = []
        with contextlib.suppress(OSError):
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks)


def test_scrapes_are_valid_prometheus_text_and_other_paths_are_refused():
    with exporter("--min-interval", "0") as (_proc, url):
        status, ctype, text = get(f"{url}/metrics")
        assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
        check_metrics(text)
        m = parse(text)
        assert m["lbtune_up"] == {frozenset(): 1.0}
        assert m["lbtune_scrape_duration_seconds"][frozenset()] > 0
        status, _, text2 = get(f"{url}/metrics")  # a second scrape: window since the first
        check_metrics(text2)
        assert 0 < parse(text2)["lbtune_window_seconds"][frozenset()] < 60
        assert get(f"{url}/nope")[0] == 404
        req = urllib.request.Request(f"{url}/metrics", data=b"x", method="POST")  # noqa: S310
        with pytest.raises(urllib.error.HTTPError) as e:
            DIRECT.open(req, timeout=10)
        assert e.value.code == 405


def test_hostile_clients_neither_crash_nor_hang_it():
    rnd = random.Random(17)  # noqa: S311 (a fixed seed: the same fuzz every run)
    payloads = [
        bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 4096))) for _ in range(40)
    ]
    payloads += [
        b"\r\n\r\n",
        b"GET /" + b"A" * 100_000 + b" HTTP/1.1\r\n\r\n",  # request line too long
        b"GET /metrics HTTP/1.1\r\n" + b"X-H: y\r\n" * 500 + b"\r\n",  # too many headers
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",  # never ends its headers
        b"BREW /pot HTCPCP/1.0\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nContent-Length: 999999999\r\n\r\nabc",
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET \x00\xff HTTP/1.0\r\n\r\n",
        b"GET /metrics?" + b"%" * 5000 + b" HTTP/1.0\r\n\r\n",
    ]
    with exporter("--min-interval", "0") as (proc, url):
        port = int(url.rsplit(":", 1)[1])
        for p in payloads:
            _send(port, p)
        for p in payloads[:10]:  # close before reading the answer
            _send(port, p, read=False)
        # A flood of silent connections, more than the server serves at once, then a
        # scrape once they are gone.
        silent = [socket.create_connection(("127.0.0.1", port), timeout=10)
                  for _ in range(WORKERS + 20)]  # fmt: skip
        for s in silent:
            s.close()
        # A few silent connections held open do not stop a scrape meanwhile.
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(8)]
        try:
            _status, _, text = wait_for(lambda: _ok(f"{url}/metrics"), "a scrape after the fuzz")
            check_metrics(text)
        finally:
            for s in held:
                s.close()
        assert proc.poll() is None  # still running
    err = proc.stderr.read() if proc.stderr else ""
    assert "Traceback" not in err, err


def _ok(url: str):  # type: ignore[no-untyped-def]
    try:
        r = get(url, timeout=5)
    except OSError:
        return None
    return r if r[0] == 200 else None


def test_textfile_loop_rewrites_the_file_whole(tmp_path):
    """`--textfile DIR` on the running host: a window per --interval, each written whole
    (only lbtune.prom in DIR, valid every time it is read), until --duration."""
    r = subprocess.run(
        [*LBTUNE, "exporter", "--textfile", str(tmp_path), "--interval", "300ms",
         "--duration", "1500ms"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["lbtune.prom"]
    text = (tmp_path / "lbtune.prom").read_text()
    check_metrics(text)
    m = parse(text)
    assert m["lbtune_up"] == {frozenset(): 1.0}
    assert 0.2 < m["lbtune_window_seconds"][frozenset()] < 30  # one interval, not since boot
