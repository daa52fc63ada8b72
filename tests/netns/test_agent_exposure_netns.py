"""`lbtune ipvs agent` as exposed to a network, for real in throwaway namespaces.

- where it listens by default (the egress interface's address, not 0.0.0.0) and whom it
  answers (loopback and the directly connected networks, or `--allow`); refusals are one
  log line each, rate-limited;
- 1,000 hostile requests (garbage, huge headers, slowloris, half-close, resets, ...): no
  traceback, bounded memory, and it still answers;
- 500 clients at once on each port: every one answered and no accept-queue overflow
  (TcpExt.ListenOverflows of the namespace stays 0; the backlog was 5);
- `--misc-check` runs inside `--netns`;
- one number for the accept-queue limit: min(application backlog, somaxconn), as sock_diag
  reports it, in the text and the JSON alike.

No timing is asserted: each wait has a generous limit only so a regression cannot hang.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.hostile_http import GOOD_WEIGHT
from tests.netns.conftest import in_netns, ip

REPO = Path(__file__).resolve().parents[2]
AGENT, HAPROXY = 19277, 19278


class Agent:
    def __init__(self, proc: subprocess.Popen[str], first: dict[str, Any], err: Any) -> None:
        self.proc, self.first, self._err = proc, first, err

    def stderr(self) -> str:
        self._err.flush()
        return Path(self._err.name).read_text(errors="replace")

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def _start(netns: str, *args: str) -> Agent:
    err = tempfile.NamedTemporaryFile("w+", prefix="lbtune-agent-err-")  # noqa: SIM115
    argv = [sys.executable, "-m", "lbtune", "--netns", netns, "ipvs", "agent",
            "--agent-port", str(AGENT), "--port", "18080", "--egress", "lo",
            "--interval", "0.5", "--duration", "300", "--json", *args]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    line = proc.stdout.readline() if proc.stdout else ""  # type: ignore[union-attr]
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"agent did not start: {Path(err.name).read_text()}")
    return Agent(proc, json.loads(line), err)


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for a in started:
        a.proc.terminate()
        a.proc.communicate(timeout=20)


@pytest.fixture
def lo_ns(netns: str) -> str:
    ip("-n", netns, "link", "set", "lo", "up")
    return netns


def _get(addr: str, port: int, source: str = "") -> str:
    """One HTTP/1.0 GET /; the status line, or what went wrong."""
    s = socket.socket()
    s.settimeout(10)
    try:
        if source:
            s.bind((source, 0))
        s.connect((addr, port))
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        buf = b""
        while chunk := s.recv(65536):
            buf += chunk
        return buf.split(b"\r\n", 1)[0].decode() if buf else "closed"
    except OSError as e:
        return f"error {e.strerror or e}"
    finally:
        s.close()


# --------------------------------------------------------------- where and for whom


def test_by_default_it_listens_on_the_egress_address_for_connected_networks(netns, agents):
    ip("-n", netns, "link", "set", "lo", "up")
    ip("-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
    ip("-n", netns, "addr", "add", "10.77.5.1/24", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")
    ip("-n", netns, "link", "set", "eth1", "up")
    ip("-n", netns, "route", "add", "default", "via", "10.77.5.254")
    argv = [sys.executable, "-m", "lbtune", "--netns", netns, "ipvs", "agent", "--agent-port",
            str(AGENT), "--port", "18080", "--duration", "300", "--json"]  # fmt: skip
    err = tempfile.NamedTemporaryFile("w+", prefix="lbtune-agent-err-")  # noqa: SIM115
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    first = json.loads(proc.stdout.readline() or "{}")  # type: ignore[union-attr]
    agents.append(Agent(proc, first, err))
    assert first["listening"] == f"http://10.77.5.1:{AGENT}/", Path(err.name).read_text()
    assert first["allow"] == ["127.0.0.0/8", "::1/128", "10.77.5.0/24"]
    # answers on its address, not on every address of the host (0.0.0.0)
    assert in_netns(netns, _get, "10.77.5.1", AGENT).startswith("HTTP/1.0 200")
    assert in_netns(netns, _get, "127.0.0.1", AGENT) == "error Connection refused"


def test_peers_outside_allow_are_refused_and_logged_rate_limited(lo_ns, agents):
    a = _start(lo_ns, "--listen", "0.0.0.0", "--allow", "127.0.0.1/32",
               "--haproxy-port", str(HAPROXY))
    agents.append(a)
    assert a.first["allow"] == ["127.0.0.1/32"]

    def probe() -> tuple[str, list[str], str]:
        ok = _get("127.0.0.1", AGENT)
        refused = [_get("127.0.0.1", AGENT, source="127.0.0.2") for _ in range(40)]
        s = socket.create_connection(("127.0.0.1", HAPROXY), timeout=10,
                                     source_address=("127.0.0.3", 0))  # fmt: skip
        line = s.recv(100).decode()
        s.close()
        return ok, refused, line

    ok, refused, line = in_netns(lo_ns, probe)
    assert ok.startswith("HTTP/1.0 200")
    # closed at once, nothing said (a reset when the request was already in)
    assert set(refused) <= {"closed", "error Connection reset by peer"}, set(refused)
    assert line == ""  # the agent-check port refuses the same way
    log = a.stderr()
    lines = [x for x in log.splitlines() if "not in --allow" in x]
    assert lines and "refused 127.0.0.2:" in lines[0]
    assert len(lines) <= 10  # 41 refusals, at most 10 lines per 10 s
    assert "Traceback" not in log


# ------------------------------------------------------------------------------ fuzz


def _linger0(s: socket.socket) -> None:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def _bad(kind: int, port: int, line_port: int) -> None:
    """One hostile request of `kind`; whatever the agent does, return without raising."""
    rnd = random.Random(kind * 7919 + port)  # noqa: S311 - reproducible junk
    target = line_port if kind % 13 == 12 else port
    s = socket.socket()
    s.settimeout(15)
    try:
        s.connect(("127.0.0.1", target))
        k = kind % 13
        if k == 0:
            s.sendall(rnd.randbytes(rnd.randint(1, 3000)))
        elif k == 1:
            s.sendall(b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        elif k == 2:  # slowloris: one byte at a time, never finishing the head
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            for _ in range(40):
                s.sendall(b"X")
                time.sleep(0.25)
        elif k == 3:  # half-close in the middle of the request line
            s.sendall(b"GET / HTT")
            s.shutdown(socket.SHUT_WR)
        elif k == 4:  # reset at once
            _linger0(s)
        elif k == 5:
            pass  # connect and close
        elif k == 6:
            s.sendall(b"\x00\x01\x02 / HTTP/1.1\r\n\r\n")
        elif k == 7:
            s.sendall(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        elif k == 8:
            s.sendall(b"POST / HTTP/1.1\r\nContent-Length: 50000\r\n\r\n" + b"z" * 50_000)
        elif k == 9:
            s.sendall(b"GET /\xff\xfe HTTP/1.0\r\n\r\n")
        elif k == 10:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        elif k == 11:  # a good request, then a reset before the answer is read
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            _linger0(s)
        else:  # the agent-check port: junk in, reset
            s.sendall(b"junk\r\n" * 100)
            _linger0(s)
        if k not in (4, 11, 12):
            while s.recv(65536):
                pass
    except OSError:
        pass
    finally:
        s.close()


def _fuzz(port: int, line_port: int, n: int, workers: int) -> list[str]:
    kinds = iter(range(n))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                k = next(kinds, None)
            if k is None:
                return
            _bad(k, port, line_port)

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [_get("127.0.0.1", port) for _ in range(3)]


def test_a_thousand_hostile_requests_leave_no_traceback_and_it_still_answers(lo_ns, agents):
    a = _start(lo_ns, "--listen", "127.0.0.1", "--haproxy-port", str(HAPROXY))
    agents.append(a)
    before = a.rss_kib()
    after_fuzz = in_netns(lo_ns, _fuzz, AGENT, HAPROXY, 1000, 40)
    assert all(s.startswith("HTTP/1.0 200") for s in after_fuzz), after_fuzz
    assert in_netns(lo_ns, _get, "127.0.0.1", AGENT).startswith("HTTP/1.0 200")
    log = a.stderr()
    assert "Traceback" not in log and "Exception" not in log, log[:3000]
    assert log.count("\n") < 200, log[:3000]  # rate-limited: not one line per request
    assert a.proc.poll() is None
    after = a.rss_kib()
    print(f"agent RSS before {before} KiB, after 1,000 hostile requests {after} KiB")
    assert after < before + 64 * 1024  # bounded: workers and buffers are capped


# ------------------------------------------------------------------------------ load


def _many(port: int, n: int, request: bytes) -> list[bytes]:
    """n clients connect at once, each sends `request`, reads to EOF; their answers."""
    import selectors

    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
        sel.register(s, selectors.EVENT_WRITE if request else selectors.EVENT_READ, [b"", False])
    answers: dict[int, bytes] = {}
    guard = time.monotonic() + 180
    while len(answers) < n and time.monotonic() < guard:
        for key, events in sel.select(1.0):
            s, state = key.fileobj, key.data
            assert isinstance(s, socket.socket)
            try:
                if events & selectors.EVENT_WRITE:
                    s.sendall(request)
                    sel.modify(s, selectors.EVENT_READ, state)
                    continue
                chunk = s.recv(65536)
            except OSError as e:
                chunk, state[0] = b"", f"error {e}".encode()
            if chunk:
                state[0] += chunk
            else:
                answers[s.fileno()] = state[0]
                sel.unregister(s)
    for s in socks:
        s.close()
    return list(answers.values())


def _listen_overflows() -> int:
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            table = dict(zip(head.split()[1:], values.split()[1:]))
            return int(table["ListenOverflows"])
    raise AssertionError("no TcpExt")


def test_five_hundred_clients_at_once_are_all_answered(lo_ns, agents):
    a = _start(lo_ns, "--listen", "127.0.0.1", "--haproxy-port", str(HAPROXY))
    agents.append(a)
    assert in_netns(lo_ns, _listen_overflows) == 0
    http = in_netns(lo_ns, _many, AGENT, 500, b"GET / HTTP/1.0\r\n\r\n")
    assert len(http) == 500
    assert all(x.startswith(b"HTTP/1.0 200") for x in http), {x[:40] for x in http}
    line = in_netns(lo_ns, _many, HAPROXY, 500, b"")
    assert len(line) == 500 and all(x.startswith((b"up", b"down")) for x in line), set(line)
    # nobody had to retry a dropped SYN: the accept queue held them all
    assert in_netns(lo_ns, _listen_overflows) == 0
    assert "Traceback" not in a.stderr()


# ------------------------------------------------------------------- misc-check netns


def test_misc_check_fetches_inside_the_namespace(lo_ns):
    server = subprocess.Popen(["ip", "netns", "exec", lo_ns, sys.executable, "-m",
                               "tests.hostile_http", "good:18299"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        argv = [sys.executable, "-m", "lbtune", "--netns", lo_ns, "ipvs", "agent",
                "--misc-check", "http://127.0.0.1:18299/"]  # fmt: skip
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode == 2 + GOOD_WEIGHT, r.stderr
    finally:
        server.kill()
        server.wait()


# -------------------------------------------------------------------- one backlog


LISTENER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.bind(("127.0.0.1", 18081)); s.listen(16)
    print("listening", flush=True)
    sys.stdin.readline()
""")


