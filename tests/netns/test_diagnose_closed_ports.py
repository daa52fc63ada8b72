"""`diagnose` names the closed port with the probes: UDP datagrams and TCP SYNs nothing takes.

In a throwaway namespace, once the probes are attached, a stream of datagrams goes to a UDP
port with no socket and a stream of connects to a TCP port with no listener (both on lo),
while the window is held open. The counter rules find the loss (Udp.NoPorts, Tcp.OutRsts);
the drops probe's `icmp:icmp_send` (port unreachable) and `tcp:tcp_send_reset` (reason
NO_SOCKET) handlers name the address and port. Counters alone ("port unknown") are tested in
tests/netns/test_diagnose_scenarios.py.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lbtune.host.host import Host
from tests.netns import faults as F
from tests.netns.conftest import in_netns, ip

pytest.importorskip("bcc", reason="the probes need bcc (python3-bpfcc; `make setup`)")

UDP_PORT, TCP_PORT = 15355, 18091


def _diagnose_closed_ports(netns: str) -> Any:
    from lbtune.diagnose.report import diagnose
    from lbtune.diagnose.view import report_view

    ip("link", "set", "lo", "up")
    attached, sent, done = threading.Event(), threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def status(text: str) -> None:
        if text == "attached":
            attached.set()

    def load() -> None:
        try:
            if not attached.wait(120):
                return
            box["udp"] = F.UdpNoPort(port=UDP_PORT, datagrams=300, seconds=1).trigger()
            box["tcp"] = F.TcpNoListener(port=TCP_PORT, connects=200, seconds=1).trigger()
        finally:
            sent.set()

    def progress(elapsed: float, total: float) -> None:
        sent.wait(120)  # hold the window open until the load is over

    t = threading.Thread(target=load)
    t.start()
    try:
        report = diagnose(
            Host.open("/", netns=netns), 0.5, progress=progress,
            rules=["udp-no-port", "tcp-no-listener"], probe_status=status,
        )  # fmt: skip
    finally:
        done.set()
        t.join(60)
    return report_view(report).document(), box


def test_the_probes_name_the_closed_udp_and_tcp_ports(netns):
    doc, box = in_netns(netns, _diagnose_closed_ports, netns)
    assert doc["probes"]["status"] == "ran", doc["probes"]
    assert "closed ports unnamed" not in " ".join(doc["probes"]["notes"]), doc["probes"]["notes"]
    by_rule = {f["rule"]: f for f in doc["findings"]}
    assert set(by_rule) == {"udp-no-port", "tcp-no-listener"}, doc["findings"]

    udp = by_rule["udp-no-port"]
    assert udp["object"] == f"udp 127.0.0.1:{UDP_PORT}", udp["object"]
    assert udp["title"] == f"UDP datagrams to port {UDP_PORT}: nothing listens"
    (named,) = [e for e in udp["evidence"] if e["counter"].startswith("probe udp no socket")]
    assert named["counter"] == f"probe udp no socket on 127.0.0.1:{UDP_PORT}"
    # every datagram the probe saw went to that port; at most as many as were sent
    assert 0 < named["value"] <= box["udp"].attempted
    assert "counters do not say which port" not in udp["cause"]
    assert f"went to 127.0.0.1:{UDP_PORT}" in udp["cause"]
    fix = udp["fixes"][0]
    assert fix["knob"] == f"nothing listens on udp 127.0.0.1:{UDP_PORT}"
    assert fix["scope"] == "application"
    # the drops probe's own record: NO_SOCKET in UDP's receive path
    assert any("NO_SOCKET" in e["counter"] and "udp" in e["counter"] for e in udp["evidence"])

    tcp = by_rule["tcp-no-listener"]
    assert tcp["object"] == f"tcp 127.0.0.1:{TCP_PORT}", tcp["object"]
    (named,) = [e for e in tcp["evidence"] if e["counter"].startswith("probe tcp no socket")]
    # a reset per refused connect, each one seen by tcp_send_reset with reason NO_SOCKET
    assert named["value"] == box["tcp"].attempted, tcp["evidence"]
    assert tcp["fixes"][0]["knob"] == f"nothing listens on tcp 127.0.0.1:{TCP_PORT}"
