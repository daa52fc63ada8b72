"""Lab pieces without a kernel: topology plan, load-tool reports, configs, scenario values."""

from __future__ import annotations

import dataclasses
import ipaddress
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lbtune.errors import BadInput
from lbtune.lab.experiments.labprofile import lab_director_profile
from lbtune.lab.experiments.scenario import (
    Bypass,
    ScenarioConfig,
    ScenarioResult,
    ServerShare,
    result_from_json,
)
from lbtune.lab.inguest.balancer import LabService, RealServer
from lbtune.lab.inguest.labnet import plan_topology
from lbtune.lab.inguest.load import load_argv, parse_ab, parse_wrk
from lbtune.lab.inguest.servers import render_haproxy_cfg, render_nginx_conf
from lbtune.lab.inguest.shell import LabStepFailed, Shell
from lbtune.lab.progress import ProgressReader, ProgressWriter, Step
from lbtune.tune.profile import load_profile

DATA = Path(__file__).parents[2] / "data" / "lab"


# --------------------------------------------------------------------------- topology


def test_topology_names_and_addresses():
    t = plan_topology(servers=3, directors=2, rates=[None, 100, None])
    assert [n.name for n in t.nodes] == ["client", "dir1", "dir2", "rs1", "rs2", "rs3"]
    addrs = [n.address for n in t.nodes] + [t.vip]
    assert len(set(addrs)) == len(addrs)
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("10.77.0.0/24") for a in addrs)
    assert len({n.mac for n in t.nodes}) == len(t.nodes)
    assert t.servers[1].rate_mbit == 100 and t.servers[0].rate_mbit is None
    assert t.node("dir2").netns == "lab-dir2"


def test_topology_interface_names_fit_ifnamsiz_at_the_limits():
    t = plan_topology(servers=32, directors=4)
    assert all(len(n.bridge_port) <= 15 and len(n.netns) <= 64 for n in t.nodes)
    assert len({n.address for n in t.nodes} | {t.vip}) == len(t.nodes) + 1


@pytest.mark.parametrize(
    "kw", [{"servers": 0}, {"servers": 33}, {"directors": 0}, {"directors": 5},
           {"servers": 2, "rates": [1]}, {"servers": 1, "rates": [0]}],
)  # fmt: skip
def test_topology_refuses_bad_counts(kw):
    with pytest.raises(BadInput):
        plan_topology(**kw)


# --------------------------------------------------------------------------- load reports


def test_parse_wrk_recording():
    r = parse_wrk((DATA / "wrk-latency.txt").read_text())
    assert (r.tool, r.requests, r.rps, r.seconds) == ("wrk", 8597, 4292.02, 2.0)
    assert r.latency_ms == {"p50": 0.562, "p90": 1.04, "p99": 1.64}
    assert r.failures == 0


def test_parse_wrk_error_lines():
    # wrk prints these two lines only when the counts are not zero (src/wrk.c)
    text = (DATA / "wrk-latency.txt").read_text().replace(
        "Requests/sec:",
        "  Socket errors: connect 2, read 3, write 0, timeout 4\n"
        "  Non-2xx or 3xx responses: 5\nRequests/sec:",
    )
    r = parse_wrk(text)
    assert r.errors == {"connect": 2, "read": 3, "write": 0, "timeout": 4, "non_2xx_3xx": 5}
    assert r.failures == 14


def test_parse_ab_recording():
    r = parse_ab((DATA / "ab-keepalive.txt").read_text())
    assert (r.tool, r.requests, r.rps, r.seconds) == ("ab", 10239, 5118.70, 2.0)
    assert r.latency_ms == {"p50": 1.0, "p90": 1.0, "p99": 1.0}
    assert r.failures == 0


@pytest.mark.parametrize("parse", [parse_wrk, parse_ab])
def test_a_report_without_results_is_an_error_not_zero(parse):
    with pytest.raises(LabStepFailed):
        parse("unable to connect to 10.77.0.100:80 Connection refused\n")


def test_load_argv_is_a_list_bounded_in_time():
    wrk = load_argv("wrk", "http://10.77.0.100/", 10, 2, 12)
    assert wrk[:7] == ["wrk", "-t", "2", "-c", "12", "-d", "10s"]
    ab = load_argv("ab", "http://10.77.0.100/", 3, 1, 4)
    assert ab[ab.index("-t") + 1] == "3" and int(ab[ab.index("-n") + 1]) == 150000


# --------------------------------------------------------------------------- configs


