"""`ipvs selftest` reads the service's counters after the run once the kernel's estimator
(net/netfilter/ipvs/ip_vs_est.c) has folded the per-CPU counts in. On a loaded host it runs
late; the self-test then reads again until the count covers the answered exchanges or the
totals stood still for two periods. The same against a real IPVS: tests/lab/test_ipvs_lab.py
(the DR path)."""

from __future__ import annotations

from typing import Optional

from lbtune.host.ipvs.table import Service, ServiceKey, ServiceSettings
from lbtune.host.ipvs.wire import Counters
from lbtune.ipvs.selftest import ESTIMATOR_PERIOD_S, SETTLE_PERIODS, settled

KEY = ServiceKey(4, "tcp", "10.0.0.100", 80)


def svc(conns: int, inpkts: int = 0, cps: int = 0) -> Service:
    return Service(KEY, ServiceSettings("rr"), Counters(conns=conns, inpkts=inpkts, cps=cps))


class Reads:
    def __init__(self, *values: Optional[Service]) -> None:
        self.values = list(values)
        self.calls = 0
        self.slept: list[float] = []

    def read(self) -> Optional[Service]:
        self.calls += 1
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]

    def sleep(self, s: float) -> None:
        self.slept.append(s)


def test_counts_that_cover_the_run_are_read_once():
    r = Reads(svc(140))
    assert settled(r.read, svc(100), 40, r.sleep).counters.conns == 140
    assert r.calls == 1 and r.slept == []


def test_a_late_estimator_is_waited_for_until_the_count_covers_the_run():
    r = Reads(svc(135, 500), svc(140, 520))
    assert settled(r.read, svc(100), 40, r.sleep).counters.conns == 140
    assert r.calls == 2 and r.slept == [ESTIMATOR_PERIOD_S + 0.2]


def test_a_short_count_that_stands_still_for_two_periods_stands():
    # IPVS reused a connection (same client port, old entry in TIME_WAIT): one count for two
    # exchanges; the rates decay between reads, the totals do not move
    r = Reads(svc(139, 500, cps=20), svc(139, 500, cps=15), svc(139, 500, cps=10))
    assert settled(r.read, svc(100), 40, r.sleep).counters.conns == 139
    assert r.calls == 3


def test_an_estimator_late_by_more_than_a_period_is_still_waited_for():
    # an estimator more than a period late: two reads a period apart agree on 35 of 40,
    # and the rest is folded in after that
    r = Reads(svc(135, 500), svc(135, 500), svc(140, 520))
    assert settled(r.read, svc(100), 40, r.sleep).counters.conns == 140
    assert r.calls == 3


def test_the_wait_is_bounded():
    r = Reads(*(svc(100 + i, i) for i in range(1, 20)))
    after = settled(r.read, svc(100), 40, r.sleep)
    assert r.calls == 1 + SETTLE_PERIODS and len(r.slept) == SETTLE_PERIODS
    assert after.counters.conns == 100 + 1 + SETTLE_PERIODS


def test_an_unreadable_service_is_not_waited_for():
    r = Reads(None)
    assert settled(r.read, svc(100), 40, r.sleep) is None and r.slept == []
    r = Reads(svc(135), None)
    assert settled(r.read, svc(100), 40, r.sleep).counters.conns == 135
