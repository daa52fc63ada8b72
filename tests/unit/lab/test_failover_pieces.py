"""The failover lab's pure parts: windows per switch, the prober's HTTP parsing, options."""

from __future__ import annotations

import pytest

from lbtune.errors import BadInput
from lbtune.lab.experiments.failover import FailoverConfig, _lab_config
from lbtune.lab.experiments.failover_stats import (
    ClientRecord,
    Conn,
    Event,
    FailoverResult,
    result_from_json,
    switch_windows,
)
from lbtune.lab.inguest.failoverclient import _response_done
from lbtune.lab.inguest.labnet import plan_topology


def _probes(start: float, stop: float, bad: tuple[float, float] = (0.0, 0.0)):
    """A probe every 20 ms from start to stop, failing in [bad)."""
    out, t = [], start
    while t < stop:
        out.append((round(t, 3), not bad[0] <= t < bad[1]))
        t += 0.02
    return tuple(out)


def test_loss_window_runs_from_first_failure_to_first_success_after_the_last():
    rec = ClientRecord(_probes(0, 20, bad=(10.0, 10.7)), ())
    [w1, w2] = switch_windows(rec, [Event(10.0, "failover", "dir2", 0.4, "dir2"),
                                    Event(15.0, "failback", "dir1", 3.7, "dir1")], 20.0)
    assert w1.loss_s == pytest.approx(0.7, abs=0.021) and w1.failed == 35
    assert w2.loss_s == 0.0 and w2.failed == 0 and w1.recovered and w2.recovered
    assert w1.probes + w2.probes == 500  # [9.5, 19.5): every probe in exactly one window
    assert w1.max_gap_s == pytest.approx(0.02, abs=0.001)
    stalled = ClientRecord(tuple(p for p in rec.probes if not 10.0 <= p[0] < 10.3), ())
    [w] = switch_windows(stalled, [Event(10.0, "failover", "dir2", 0.4)], 20.0)
    assert w.max_gap_s == pytest.approx(0.32, abs=0.021)  # the prober's pause shows


def test_a_failure_just_before_the_kill_belongs_to_its_switch_and_no_success_means_to_end():
    rec = ClientRecord(_probes(0, 12, bad=(9.9, 12.0)), ())
    [w] = switch_windows(rec, [Event(10.0, "failover", "dir2", None)], 12.0)
    assert w.failed > 0 and w.loss_s == pytest.approx(11.5 - 9.9, abs=0.021)
    assert not w.recovered
    assert "no request succeeded" in FailoverResult.build({}, [w], "", {}, "").reason


def test_keepalive_connections_count_when_open_at_the_switch_and_lost_when_broken_in_it():
    conns = (
        Conn(1.0, None, ""),  # survives
        Conn(1.0, 10.3, "Connection reset by peer"),  # broken by the failover
        Conn(10.6, 15.2, "Connection reset by peer"),  # opened after it, lost at failback
        Conn(1.0, 5.0, "closed by the server"),  # gone before the first switch
    )
    rec = ClientRecord(_probes(0, 20), conns)
    w1, w2 = switch_windows(rec, [Event(10.0, "failover", "dir2", 0.4),
                                  Event(15.0, "failback", "dir1", 3.7)], 20.0)
    assert (w1.established, w1.lost) == (2, 1) and w1.reasons == ("Connection reset by peer",)
    assert (w2.established, w2.lost) == (2, 1)


def test_result_reason_and_json_round_trip():
    rec = ClientRecord(_probes(0, 20), (Conn(1.0, 10.3, "reset"),))
    ws = switch_windows(rec, [Event(10.0, "failover", "dir2", 0.4, "dir2")], 20.0)
    with_sync = FailoverResult.build({"sync": True}, ws, "", {}, "6.1")
    assert not with_sync.ok and "sync was on" in with_sync.reason
    without = FailoverResult.build({"sync": False}, ws, "", {}, "6.1")
    assert without.ok and without.summary[0].lost == 1
    assert result_from_json(without.to_json()) == without
    wrong = switch_windows(rec, [Event(10.0, "failover", "dir2", 0.4, "dir1")], 20.0)
    assert "wrong director" in FailoverResult.build({}, wrong, "", {}, "").reason
    never = switch_windows(rec, [Event(10.0, "failover", "dir2", None)], 20.0)
    assert "did not move" in FailoverResult.build({}, never, "", {}, "").reason


def test_prober_reads_whole_responses_only():
    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-Lab-Server: rs2\r\n\r\nrs2\n"
    assert _response_done(resp[:-2], closing=False) is None
    assert _response_done(resp + b"HTTP/1.1", closing=False) == (200, "rs2", len(resp))
    assert _response_done(b"HTTP/1.1 503 x\r\n\r\n", closing=True) == (503, "", 18)


