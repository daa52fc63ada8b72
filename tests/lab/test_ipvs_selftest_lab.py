"""`ipvs selftest` names the real server that did not answer, in the lab kernel's real IPVS.

One boot (tests/lab/guest/ipvs_selftest.py): a healthy run, then a real server without the
VIP on lo, one with nothing listening, and one that does not exist. Each failing run must
name that server (JSON `unanswered`, and the text) with the likely cause, and the name must
match where the kernel's own IPVS connection table says the failed connections went.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.lab

VIP = "10.0.0.100"
RS = {1: "10.0.0.11", 2: "10.0.0.12", 3: "10.0.0.13", 4: "10.0.0.14"}


@pytest.fixture(scope="module")
def lab() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.ipvs_selftest:run", timeout=600)
    except LabUnavailable as e:
        pytest.skip(str(e))
    return res.value  # type: ignore[no-any-return]


def _service(run: dict[str, Any]) -> dict[str, Any]:
    assert run["json"] is not None, run["stderr"]
    (svc,) = run["json"]["services"]
    return svc  # type: ignore[no-any-return]


def _syn_recv_dests(table: str) -> set[str]:
    """Real servers with half-open connections in the director's table (the failed ones:
    in DR the director never sees the server's answer, so a refused or unanswered SYN stays
    SYN_RECV there, and so do answered ones until their FIN: only unanswered ones matter)."""
    import ipaddress

    out = set()
    for line in table.splitlines()[1:]:
        f = line.split()
        if f[0] == "TCP" and f[7] == "SYN_RECV":
            out.add(str(ipaddress.IPv4Address(int(f[5], 16))))
    return out


def test_a_healthy_bed_passes_with_nothing_unanswered(lab):
    assert lab["apply"]["code"] == 0, lab["apply"]["stderr"]
    assert lab["rs_apply"] == [0, 0, 0]
    h = lab["healthy"]
    assert h["code"] == 0, h["stdout"]
    svc = _service(h)
    assert svc["level"] == "pass" and svc["ok"] == 6 and svc["unanswered"] == []


def test_a_real_server_without_the_vip_on_lo_is_named(lab):
    r = lab["no_vip"]
    assert r["code"] == 1
    svc = _service(r)
    assert svc["level"] == "fail"
    (u,) = svc["unanswered"]  # rr over three servers: one in three exchanges went to rs3
    assert u["address"] == RS[3] and u["failed"] == 2 == svc["attempts"] - svc["ok"]
    assert f"{VIP} is not on its lo" in u["cause"]
    assert u["errors"] == ["no reply within 1 s"]
    assert f"2 sent to {RS[3]}" in svc["reason"]
    assert f"real server {RS[3]}: 2 failed: no reply" in r["text"]
    assert set(dict(svc["distribution"])) == {RS[1], RS[2]}
    # the kernel's record agrees: the only half-open connections went to rs3
    assert _syn_recv_dests(r["conn_table"]) == {RS[3]}


def test_a_real_server_with_nothing_listening_is_named(lab):
    r = lab["no_listener"]
    assert lab["rs2_listening"].strip() == ""  # positive control: the server is really gone
    assert r["code"] == 1
    svc = _service(r)
    (u,) = svc["unanswered"]
    assert u["address"] == RS[2] and u["failed"] == 2 == svc["attempts"] - svc["ok"]
    assert u["errors"] == ["Connection refused"]
    assert f"refused (a TCP reset): {RS[2]} has the VIP but nothing listens on {VIP}:80" \
        in u["cause"]
    assert f"real server {RS[2]}: 2 failed: refused" in r["text"]
    assert set(dict(svc["distribution"])) == {RS[1], RS[3]}


def test_a_real_server_the_director_cannot_reach_is_named(lab):
    assert lab["gone_apply"]["code"] == 0, lab["gone_apply"]["stderr"]
    r = lab["gone"]
    assert r["code"] == 1
    svc = _service(r)
    (u,) = svc["unanswered"]  # rr over four servers, 8 exchanges: 2 or 3 went to 10.0.0.14
    assert u["address"] == RS[4] and u["failed"] == svc["attempts"] - svc["ok"] >= 2
    assert f"no ARP answer from {RS[4]}" in u["cause"]
    assert "FAILED" in lab["neigh"] or "INCOMPLETE" in lab["neigh"]
    assert set(dict(svc["distribution"])) == {RS[1], RS[2], RS[3]}


# -- issue 16 item 10: keepalived runs the export -----------------------------------------


def test_keepalived_applies_the_exported_timeouts_and_checks_udp_real_servers(lab):
    k = lab["keepalived"]
    assert k["export"]["code"] == 0 and k["export"]["stderr"] == "", k["export"]
    assert "lvs_timeouts tcp 600 tcpfin 40 udp 90" in k["export"]["stdout"]
    assert k["before"]["services"] == {}
    assert k["before"]["timeouts"] != {"tcp": 600, "tcpfin": 40, "udp": 90}
    last = k["seen"][-1]
    # keepalived set the kernel's timeouts from lvs_timeouts ...
    assert last["timeouts"] == {"tcp": 600, "tcpfin": 40, "udp": 90}, k["seen"]
    # ... and its UDP_CHECK took out rs2 (nothing listens on UDP 53) but kept rs1
    assert last["services"] == {f"udp:{VIP}:53": [f"{RS[1]}:53"]}, (k["seen"], k["log"])
    # positive control: it was the UDP check that failed rs2, and rs1's check ran and passed
    log = "\n".join(k["log"])
    assert f"UDP_CHECK on service [{RS[2]}]:udp:53 failed" in log, log
    assert f"UDP connection to [{RS[1]}]:udp:53 success" in log, log
