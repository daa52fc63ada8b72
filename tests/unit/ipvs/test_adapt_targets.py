"""adapt's weight planner: each real server is its own (address AND port), so restoring
the configured weights of two real servers on one address gives each its own weight."""

from __future__ import annotations

from lbtune.host.ipvs.table import (
    Destination,
    DestKey,
    DestSettings,
    Service,
    ServiceKey,
    ServiceSettings,
)
from lbtune.ipvs.adapt import server_name, server_names, weight_targets
from lbtune.ipvs.config import parse_config_text
from lbtune.tune.knobs.ipvs import Drain

SHARED = """
[[service]]
address = "10.0.0.1"
port = 80
scheduler = "wrr"
forward = "masq"
  [[service.real_server]]
  address = "10.0.0.11"
  port = 8080
  weight = 1
  [[service.real_server]]
  address = "10.0.0.11"
  port = 8081
  weight = 5
  [[service.real_server]]
  address = "10.0.0.12"
  port = 8080
  weight = 3
"""


def _table(weights: dict[tuple[str, int], int]) -> dict[ServiceKey, Service]:
    key = ServiceKey.of("tcp", "10.0.0.1", 80)
    dests = tuple(Destination(DestKey.of(a, p), DestSettings(w, "masq"))
                  for (a, p), w in weights.items())  # fmt: skip
    return {key: Service(key, ServiceSettings("wrr"), destinations=dests)}


def test_real_servers_sharing_an_address_keep_their_own_weights():
    cfg = parse_config_text(SHARED, "shared")
    (svc,) = cfg.services
    names = [server_name(svc, rs) for rs in svc.servers]
    assert names == ["10.0.0.11:8080", "10.0.0.11:8081", "10.0.0.12"]
    want = {(svc.key, server_name(svc, rs)): (rs.weight, "configured") for rs in svc.servers}
    table = _table({("10.0.0.11", 8080): 40, ("10.0.0.11", 8081): 40, ("10.0.0.12", 8080): 40})
    targets = weight_targets(want)(cfg, table, Drain(0))
    assert sorted((t.knob.obj, t.value) for t in targets) == [
        ("tcp:10.0.0.1:80/10.0.0.11:8080", "1"),
        ("tcp:10.0.0.1:80/10.0.0.11:8081", "5"),
        ("tcp:10.0.0.1:80/10.0.0.12:8080", "3"),
    ]


def test_server_names_in_one_pass_name_each_server_as_server_name_does():
    cfg = parse_config_text(SHARED, "shared")
    (svc,) = cfg.services
    assert server_names(svc) == {server_name(svc, rs): rs for rs in svc.servers}
    assert list(server_names(svc)) == ["10.0.0.11:8080", "10.0.0.11:8081", "10.0.0.12"]
