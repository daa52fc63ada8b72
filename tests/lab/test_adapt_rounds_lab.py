"""`adapt`'s poll round against real IPVS, its netlink requests counted
(tests/lab/guest/adapt_rounds.py): one table read per round; a round that changes nothing
sends nothing and takes no lock."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def rounds(lab_kernel: Any) -> dict[str, Any]:
    """(lab_kernel: without the lab kernel the tier is skipped, which fails under CI.)"""
    from lbtune.lab.guests.uml import run_in_lab

    res = run_in_lab("tests.lab.guest.adapt_rounds:run", 3, 3, 3, timeout=600)
    return res.value  # type: ignore[no-any-return]


def test_a_round_that_changes_a_weight_reads_the_table_once(rounds):
    first = rounds["rounds"][0]
    assert first["weights"] == [0]  # the server whose agent says down
    assert rounds["kernel_weight_of_down"] == 0
    assert first["table_reads"] == 1
    assert first["changes"] == 1 and first["change_batches"] == 1
    # under the lock only the edited service is read again, and read back once
    assert first["service_reads"] == 2
    assert first["locks"] == 1


def test_a_round_that_changes_nothing_writes_nothing(rounds):
    for later in rounds["rounds"][1:]:
        assert later["weights"] == []
        assert later["table_reads"] == 1
        assert later["changes"] == 0 and later["change_batches"] == 0
        assert later["service_reads"] == 0
        assert later["locks"] == 0
