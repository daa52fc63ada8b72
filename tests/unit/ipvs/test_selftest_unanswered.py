"""`ipvs selftest` names the real server a failed exchange went to: the IPVS connection
table's lines (net/netfilter/ipvs/ip_vs_conn.c formats) and the grouping by server and cause.
The same on a real IPVS table: tests/lab/test_ipvs_selftest_lab.py."""

from __future__ import annotations

import errno

from lbtune.host.endpoints.exchange import Exchange
from lbtune.host.fs import HostFS
from lbtune.host.ipvs.conntable import find_connections, parse_line
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.selftest import unanswered

HEADER = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData\n"
# the client 10.0.0.1, ports 0xD431 and 0xD432, the VIP 10.0.0.100:80
TABLE = HEADER + (
    "TCP 0A000001 D431 0A000064 0050 0A00000D 0050 SYN_RECV         57\n"
    "TCP 0A000001 D432 0A000064 0050 0A00000C 0050 SYN_RECV         58\n"
    "TCP 0A000001 D433 0A000064 0050 0A00000B 0050 TIME_WAIT        80\n"
    "UDP 0A000001 D431 0A000064 0035 0A00000B 0035 UDP             290\n"
    "TCP fd00:0000:0000:0000:0000:0000:0000:0001 D434 fd00:0000:0000:0000:0000:0000:0000:0100 "
    "0050 fd00:0000:0000:0000:0000:0000:0000:0013 0050 SYN_RECV         57\n"
)
CFG = """
[[service]]
address = "10.0.0.100"
port = 80
scheduler = "rr"
  [[service.real_server]]
  address = "10.0.0.11"
  [[service.real_server]]
  address = "10.0.0.12"
  [[service.real_server]]
  address = "10.0.0.13"
"""


def test_parse_lines_of_both_families():
    v4 = parse_line(TABLE.splitlines()[1])
    assert v4 is not None
    assert (v4.protocol, v4.client, v4.cport, v4.vip, v4.vport, v4.dest, v4.dport, v4.state,
            v4.expires) == ("tcp", "10.0.0.1", 0xD431, "10.0.0.100", 80, "10.0.0.13", 80,
                            "SYN_RECV", 57)
    v6 = parse_line(TABLE.splitlines()[5])
    assert v6 is not None and (v6.client, v6.vip, v6.dest) == ("fd00::1", "fd00::100", "fd00::13")
    assert parse_line(HEADER) is None and parse_line("TCP zz") is None


def test_find_connections_keeps_only_the_asked_endpoints(tmp_path):
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/net/ip_vs_conn").write_text(TABLE)
    fs = HostFS(str(tmp_path))
    got = find_connections(fs, [("10.0.0.1", 0xD431), ("fd00::1", 0xD434)])
    assert got is not None
    assert sorted(got) == [("10.0.0.1", 0xD431), ("fd00::1", 0xD434)]
    assert [c.protocol for c in got[("10.0.0.1", 0xD431)]] == ["tcp", "udp"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert find_connections(HostFS(str(empty)), [("10.0.0.1", 1)]) is None


def _ex(port: int, err: int, text: str) -> Exchange:
    return Exchange(False, b"", text, f"10.0.0.1:{port}", 2.0, err)


def test_failed_exchanges_are_named_by_real_server_and_cause(tmp_path):
    (tmp_path / "proc/net").mkdir(parents=True)
    (tmp_path / "proc/net/ip_vs_conn").write_text(TABLE)
    svc = parse_config_text(CFG, "dr.toml").services[0]
    exs = [
        Exchange(True, b"server 10.0.0.11", "", "10.0.0.1:54323", 0.01),
        _ex(0xD431, errno.ETIMEDOUT, "no reply within 2 s"),  # -> 10.0.0.13
        _ex(0xD432, errno.ECONNREFUSED, "Connection refused"),  # -> 10.0.0.12
        _ex(0xD439, errno.ETIMEDOUT, "no reply within 2 s"),  # not in the table
    ]
    table = find_connections(HostFS(str(tmp_path)), [("10.0.0.1", p) for p in
                                                     (0xD431, 0xD432, 0xD439)])
    states = {"10.0.0.13": "REACHABLE", "10.0.0.12": "REACHABLE"}
    got = {u.address: u for u in unanswered(svc, exs, table, states.get)}
    assert set(got) == {"10.0.0.13", "10.0.0.12", ""}
    assert got["10.0.0.13"].failed == 1 and "10.0.0.100 is not on its lo" in got["10.0.0.13"].cause
    assert "nothing listens on 10.0.0.100:80" in got["10.0.0.12"].cause
    assert "a TCP reset" in got["10.0.0.12"].cause
    assert got[""].errors == ("no reply within 2 s",)
    assert "IPVS has no connection for them" in got[""].cause
    # a server the director cannot resolve: ARP, not the VIP
    lost = unanswered(svc, exs[:2], table, {"10.0.0.13": "FAILED"}.get)
    assert "no ARP answer from 10.0.0.13 (neighbour FAILED)" in lost[0].cause
    assert unanswered(svc, exs, None, states.get) == ()  # no table: nothing claimed
