"""Every protocol counter the monitor's drop table sums is a key the parsers produce from a
real /proc/net/{snmp,netstat,snmp6} (the table once asked for `Udp6.Udp6NoPorts`, which
never exists, so IPv6 UDP drops were never counted)."""

from __future__ import annotations

from lbtune.observe.procnet import parse_snmp, parse_snmp6
from lbtune.tui.frame import CAUSES, _Snmp
from tests.conftest import AWS, HOSTS


def test_every_snmp_key_of_the_drop_table_exists_in_a_real_host():
    net = HOSTS / AWS / "proc" / "net"
    keys = {
        **parse_snmp((net / "snmp").read_text(), "snmp"),
        **parse_snmp((net / "netstat").read_text(), "netstat"),
        **parse_snmp6((net / "snmp6").read_text(), "snmp6"),
    }
    wanted = [k for _, _, count in CAUSES if isinstance(count, _Snmp) for k in count.keys]
    assert "Udp6.NoPorts" in wanted and "Udp6.RcvbufErrors" in wanted
    assert [k for k in wanted if k not in keys] == []
