"""Services already in place get no plan rows (apply, and plan without -v), yet the changes
are exactly those of the full plan: every kind of drift on a table of several services."""

from __future__ import annotations

from dataclasses import replace

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
from lbtune.ipvs.reconcile import in_place, plan_director
from tests.conftest import HOSTS, TINY

VIP = "10.0.0.100"
FACTS = HostFacts(None, frozenset({VIP}), frozenset({"lo"}))
PORTS = (80, 81, 82)
REALS = {"10.0.0.11": 1, "10.0.0.12": 3}
CONFIG = "".join(
    f'[[service]]\naddress = "{VIP}"\nport = {p}\nscheduler = "wrr"\n'
    + "".join(f'[[service.real_server]]\naddress = "{a}"\nweight = {w}\n'
              for a, w in REALS.items())
    for p in PORTS
)  # fmt: skip


def kernel() -> list[Service]:
    return [
        Service(ServiceKey.of("tcp", VIP, p), ServiceSettings("wrr"),
                destinations=tuple(Destination(DestKey.of(a, p), DestSettings(w))
                                   for a, w in REALS.items()))
        for p in PORTS
    ]  # fmt: skip


def _svc(table: list[Service], port: int) -> int:
    return next(i for i, s in enumerate(table) if s.key.port == port)


def weight_drift(t: list[Service]) -> None:
    i = _svc(t, 81)
    d = t[i].destinations
    t[i] = replace(t[i], destinations=(replace(d[0], settings=DestSettings(9)), d[1]))


def threshold_drift(t: list[Service]) -> None:
    i = _svc(t, 80)
    d = t[i].destinations
    t[i] = replace(t[i], destinations=(d[0], replace(d[1], settings=DestSettings(3, "dr", 9))))


def extra_real_server(t: list[Service]) -> None:
    i = _svc(t, 82)
    t[i] = replace(t[i], destinations=(*t[i].destinations,
                                       Destination(DestKey.of("10.0.0.13", 82), DestSettings())))


def missing_real_server(t: list[Service]) -> None:
    i = _svc(t, 80)
    t[i] = replace(t[i], destinations=t[i].destinations[:1])


def scheduler_drift(t: list[Service]) -> None:
    i = _svc(t, 82)
    t[i] = replace(t[i], settings=ServiceSettings("rr"))


def missing_service(t: list[Service]) -> None:
    del t[_svc(t, 81)]


def extra_service(t: list[Service]) -> None:
    t.append(Service(ServiceKey.of("tcp", VIP, 99), ServiceSettings("rr")))


def nothing(t: list[Service]) -> None:
    pass


@pytest.mark.parametrize("drift", [nothing, weight_drift, threshold_drift, extra_real_server,
                                   missing_real_server, scheduler_drift, missing_service,
                                   extra_service])  # fmt: skip
def test_same_changes_with_and_without_rows_for_services_in_place(drift):
    cfg = parse_config_text(CONFIG, "t.toml")
    table = kernel()
    drift(table)
    host = Host.open(str(HOSTS / TINY))
    plans = {}
    for every_row in (True, False):
        ipvs_of(host).assume(table)
        plans[every_row] = plan_director(host, cfg, FACTS, every_row=every_row)
    full, short = plans[True], plans[False]

    def ops(p):
        return [(c.knob.kind, c.knob.obj, c.current, c.desired) for c in p.plan.to_apply]

    assert ops(short) == ops(full)
    ok = sum(1 for c in full.plan.changes if c.action.value == "ok")
    ok_short = sum(1 for c in short.plan.changes if c.action.value == "ok")
    assert full.in_place == 0
    assert ok_short + short.in_place == ok  # every object accounted for, once
    as_configured = [s for s in table if s in kernel()]  # a service and its 2 real servers
    assert short.in_place == 3 * len(as_configured)
    if drift is nothing:
        assert short.plan.changes == () and short.in_place == 9


def test_in_place_compares_settings_not_text():
    cfg = parse_config_text(CONFIG, "t.toml")
    table = {s.key: s for s in kernel()}
    assert in_place(cfg, table) == frozenset(table)
    k = ServiceKey.of("tcp", VIP, 80)
    table[k] = replace(table[k], settings=ServiceSettings("wrr", netmask=24))
    assert in_place(cfg, table) == frozenset(table) - {k}
