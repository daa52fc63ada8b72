"""The RTM_GETLINK reader decodes link messages as kernels of every age send them (the live
comparison with /sys/class/net/*/statistics is in tests/netns/test_netlink_live.py)."""

from __future__ import annotations

import struct

from lbtune.host.net import netlink
from lbtune.host.net.linkstats import IFLA_IFNAME, IFLA_STATS64, STATS64_FIELDS, parse_link


def test_parse_link_keeps_the_fields_an_older_kernel_sends():
    """A kernel before 4.6 sends 23 fields (no rx_nohandler); 5.19+ sends 25
    (rx_otherhost_dropped, which sysfs has no file for): names follow the struct's order."""

    def message(nfields: int) -> bytes:
        head = struct.pack("=BxHiII", 0, 1, 2, 0x1043, 0)
        name = b"eth0\0"
        stats = struct.pack(f"={nfields}Q", *range(1, nfields + 1))
        attrs = b""
        for atype, payload in ((IFLA_IFNAME, name), (IFLA_STATS64, stats)):
            raw = struct.pack("=HH", 4 + len(payload), atype) + payload
            attrs += raw + b"\0" * (netlink.align4(len(raw)) - len(raw))
        return head + attrs

    name, old = parse_link(message(23)) or ("", {})
    assert name == "eth0" and list(old) == list(STATS64_FIELDS[:23])
    assert old["rx_packets"] == 1 and old["tx_window_errors"] == 21
    _, new = parse_link(message(25)) or ("", {})
    assert list(new) == list(STATS64_FIELDS) and new["rx_nohandler"] == 24
    assert parse_link(message(25)[:10]) is None
