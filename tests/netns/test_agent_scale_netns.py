"""The agent's connection count at scale, on a real kernel: 20,000 established connections
on the served port (2,000 of them IPv6) and 1,500 on another port, all over loopback in a
throwaway namespace (tests/conns_helper.py holds them; it raises only its own RLIMIT_NOFILE).

The truth is `ss -Htn state established '( sport = :PORT )'` in the namespace. The clients'
ends (ephemeral local ports) and the other port's connections are established too and must
not be counted; nor the listeners. sock_diag (state mask + port filter program), the
/proc/net/tcp{,6} fallback and the sampler's report must all give the truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.netns.conftest import in_netns, ip

HELPER = Path(__file__).resolve().parents[1] / "conns_helper.py"
PORT, OTHER = 18080, 18081
COUNT, V6, OTHER_COUNT = 20_000, 2_000, 1_500


@pytest.fixture
def crowded(netns: str) -> Iterator[str]:
    """`netns` with lo up and the helper holding its connections (closed after)."""
    ip("-n", netns, "link", "set", "lo", "up")
    argv = ["ip", "netns", "exec", netns, sys.executable, str(HELPER), str(PORT), str(COUNT),
            str(OTHER), str(OTHER_COUNT), "--v6", str(V6)]  # fmt: skip
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert json.loads(line)["ready"], line
        yield netns
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ss(netns: str, port: int, family: str = "") -> int:
    argv = ["ip", "netns", "exec", netns, "ss", "-Htn", *([family] if family else []),
            "state", "established", f"( sport = :{port} )"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def _counts() -> dict[str, Any]:
    from lbtune.host.host import Host
    from lbtune.host.net import sockdiag
    from lbtune.ipvs import nodeagent as ag

    def refused(_port: int) -> int:
        raise PermissionError(1, "Operation not permitted")

    host = Host.open("/")
    opts = ag.AgentOptions(port=PORT, egress="lo", signals=("conns",), max_conns=40_000)
    live = ag.Sampler(host, opts).sample()
    fallback = ag.Sampler(host, opts, connections=refused).sample()
    return {
        "sock_diag": sockdiag.count_established(PORT),
        "sock_diag_other": sockdiag.count_established(OTHER),
        "proc": sockdiag.count_established_proc(sockdiag.PROC_TCP, PORT),
        "proc_other": sockdiag.count_established_proc(sockdiag.PROC_TCP, OTHER),
        "report": (live.connections, live.connections_source, live.errors,
                   live.utilisations()["conns"]),
        "fallback": (fallback.connections, fallback.connections_source, fallback.errors),
        # every TCP socket of the namespace in any state on the port, listeners included
        "any_state": sockdiag.count_tcp(sockdiag.ALL_STATES, PORT, PORT),
        "range": sockdiag.count_tcp(1 << sockdiag.TCP_ESTABLISHED, PORT, OTHER),
    }


def test_agent_counts_what_ss_counts_at_20000_connections(crowded):
    truth = _ss(crowded, PORT)
    assert truth == COUNT  # the helper made them all (else the test proves nothing)
    assert _ss(crowded, PORT, "-6") == V6
    other = _ss(crowded, OTHER)
    assert other == OTHER_COUNT
    got = in_netns(crowded, _counts)
    assert got["sock_diag"] == truth
    assert got["sock_diag_other"] == other
    assert got["proc"] == truth and got["proc_other"] == other
    assert got["report"] == (truth, "sock_diag", (), round(truth / 40_000, 4))
    assert got["fallback"] == (truth, "/proc/net/tcp", ())
    assert got["any_state"] == truth + 2  # the two listeners (127.0.0.1 and ::1)
    assert got["range"] == truth + other
