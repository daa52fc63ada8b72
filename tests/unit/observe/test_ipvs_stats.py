"""/proc/net/ip_vs_stats (ip_vs_stats_show): the totals row, hex."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.ipvs_stats import parse_ip_vs_stats, read_ipvs_stats
from tests.conftest import DELL, HOSTS

# "%8LX %8LX %8LX %16LX %16LX" totals, then the estimator's rates.
TEXT = (
    "   Total Incoming Outgoing         Incoming         Outgoing\n"
    "   Conns  Packets  Packets            Bytes            Bytes\n"
    "     2A3      F1A      E0C            1F4D2            2CB81\n"
    "\n"
    " Conns/s   Pkts/s   Pkts/s          Bytes/s          Bytes/s\n"
    "       1        4        3              1C6              2B1\n"
)


def test_totals() -> None:
    s = parse_ip_vs_stats(TEXT, "ip_vs_stats")
    assert (s.conns, s.in_packets, s.out_packets) == (0x2A3, 0xF1A, 0xE0C)
    assert (s.in_bytes, s.out_bytes) == (0x1F4D2, 0x2CB81)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no 'Total'"),
        (TEXT.replace("   Conns  Packets", "   Foo  Packets"), "no 'Total'"),
        (TEXT.replace("     2A3 ", "     2A3 1 "), "6 values"),
        (TEXT.replace("F1A", "XYZ"), "not hexadecimal"),
    ],
)
def test_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem):
        parse_ip_vs_stats(text, "ip_vs_stats")


def test_read(tmp_path: pathlib.Path) -> None:
    assert read_ipvs_stats(HostFS(str(tmp_path))) is None  # ip_vs not loaded
    s = read_ipvs_stats(HostFS(str(HOSTS / DELL)))
    assert s is not None and s.conns == 98221453 and s.out_packets == 0  # DR: no replies
    assert s.in_packets > 2**32  # wider than the %8LX field
