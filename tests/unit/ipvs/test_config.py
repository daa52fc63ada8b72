"""The director config: what a valid document turns into, and one clear line per mistake."""

from __future__ import annotations

import pytest

from lbtune.errors import BadInput
from lbtune.host.ipvs.table import F_PERSISTENT, F_SCHED2, DestSettings, ServiceKey
from lbtune.ipvs.config import HostFacts, check_host, parse_config_text

FULL = """
[director]
prune = "vips"
drain_timeout = 20

[timeouts]
tcp = 900
tcpfin = 30
udp = 60

[sysctl]
conn_reuse_mode = 1
"net.ipv4.vs.expire_nodest_conn" = 1

[[vip]]
address = "10.0.0.100"
dev = "eth0"

[[vip]]
address = "2001:db8::100"
dev = "eth0"

[[service]]
address = "10.0.0.100"
port = 80
scheduler = "wrr"
persistence = 300
persistence_netmask = 24

  [[service.real_server]]
  address = "10.0.0.11"
  weight = 3
  upper = 1000
  lower = 800

  [[service.real_server]]
  address = "10.0.0.12"

[[service]]
protocol = "udp"
address = "10.0.0.100"
port = 53
scheduler = "sh"
flags = ["sh-port", "ops"]

  [[service.real_server]]
  address = "10.0.0.11"

[[service]]
protocol = "tcp"
address = "2001:db8::100"
port = 443
scheduler = "mh"
flags = ["mh-fallback"]

  [[service.real_server]]
  address = "2001:db8::11"

[[service]]
protocol = "fwmark"
fwmark = 7
family = "inet6"

  [[service.real_server]]
  address = "2001:db8::12"
"""


def parse(text: str):  # type: ignore[no-untyped-def]
    return parse_config_text(text, "dr.toml")


def test_full_config_parses_into_values():
    cfg = parse(FULL)
    assert cfg.prune == "vips" and cfg.drain_timeout == 20
    assert cfg.timeouts == (("tcp", 900), ("tcpfin", 30), ("udp", 60))
    assert cfg.sysctls == (("net.ipv4.vs.conn_reuse_mode", "1"),
                           ("net.ipv4.vs.expire_nodest_conn", "1"))
    assert [(v.address, v.dev, v.prefix) for v in cfg.vips] == [
        ("10.0.0.100", "eth0", 32), ("2001:db8::100", "eth0", 128)]
    web, dns, six, mark = cfg.services
    assert web.key == ServiceKey(4, "tcp", "10.0.0.100", 80)
    assert web.settings.flags == F_PERSISTENT and web.settings.timeout == 300
    assert web.settings.netmask == 24
    assert [s.key.ident for s in web.servers] == ["10.0.0.11:80", "10.0.0.12:80"]
    assert web.servers[0].settings == DestSettings(3, "dr", 1000, 800)
    assert web.servers[1].settings == DestSettings(1, "dr", 0, 0)
    assert dns.settings.flags == F_SCHED2 | 0x4 and dns.servers[0].port == 53
    assert six.key.ident == "tcp:[2001:db8::100]:443" and six.settings.netmask == 128
    assert mark.key.ident == "fwmark:7:inet6" and mark.servers[0].port == 0


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        # DR cannot remap ports
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nport = 8080', "DR cannot change the port"),
        ('[[service]]\nprotocol = "fwmark"\nfwmark = 1\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nport = 80', "DR cannot change the port"),
        # duplicates
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service]]\naddress = "10.0.0.01"\n'
         'port = 80', None),
        ('[[service]]\naddress = "2001:db8::1"\nport = 80\n[[service]]\n'
         'address = "2001:DB8:0::1"\nport = 80', "listed twice"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\n[[service.real_server]]\naddress = "10.0.0.2"', "listed twice"),
        ('[[vip]]\naddress = "10.0.0.1"\ndev = "eth0"\n[[vip]]\naddress = "10.0.0.1"\n'
         'dev = "eth1"', "listed twice"),
        # address families
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "2001:db8::2"', "IPv6 real server for an IPv4 service"),
        # schedulers and flags
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nscheduler = "fastest"',
         "not an IPVS scheduler"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nscheduler = "rr"\n'
         'flags = ["sh-port"]', "service flag 'sh-port' (scheduler rr)"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nflags = ["ops"]',
         "one-packet scheduling (ops) is for UDP"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nflags = ["persistent"]',
         "persistence = SECONDS"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\npersistence_netmask = 24',
         "needs persistence"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\npersistence = 60\n'
         'persistence_netmask = 33', "from 1 to 32"),
        # ranges
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nweight = 70000', "weight = 70000"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nweight = -1', "weight = -1"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nupper = 10\nlower = 20', "lower = 20 is above upper = 10"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service.real_server]]\n'
         'address = "10.0.0.2"\nlower = 5', "lower = 5 is above upper = 0"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 0', "port = 0"),
        ('[[service]]\naddress = "10.0.0.1"\nport = true', "port = True"),
        ("[timeouts]\ntcp = 0", "tcp = 0"),
        ("[director]\ndrain_timeout = 1e3", "drain_timeout = 1000.0"),
        # names, keys, types
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nwieght = 3', "unknown key 'wieght'"),
        ("[ipvs]\nx = 1", "unknown key 'ipvs'"),
        ('[[service]]\naddress = "vip.example"\nport = 80', "is not an IP address"),
        ('[[service]]\nprotocol = "icmp"\naddress = "10.0.0.1"\nport = 80', "protocol"),
        ('[[service]]\nprotocol = "fwmark"\nfwmark = 1\naddress = "10.0.0.1"',
         "selected by its mark alone"),
        ('[[service]]\naddress = "10.0.0.1"\nport = 80\nfwmark = 3', "are for protocol"),
        ('[[vip]]\naddress = "10.0.0.1"\ndev = "eth0/../x"', "not an interface name"),
        ('[sysctl]\n"net.ipv4.vs.../../x" = 1', "IPVS sysctl name"),
        ('[sysctl]\nconn_reuse_mode = "1; reboot"', "whole number"),
        ('[sysctl]\nconn_reuse_mode = 1\n"net.ipv4.vs.conn_reuse_mode" = 0', "set twice"),
        ("service = 3", "expected [[service]] tables"),
        ("[director]\nprune = \"some\"", "prune"),
        ('[[service]\naddress = "10.0.0.1"', "dr.toml:1: invalid TOML"),
    ],
)
def test_one_line_error_naming_the_entry(snippet, message):
    with pytest.raises(BadInput) as e:
        parse(snippet)
    text = str(e.value)
    assert "\n" not in text and text.startswith("dr.toml")
    assert message is None or message in text, text


