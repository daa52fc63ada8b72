"""A real scrape: Debian's Prometheus server, started in a throwaway network namespace,
scrapes `lbtune --netns NS exporter` every second while a real fault runs there (UDP sent
to a port nothing listens on: the kernel counts Udp.NoPorts). Over Prometheus's HTTP API
the drop rate of cause `udp_no_port` is seen above 0 and the shipped alert
`LbtuneDropsRising` fires. The shipped rules are used as they are, except that every
`for:` is cut to 0s (a test cannot wait 5 minutes). Bounded waits only."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.parse
from typing import Any, Iterator

import pytest

from tests.conftest import fork_call
from tests.fleet.conftest import LBTUNE, RULES, check_metrics, need_root, parse
from tests.fleet.test_exporter_http import exporter, wait_for

PROM_PORT = 9090  # inside the namespace: nothing else listens there

# Sends UDP datagrams to 127.0.0.1:9 (discard: nothing listens in a fresh namespace) until
# killed, about 500 a second: every one is a Udp.NoPorts drop.
UDP_TO_CLOSED_PORT = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
while True:
    try:
        s.sendto(b"x", ("127.0.0.1", 9))
    except OSError:
        pass
    time.sleep(0.002)
"""


@pytest.fixture
def promns() -> Iterator[str]:
    need_root()
    name = f"lbtune-prom{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True,
                       capture_output=True)  # fmt: skip
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def _get_in(netns: str, path: str) -> Any:
    """GET http://127.0.0.1:PROM_PORT/path from inside `netns` (a forked child joins it)."""

    def call() -> Any:
        import urllib.request

        from lbtune.host.net.netns import enter_netns

        enter_netns(netns)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"http://127.0.0.1:{PROM_PORT}{path}", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return None

    return fork_call(call)


def _api(netns: str, path: str) -> Any:
    text = _get_in(netns, path)
    return None if text is None else json.loads(text)


@contextlib.contextmanager
def _process(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _query(netns: str, expr: str) -> list[dict[str, Any]]:
    doc = _api(netns, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if not doc or doc.get("status") != "success":
        return []
    return list(doc["data"]["result"])


def test_prometheus_scrapes_the_drop_rate_and_the_alert_fires(promns, tmp_path):
    rules = re.sub(r"(?m)^(\s*)for: \S+$", r"\1for: 0s", RULES.read_text())
    assert rules != RULES.read_text()
    (tmp_path / "lbtune.rules.yml").write_text(rules)
    with exporter("--min-interval", "0", netns=promns) as (exp, url):
        port = int(url.rsplit(":", 1)[1])
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files:\n  - lbtune.rules.yml\n"
            "scrape_configs:\n  - job_name: lbtune\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{port}']\n"
        )
        prometheus = [
            "ip", "netns", "exec", promns, "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{PROM_PORT}",
        ]  # fmt: skip
        fault = ["ip", "netns", "exec", promns, sys.executable, "-c", UDP_TO_CLOSED_PORT]
        with _process(prometheus) as prom, _process(fault):
            wait_for(lambda: _get_in(promns, "/-/ready") is not None or prom.poll() is not None,
                     "prometheus ready", timeout=30)  # fmt: skip
            assert prom.poll() is None, prom.stderr.read().decode() if prom.stderr else ""
            up = wait_for(lambda: _query(promns, 'up{job="lbtune"} == 1'), "a scrape", 30)
            assert up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
            rate = wait_for(
                lambda: _query(promns,
                               'rate(lbtune_drops_total{cause="udp_no_port"}[30s]) > 0'),
                "the udp_no_port drop rate above 0", timeout=30,
            )  # fmt: skip
            assert float(rate[0]["value"][1]) > 0

            def firing() -> list[dict[str, Any]]:
                doc = _api(promns, "/api/v1/alerts") or {"data": {"alerts": []}}
                return [a for a in doc["data"]["alerts"]
                        if a["labels"]["alertname"] == "LbtuneDropsRising"
                        and a["labels"].get("cause") == "udp_no_port"
                        and a["state"] == "firing"]  # fmt: skip

            alert = wait_for(firing, "LbtuneDropsRising firing", timeout=30)[0]
            assert alert["labels"]["severity"] == "warning"
            assert "udp_no_port" in alert["annotations"]["summary"]
            # What Prometheus scraped passes promtool, as every exporter output must.
            text = fork_call(_metrics_in, promns, port)
            check_metrics(text)
            m = parse(text)
            assert m["lbtune_drops_total"][frozenset({("cause", "udp_no_port")})] > 0
            assert m["lbtune_up"] == {frozenset(): 1.0}
    assert exp.returncode == 0


def _metrics_in(netns: str, port: int) -> str:
    import urllib.request

    from lbtune.host.net.netns import enter_netns

    enter_netns(netns)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return str(r.read().decode())


def test_probes_export_kernel_drop_reasons_and_their_own_cost(promns):
    """`--probes --drop-locations`: the drops probe names the kernel's reason for the same
    fault (NO_SOCKET in __udp4_lib_rcv) and reports what it cost."""
    fault = ["ip", "netns", "exec", promns, sys.executable, "-c", UDP_TO_CLOSED_PORT]
    with _process(fault):
        r = subprocess.run(
            [*LBTUNE, "--netns", promns, "exporter", "--once", "--interval", "2s", "--probes",
             "--drop-locations"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    check_metrics(r.stdout)
    m = parse(r.stdout)
    up = {dict(k)["source"]: v for k, v in m["lbtune_source_up"].items()}
    assert up["probes"] == 1.0
    assert m["lbtune_kernel_drops_total"][frozenset({("reason", "NO_SOCKET")})] > 0
    loc = m["lbtune_kernel_drops_by_location_total"]
    assert loc[frozenset({("reason", "NO_SOCKET"), ("location", "__udp4_lib_rcv")})] > 0
    ratio = m["lbtune_probe_cpu_ratio"][frozenset({("probe", "drops")})]
    assert 0 < ratio < 1  # a share of one CPU
    assert 0 < m["lbtune_probe_event_cost_seconds"][frozenset({("probe", "drops")})] < 1e-3
