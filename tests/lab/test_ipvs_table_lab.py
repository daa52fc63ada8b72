"""The IPVS table in the lab kernel: exports rebuild it exactly; fuzzed configs cannot hurt it.

One boot (tests/lab/guest/ipvs_table.py): a config using every feature is applied, exported,
the table flushed with ipvsadm and rebuilt with `ipvsadm -R` from the export; then
hypothesis feeds `lbtune ipvs apply` hostile documents against that table.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.lab

FUZZ_EXAMPLES = 80


@pytest.fixture(scope="module")
def lab() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        return run_in_lab("tests.lab.guest.ipvs_table:run", FUZZ_EXAMPLES,  # type: ignore[no-any-return]
                          timeout=900).value
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")


def test_export_reimported_with_ipvsadm_gives_the_same_table(lab):
    e = lab["export"]
    assert e["apply"] == ""
    applied, restored = e["applied"], e["restored"]
    assert e["flushed"]["services"] == []  # the restore really started from nothing
    assert e["restore"] == 0
    assert restored["services"] == applied["services"]  # every field lbtune reads
    assert restored["timeouts"] == applied["timeouts"] == {"tcp": 600, "tcpfin": 40, "udp": 90}
    assert restored["saved"] == applied["saved"]  # and what ipvsadm -S shows
    assert e["again"] == 0  # lbtune sees nothing to change in the rebuilt table


def test_the_export_carries_what_ipvsadm_save_leaves_out(lab):
    e = lab["export"]
    assert "-x 1000 -y 800" in e["export"]  # thresholds
    assert "-x 1000" not in e["applied"]["saved"]  # ipvsadm -S drops them
    assert e["export"].startswith("--set 600 40 90\n")
    by_service = {s["service"]: s for s in e["applied"]["services"]}
    assert by_service["tcp:10.7.0.1:80"]["real_servers"][0]["upper"] == 1000
    assert by_service["udp:10.7.0.1:53"]["flags"] == ["ops", "sh-fallback", "sh-port"]
    assert by_service["tcp:[2001:db8::1]:443"]["netmask"] == 64
    assert by_service["fwmark:8:inet6"]["real_servers"][0]["address"] == "[2001:db8::12]:0"


def test_export_of_the_kernel_table_matches_the_config_export(lab):
    e = lab["export"]
    assert sorted(e["export_kernel"].splitlines()) == sorted(e["export"].splitlines())


def test_fuzzed_configs_never_crash_and_never_change_the_kernel(lab):
    f = lab["fuzz"]
    assert f["n_problems"] == 0, f["problems"]
    assert sum(f["exit_codes"].values()) == FUZZ_EXAMPLES
    assert f["exit_codes"].get("2", 0) > FUZZ_EXAMPLES // 2  # most documents are refused
    assert f["unchanged"] == {"services": True, "timeouts": True, "saved": True}
