"""Runs inside the lab guest: `lbtune exporter` on a director with a real IPVS table.

Two virtual services (one with a drained real server) are applied with `lbtune ipvs apply`,
a client namespace sends a few UDP datagrams and TCP SYNs to the VIP (IPVS schedules them:
its per-service counters move), and the exporter's output is returned twice: by default
(per virtual service) and with `--ipvs-real-servers`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any

from tests.conftest import run_cli

CONFIG = """
[[vip]]
address = "10.7.0.1"
dev = "lo"

[[service]]
address = "10.7.0.1"
port = 80
scheduler = "wrr"
  [[service.real_server]]
  address = "10.7.1.1"
  weight = 3
  [[service.real_server]]
  address = "10.7.1.2"
  weight = 0

[[service]]
protocol = "udp"
address = "10.7.0.1"
port = 53
scheduler = "rr"
  [[service.real_server]]
  address = "10.7.1.1"
"""
CLIENT = "lbt-exp-client"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def traffic() -> None:
    """From a client namespace: 5 UDP datagrams and 3 SYNs to the VIP."""
    ip("netns", "add", CLIENT)
    ip("link", "add", "v-dir", "type", "veth", "peer", "name", "v-cl", "netns", CLIENT)
    ip("addr", "add", "10.8.0.1/24", "dev", "v-dir")
    ip("link", "set", "v-dir", "up")
    ip("-n", CLIENT, "addr", "add", "10.8.0.2/24", "dev", "v-cl")
    ip("-n", CLIENT, "link", "set", "v-cl", "up")
    ip("-n", CLIENT, "link", "set", "lo", "up")
    ip("-n", CLIENT, "route", "add", "10.7.0.0/16", "via", "10.8.0.1")
    script = (
        "import socket\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "for i in range(5):\n"
        "    u.sendto(b'q', ('10.7.0.1', 53))\n"
        "for i in range(3):\n"
        "    t = socket.socket()\n"
        "    t.settimeout(0.3)\n"
        "    try:\n"
        "        t.connect(('10.7.0.1', 80))\n"
        "    except OSError:\n"
        "        pass\n"
        "    t.close()\n"
    )
    subprocess.run(["ip", "netns", "exec", CLIENT, "python3", "-c", script], check=True,
                   timeout=30)  # fmt: skip


def counted(flag: str, service: str, conns: int, deadline: float) -> None:
    """Waits until the kernel's per-service counters show the client's connections.

    IPVS folds its per-CPU counters into what netlink reports only when its rate estimator
    runs (every 2 s), so a read straight after the traffic can still show 0 (it did, once in
    CI: UDP conns 0). `ipvsadm` is the independent reader here, not lbtune.
    """
    while True:
        out = subprocess.run(["ipvsadm", "-Ln", "--stats", flag, service], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        # the service's row: PROTO ADDR:PORT Conns InPkts ... (its real servers follow: "->")
        row = next(x.split() for x in out.splitlines() if x.startswith(("TCP", "UDP")))
        if int(row[2]) >= conns or time.monotonic() > deadline:
            return
        time.sleep(0.2)


def run() -> dict[str, Any]:
    subprocess.run(["modprobe", "ip_vs"], check=True)
    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"
    with open("/tmp/director.toml", "w") as f:
        f.write(CONFIG)
    applied = run_cli("ipvs", "apply", "/tmp/director.toml")
    traffic()
    deadline = time.monotonic() + 20
    counted("-u", "10.7.0.1:53", 1, deadline)
    counted("-t", "10.7.0.1:80", 1, deadline)
    default = run_cli("exporter", "--once", "--interval", "500ms")
    per_rs = run_cli("exporter", "--once", "--interval", "500ms", "--ipvs-real-servers")
    return {
        "apply": [applied.exit_code, applied.stderr],
        "default": [default.exit_code, default.stdout, default.stderr],
        "per_rs": [per_rs.exit_code, per_rs.stdout, per_rs.stderr],
        "hostname": socket.gethostname(),
    }