def test_the_backlog_is_one_number_the_effective_one(lo_ns):
    ip("netns", "exec", lo_ns, "sysctl", "-q", "-w", "net.core.somaxconn=8")  # per namespace
    app = subprocess.Popen(["ip", "netns", "exec", lo_ns, sys.executable, "-c", LISTENER],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert app.stdout is not None and app.stdout.readline().strip() == "listening"
        base = [sys.executable, "-m", "lbtune", "--netns", lo_ns, "ipvs", "agent", "--once",
                "--port", "18081", "--egress", "lo", "--interval", "0.2"]  # fmt: skip
        doc = json.loads(subprocess.run([*base, "--json"], capture_output=True, text=True,
                                        timeout=60, check=True).stdout)  # fmt: skip
        assert doc["listen_backlog"] == 8  # min(listen(16), somaxconn 8), sock_diag's wqueue
        text = subprocess.run(base, capture_output=True, text=True, timeout=60,
                              check=True).stdout  # fmt: skip
        listen = next(x for x in text.splitlines() if x.startswith("listen "))
        assert "queue 0 of backlog 8" in listen and "/9" not in listen, listen
    finally:
        app.kill()
        app.wait()


def test_no_file_descriptor_leak_after_the_flood(lo_ns, agents):
    """What the fuzz and the load leave behind: the agent's open descriptors come back."""
    a = _start(lo_ns, "--listen", "127.0.0.1")
    agents.append(a)
    fds_before = len(os.listdir(f"/proc/{a.proc.pid}/fd"))
    in_netns(lo_ns, _fuzz, AGENT, HAPROXY, 130, 20)
    in_netns(lo_ns, _many, AGENT, 200, b"GET / HTTP/1.0\r\n\r\n")
    guard = time.monotonic() + 60
    while len(os.listdir(f"/proc/{a.proc.pid}/fd")) > fds_before + 2 and time.monotonic() < guard:
        time.sleep(0.2)
    assert len(os.listdir(f"/proc/{a.proc.pid}/fd")) <= fds_before + 2


# ------------------------------------------------------------------ promtool


def _metrics(port: int) -> str:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
    buf = b""
    while chunk := s.recv(65536):
        buf += chunk
    s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    return body.decode()


def test_the_real_metrics_pass_promtool(lo_ns, agents):
    """promtool (Debian's prometheus, installed by scripts/setup.sh) lints the agent's real
    /metrics: base units (bytes, not bits), _total only on counters."""
    import shutil

    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: scripts/setup.sh installs Debian's prometheus"
    a = _start(lo_ns, "--listen", "127.0.0.1")
    agents.append(a)
    text = in_netns(lo_ns, _metrics, AGENT)
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60, check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "lbtune_agent_egress_bytes_per_second{" in text  # the egress rate is there
    assert "lbtune_agent_source_ok{" in text
