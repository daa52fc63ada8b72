"""Runs inside the lab guest: `ipvs selftest` names the real server that did not answer.

The DR bed (tests/lab/guest/dr_lab.py: client, director, rs1..rs3 with banner servers on
port 80), rr over the real servers, then one fault at a time, each followed by a self-test
from the client namespace (`--json`, and the text for the docs):

1. rs3 has the ARP settings but not the VIP on lo: its kernel drops what IPVS sends it;
2. the VIP is back on rs3, and rs2's server is stopped: nothing listens on rs2;
3. a fourth real server 10.0.0.14 that does not exist: the director gets no ARP answer.

Then (issue 16 item 10) Debian's keepalived runs the `ipvs export --format keepalived` of
a config with `[timeouts]` and a UDP service in the director's namespace (health checkers
only, `-C`): its IPVS timeouts become the config's, and the UDP real server with nothing
listening is taken out by the exported UDP_CHECK while the one that listens stays.

Each phase also records the director's IPVS connection table (the evidence the self-test
reads) so the host-side test (tests/lab/test_ipvs_selftest_lab.py) can check the names
against the kernel's own record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from tests.lab.guest.dr_lab import VIP, Bed, cli, config, rs_addr, sh, write

UDP_CFG = f"""
[timeouts]
tcp = 600
tcpfin = 40
udp = 90

[[service]]
protocol = "udp"
address = "{VIP}"
port = 53
scheduler = "rr"
  [[service.real_server]]
  address = "{rs_addr(1)}"
  [[service.real_server]]
  address = "{rs_addr(2)}"
"""
UDP_ECHO = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.bind(('0.0.0.0', 53))\nwhile True:\n    d, a = s.recvfrom(512)\n"
            "    s.sendto(d, a)\n")


def selftest(cfg: str, n: int, text: bool = False) -> dict[str, Any]:
    """The self-test's JSON; with `text` also a second run for its text report (each run
    takes seconds here, so only where tests/lab/test_ipvs_selftest_lab.py reads the text)."""
    args = ("ipvs", "selftest", cfg, "--from-netns", "cl", "-n", str(n), "--timeout", "1")
    out = cli(*args, "--json", netns="dir")
    if text:
        out["text"] = cli(*args, netns="dir")["stdout"]
    out["conn_table"] = sh("ip", "netns", "exec", "dir", "cat", "/proc/net/ip_vs_conn")
    return out


def run() -> dict[str, Any]:
    bed = Bed(3)
    out: dict[str, Any] = {}
    try:
        cfg = write("/tmp/dr.toml", config("rr"))
        out["apply"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
        out["rs_apply"] = [cli("ipvs", "realserver", "apply", "--vip", VIP, "--iface", "eth0",
                               netns=f"rs{i}")["code"] for i in (1, 2, 3)]
        out["healthy"] = selftest(cfg, 6)
        # 1. rs3 without the VIP on lo (its ARP settings stay right)
        sh("ip", "-n", "rs3", "addr", "del", f"{VIP}/32", "dev", "lo")
        out["no_vip"] = selftest(cfg, 6, text=True)
        # 2. the VIP back on rs3; rs2's server stopped
        sh("ip", "-n", "rs3", "addr", "add", f"{VIP}/32", "dev", "lo")
        bed.servers[1].kill()
        bed.servers[1].wait()
        out["rs2_listening"] = sh("ip", "netns", "exec", "rs2", "ss", "-Htln", "sport = :80")
        out["no_listener"] = selftest(cfg, 6, text=True)
        # 3. a real server that does not exist (rs2 serves again)
        bed.serve(2)
        gone = write("/tmp/gone.toml", config("rr") + f'[[service.real_server]]\naddress = '
                     f'"{rs_addr(4)}"\n')
        out["gone_apply"] = cli("ipvs", "apply", gone, "--json", netns="dir")
        out["gone"] = selftest(gone, 8)
        out["neigh"] = sh("ip", "-n", "dir", "neigh", "show", rs_addr(4))
        out["keepalived"] = keepalived_udp()
    finally:
        bed.close()
    return out


def _table() -> dict[str, Any]:
    r = cli("ipvs", "status", "--json", netns="dir")
    assert r["code"] == 0, r["stderr"]
    return {"timeouts": r["json"]["timeouts"],
            "services": {s["service"]: [x["address"] for x in s["real_servers"]]
                         for s in r["json"]["services"]}}


def keepalived_udp() -> dict[str, Any]:
    sh("ip", "netns", "exec", "dir", "ipvsadm", "-C")
    out: dict[str, Any] = {"before": _table()}
    cfg = write("/tmp/udp.toml", UDP_CFG)
    exp = cli("ipvs", "export", cfg, "--format", "keepalived")
    out["export"] = {"code": exp["code"], "stdout": exp["stdout"], "stderr": exp["stderr"]}
    run = "/tmp/kd"
    os.makedirs(run, exist_ok=True)
    conf = write(f"{run}/keepalived.conf", exp["stdout"])
    echo = subprocess.Popen(["ip", "netns", "exec", "rs1", sys.executable, "-c", UDP_ECHO])
    with open(f"{run}/log", "wb") as log:
        kd = subprocess.Popen(
            ["ip", "netns", "exec", "dir", "keepalived", "-n", "-l", "-D", "-C", "-f", conf,
             "-p", f"{run}/keepalived.pid", "-c", f"{run}/checkers.pid"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    svc = f"udp:{VIP}:53"
    try:
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60  # a safety stop: the test judges what was seen
        while time.monotonic() < deadline:
            now = _table()
            if not seen or now != seen[-1]:
                seen.append(now)
            with open(f"{run}/log", encoding="utf-8", errors="replace") as f:
                checked = f"UDP connection to [{rs_addr(1)}]:udp:53 success" in f.read()
            # until rs2 is out and rs1's check has passed (UDP_CHECK passes a server once
            # connect_timeout has gone by without an ICMP error)
            if now["services"].get(svc) == [f"{rs_addr(1)}:53"] and checked:
                break
            time.sleep(0.5)
        out["seen"] = seen
    finally:
        os.killpg(kd.pid, signal.SIGTERM)
        kd.wait(timeout=20)
        echo.kill()
        echo.wait()
    with open(f"{run}/log", encoding="utf-8", errors="replace") as f:
        out["log"] = [line.strip() for line in f][-40:]
    json.dumps(out)
    return out