def test_service_is_written_as_an_lbtune_ipvs_config():
    """The lab configures its director with `lbtune ipvs apply`: the config it writes must be
    what the configurator itself reads."""
    from lbtune.ipvs.config import parse_config_text

    svc = LabService("10.77.0.100", 80, "wrr", (RealServer("10.77.0.11", 1),
                                               RealServer("10.77.0.12", 3)))  # fmt: skip
    cfg = parse_config_text(svc.director_toml("eth0"), "lab")
    (vs,) = cfg.services
    assert (vs.key.protocol, vs.key.addr, vs.key.port, vs.scheduler) == (
        "tcp", "10.77.0.100", 80, "wrr")
    assert [(r.address, r.port, r.weight, r.forward) for r in vs.servers] == [
        ("10.77.0.11", 80, 1, "dr"), ("10.77.0.12", 80, 3, "dr")]
    assert [(v.address, v.dev) for v in cfg.vips] == [("10.77.0.100", "eth0")]


@pytest.mark.parametrize(
    "change", [{"scheduler": "fastest"}, {"port": 0}, {"protocol": "icmp"},
               {"servers": (RealServer("10.77.0.11", 0),)},
               {"servers": (RealServer("10.77.0.11", 70000),)}],
)  # fmt: skip
def test_service_validation(change):
    base = {"vip": "10.77.0.100", "port": 80, "scheduler": "rr",
            "servers": (RealServer("10.77.0.11", 1),)}  # fmt: skip
    with pytest.raises(BadInput):
        LabService(**{**base, **change})


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed")
@pytest.mark.parametrize("kind", ["realserver", "adaptive"])
def test_nginx_accepts_the_generated_config(tmp_path, kind):
    from lbtune.lab.experiments.adaptive import adaptive_nginx_conf

    conf = tmp_path / "nginx.conf"
    if kind == "realserver":
        conf.write_text(render_nginx_conf("rs1", str(tmp_path)))
    else:
        conf.write_text(adaptive_nginx_conf("rs1", str(tmp_path), str(tmp_path / "www")))
    proc = subprocess.run(
        ["nginx", "-t", "-q", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "e")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    expected = 'return 200 "rs1\\n"' if kind == "realserver" else "root " + str(tmp_path / "www")
    assert expected in conf.read_text()


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy not installed")
def test_haproxy_accepts_the_generated_config(tmp_path):
    cfg = tmp_path / "haproxy.cfg"
    servers = [("rs1", "10.77.0.11", 1), ("rs2", "10.77.0.12", 3)]
    cfg.write_text(render_haproxy_cfg(str(tmp_path), "10.77.0.100", servers, "wrr"))
    proc = subprocess.run(["haproxy", "-c", "-q", "-f", str(cfg)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "server rs2 10.77.0.12:80 weight 3" in cfg.read_text()
    with pytest.raises(LabStepFailed):
        render_haproxy_cfg(str(tmp_path), "10.77.0.100", servers, "mh")


def test_lab_director_profile_is_lb_dr_without_what_one_cpu_cannot_take(tmp_path):
    path = tmp_path / "lab-lb-dr.toml"
    path.write_text(lab_director_profile())
    lab = load_profile(str(path))
    shipped = load_profile("lb-dr")
    assert lab.name == "lab-lb-dr" and lab.role == "lb-dr"
    assert lab.sysctl.keys() == shipped.sysctl.keys()
    assert {k: s.value for k, s in lab.sysctl.items()} == {
        k: s.value for k, s in shipped.sysctl.items()
    }
    assert "rings" in shipped.nic["data"] and "rings" not in lab.nic["data"]
    assert lab.irqbalance["state"].value == "stopped" and "ban" not in lab.irqbalance
    assert lab.cpu["housekeeping"].value == "0"


def test_ip_batch_refuses_words_that_would_split():
    with pytest.raises(ValueError):
        Shell().ip_batch([["link", "add", "a b"]])
    with pytest.raises(ValueError):
        Shell().ip_batch([["addr", "add", "1.2.3.4/24 # x"]])


# --------------------------------------------------------------------------- scenario values


@pytest.mark.parametrize(
    "kw", [{"mode": "nat"}, {"servers": 2, "weights": (1, 2, 3)}, {"duration": 0},
           {"duration": 601}, {"threads": 4, "connections": 2}, {"fault": "cable"},
           {"fault": "wrong-arp", "mode": "proxy"}, {"mode": "proxy", "scheduler": "mh"},
           {"scheduler": "fastest"}, {"weights": (0, 0, 0)}, {"servers": 40}],
)  # fmt: skip
def test_scenario_config_refuses(kw):
    with pytest.raises(BadInput):
        ScenarioConfig(**kw)


def test_result_round_trips_through_json():
    cfg = ScenarioConfig(scheduler="wrr", servers=2, weights=(1, 3))
    r = ScenarioResult(
        config=cfg, ok=True, stopped=None, reason="", vip="10.77.0.100", kernel="6.1",
        servers=(ServerShare("rs1", "10.77.0.11", 1, 25, 0.25, 0.25, 3, 0),
                 ServerShare("rs2", "10.77.0.12", 3, 75, 0.75, 0.75, 9, 0)),
        bypass=Bypass(100, 1000, 100),
    )  # fmt: skip
    data = r.to_json()
    assert data["bypass"]["through_director"] == 0.0 and data["serving"] == 2
    back = result_from_json(data)
    assert back == r
    assert dataclasses.asdict(back.config) == dataclasses.asdict(cfg)


def test_bypass_share():
    dr = Bypass(client_sent=100, client_received=1000, director_received=100)
    assert dr.through_director == 0
    assert Bypass(0, 0, 0).through_director == 0
    assert Bypass(100, 1000, 1080).through_director == 0.98


def test_expected_shares():
    from lbtune.lab.experiments.scenario import expected_share

    assert [expected_share("wrr", (1, 3), i) for i in (0, 1)] == [0.25, 0.75]
    assert [expected_share("rr", (1, 3, 0), i) for i in (0, 1, 2)] == [0.5, 0.5, 0.0]
    assert expected_share("sh", (1, 1), 0) is None


def test_progress_lines_pass_from_writer_to_reader(tmp_path):
    seen: list[Step] = []
    reader = ProgressReader(seen.append)
    write = ProgressWriter(str(tmp_path))
    write("topology", "start", "5 namespaces")
    reader.poll(tmp_path)
    with open(tmp_path / "progress.jsonl", "a") as fh:
        fh.write('{"name": "load", "state": "tick", "done": 1')  # half a line: not yet
    reader.poll(tmp_path)
    assert [(s.name, s.state) for s in seen] == [("topology", "start")]
    with open(tmp_path / "progress.jsonl", "a") as fh:
        fh.write(', "total": 3}\nnot json\n')
    reader.poll(tmp_path)
    assert [(s.name, s.state, s.done, s.total) for s in seen[1:]] == [("load", "tick", 1, 3)]


def test_adaptive_requests_without_an_access_log_are_unknown_not_zero(tmp_path):
    """A server whose access log is missing served an unknown number of requests, not 0:
    its count is None, the scheme says why, and no share is computed from it."""
    from lbtune.lab.experiments.adaptive import _Web, rows

    web = _Web("rs1", "ns-unused", str(tmp_path), str(tmp_path / "www"), Shell())
    assert web.phase_requests() is None  # not started: nothing was logged or rotated
    (tmp_path / "access.log.before").write_text("200\n200\n\n200\n")
    assert web.phase_requests() == 3
    scheme = {"scheme": "rr", "load": None, "failures": None, "events": [],
              "requests": {"rs1": 30, "rs2": None}}  # fmt: skip
    (row,) = rows({"schemes": [scheme]})
    assert row.shares == {"rs1": None, "rs2": None}
    scheme["requests"] = {"rs1": 30, "rs2": 10}
    assert rows({"schemes": [scheme]})[0].shares == {"rs1": 0.75, "rs2": 0.25}
def test_bypass_share_never_exceeds_all_reply_bytes():
    """Through HAProxy the director receives its own connections' headers and handshakes
    too: 1,210 bytes for 1,000 reply bytes used to read "111% of reply bytes"."""
    proxy = Bypass(client_sent=100, client_received=1000, director_received=1210)
    assert proxy.through_director == 1.0
    assert proxy.overhead == 0.11  # the extra, said next to it
    assert Bypass(100, 1000, 1080).overhead == 0.0
    assert Bypass(0, 0, 0).overhead == 0.0


def test_lab_caused_fail_becomes_a_skip_with_its_reason():
    from lbtune.lab.experiments.scenario import CheckLine, lab_checks

    checks = (
        CheckLine("profile-in-sync", "fail", "lb-dr: cpu.data = 'x' selects no CPU on this host"),
        CheckLine("rings", "pass", "ok"),
    )
    out, summary, tolerated = lab_checks("lb-dr", checks, {"pass": 1, "fail": 1, "skip": 0})
    assert [c.level for c in out] == ["skip", "pass"]
    assert "lab:" in out[0].reason and "more than one CPU" in out[0].reason
    assert summary == {"pass": 1, "fail": 0, "skip": 1}
    assert set(tolerated) == {"profile-in-sync"}
    # a fail the lab does not cause stays a fail
    real = (CheckLine("profile-in-sync", "fail", "2 of 9 knobs drifted"),)
    out2, summary2, tolerated2 = lab_checks("lb-dr", real, {"fail": 1})
    assert out2 == real and summary2 == {"fail": 1} and tolerated2 == {}


def _report(r: Any) -> str:
    import io

    from rich.console import Console

    from lbtune.cli.lab.report import render_result

    buf = io.StringIO()
    render_result(Console(file=buf, width=200, highlight=False), r)
    return buf.getvalue()


def _keepalive_dr(mode: str = "dr", keepalive: bool = True, **kw: Any) -> Any:
    cfg = ScenarioConfig(scheduler="wrr", servers=2, weights=(1, 3), mode=mode,
                         keepalive=keepalive)  # fmt: skip
    return ScenarioResult(
        config=cfg, ok=True, stopped=None, reason="", vip="10.77.0.100", kernel="6.1",
        servers=(ServerShare("rs1", "10.77.0.11", 1, 40, 0.4, 0.25, 3, 0),
                 ServerShare("rs2", "10.77.0.12", 3, 60, 0.6, 0.75, 9, 0)),
        **kw,
    )  # fmt: skip


def test_weights_report_says_ipvs_schedules_connections_not_requests():
    text = _report(_keepalive_dr())
    assert "expected: the weight share of the connections IPVS schedules" in text
    assert "--no-keepalive schedules every request" in text
    assert "weight share of the connections" not in _report(_keepalive_dr(keepalive=False))


def test_proxy_report_says_what_the_extra_bytes_are():
    r = _keepalive_dr(mode="proxy", bypass=Bypass(100, 1000, 1210))
    text = _report(r)
    assert "replies through the director: 100% of reply bytes" in text
    assert "also received 11% more: the headers, handshakes and ACKs" in text
    assert "111%" not in text


def test_lbtune_in_the_lab_is_one_argv_with_the_labs_state_dir(tmp_path, monkeypatch):
    from lbtune.lab.inguest import shell

    monkeypatch.setattr(shell, "STATE_DIR", str(tmp_path / "state"))
    assert shell.lbtune_argv("lab-rs1", "show", "--json")[1:] == [
        "-m", "lbtune", "--netns", "lab-rs1", "show", "--json"]  # fmt: skip
    assert shell.lbtune_argv(None, "show")[1:] == ["-m", "lbtune", "show"]
    sh = Shell()
    assert sh.check_lbtune(None, "--version").startswith("lbtune, version ")
    res = sh.lbtune(None, "no-such-command", "--no-such-option")
    assert res.returncode == 2 and res.argv[-2:] == ("no-such-command", "--no-such-option")
    with pytest.raises(LabStepFailed) as e:
        sh.check_lbtune("lab-x", "no-such-command")
    said = "lbtune no-such-command in lab-x: Error: No such command 'no-such-command'."
    assert str(e.value) == said
    assert (tmp_path / "state").is_dir()  # created for the run's journals
    proc = sh.spawn_lbtune(None, "--version")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out.startswith("lbtune, version ")


def test_steps_say_start_done_or_fail_and_keep_each_steps_time(tmp_path):
    from lbtune.lab.progress import Steps

    steps = Steps(ProgressWriter(str(tmp_path)))
    with steps.step("topology", "3 namespaces"):
        pass
    with pytest.raises(LabStepFailed), steps.step("load"):
        raise LabStepFailed("wrk exited 1")
    seen: list[Step] = []
    ProgressReader(seen.append).poll(tmp_path)
    assert [(s.name, s.state, s.detail) for s in seen] == [
        ("topology", "start", "3 namespaces"), ("topology", "done", "3 namespaces"),
        ("load", "start", ""), ("load", "fail", "wrk exited 1")]  # fmt: skip
    assert [(t.name, t.ok, t.detail) for t in steps.times] == [
        ("topology", True, "3 namespaces"), ("load", False, "wrk exited 1")]  # fmt: skip
    assert all(t.seconds >= 0 for t in steps.times)
