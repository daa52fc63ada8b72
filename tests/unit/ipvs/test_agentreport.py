"""Agent reports: JSON round trip and validation, Prometheus text, HAProxy and MISC_CHECK."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lbtune.errors import BadInput
from lbtune.ipvs.nodereport import (
    AgentReport,
    haproxy_line,
    judge,
    misc_exit_code,
    parse_report,
    prometheus_text,
)

BASE = AgentReport(
    node='rs"1', port=80, time=1.5, interval=1.0, cpu_util=0.42, cpus=2, runq=3,
    mem_available=512 << 20, mem_total=1 << 30, connections=17, listening=True,
    listen_queue=64, listen_backlog=127, listen_drops=9, listen_drops_delta=0,
    egress_dev="eth0", egress_bps=30e6, egress_capacity_bps=40e6, max_conns=None,
    signals=("cpu", "runq", "mem", "listen", "egress", "conns"), load=0.0, bottleneck="",
    pressure=0.0, health="ok", reason="",
)  # fmt: skip


def test_judge_and_json_round_trip():
    r = judge(BASE)
    assert r.bottleneck == "egress" and r.load == pytest.approx(0.75)
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["utilisation"]["listen"] == pytest.approx(0.5)
    assert doc["utilisation"]["conns"] is None  # no --max-conns: cannot tell
    assert parse_report(doc) == r


@pytest.mark.parametrize(("key", "value", "msg"), [
    ("version", 2, "version"),
    ("load", 1.5, "0..1"),
    ("health", "meh", "one of"),
    ("connections", "17", "a whole number"),
    ("listening", 1, "true or false"),
    ("egress_bps", float("nan"), "a number"),
])  # fmt: skip
def test_parse_refuses_bad_documents(key, value, msg):
    doc = judge(BASE).to_json()
    doc[key] = value
    with pytest.raises(BadInput, match=msg):
        parse_report(doc, "http://rs1:9177/")
    doc.pop(key)
    with pytest.raises(BadInput):
        parse_report(doc)
    with pytest.raises(BadInput, match="JSON object"):
        parse_report([1, 2])


def test_prometheus_text_parses_with_the_reference_parser():
    r = judge(BASE)
    families = {f.name: f for f in text_string_to_metric_families(prometheus_text(r))}
    assert families["lbtune_agent_listen_drops"].type == "counter"
    drops = families["lbtune_agent_listen_drops"].samples[0]
    assert drops.value == 9 and drops.labels == {"node": 'rs"1', "port": "80"}
    util = {s.labels["resource"]: s.value for s in families["lbtune_agent_utilisation"].samples}
    assert util == pytest.approx({"cpu": 0.42, "runq": 0.375, "mem": 0.5, "listen": 0.5,
                                  "egress": 0.75})  # fmt: skip
    health = {s.labels["state"]: s.value for s in families["lbtune_agent_health"].samples}
    assert health == {"ok": 1, "overloaded": 0, "down": 0, "unknown": 0}
    # Prometheus base units: 40 Mbit/s is 5,000,000 bytes/s
    cap = families["lbtune_agent_egress_capacity_bytes_per_second"].samples[0]
    assert cap.value == 40e6 / 8 and cap.labels["dev"] == "eth0"


def test_haproxy_agent_check_lines():
    assert haproxy_line(judge(BASE)) == "up 25%\n"
    assert haproxy_line(judge(replace(BASE, listen_drops_delta=4))).startswith("drain #4 listen")
    assert haproxy_line(judge(replace(BASE, listening=False))).startswith("down #nothing")
    full = judge(replace(BASE, listen_queue=127))
    assert full.health == "overloaded" and haproxy_line(full).startswith("drain #listen at")
    busy = judge(replace(BASE, egress_bps=40e6))  # a full link: busy, still up
    assert busy.health == "ok" and haproxy_line(busy) == "up 1%\n"


def test_misc_check_exit_codes():
    assert misc_exit_code(None) == 1  # agent unreachable: fail the server
    assert misc_exit_code(judge(replace(BASE, listening=False))) == 1
    assert misc_exit_code(judge(BASE)) == 2 + round(253 * 0.25)
    idle = judge(replace(BASE, egress_bps=0.0, cpu_util=0.0, runq=0, listen_queue=0,
                         mem_available=1 << 30))  # fmt: skip
    assert misc_exit_code(idle) == 255
    queued = judge(replace(BASE, listen_queue=125))
    assert queued.health == "overloaded" and misc_exit_code(queued) == 1
