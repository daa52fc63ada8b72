"""`lbtune --netns NS checklist` against real sockets in a throwaway namespace."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Iterator

import pytest

from tests.netns.conftest import in_netns, ip

# A listener with a tiny backlog that lives until its stdin closes.
LISTENER = """
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(int(sys.argv[2]))
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def listener(netns: str) -> Iterator[Any]:
    """Start `listen(backlog)` on a port inside the namespace; stopped after the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(port: int, backlog: int) -> None:
        p = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, "-c", LISTENER, str(port), str(backlog)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"

    yield start
    for p in procs:
        assert p.stdin is not None
        p.stdin.close()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def checks(result: Any) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in result.json["checks"]}


def test_small_listen_backlog_fails(cli, netns, listener):
    listener(8080, 16)
    r = cli("--netns", netns, "checklist", "--role", "web", "--json")
    assert r.exit_code == 1, r.stderr
    b = checks(r)["listen-backlog"]
    assert b["level"] == "fail", b
    assert "port 8080" in b["reason"] and "backlog 16" in b["reason"]
    assert "in this namespace" not in b["reason"]  # a real listener was found


def test_backlog_capped_by_somaxconn_warns_and_load_port_is_checked(cli, netns, listener):
    ip("netns", "exec", netns, "sysctl", "-q", "-w", "net.core.somaxconn=2048")
    listener(8080, 8192)  # the kernel caps it at somaxconn: 2048
    r = cli("--netns", netns, "checklist", "--role", "web", "--json")
    b = checks(r)["listen-backlog"]
    assert b["level"] == "warn", b  # >= 1024 but < 4096
    assert "port 8080 (0.0.0.0) backlog 2048 (capped by somaxconn)" in b["reason"]
    assert "net.core.somaxconn" in b["fix"]
    ip("netns", "exec", netns, "sysctl", "-q", "-w", "net.core.somaxconn=8192")
    listener(8081, 8192)
    r = cli("--netns", netns, "checklist", "--role", "web", "--json")
    b = checks(r)["listen-backlog"]
    assert b["level"] == "warn" and "8081" not in b["reason"], b
    assert "backlog 2048 (the application's, or somaxconn at its start)" in b["reason"]
    # --load names the port under test: only that listener counts
    r = cli("--netns", netns, "checklist", "--role", "web", "--json",
            "--load", "wrk -t2 -c100 http://10.0.0.1:8081/")  # fmt: skip
    b = checks(r)["listen-backlog"]
    assert b["level"] == "pass" and "port 8081" in b["reason"] and "8080" not in b["reason"]
    r = cli("--netns", netns, "checklist", "--role", "web", "--json",
            "--load", "wrk -t2 -c3000 http://10.0.0.1:8080/")  # fmt: skip
    b = checks(r)["listen-backlog"]
    assert b["level"] == "fail" and "3000 planned connections" in b["reason"], b
    r = cli("--netns", netns, "checklist", "--role", "web", "--json",
            "--load", "wrk -t2 -c100 http://10.0.0.1:9999/")  # fmt: skip
    b = checks(r)["listen-backlog"]
    assert b["level"] == "warn" and "nothing listens on port 9999" in b["reason"]


def _leave_time_wait(count: int) -> int:
    """Open `count` loopback connections and close them client side first (-> TIME_WAIT)."""
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    port = srv.getsockname()[1]
    pairs = []
    for _ in range(count):
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = srv.accept()
        pairs.append((c, a))
    for c, a in pairs:
        c.close()  # active close: the client side goes to TIME_WAIT
        a.recv(1)  # the FIN arrives
        a.close()
    srv.close()
    return port


def test_time_wait_left_from_a_previous_run_warns(cli, netns):
    ip("-n", netns, "link", "set", "lo", "up")
    r = cli("--netns", netns, "checklist", "--role", "client", "--json")
    assert checks(r)["sockets-drained"]["level"] == "pass", checks(r)["sockets-drained"]
    in_netns(netns, _leave_time_wait, 5)
    r = cli("--netns", netns, "checklist", "--role", "client", "--json")
    d = checks(r)["sockets-drained"]
    assert d["level"] == "warn", d
    assert d["reason"].startswith("5 TIME_WAIT") and "in this namespace" in d["reason"]
    assert "60 s" in d["fix"]


def test_namespace_run_skips_host_global_knobs(cli, veth4):
    r = cli("--netns", veth4, "checklist", "--role", "client", "--json")
    assert r.exit_code == 1, r.stderr  # the profile drifted (below): a failed check
    c = checks(r)
    p = c["profile-in-sync"]
    assert "host-global not checked from a namespace" in p["reason"]
    # a fresh namespace has the kernel's port range, not loadgen's: drift, fixed in the namespace
    assert p["level"] == "fail" and "knobs drifted" in p["reason"]
    assert p["fix"] == f"lbtune --netns {veth4} apply loadgen"
    # veth has no rings
    assert c["nic-rings"]["level"] == "skip"
