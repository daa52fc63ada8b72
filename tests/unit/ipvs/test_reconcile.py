"""Reconcile on plain data: a config against a given kernel table gives the minimal plan.

The table is handed to the IPVS session (`Ipvs.assume`) instead of being read from a
kernel, so these run anywhere; the lab tier runs the same plans against real IPVS.
"""

from __future__ import annotations

from typing import Any

import pytest

from lbtune.host.host import Host
from lbtune.host.ipvs.table import (
    Destination,
    DestKey,
    DestSettings,
    Service,
    ServiceKey,
    ServiceSettings,
    ipvs_of,
)
from lbtune.ipvs.config import HostFacts, parse_config_text
from lbtune.ipvs.reconcile import plan_director, teardown_targets
from tests.conftest import HOSTS, TINY

VIP = "10.0.0.100"
FACTS = HostFacts(None, frozenset({VIP}), frozenset({"lo", "eth0"}))
SVC = ServiceKey.of("tcp", VIP, 80)


def cfg_text(
    servers: dict[str, int], sched: str = "wrr", prune: str = "all", extra: str = ""
) -> str:
    out = [f'[director]\nprune = "{prune}"\n',
           f'[[service]]\naddress = "{VIP}"\nport = 80\nscheduler = "{sched}"\n']
    for addr, w in servers.items():
        out.append(f'[[service.real_server]]\naddress = "{addr}"\nweight = {w}\n')
    return "\n".join(out) + extra


def table(servers: dict[str, int], sched: str = "wrr", active: int = 0,
          extra: tuple[Service, ...] = ()) -> list[Service]:
    dests = tuple(Destination(DestKey.of(a, 80), DestSettings(w), active=active)
                  for a, w in servers.items())
    return [Service(SVC, ServiceSettings(sched), destinations=dests), *extra]


def plan_ops(cfg: str, kernel: list[Service], **kw: Any) -> list[tuple[str, str, Any, str]]:
    host = Host.open(str(HOSTS / TINY))
    ipvs_of(host).assume(kernel)
    planned = plan_director(host, parse_config_text(cfg, "t.toml"), FACTS, **kw)
    return [(c.knob.kind, c.knob.obj, c.current, c.desired) for c in planned.plan.to_apply]


def test_empty_table_adds_service_then_real_servers():
    ops = plan_ops(cfg_text({"10.0.0.11": 1, "10.0.0.12": 3}), [])
    assert ops == [
        ("ipvs_service", f"tcp:{VIP}:80", "absent", "sched=wrr netmask=32"),
        ("ipvs_dest", f"tcp:{VIP}:80/10.0.0.11:80", "absent", "weight=1 fwd=dr"),
        ("ipvs_dest", f"tcp:{VIP}:80/10.0.0.12:80", "absent", "weight=3 fwd=dr"),
    ]


def test_table_as_configured_needs_nothing():
    servers = {"10.0.0.11": 1, "10.0.0.12": 3}
    assert plan_ops(cfg_text(servers), table(servers)) == []


def test_weight_change_is_one_edit_in_place():
    ops = plan_ops(cfg_text({"10.0.0.11": 1, "10.0.0.12": 5}),
                   table({"10.0.0.11": 1, "10.0.0.12": 3}))
    assert ops == [("ipvs_dest", f"tcp:{VIP}:80/10.0.0.12:80", "weight=3 fwd=dr",
                    "weight=5 fwd=dr")]


def test_scheduler_change_edits_the_service_keeping_its_real_servers():
    servers = {"10.0.0.11": 1}
    ops = plan_ops(cfg_text(servers, sched="wlc"), table(servers, sched="wrr"))
    assert ops == [("ipvs_service", f"tcp:{VIP}:80", "sched=wrr netmask=32",
                    "sched=wlc netmask=32")]


def test_thresholds_are_part_of_the_complete_destination():
    cfg = cfg_text({}) + '[[service.real_server]]\naddress = "10.0.0.11"\nupper = 100\nlower = 50\n'
    ops = plan_ops(cfg, table({"10.0.0.11": 1}))
    assert ops == [("ipvs_dest", f"tcp:{VIP}:80/10.0.0.11:80", "weight=1 fwd=dr",
                    "weight=1 fwd=dr upper=100 lower=50")]


