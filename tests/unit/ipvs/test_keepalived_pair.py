"""`ipvs export --format keepalived --peer`: one director's whole keepalived.conf of a pair."""

from __future__ import annotations

import pytest

from lbtune.errors import BadInput
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.keepalived import PairSettings, both_directors, pair_config
from tests.conftest import run_cli
from tests.unit.ipvs.test_config import FULL

LAB = """
[[service]]
address = "10.77.0.100"
port = 80
scheduler = "rr"

  [[service.real_server]]
  address = "10.77.0.11"

  [[service.real_server]]
  address = "10.77.0.12"
"""


def _services(text: str = LAB):  # type: ignore[no-untyped-def]
    return parse_config_text(text, "dr.toml").services


def _block(lines: list[str], head: str) -> list[str]:
    """The lines of the `head {` block, up to its closing brace."""
    start = lines.index(head + " {")
    end = lines.index("}", start)
    return [line.strip() for line in lines[start + 1:end]]


def test_master_gets_the_instance_the_vip_the_sync_daemon_and_the_virtual_servers():
    pair = PairSettings(peer="10.77.0.3", interface="eth0", src="10.77.0.2")
    lines = pair_config(_services(), pair, 80)
    inst = _block(lines, "vrrp_instance lbtune_51")
    assert "state BACKUP" in inst  # both start as backup; priority elects
    assert "priority 150" in inst and "virtual_router_id 51" in inst
    assert "advert_int 1" in inst and "version 3" not in inst  # whole seconds: VRRPv2
    assert "unicast_src_ip 10.77.0.2" in inst
    assert inst[inst.index("unicast_peer {") + 1] == "10.77.0.3"
    assert inst[inst.index("virtual_ipaddress {") + 1] == "10.77.0.100/32 dev eth0"
    assert "lvs_sync_daemon eth0 lbtune_51 id 51" in _block(lines, "global_defs")
    text = "\n".join(lines)
    assert text.count("virtual_server 10.77.0.100 80 {") == 1
    assert text.count("real_server ") == 2 and "lvs_method DR" in text


def test_sub_second_adverts_switch_to_vrrpv3_and_shorten_the_takeover():
    slow = PairSettings(peer="10.77.0.3", interface="eth0", role="backup")
    fast = PairSettings(peer="10.77.0.3", interface="eth0", role="backup", advert_int=0.1)
    assert fast.version == 3 and slow.version == 2
    inst = _block(pair_config(_services(), fast), "vrrp_instance lbtune_51")
    assert "version 3" in inst and "advert_int 0.1" in inst and "priority 100" in inst
    # RFC 5798: 3 x advert + (256 - prio) / 256 x advert
    assert slow.master_down_interval() == pytest.approx(3 + 156 / 256)
    assert fast.master_down_interval() == pytest.approx(0.3 + 15.6 / 256)


def test_no_sync_leaves_out_the_daemon_and_preempt_delay_is_written():
    pair = PairSettings(peer="10.77.0.3", interface="eth1", sync=False, preempt_delay=2.5)
    lines = pair_config(_services(), pair)
    assert not any("lvs_sync_daemon" in line for line in lines)
    assert "preempt_delay 2.5" in _block(lines, "vrrp_instance lbtune_51")


def test_vips_of_the_other_family_are_excluded_and_fwmark_needs_an_explicit_vip():
    lines = pair_config(_services(FULL), PairSettings(peer="10.0.0.3", interface="eth0"))
    inst = _block(lines, "vrrp_instance lbtune_51")
    v4 = inst.index("virtual_ipaddress {")
    assert inst[v4 + 1] == "10.0.0.100/32 dev eth0" and inst[v4 + 2] == "}"
    v6 = inst.index("virtual_ipaddress_excluded {")
    assert inst[v6 + 1] == "2001:db8::100/128 dev eth0"
    fwmark_only = [s for s in _services(FULL) if s.key.protocol == "fwmark"]
    with pytest.raises(BadInput, match="--vip"):
        pair_config(fwmark_only, PairSettings(peer="10.0.0.3", interface="eth0"))
    lines = pair_config(fwmark_only, PairSettings(peer="2001:db8::3", interface="eth0",
                                                  vips=("2001:db8::100/64",)))
    assert "2001:db8::100/64 dev eth0" in _block(lines, "vrrp_instance lbtune_51")
    assert "version 3" in _block(lines, "vrrp_instance lbtune_51")  # IPv6: VRRPv3 only


