"""Where the agent counts connections: sock_diag, /proc/net/tcp{,6} when sock_diag refuses,
and an error (never 0, never "down") when neither can be read. The failing source is the
test's hook (sock_diag refusing as the kernel does: EPERM); /proc is this host's, or an
empty directory as the host root where it must fail."""

from __future__ import annotations

import errno
import json
import time

from prometheus_client.parser import text_string_to_metric_families

from lbtune.host.host import Host
from lbtune.ipvs import nodeagent as ag
from lbtune.ipvs.nodereport import parse_report, prometheus_text


def _refused(_port: int) -> int:
    raise OSError(errno.EPERM, "Operation not permitted")


OPTS = ag.AgentOptions(port=18080, egress="lo", signals=("listen", "conns"), max_conns=10)


def test_sock_diag_is_the_source():
    r = ag.Sampler(Host.open("/"), OPTS, connections=lambda port: 7 if port == 18080 else -1)
    r.sample()
    got = r.sample()
    assert (got.connections, got.connections_source, got.errors) == (7, "sock_diag", ())
    assert got.utilisations()["conns"] == 0.7
    assert parse_report(json.loads(json.dumps(got.to_json()))) == got


def test_the_proc_fallback_says_so():
    got = ag.Sampler(Host.open("/"), OPTS, connections=_refused).sample()
    assert got.connections_source == "/proc/net/tcp" and not got.errors
    assert got.connections >= 0


def test_neither_source_is_an_error_not_zero_load_nor_down(tmp_path):
    s = ag.Sampler(Host.open(str(tmp_path)), OPTS, connections=_refused)
    got = s.sample()
    assert got.connections_source == ""
    err = [e for e in got.errors if e.startswith("connections:")]
    assert len(err) == 1 and "sock_diag: Operation not permitted" in err[0]
    assert "/proc/net/tcp:" in err[0]
    assert got.utilisations()["conns"] is None  # unknown, not 0 of 10
    assert got.health != "down" or "nothing listens" in got.reason  # only listeners say down
    fams = {f.name for f in text_string_to_metric_families(prometheus_text(got))}
    assert "lbtune_agent_connections" not in fams


def test_an_older_agent_without_the_source_field_still_parses():
    got = ag.Sampler(Host.open("/"), OPTS, connections=lambda _p: 3).sample()
    doc = got.to_json()
    del doc["connections_source"]
    assert parse_report(doc).connections_source == ""


def test_a_costly_count_is_spaced_out_within_the_budget(monkeypatch):
    calls = []
    now = [1000.0]  # the sampler's clock for when a count is due (CPU time is real)
    monkeypatch.setattr(ag, "_monotonic", lambda: now[0])

    def costly(_port: int) -> int:  # 20 ms of this thread's CPU, as a big dump would take
        t = time.thread_time()
        while time.thread_time() - t < 0.02:
            pass
        calls.append(now[0])
        return len(calls)

    s = ag.Sampler(Host.open("/"), OPTS, connections=costly)
    first = s.sample()
    assert len(calls) == 1 and first.connections_age == 0.0
    again = []
    for later in (0.1, 0.2, 0.39):  # 20 ms / 5 % = 0.4 s: not due yet
        now[0] = 1000.0 + later
        again.append(s.sample())
    assert len(calls) == 1
    assert [(r.connections, r.connections_age) for r in again] == [(1, 0.1), (1, 0.2), (1, 0.39)]
    now[0] = 1010.0  # due long since (unless the count had taken 0.5 s of CPU)
    fresh = s.sample()
    assert len(calls) == 2 and fresh.connections == 2 and fresh.connections_age == 0.0


def test_a_cheap_count_is_taken_every_sample():
    calls = []
    s = ag.Sampler(Host.open("/"), OPTS, connections=lambda _p: calls.append(1) or 5)
    for _ in range(3):
        s.sample()
        time.sleep(0.01)
    assert len(calls) == 3
