"""`lbtune ipvs agent` and `lbtune ipvs adapt` on the command line: inputs and the modes that
need no IPVS (one report, MISC_CHECK against a real agent endpoint)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from lbtune.ipvs.nodereport import AgentReport, judge
from tests.conftest import run_cli

REPORT = judge(AgentReport(
    node="rs1", port=80, time=0.0, interval=1.0, cpu_util=0.1, cpus=1, runq=0,
    mem_available=1 << 30, mem_total=2 << 30, connections=3, listening=True, listen_queue=0,
    listen_backlog=511, listen_drops=0, listen_drops_delta=0, egress_dev="eth0",
    egress_bps=25e6, egress_capacity_bps=100e6, max_conns=None,
    signals=("listen", "egress"), load=0.0, bottleneck="", pressure=0.0, health="ok",
    reason="",
))  # fmt: skip


@pytest.fixture
def served() -> Iterator[dict[str, Any]]:
    """An HTTP server on 127.0.0.1 that answers with `doc['body']` (a stand-in agent)."""
    doc: dict[str, Any] = {"body": json.dumps(REPORT.to_json())}

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = doc["body"].encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    doc["url"] = f"http://127.0.0.1:{srv.server_address[1]}/"
    try:
        yield doc
    finally:
        srv.shutdown()
        srv.server_close()


def test_misc_check_exit_code_is_two_plus_weight(served):
    r = run_cli("ipvs", "agent", "--misc-check", served["url"], "--json")
    assert r.exit_code == 2 + round(253 * 0.75)  # headroom 75 % (egress 25 of 100 Mbit/s)
    assert r.json["report"]["node"] == "rs1"


def test_misc_check_fails_the_server_on_garbage_or_no_agent(served):
    served["body"] = "{\"version\": 1}"
    r = run_cli("ipvs", "agent", "--misc-check", served["url"])
    assert r.exit_code == 1 and "missing" in r.stderr
    r = run_cli("ipvs", "agent", "--misc-check", "http://127.0.0.1:1/", "--timeout", "0.5")
    assert r.exit_code == 1 and "127.0.0.1:1" in r.stderr


@pytest.mark.parametrize("args", [
    ["agent", "--signals", "cpu,gpu", "--once"],
    ["agent", "--interval", "0", "--once"],
    ["agent", "--port", "0", "--once"],
])  # fmt: skip
def test_agent_refuses_bad_options(args):
    r = run_cli("ipvs", *args)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1


def test_adapt_refuses_bad_input(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text('[[service]]\naddress = "10.0.0.100"\nport = 80\n'
                   '  [[service.real_server]]\n  address = "10.0.0.11"\n  agent = "ftp://x"\n')
    r = run_cli("ipvs", "adapt", str(cfg), "--dry-run")
    assert r.exit_code == 2 and "agent = 'ftp://x'" in r.stderr
    r = run_cli("ipvs", "adapt", str(cfg), "--interval", "0")
    assert r.exit_code == 2 and "--interval" in r.stderr


@pytest.mark.parametrize(("args", "msg"), [
    (["--adaptive", "--mode", "proxy"], "--mode does not apply"),
    (["--adaptive", "--no-keepalive"], "--keepalive does not apply"),
    (["--rates", "60,15"], "belong to --adaptive"),
    (["--adaptive", "--rates", "60,x"], "comma-separated whole numbers"),
    (["--adaptive", "--rates", "60"], "2 to 8"),
    (["--adaptive", "--schemes", "rr,lc"], "rr, wlc, adapt"),
    (["--adaptive", "--duration", "1000"], "3 to 300"),
])  # fmt: skip
def test_lab_run_adaptive_refuses_what_does_not_apply(args, msg):
    r = run_cli("lab", "run", *args)
    assert r.exit_code == 2 and msg in r.stderr and r.stderr.count("\n") == 1
