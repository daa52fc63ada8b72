"""`lbtune exporter` on a director with a real IPVS table (the lab kernel has IPVS): series
per virtual service by default (9 each), per real server only with --ipvs-real-servers, the
kernel's counters moved by real client packets, and `promtool check metrics` on both."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fleet.conftest import check_metrics, parse

pytestmark = pytest.mark.lab

TCP, UDP = "tcp:10.7.0.1:80", "udp:10.7.0.1:53"


@pytest.fixture(scope="module")
def lab() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        return run_in_lab("tests.lab.guest.exporter_ipvs:run", timeout=300).value  # type: ignore[no-any-return]
    except LabUnavailable as e:
        pytest.skip(str(e))


def test_per_virtual_service_by_default(lab):
    assert lab["apply"][0] == 0, lab["apply"][1]
    code, text, err = lab["default"]
    assert code == 0, err
    check_metrics(text)
    m = parse(text)
    up = {dict(k)["source"]: v for k, v in m["lbtune_source_up"].items()}
    assert up["ipvs_table"] == 1.0 and up["ipvs"] == 1.0
    conns = {dict(k)["service"]: v for k, v in m["lbtune_ipvs_service_connections_total"].items()}
    assert set(conns) == {TCP, UDP}
    assert conns[UDP] >= 1 and conns[TCP] >= 1  # the client's datagrams and SYNs
    pk = m["lbtune_ipvs_service_packets_total"]
    assert pk[frozenset({("service", UDP), ("direction", "in")})] >= 5
    servers = m["lbtune_ipvs_service_real_servers"]
    assert servers[frozenset({("service", TCP), ("state", "serving")})] == 1
    assert servers[frozenset({("service", TCP), ("state", "drained")})] == 1
    ipvs = [k for k in m if k.startswith("lbtune_ipvs_service_")]
    assert sum(len(m[k]) for k in ipvs) == 9 * 2
    assert not any(k.startswith("lbtune_ipvs_real_server") for k in m)


def test_per_real_server_only_when_asked(lab):
    code, text, err = lab["per_rs"]
    assert code == 0, err
    check_metrics(text)
    m = parse(text)
    weight = {(dict(k)["service"], dict(k)["real_server"]): v
              for k, v in m["lbtune_ipvs_real_server_weight"].items()}  # fmt: skip
    assert weight == {(TCP, "10.7.1.1:80"): 3, (TCP, "10.7.1.2:80"): 0, (UDP, "10.7.1.1:53"): 1}
    assert len(m["lbtune_ipvs_real_server_connections_total"]) == 3
