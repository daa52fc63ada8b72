"""A source the agent cannot read is an error it reports, never "nothing listens" (down, and
adapt's weight 0) or "0 bytes sent" (idle, then a spike).

The sampler reads this host (read-only: psutil, /proc); the failing source is the test's
fault hook on the module the sampler calls (sock_diag or the rtnetlink link dump raising
what the kernel raises when it refuses: EPERM)."""

from __future__ import annotations

import errno
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lbtune.host.host import Host
from lbtune.host.net import linkstats, sockdiag
from lbtune.ipvs import nodeagent as ag
from lbtune.ipvs.nodereport import haproxy_line, misc_exit_code, parse_report, prometheus_text
from lbtune.ipvs.weights import Policy, ServerState, step


def _refused(*_a: object) -> None:
    raise OSError(errno.EPERM, "Operation not permitted")


def _sampler(port: int = 18080) -> ag.Sampler:
    opts = ag.AgentOptions(port=port, egress="lo", signals=("listen", "egress", "conns"))
    return ag.Sampler(Host.open("/"), opts)


def test_a_sock_diag_error_is_reported_not_down(monkeypatch):
    monkeypatch.setattr(sockdiag, "dump_listen_sockets", _refused)
    s = _sampler()
    s.sample()
    r = s.sample()
    assert r.health == "unknown", r.reason
    assert r.health != "down"
    assert any(e.startswith("listeners:") and "Operation not permitted" in e for e in r.errors)
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["errors"] == list(r.errors)
    # every format says so: JSON round trip, Prometheus, HAProxy, keepalived
    assert parse_report(doc).health == "unknown"
    fams = {f.name: f for f in text_string_to_metric_families(prometheus_text(r))}
    ok = {x.labels["source"]: x.value for x in fams["lbtune_agent_source_ok"].samples}
    assert ok == {"listeners": 0, "link_stats": 1}
    health = {x.labels["state"]: x.value for x in fams["lbtune_agent_health"].samples}
    assert health["unknown"] == 1 and health["down"] == 0
    assert haproxy_line(r) == ""  # no word: HAProxy keeps the server's state
    assert misc_exit_code(r) == 0  # keepalived keeps the weight


def test_the_agent_text_names_the_error(monkeypatch, capsys):
    monkeypatch.setattr(sockdiag, "dump_listen_sockets", _refused)
    from lbtune.cli.ipvs.adapt import _print_report

    s = _sampler()
    s.sample()
    _print_report(s.sample())
    out = capsys.readouterr().out
    assert "nothing listens" not in out
    assert "listen       unknown" in out and "error        listeners: sock_diag:" in out


def test_a_link_stats_error_is_no_rate_and_no_spike_after(monkeypatch):
    counter = {"n": 10_000_000_000}  # a busy interface's lifetime counter
    fail = {"now": False}

    def stats() -> dict[str, dict[str, int]]:
        if fail["now"]:
            _refused()
        counter["n"] += 1000
        return {"lo": {"tx_bytes": counter["n"]}}

    monkeypatch.setattr(linkstats, "dump_link_stats", stats)
    s = _sampler()
    s.sample()
    assert s.sample().egress_bps is not None
    fail["now"] = True
    broken = s.sample()
    assert broken.egress_bps is None  # unknown, not 0 bits/s
    assert any(e.startswith("link_stats:") for e in broken.errors)
    assert broken.utilisations()["egress"] is None
    fail["now"] = False
    after = s.sample()  # the previous sample had no counter: no rate yet, not a spike
    assert after.egress_bps is None and not after.errors
    again = s.sample()
    assert again.egress_bps is not None
    # 1000 bytes (8,000 bits) per sample; a spike from the lifetime counter would be 8e10.
    # Per sample, not per second: a sample takes a few ms, so the rate itself can pass 1e6.
    assert again.egress_bps * again.interval < 1e6


def _report(health: str, load: float) -> object:
    from tests.unit.ipvs.test_weights import report

    r = report(egress_mbit=load * 100)
    from dataclasses import replace

    return replace(r, health=health, reason="cannot tell: listeners: sock_diag: EPERM",
                   errors=("listeners: sock_diag: EPERM",) if health == "unknown" else ())


@pytest.mark.parametrize("current", [37, 0, 100])
def test_adapt_keeps_the_last_weight_of_a_server_whose_agent_cannot_read(current):
    configured = {"a": 1, "b": 1}
    policy = Policy()
    state = {"a": ServerState(load=0.9, pressure=0.1, throughput=9e7, capacity=1e8),
             "b": ServerState(load=0.2, pressure=0.1, throughput=2e7, capacity=1e8)}
    reports = {"a": _report("unknown", 0.1), "b": _report("ok", 0.2)}
    new, decisions = step(policy, configured, {"a": current, "b": 100}, reports, state)  # type: ignore[arg-type]
    a = next(d for d in decisions if d.server == "a")
    assert a.weight == current and not a.changed, a
    assert "weight kept" in a.reason
    assert new["a"] == state["a"]  # nothing folded in from a report that could not read
