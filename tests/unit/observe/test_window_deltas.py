"""A NIC's counters over a window (`window._deltas`) are `counter_delta` of each, whatever
the two samples hold: the same counters (the fast path), a counter that went down (reset),
one not read (None) in either sample, one new or gone, and the same ones in another order."""

from __future__ import annotations

import pytest

from lbtune.observe.window import _deltas, counter_delta


@pytest.mark.parametrize(
    "before, after",
    [
        ({"rx_packets": 5, "rx_dropped": 1}, {"rx_packets": 9, "rx_dropped": 1}),
        ({"rx_packets": 5, "rx_dropped": 7}, {"rx_packets": 9, "rx_dropped": 2}),  # reset
        ({"rx_packets": 5, "rx_dropped": None}, {"rx_packets": 9, "rx_dropped": 4}),
        ({"rx_packets": 5, "rx_dropped": 3}, {"rx_packets": 9, "rx_dropped": None}),
        ({"rx_packets": 5}, {"rx_packets": 9, "rx_dropped": 4}),  # a counter appeared
        ({"rx_packets": 5, "rx_dropped": 3}, {"rx_packets": 9}),  # one went
        ({"rx_dropped": 3, "rx_packets": 5}, {"rx_packets": 9, "rx_dropped": 4}),  # order
        ({}, {}),
    ],
)
def test_a_nics_counters_over_a_window(before, after):
    expected = {k: counter_delta(before.get(k), v) for k, v in after.items()}
    got = _deltas(after, before)
    assert got == expected and list(got) == list(after)
