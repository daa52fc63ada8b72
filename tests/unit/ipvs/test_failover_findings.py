"""`ipvs plan` of a [cluster] config says what breaks stateless failover (lbtune.ipvs.failover),
in its text and its --json warnings; a config without [cluster] gets none of it."""

from __future__ import annotations

import re

import pytest

from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.failover import BREAKS, WARN, failover_findings
from lbtune.ipvs.gate import Hysteresis
from tests.conftest import run_cli
from tests.unit.ipvs.test_bird_export import CLUSTER, SERVICES


def _findings(text: str) -> list[tuple[str, str, str]]:
    cfg = parse_config_text(text, "c.toml")
    return [(f.level, f.check, f.object) for f in failover_findings(cfg)]


def test_the_recommended_cluster_has_no_findings():
    assert _findings(SERVICES + CLUSTER) == []


def test_without_cluster_nothing_is_said():
    text = re.sub(r'scheduler = "mh"\nflags = .*', 'scheduler = "wlc"', SERVICES)
    assert "wlc" in text and _findings(text.replace("sloppy_tcp = 1", "")) == []


@pytest.mark.parametrize("old,new,expect", [
    ('scheduler = "mh"\nflags = ["mh-fallback", "mh-port"]', 'scheduler = "wlc"',
     (BREAKS, "scheduler", "tcp:10.0.0.100:80")),
    ('scheduler = "mh"\nflags = ["mh-fallback", "mh-port"]', 'scheduler = "rr"',
     (BREAKS, "scheduler", "tcp:10.0.0.100:80")),
    ('scheduler = "mh"\nflags = ["mh-fallback", "mh-port"]', 'scheduler = "sh"',
     (WARN, "scheduler", "tcp:10.0.0.100:80")),
    ('flags = ["mh-fallback", "mh-port"]', 'flags = ["mh-port"]',
     (WARN, "mh-fallback", "tcp:10.0.0.100:80")),
    ('  address = "10.0.0.12"', '  address = "10.0.0.12"\n  upper = 100',
     (BREAKS, "thresholds", "tcp:10.0.0.100:80")),
    ('flags = ["mh-fallback"]', 'flags = ["mh-fallback"]\npersistence = 300',
     (BREAKS, "persistence", "tcp:10.0.0.101:443")),
    ("sloppy_tcp = 1", "sloppy_tcp = 0", (BREAKS, "sloppy_tcp", "net.ipv4.vs.sloppy_tcp")),
    ('  address = "10.0.0.12"', '  address = "10.0.0.12"\n  agent = "http://10.0.0.12:9177/"',
     (WARN, "weights", "tcp:10.0.0.100:80")),
    ('[[vip]]\naddress = "10.0.0.100"', '[[vip]]\naddress = "10.0.0.99"',
     (WARN, "gate", "10.0.0.99")),
])
def test_each_failover_breaker_is_found(old, new, expect):
    text = SERVICES + CLUSTER
    assert old in text
    assert _findings(text.replace(old, new, 1)) == [expect]


def test_persistence_with_the_sync_daemon_is_a_warning_not_a_break():
    text = (SERVICES + CLUSTER).replace('flags = ["mh-fallback"]',
                                        'flags = ["mh-fallback"]\npersistence = 300')
    assert _findings(text.replace("asn = 65001", "asn = 65001\nsync = true")) == [
        (WARN, "persistence", "tcp:10.0.0.101:443")]


def test_udp_needs_no_sloppy_tcp_but_its_real_servers_are_not_gated():
    udp = SERVICES.replace("port = 80\n", 'protocol = "udp"\nport = 53\n').replace(
        "port = 443\n", 'protocol = "udp"\nport = 443\n').replace("sloppy_tcp = 1", "")
    assert _findings(udp + CLUSTER) == [(WARN, "gate", "udp:10.0.0.100:53"),
                                        (WARN, "gate", "udp:10.0.0.101:443")]


def test_plan_prints_the_findings_and_puts_them_in_its_json(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text((SERVICES + CLUSTER).replace('scheduler = "mh"\nflags = ["mh-fallback"]',
                                                'scheduler = "wlc"'))
    r = run_cli("ipvs", "plan", str(cfg))
    assert r.exit_code == 0, r.stderr
    assert "warning: stateless failover breaks: tcp:10.0.0.101:443: wlc picks by this " \
           "director's own state" in " ".join(r.stdout.split())
    j = run_cli("ipvs", "plan", str(cfg), "--json")
    assert j.exit_code == 0, j.stderr
    failover = [w for w in j.json["warnings"] if w.startswith("stateless failover")]
    assert len(failover) == 1 and "tcp:10.0.0.101:443" in failover[0]


@pytest.mark.parametrize("checks,states", [
    # rise 3: three passes in a row to announce; a failure resets the count
    ("PPFPPP", [None, None, None, None, None, True]),
    # fall 2: one failure of an announced VIP is not a withdrawal, two in a row are
    ("PPPFPFF", [None, None, True, None, None, None, False]),
    ("FFFF", [None, None, None, None]),
])
def test_hysteresis_rise_and_fall(checks, states):
    h = Hysteresis(rise=3, fall=2)
    assert [h.feed(c == "P") for c in checks] == states


@pytest.mark.parametrize("text,args,expect", [
    (SERVICES, ("--director", "dir1"), "no [cluster] section: the gate is a cluster director's"),
    (SERVICES + CLUSTER, ("--director", "dir7"), "no director 'dir7' in [cluster]"),
    (SERVICES + CLUSTER, ("--director", "dir1"),
     "director dir1's address 10.0.1.11 is not an address of this host"),
    (SERVICES + CLUSTER, ("--director", "dir1", "--duration", "-1"), "--duration -1"),
])
def test_the_gate_refuses_what_it_cannot_run_as(tmp_path, text, args, expect):
    """One line, exit 2, before BIRD is asked anything (there is no BIRD at this socket)."""
    from tests.cli.test_ipvs_cli import one_line_error

    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    r = run_cli("ipvs", "gate", str(cfg), "--socket", str(tmp_path / "none.ctl"), *args)
    assert expect in one_line_error(r)
    assert r.stdout == ""