def test_pair_prints_both_directors_with_swapped_addresses():
    pair = PairSettings(peer="10.77.0.3", interface="eth0", src="10.77.0.2")
    both = both_directors(_services(), pair)
    m = _block(both["master"], "vrrp_instance lbtune_51")
    b = _block(both["backup"], "vrrp_instance lbtune_51")
    assert "priority 150" in m and "priority 100" in b
    assert "unicast_src_ip 10.77.0.2" in m and "unicast_src_ip 10.77.0.3" in b
    assert m[m.index("unicast_peer {") + 1] == "10.77.0.3"
    assert b[b.index("unicast_peer {") + 1] == "10.77.0.2"


@pytest.mark.parametrize(("kw", "match"), [
    ({"peer": "dir2"}, "--peer"),
    ({"priority": 255}, "--priority"),
    ({"vrid": 0}, "--vrid"),
    ({"advert_int": 0.005}, "--advert-int"),
    ({"advert_int": 0.125}, "centiseconds"),
    ({"advert_int": 50.5}, "40.95"),
    ({"interface": "eth0 {"}, "--interface"),
    ({"interface": "eth0;reboot"}, "--interface"),  # issue 20 item 9: config injection
    ({"interface": "eth0\n}\nglobal_defs {"}, "--interface"),
    ({"interface": "averyverylongname"}, "--interface"),  # 17 > IFNAMSIZ - 1
    ({"interface": "a/b"}, "--interface"),
    ({"interface": ".."}, "--interface"),
    ({"peer": "fe80::1%x\n}"}, "--peer"),  # ipaddress takes any IPv6 scope text
    ({"src": "fe80::1%eth0;x", "peer": "fe80::2"}, "--src"),
    ({"vips": ("fe80::1%x}/64",)}, "--vip"),
    ({"vips": ("10.0.0.1/24 dev eth9",)}, "--vip"),
    ({"router_id": "r1\n}"}, "router_id"),
    ({"src": "2001:db8::1"}, "family"),
    ({"vips": ("10.0.0.300",)}, "--vip"),
])
def test_bad_pair_settings_are_refused(kw, match):
    args = {"peer": "10.77.0.3", "interface": "eth0", **kw}
    with pytest.raises(BadInput, match=match):
        PairSettings(**args)


def test_cli_pair_export_json_and_option_errors(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(LAB)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--src", "10.77.0.2", "--advert-int", "0.1", "--pair", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json["pair"]["vrrp_version"] == 3 and r.json["pair"]["sync"] is True
    assert set(r.json["configs"]) == {"master", "backup"}
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--role", "backup")
    assert r.exit_code == 2 and "--role needs --format keepalived --peer" in r.stderr
    r = run_cli("ipvs", "export", str(cfg), "--peer", "10.77.0.3")
    assert r.exit_code == 2 and "--format keepalived" in r.stderr
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--pair")
    assert r.exit_code == 2 and "--pair needs --src" in r.stderr
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--src", "10.77.0.2", "--pair", "--priority", "200")
    assert r.exit_code == 2 and "no --role/--priority" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("iface", ["eth0;reboot", "eth0\n}", "averyverylongname", "a/b", "-x"])
def test_cli_refuses_an_interface_name_keepalived_conf_would_carry(tmp_path, iface):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(LAB)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--interface", iface)
    assert r.exit_code == 2 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "is not an interface name" in r.stderr


def test_pair_export_carries_the_timeouts_in_global_defs():
    from lbtune.host.ipvs.table import Timeouts

    lines = pair_config(_services(), PairSettings(peer="10.77.0.3", interface="eth0"),
                        timeouts=Timeouts(900, 0, 60))
    assert _block(lines, "global_defs") == ["router_id lbtune-master",
                                            "lvs_sync_daemon eth0 lbtune_51 id 51",
                                            "lvs_timeouts tcp 900 udp 60"]
