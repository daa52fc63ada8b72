"""/proc/softirqs: columns are possible CPUs (named in the header), not positions."""

from __future__ import annotations

import os
import pathlib

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.softirqs import parse_softirqs, read_softirqs
from tests.conftest import DELL, HOSTS, TINY

# fs/proc/softirqs.c: 20 spaces, "CPU%-8d" per possible CPU, rows "%12s:" + " %10u".
TEXT = (
    "                    CPU0       CPU1       \n"
    "          HI:          0          0\n"
    "       TIMER:      72192     100743\n"
    "      NET_TX:        156        148\n"
    "      NET_RX:       5655       7195\n"
    "       BLOCK:          0    2011507\n"
    "    IRQ_POLL:          0          0\n"
    "     TASKLET:          2          1\n"
    "       SCHED:     197713     195691\n"
    "     HRTIMER:          0          0\n"
    "         RCU:     236325     536637\n"
)


def test_parse() -> None:
    s = parse_softirqs(TEXT, "softirqs")
    assert s.cpus == (0, 1)
    assert s.counts["NET_RX"] == {0: 5655, 1: 7195}
    assert s.counts["BLOCK"][1] == 2011507
    assert len(s.counts) == 10


def test_header_ids_not_positions() -> None:
    text = "                    CPU0       CPU4       \n      NET_RX:         10         20\n"
    assert parse_softirqs(text, "s").counts["NET_RX"] == {0: 10, 4: 20}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty file"),
        ("   cpu0 cpu1\n", "bad header"),
        ("  CPU0 CPU1\n NET_RX: 1\n", "expected 2 counts"),
        ("  CPU0 CPU1\n NET_RX: 1 x\n", "non-integer"),
        ("  CPU0 CPU1\n NET_RX 1 2\n", "expected 2 counts"),
    ],
)
def test_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem):
        parse_softirqs(text, "softirqs")


@pytest.mark.skipif(not os.path.exists("/proc/softirqs"), reason="no /proc/softirqs")
def test_this_machine() -> None:
    s = read_softirqs(HostFS("/"))
    assert s is not None and "NET_RX" in s.counts
    possible = HostFS("/").read_cpulist("/sys/devices/system/cpu/possible")
    assert possible is not None and set(s.cpus) == set(possible)


def test_fixtures(tmp_path: pathlib.Path) -> None:
    r750 = read_softirqs(HostFS(str(HOSTS / DELL)))
    assert r750 is not None and r750.cpus == tuple(range(48))
    net_rx = r750.counts["NET_RX"]
    top = max(net_rx, key=net_rx.__getitem__)
    assert top == 41 and net_rx[41] > 0.4 * sum(net_rx.values())
    tiny = read_softirqs(HostFS(str(HOSTS / TINY)))
    assert tiny is not None and tiny.cpus == (0, 1)  # offline CPU 1 keeps its column
    assert all(row[1] == 0 for row in tiny.counts.values())
    assert read_softirqs(HostFS(str(tmp_path))) is None
