"""IPVS totals from /proc/net/ip_vs_stats (present only when the ip_vs module is loaded).

Format of ip_vs_stats_show (net/netfilter/ipvs/ip_vs_ctl.c), all values hex:

       Total Incoming Outgoing         Incoming         Outgoing
       Conns  Packets  Packets            Bytes            Bytes
        1A2B     3C4D        0         11223344                0

     Conns/s   Pkts/s   Pkts/s          Bytes/s          Bytes/s
           3        5        0              2A0                0

The first value row holds the totals since load; the second the kernel's rate estimates,
which lbtune does not use (it computes its own rates from two samples).
"""

from __future__ import annotations

from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.model import IpvsStats

IPVS_STATS = "/proc/net/ip_vs_stats"


def parse_ip_vs_stats(text: str, source: str) -> IpvsStats:
    """Parse the totals row (the line after the `Total ... / Conns ...` header pair)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:1] != ["Total"]:
            continue
        if i + 2 >= len(lines) or lines[i + 1].split()[:1] != ["Conns"]:
            break
        values = lines[i + 2].split()
        if len(values) != 5:
            raise MalformedHostFile(source, f"totals row has {len(values)} values, expected 5")
        try:
            conns, inpkts, outpkts, inbytes, outbytes = (int(v, 16) for v in values)
        except ValueError:
            raise MalformedHostFile(source, "totals row is not hexadecimal") from None
        return IpvsStats(conns, inpkts, outpkts, inbytes, outbytes)
    raise MalformedHostFile(source, "no 'Total'/'Conns' header rows")


def read_ipvs_stats(fs: HostFS) -> Optional[IpvsStats]:
    """IPVS totals; None when IPVS is not loaded (no /proc/net/ip_vs_stats)."""
    text = fs.read(IPVS_STATS)
    return None if text is None else parse_ip_vs_stats(text, fs.path(IPVS_STATS))