def test_duplicate_names_both_places():
    with pytest.raises(BadInput, match=r"service tcp:10.0.0.1:80 is listed twice "
                       r"\(\[\[service\]\] #1 and \[\[service\]\] #2\)"):
        parse('[[service]]\naddress = "10.0.0.1"\nport = 80\n[[service]]\naddress = "10.0.0.1"\n'
              'port = 80')


FACTS = HostFacts(frozenset({"rr", "wrr", "wlc", "sh", "mh"}),
                  frozenset({"10.0.0.2", "10.0.0.100"}), frozenset({"lo", "eth0"}))


def test_host_checks_pass_for_placed_and_local_vips():
    local = parse('[[service]]\naddress = "10.0.0.100"\nport = 80')  # an address of the host
    placed = parse('[[vip]]\naddress = "2001:db8::100"\ndev = "eth0"\n'
                   '[[service]]\naddress = "2001:db8::100"\nport = 443')  # fmt: skip
    for cfg in (parse(FULL), local, placed):
        assert check_host(cfg, FACTS) is None  # accepted: nothing raised
    # Not vacuous: on a host without addresses the placed VIP still passes (the config puts
    # it there), the merely local one does not.
    bare = HostFacts(FACTS.schedulers, frozenset(), FACTS.interfaces)
    assert check_host(placed, bare) is None
    with pytest.raises(BadInput, match=r"VIP 10\.0\.0\.100 is not an address of this host"):
        check_host(local, bare)


def test_scheduler_the_kernel_lacks():
    cfg = parse('[[service]]\naddress = "10.0.0.100"\nport = 80\nscheduler = "lblcr"')
    with pytest.raises(BadInput, match=r"scheduler lblcr is not available in this kernel "
                       r"\(offered: mh, rr, sh, wlc, wrr\)"):
        check_host(cfg, FACTS)
    check_host(cfg, HostFacts(None, FACTS.local_addresses, FACTS.interfaces))  # cannot tell


def test_vip_not_local():
    cfg = parse('[[service]]\naddress = "10.0.0.200"\nport = 80')
    with pytest.raises(BadInput, match=r"VIP 10\.0\.0\.200 is not an address of this host"):
        check_host(cfg, FACTS)
    placed = parse('[[vip]]\naddress = "10.0.0.200"\ndev = "eth0"\n'
                   '[[service]]\naddress = "10.0.0.200"\nport = 80')
    check_host(placed, FACTS)


def test_vip_on_a_missing_interface():
    cfg = parse('[[vip]]\naddress = "10.0.0.200"\ndev = "bond9"')
    with pytest.raises(BadInput, match="interface bond9 does not exist"):
        check_host(cfg, FACTS)