def test_lab_config_is_an_ipvs_config_and_bad_options_are_refused():
    from lbtune.ipvs.config import parse_config_text

    topo = plan_topology(2, directors=2)
    [svc] = parse_config_text(_lab_config(topo.vip, topo.servers), "lab.toml").services
    assert svc.key.addr == topo.vip and [r.address for r in svc.servers] == [
        s.address for s in topo.servers]
    for kw in ({"kills": 0}, {"advert_int": 0.005}, {"advert_int": 0.125}, {"settle": 0.1}):
        with pytest.raises(BadInput):
            FailoverConfig(**kw)  # type: ignore[arg-type]
    assert FailoverConfig(advert_int=1.0).master_down() == pytest.approx(3.609, abs=0.001)


def test_cli_refuses_bad_options_before_anything_boots():
    from tests.conftest import run_cli

    for args in (("--kills", "0"), ("--advert-int", "0.125"), ("--servers", "9")):
        r = run_cli("lab", "failover", *args, "--json")
        assert r.exit_code == 2, (args, r.stderr)
        assert r.json["error"]["type"] == "bad-input" and "Traceback" not in r.stderr


def test_report_shows_every_switch_and_the_kept_connections(capsys):
    from lbtune.cli.lab.failover import render

    rec = ClientRecord(_probes(0, 20, bad=(10.0, 10.3)),
                      (Conn(1.0, None, ""), Conn(1.0, 10.2, "Connection reset by peer")))
    ws = switch_windows(rec, [Event(10.0, "failover", "dir2", 0.34, "dir2"),
                              Event(15.0, "failback", "dir1", 3.6, "dir1")], 20.0)
    cfg = dict(vars(FailoverConfig(kills=1, sync=False)))
    render(FailoverResult.build(cfg, ws, "", {}, "6.1.176"))
    out = capsys.readouterr().out
    assert " 1  failover dir2    0.34 s  0.30 s     15" in out
    assert "failover x1: loss window median 0.30 s" in out and "kept 1 of 2" in out
    assert out.rstrip().endswith("OK")


def _held_windows(held: int, lost: int, kind: str = "failback"):
    """One switch with 4 serving keep-alive connections, `lost` of them broken in it."""
    conns = tuple(Conn(1.0, 10.3 if i < lost else None, "reset") for i in range(4))
    rec = ClientRecord(_probes(0, 20), conns)
    return switch_windows(rec, [Event(10.0, kind, "dir1", 3.9, "dir1", held=held)], 20.0)


def test_sync_reason_tells_timing_from_sync_losing_what_it_held():
    cfg = {"sync": True, "preempt_delay": 3.0}
    # the returning master lacked two: those two broke, which is timing (preempt_delay)
    short = FailoverResult.build(cfg, _held_windows(held=2, lost=2), "", {}, "6.1")
    assert not short.ok and short.windows[0].held == 2
    assert "holding 2 of 4" in short.reason and "raise --preempt-delay" in short.reason
    assert "preempt_delay 3 s" in short.reason
    # it held all four and one broke anyway: sync did not keep what it carried
    broke = FailoverResult.build(cfg, _held_windows(held=4, lost=1), "", {}, "6.1")
    assert "the new master held them: switch 1 (failback)" in broke.reason
    # more broke than it lacked: also sync's fault
    more = FailoverResult.build(cfg, _held_windows(held=3, lost=2), "", {}, "6.1")
    assert "held them" in more.reason
    # a failover whose wait for sync ran out
    kill = FailoverResult.build(cfg, _held_windows(held=3, lost=1, kind="failover"), "", {}, "")
    assert "held 3 of 4" in kill.reason and "within the wait" in kill.reason
    # all held, none lost: fine; and the held count survives the JSON round trip
    fine = FailoverResult.build(cfg, _held_windows(held=4, lost=0), "", {}, "6.1")
    assert fine.ok and result_from_json(fine.to_json()) == fine


def test_prober_keeps_the_serving_keepalive_ports_in_its_ports_file(tmp_path):
    """The real prober against a keep-alive HTTP server on loopback: the ports file names
    exactly the client ports the server sees the keep-alive requests from."""
    import http.server
    import json
    import subprocess
    import sys
    import threading
    import time

    seen: set[int] = set()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.headers.get("Connection", "").lower() != "close":
                seen.add(self.client_address[1])
            body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stop, out, ports = tmp_path / "stop", tmp_path / "out.json", tmp_path / "ports.json"
    proc = subprocess.Popen([sys.executable, "-m", "lbtune.lab.inguest.failoverclient",
                             "--vip", "127.0.0.1",
                             "--port", str(srv.server_address[1]), "--keepalive", "3",
                             "--interval", "0.05", "--stop", str(stop), "--out", str(out),
                             "--ports", str(ports)])  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (
                ports.exists() and len(json.loads(ports.read_text())["ports"]) == 3):
            time.sleep(0.05)
        got = json.loads(ports.read_text())["ports"]
        stop.write_text("")
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        srv.shutdown()
        srv.server_close()
    assert len(got) == 3 and set(got) == seen, (got, seen)
    conns = json.loads(out.read_text())["conns"]
    assert sorted(c["port"] for c in conns) == sorted(got)