def test_removed_real_server_is_drained_then_deleted_after_the_rest():
    ops = plan_ops(cfg_text({"10.0.0.11": 1, "10.0.0.13": 1}),
                   table({"10.0.0.11": 1, "10.0.0.12": 1}, active=4))
    assert ops == [
        ("ipvs_drain", f"tcp:{VIP}:80/10.0.0.12:80", "1", "0"),
        ("ipvs_dest", f"tcp:{VIP}:80/10.0.0.13:80", "absent", "weight=1 fwd=dr"),
        ("ipvs_dest", f"tcp:{VIP}:80/10.0.0.12:80", "weight=1 fwd=dr", "absent"),
    ]


def test_removal_without_expire_nodest_conn_warns():
    host = Host.open(str(HOSTS / TINY))
    ipvs_of(host).assume(table({"10.0.0.11": 1, "10.0.0.12": 1}))
    cfg = parse_config_text(cfg_text({"10.0.0.11": 1}), "t.toml")
    assert any("expire_nodest_conn" in w for w in plan_director(host, cfg, FACTS).warnings)
    nodest = "[sysctl]\nexpire_nodest_conn = 1\n"
    fixed = parse_config_text(cfg_text({"10.0.0.11": 1}, extra=nodest), "t.toml")
    assert plan_director(host, fixed, FACTS).warnings == ()


OTHER = Service(ServiceKey.of("udp", "192.0.2.1", 53), ServiceSettings("rr"),
                destinations=(Destination(DestKey.of("192.0.2.11", 53), DestSettings(1)),))
MARK = Service(ServiceKey.mark(9), ServiceSettings("rr"))
SAME_VIP = Service(ServiceKey.of("tcp", VIP, 443), ServiceSettings("rr"))


@pytest.mark.parametrize(
    ("prune", "removed"),
    [
        ("all", {"udp:192.0.2.1:53", "fwmark:9", f"tcp:{VIP}:443"}),
        ("vips", {f"tcp:{VIP}:443"}),  # only services on the config's own VIPs
        ("none", set()),
    ],
)
def test_prune_policy_decides_which_foreign_services_go(prune, removed):
    servers = {"10.0.0.11": 1}
    ops = plan_ops(cfg_text(servers, prune=prune), table(servers, extra=(OTHER, MARK, SAME_VIP)))
    gone = {obj for kind, obj, _cur, want in ops if kind == "ipvs_service" and want == "absent"}
    assert gone == removed
    if "udp:192.0.2.1:53" in removed:  # its real servers are drained and deleted first
        kinds = [(k, o) for k, o, _c, _w in ops if o.startswith("udp:")]
        assert kinds == [("ipvs_drain", "udp:192.0.2.1:53/192.0.2.11:53"),
                         ("ipvs_dest", "udp:192.0.2.1:53/192.0.2.11:53"),
                         ("ipvs_service", "udp:192.0.2.1:53")]


def test_teardown_removes_only_the_configs_services():
    servers = {"10.0.0.11": 1}
    ops = plan_ops(cfg_text(servers), table(servers, extra=(OTHER,)),
                   targets_of=teardown_targets)
    assert [(k, o) for k, o, _c, _w in ops] == [
        ("ipvs_drain", f"tcp:{VIP}:80/10.0.0.11:80"),
        ("ipvs_dest", f"tcp:{VIP}:80/10.0.0.11:80"),
        ("ipvs_service", f"tcp:{VIP}:80"),
    ]


def test_ipv6_and_fwmark_services_carry_their_netmask():
    cfg = ('[[service]]\naddress = "2001:db8::1"\nport = 80\nscheduler = "rr"\npersistence = 60\n'
           'persistence_netmask = 64\n[[service]]\nprotocol = "fwmark"\nfwmark = 5\n'
           'family = "inet6"\nscheduler = "rr"\n')
    host = Host.open(str(HOSTS / TINY))
    ipvs_of(host).assume([])
    facts = HostFacts(None, frozenset({"2001:db8::1"}), frozenset({"lo"}))
    plan = plan_director(host, parse_config_text(cfg, "t.toml"), facts).plan
    assert [(c.knob.obj, c.desired) for c in plan.to_apply] == [
        ("tcp:[2001:db8::1]:80", "sched=rr flags=persistent timeout=60 netmask=64"),
        ("fwmark:5:inet6", "sched=rr netmask=128"),
    ]
