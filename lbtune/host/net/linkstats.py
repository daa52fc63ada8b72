"""Interface counters of every link in one rtnetlink dump (RTM_GETLINK, IFLA_STATS64).

`/sys/class/net/DEV/statistics` holds one file per counter, 24 of them: opening each of them
for every interface on every monitor tick was the largest part of its sampling. The kernel
fills those files and the IFLA_STATS64 attribute of a link message from the same
`dev_get_stats()`, so one dump gives the same values, by the same names, for every link of
this network namespace. Host trees (fixtures, captures) keep reading the files.
Layouts are from include/uapi/linux/rtnetlink.h (struct ifinfomsg) and
include/uapi/linux/if_link.h (IFLA_*, struct rtnl_link_stats64).
"""

from __future__ import annotations

import struct
from typing import Optional

from lbtune.host.net import netlink

RTM_NEWLINK = 16
RTM_GETLINK = 18
IFLA_IFNAME = 3
IFLA_STATS64 = 23

# struct ifinfomsg { unsigned char ifi_family, __ifi_pad; unsigned short ifi_type;
#                    int ifi_index; unsigned ifi_flags, ifi_change; }
_IFINFOMSG = struct.Struct("=BxHiII")

# struct rtnl_link_stats64, in order. The kernel appends fields over the years (the last one,
# rx_otherhost_dropped, in 5.19); sysfs has a file for each of the first 24 only, and those
# are the names kept, so a sample reads the same either way.
STATS64_FIELDS = (
    "rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_errors", "tx_errors",
    "rx_dropped", "tx_dropped", "multicast", "collisions", "rx_length_errors",
    "rx_over_errors", "rx_crc_errors", "rx_frame_errors", "rx_fifo_errors",
    "rx_missed_errors", "tx_aborted_errors", "tx_carrier_errors", "tx_fifo_errors",
    "tx_heartbeat_errors", "tx_window_errors", "rx_compressed", "tx_compressed",
    "rx_nohandler",
)  # fmt: skip


def parse_link(body: bytes) -> Optional[tuple[str, dict[str, int]]]:
    """(name, counters) of one RTM_NEWLINK message; None without a name or statistics."""
    if len(body) < _IFINFOMSG.size:
        return None
    attrs = netlink.parse_attrs(body, _IFINFOMSG.size)
    raw_name, raw_stats = attrs.get(IFLA_IFNAME), attrs.get(IFLA_STATS64)
    if raw_name is None or raw_stats is None:
        return None
    name = raw_name.split(b"\0", 1)[0].decode("utf-8", "replace")
    n = min(len(raw_stats) // 8, len(STATS64_FIELDS))
    values = struct.unpack_from(f"={n}Q", raw_stats)
    return name, dict(zip(STATS64_FIELDS, values))


def dump_link_stats() -> dict[str, dict[str, int]]:
    """Counters of every interface of this network namespace, by name, as
    `/sys/class/net/DEV/statistics` names them. Raises OSError when the kernel refuses."""
    request = _IFINFOMSG.pack(0, 0, 0, 0, 0)
    out: dict[str, dict[str, int]] = {}
    for mtype, body in netlink.dump(netlink.NETLINK_ROUTE, RTM_GETLINK, request):
        if mtype != RTM_NEWLINK:
            continue
        link = parse_link(body)
        if link is not None:
            out[link[0]] = link[1]
    return out
