"""Per-queue packet counters from the kernel's netdev generic netlink family (`qstats-get`).

Since Linux 6.9 a driver may report per-queue rx/tx packets and bytes in a standard form
(Documentation/netlink/specs/netdev.yaml); virtio_net, mlx5, bnxt, ice and others do, veth
does not. Where they exist they are the authority on per-queue traffic and lbtune's queues
probe does not need to count those queues itself. The dump covers the devices of the
caller's network namespace.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass
from typing import Optional

from lbtune.host.net.netlink import (
    CTRL_ATTR_FAMILY_ID,
    CTRL_ATTR_FAMILY_NAME,
    CTRL_CMD_GETFAMILY,
    GENL_ID_CTRL,
    GENLMSGHDR,
    NETLINK_GENERIC,
    align4,
    dump,
    parse_attrs,
)

# Documentation/netlink/specs/netdev.yaml
NETDEV_CMD_QSTATS_GET = 12
A_IFINDEX, A_QUEUE_TYPE, A_QUEUE_ID, A_SCOPE = 1, 2, 3, 4
A_RX_PACKETS, A_RX_BYTES, A_TX_PACKETS, A_TX_BYTES = 8, 9, 10, 11
SCOPE_QUEUE = 1
QUEUE_TYPES = {0: "rx", 1: "tx"}


@dataclass(frozen=True)
class QueueStat:
    """Counters of one queue since the device came up (netlink qstats)."""

    ifindex: int
    direction: str  # "rx" | "tx"
    queue: int
    packets: Optional[int]
    bytes: Optional[int]


def _uint(raw: bytes) -> int:
    # netdev.yaml declares these `uint`: 4 or 8 bytes, host order.
    return int.from_bytes(raw, "little" if struct.pack("=H", 1) == b"\x01\x00" else "big")


def _attr(atype: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), atype)
    return (head + payload).ljust(align4(4 + len(payload)), b"\0")


def _family_id(name: str) -> Optional[int]:
    payload = GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, 1, 0)
    for _mtype, body in dump(NETLINK_GENERIC, GENL_ID_CTRL, payload):
        attrs = parse_attrs(body, GENLMSGHDR.size)
        if attrs.get(CTRL_ATTR_FAMILY_NAME, b"").rstrip(b"\0").decode() == name:
            raw = attrs.get(CTRL_ATTR_FAMILY_ID)
            return _uint(raw) if raw else None
    return None


def queue_stats() -> Optional[list[QueueStat]]:
    """Every per-queue counter the kernel offers in this namespace; None when it offers none
    (kernel < 6.9: no `netdev` family or no qstats command)."""
    try:
        family = _family_id("netdev")
        if family is None:
            return None
        request = GENLMSGHDR.pack(NETDEV_CMD_QSTATS_GET, 1, 0) + _attr(
            A_SCOPE, struct.pack("=I", SCOPE_QUEUE)
        )
        answers = list(dump(NETLINK_GENERIC, family, request))
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOENT, errno.EPROTONOSUPPORT):
            return None
        raise
    out: list[QueueStat] = []
    for _mtype, body in answers:
        a = parse_attrs(body, GENLMSGHDR.size)
        if A_IFINDEX not in a or A_QUEUE_ID not in a:
            continue
        direction = QUEUE_TYPES.get(_uint(a.get(A_QUEUE_TYPE, b"\0")))
        if direction is None:
            continue
        pk, by = (A_RX_PACKETS, A_RX_BYTES) if direction == "rx" else (A_TX_PACKETS, A_TX_BYTES)
        out.append(
            QueueStat(
                ifindex=_uint(a[A_IFINDEX]),
                direction=direction,
                queue=_uint(a[A_QUEUE_ID]),
                packets=_uint(a[pk]) if pk in a else None,
                bytes=_uint(a[by]) if by in a else None,
            )
        )
    return out
