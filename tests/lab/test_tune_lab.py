"""Host-global sysctls and systemd-less persistence files, applied and rolled back in the lab."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab


def test_lb_proxy_global_sysctls_round_trip_in_lab():
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        res = run_in_lab("tests.lab.guest.tune_round_trip:run", "lb-proxy", timeout=180)
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    v = res.value
    assert v["apply"][0] == 0, v["apply"][1] + res.console[-2000:]
    assert v["changed"] > 0
    # global knobs really changed in the (guest) kernel
    assert v["during"]["vm/swappiness"].strip() == "10"
    assert int(v["during"]["fs/file-max"]) >= 2097152
    assert v["during"]["net/ipv4/ip_local_port_range"].split() == ["10000", "65535"]
    assert "vm.swappiness = 10" in v["conf"]
    assert v["verify"] == 0
    assert [j["state"] for j in v["history"]["journals"]] == ["applied"]
    assert v["rollback"][0] == 0, v["rollback"][1]
    # byte-identical originals, and the persistence file this apply created is gone again
    assert v["after"] == v["before"]
    assert v["conf_after"] is False
