"""The cluster director's BIRD export and health gate against real BIRDs: a director and a
router, each a BIRD in its own throwaway namespace on a veth pair.

The exported config (`ipvs export --format bird`) peers with the router over BGP with BFD
and announces nothing until the gate enables a VIP; `lbtune ipvs gate` withdraws what it
cannot vouch for and everything when it stops (SIGTERM: exit 0). This kernel has no IPVS
(and a fresh namespace's table is empty anyway), so every real check here fails: the
passing side of the rise/fall switch is driven by a scripted check sequence through the
same GateRun and the same BIRD, and the real checks passing is the lab's to show (IPVS).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from lbtune.host.endpoints.bird import BirdControl
from lbtune.ipvs import gate as gate_mod
from lbtune.ipvs.bird import announced_vips
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.gate import GateEvent, GateRun, VipHealth
from tests.netns.conftest import ip
from tests.unit.ipvs.test_bird_export import CLUSTER, SERVICES, _export

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("bird") is None,
                                reason="bird not installed (make setup installs bird2)")

FAST = "\n[cluster.gate]\ninterval = 0.2\ntimeout = 0.2\nrise = 3\nfall = 2\n"
ROUTER = """router id 10.0.1.1;
protocol device {}
protocol bfd { interface "*" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }; }
protocol bgp dir1 {
    local 10.0.1.1 as 65000; neighbor 10.0.1.11 as 65001; bfd on;
    ipv4 { import all; export none; };
}
"""


def _wait(what: str, cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Pair:
    """The director's and the router's BIRD, and the cluster config they run."""

    def __init__(self, tmp: Path, dns: str, rns: str) -> None:
        self.tmp, self.dns, self.rns = tmp, dns, rns
        self.text = SERVICES + CLUSTER + FAST
        self.cfg_path = tmp / "cluster.toml"
        self.cfg_path.write_text(self.text)
        (tmp / "export").mkdir()
        (tmp / "dir1.conf").write_text(_export(tmp / "export", self.text, "dir1"))
        (tmp / "router.conf").write_text(ROUTER)
        self.dsock, self.rsock = str(tmp / "d.ctl"), str(tmp / "r.ctl")
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, which: str) -> None:
        ns, conf, sock = ((self.dns, "dir1.conf", self.dsock) if which == "director"
                          else (self.rns, "router.conf", self.rsock))
        self.procs[which] = subprocess.Popen(
            ["ip", "netns", "exec", ns, "bird", "-f", "-c", str(self.tmp / conf), "-s", sock],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _wait(f"{which} BIRD's socket", lambda: os.path.exists(sock) and _answers(sock))

    def stop(self, which: str) -> None:
        p = self.procs.pop(which)
        p.terminate()
        p.wait(timeout=10)
        sock = self.dsock if which == "director" else self.rsock
        if os.path.exists(sock):
            os.unlink(sock)

    def router_routes(self) -> str:
        return "\n".join(t for _c, t in BirdControl(self.rsock).command("show route"))

    def established(self) -> bool:
        return BirdControl(self.rsock).protocol_states().get("dir1") == "up"


def _answers(sock: str) -> bool:
    try:
        BirdControl(sock).command("show status")
        return True
    except Exception:
        return False


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    pid = os.getpid()
    dns, rns = f"lbtune-gd{pid}", f"lbtune-gr{pid}"
    ip("netns", "add", dns)
    ip("netns", "add", rns)
    p = Pair(tmp_path, dns, rns)
    try:
        ip("-n", dns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
           "netns", rns)
        for ns, addr in ((dns, "10.0.1.11/24"), (rns, "10.0.1.1/24")):
            ip("-n", ns, "addr", "add", addr, "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
        p.start("router")
        p.start("director")
        _wait("the BGP session", p.established)
        yield p
    finally:
        for which in list(p.procs):
            p.stop(which)
        for ns in (dns, rns):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def test_the_export_peers_with_bfd_and_announces_nothing_until_enabled(pair: Pair):
    vip = announced_vips(parse_config_text(pair.text, "c"))[0]
    sessions = BirdControl(pair.dsock).command("show bfd sessions")
    assert any("10.0.1.1" in t and " Up " in f" {t} " for _c, t in sessions), sessions
    assert "10.0.0.100/32" not in pair.router_routes()
    BirdControl(pair.dsock).set_enabled(vip.protocol, True)
    _wait("the router to learn the VIP", lambda: "10.0.0.100/32" in pair.router_routes())
    routes = pair.router_routes()
    assert "via 10.0.1.11" in routes and "10.0.0.101/32" not in routes


def test_the_gate_withdraws_what_it_cannot_vouch_for_and_exits_0_on_sigterm(pair: Pair):
    vips = announced_vips(parse_config_text(pair.text, "c"))
    for v in vips:  # a stale announcement (a gate that died, a hand-typed enable)
        BirdControl(pair.dsock).set_enabled(v.protocol, True)
    _wait("the router to learn both VIPs", lambda: "10.0.0.101/32" in pair.router_routes())
    env = dict(os.environ, PYTHONPATH=str(REPO))
    gate = subprocess.Popen(
        ["ip", "netns", "exec", pair.dns, sys.executable, "-m", "lbtune", "ipvs", "gate",
         str(pair.cfg_path), "--director", "dir1", "--socket", pair.dsock],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        _wait("the gate to withdraw both VIPs",
              lambda: "10.0.0.10" not in pair.router_routes())
    finally:
        gate.send_signal(signal.SIGTERM)
        out, err = gate.communicate(timeout=20)
    assert gate.returncode == 0, err
    lines = out.splitlines()
    assert any(" check 10.0.0.100: failed: IPVS is not loaded" in x or
               " check 10.0.0.100: failed: the IPVS table differs" in x for x in lines), out
    assert any(" repair 10.0.0.100: BIRD had lbtune_vip_10_0_0_100 up: disabled it" in x
               for x in lines), out
    assert lines[-1].endswith(" stop gate stopped: every VIP withdrawn"), out
    assert err == ""
    states = BirdControl(pair.dsock).protocol_states()
    assert {states[v.protocol] for v in vips} == {"down"}
    # --once: the verdicts, exit 1, and BIRD left alone
    BirdControl(pair.dsock).set_enabled(vips[0].protocol, True)
    once = subprocess.run(
        ["ip", "netns", "exec", pair.dns, sys.executable, "-m", "lbtune", "--json", "ipvs",
         "gate", str(pair.cfg_path), "--director", "dir1", "--socket", pair.dsock, "--once"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=60)
    assert once.returncode == 1, once.stderr
    doc = json.loads(once.stdout)
    assert [(v["vip"], v["ok"]) for v in doc["vips"]] == [("10.0.0.100", False),
                                                          ("10.0.0.101", False)]
    assert BirdControl(pair.dsock).protocol_states()[vips[0].protocol] == "up"


def test_rise_and_fall_drive_the_routers_table_and_a_restarted_bird_is_repaired(
        pair: Pair, monkeypatch: pytest.MonkeyPatch):
    cfg = parse_config_text(pair.text, "c")
    vip = announced_vips(cfg)[0]
    script: list[bool] = []

    def scripted(host, cfg_, gate):  # type: ignore[no-untyped-def]
        ok = script.pop(0)
        return [VipHealth(v, ok if v == vip else False, "" if ok and v == vip else "scripted")
                for v in announced_vips(cfg_)]

    monkeypatch.setattr(gate_mod, "check_vips", scripted)
    events: list[GateEvent] = []
    run = GateRun(None, cfg, BirdControl(pair.dsock), events.append)  # type: ignore[arg-type]

    def rounds(*oks: bool) -> None:
        script.extend(oks)
        for _ in oks:
            run.round()

    def announced() -> bool:
        return "10.0.0.100/32" in pair.router_routes()

    rounds(True, True)  # rise = 3: two passes announce nothing
    time.sleep(1)
    assert not announced()
    rounds(True)
    _wait("the announcement after the third pass", announced)
    rounds(False)  # fall = 2: one failure withdraws nothing
    time.sleep(1)
    assert announced()
    rounds(True, False, False)
    _wait("the withdrawal after two failures in a row", lambda: not announced())
    assert [(e.vip, e.kind) for e in events if e.kind in ("announce", "withdraw")] == [
        ("10.0.0.100", "announce"), ("10.0.0.100", "withdraw")]
    rounds(True, True, True)
    _wait("the announcement again", announced)
    # BIRD restarts: its static protocols start disabled; the next round repairs that
    pair.stop("director")
    rounds(True, True)  # BIRD is gone: said once, not every round
    assert sum(e.kind == "error" for e in events) == 1, events
    pair.start("director")
    _wait("the router to lose the VIP with the session", lambda: not announced())
    rounds(True)
    assert any(e.kind == "repair" and "enabled it" in e.reason for e in events), events
    assert any(e.kind == "bird" and e.reason == "BIRD answers again" for e in events), events
    _wait("the session and the VIP back", lambda: pair.established() and announced(), 30)
    run.stop()
    _wait("the withdrawal at stop", lambda: not announced())
