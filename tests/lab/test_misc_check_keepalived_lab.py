"""`lbtune ipvs agent --misc-check` through Debian's real keepalived (MISC_CHECK, misc_dynamic)
in the lab kernel, which has IPVS: the weight keepalived sets for each case.

keepalived's misc_dynamic reads exit 0 as "keep the weight", 1 as a failed check and 2..255
as weight + 2: every failure of the check (a hostile answer, a bad URL or option, an
internal error) must exit 1, so keepalived logs "failed (exited with status 1)" and, with
`inhibit_on_failure`, sets weight 0, never exit code - 2 (70 was weight 68). A drip-fed
answer is cut by the check's own deadline (status 1), not by keepalived's misc_timeout
("timed out"). The check runs inside `--netns`: the servers live in a namespace only
that flag reaches.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.hostile_http import GOOD_WEIGHT

pytestmark = pytest.mark.lab

FAILING = ("down", "bad_status", "http09", "huge_headers", "deep_json", "deep_json_small",
           "not_json", "drip_header", "drip_body", "control_char_url", "bad_ipv6_url",
           "timeout_inf", "timeout_1e300", "usage_error")  # fmt: skip


@pytest.fixture(scope="module")
def lab() -> dict[str, Any]:
    from lbtune.lab.guests.uml import LabUnavailable, run_in_lab

    try:
        return run_in_lab("tests.lab.guest.misc_check_keepalived:run",  # type: ignore[no-any-return]
                          timeout=900).value
    except LabUnavailable as e:
        pytest.skip(str(e))


def test_every_case_was_checked(lab):
    from tests.lab.guest.misc_check_keepalived import CASES

    assert set(lab["results"]) == set(CASES), lab["log"]


def test_a_good_agent_sets_its_weight_through_the_namespace(lab):
    assert lab["results"]["good"] == "succeeded.", lab["log"]
    assert lab["weights"]["good"] == GOOD_WEIGHT


def test_an_agent_that_cannot_read_keeps_the_configured_weight(lab):
    assert lab["results"]["unknown"] == "succeeded."
    assert lab["weights"]["unknown"] == lab["configured"]


@pytest.mark.parametrize("case", FAILING)
def test_every_failure_is_a_failed_check_at_weight_zero(lab, case):
    said = lab["results"][case]  # keepalived 2.2.7: "failed with retry disabled (exited ...)"
    assert said.startswith("failed") and said.endswith("(exited with status 1)."), (case, said)
    assert lab["weights"][case] == 0, (case, lab["weights"])
