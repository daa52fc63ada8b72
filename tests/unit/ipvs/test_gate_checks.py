"""The gate's real-server check: real TCP connects on loopback (a listener, a refused port)
against min_real_servers; the IPVS half of the check (`ipvs status CONFIG` in sync) is
replaced by a verdict here, since this kernel has no IPVS (tests/netns/test_ipvs_gate_netns.py
runs the whole gate, where that half fails)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from lbtune.host.endpoints.reach import tcp_reachable
from lbtune.ipvs import gate as gate_mod
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.gate import GateEvent, check_vips


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port that 127.0.0.1 accepts on (and 127.0.0.2 refuses: bound to .1 only)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def _config(port: int, min_rs: int, sync_reason: str = "") -> str:
    return f"""
[[service]]
address = "10.0.0.100"
port = {port}
scheduler = "mh"
flags = ["mh-fallback"]
  [[service.real_server]]
  address = "127.0.0.1"
  [[service.real_server]]
  address = "127.0.0.2"
  [[service.real_server]]
  address = "127.0.0.3"
  weight = 0

[[service]]
address = "10.0.0.101"
protocol = "udp"
port = 53
scheduler = "mh"
  [[service.real_server]]
  address = "127.0.0.9"

[cluster]
asn = 65001
[[cluster.director]]
name = "dir1"
address = "10.0.1.11"
[[cluster.router]]
address = "10.0.1.1"
asn = 65000
[cluster.gate]
min_real_servers = {min_rs}
timeout = 0.5
"""


def test_tcp_reachable_tells_accepting_from_refused(listener: int) -> None:
    got = tcp_reachable([("127.0.0.1", listener), ("127.0.0.2", listener)], 2.0)
    assert got == {("127.0.0.1", listener): "", ("127.0.0.2", listener): "connection refused"}


@pytest.mark.parametrize("min_rs,ok", [(1, True), (2, False)])
def test_a_vip_passes_with_enough_reachable_real_servers(
        listener: int, monkeypatch: pytest.MonkeyPatch, min_rs: int, ok: bool) -> None:
    monkeypatch.setattr(gate_mod, "_sync_reason", lambda host, cfg: "")
    cfg = parse_config_text(_config(listener, min_rs), "c.toml")
    assert cfg.cluster is not None
    checks = {c.vip.address: c for c in check_vips(None, cfg, cfg.cluster.gate)}  # type: ignore[arg-type]
    assert checks["10.0.0.101"].ok  # UDP: the gate cannot check it, the table alone gates it
    assert checks["10.0.0.100"].ok is ok
    if not ok:
        assert checks["10.0.0.100"].reason == (
            f"tcp:10.0.0.100:{listener}: 1 of 3 real servers reachable, 2 needed "
            f"(127.0.0.2:{listener} connection refused; 127.0.0.3:{listener} weight 0)")


def test_a_table_out_of_sync_fails_every_vip_without_connecting(
        listener: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_mod, "_sync_reason", lambda host, cfg: "IPVS is not loaded")
    monkeypatch.setattr(gate_mod, "tcp_reachable", lambda *a: pytest.fail("connected"))
    cfg = parse_config_text(_config(listener, 1), "c.toml")
    assert cfg.cluster is not None
    checks = check_vips(None, cfg, cfg.cluster.gate)  # type: ignore[arg-type]
    assert [(c.vip.address, c.ok, c.reason) for c in checks] == [
        ("10.0.0.100", False, "IPVS is not loaded"), ("10.0.0.101", False, "IPVS is not loaded")]


def test_gate_events_as_json() -> None:
    e = GateEvent(1700000000.12345, "10.0.0.100", "announce", "3 check(s) in a row passed")
    assert e.to_json() == {"time": 1700000000.123, "vip": "10.0.0.100", "event": "announce",
                           "reason": "3 check(s) in a row passed"}
