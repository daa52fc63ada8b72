"""Receive-side scaling and flow steering as ethtool sees them: the hash fields per flow
type (`ethtool -n DEV rx-flow-hash udp4`), the indirection table and hash key (`ethtool
-x`), and ntuple flow rules (`ethtool -n DEV` / `-N DEV flow-type ...`). In the 6.1 kernel
these are SIOCETHTOOL only (ETHTOOL_GRXFH/SRXFH, GRSSH/SRSSH, GRXCLSRLALL/SRXCLSRLINS/
SRXCLSRLDEL). The sources (`host/net/ethtool.py`) return these; None means the driver does
not support it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

# ethtool's flow-type names for rx-flow-hash (include/uapi/linux/ethtool.h TCP_V4_FLOW...).
FLOW_TYPES: tuple[str, ...] = (
    "tcp4", "udp4", "sctp4", "ah4", "esp4", "tcp6", "udp6", "sctp6", "ah6", "esp6",
)  # fmt: skip
# ethtool's letters for the hash fields (RXH_L2DA m, RXH_VLAN v, RXH_L3_PROTO t, RXH_IP_SRC s,
# RXH_IP_DST d, RXH_L4_B_0_1 f, RXH_L4_B_2_3 n, RXH_DISCARD r), in ethtool's order.
HASH_LETTERS = "mvtsdfnr"


@dataclass(frozen=True)
class Rxfh:
    """The RSS indirection table (entry i -> receive queue), the hash key (None: the driver
    does not report one) and the hash function's name ("toeplitz", "xor", "crc32", "")."""

    indir: tuple[int, ...]
    key: Optional[bytes] = None
    hfunc: str = ""


@dataclass(frozen=True)
class NtupleRule:
    """One flow-steering rule: where it sits, the flow type, the match in `ethtool -N`'s
    words ((word, value) pairs such as ("dst-port", "179")), and the action: a queue index,
    or -1 to drop."""

    location: int
    flow_type: str
    match: tuple[tuple[str, str], ...]
    action: int
