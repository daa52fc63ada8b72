"""The IPVS connection table (/proc/net/ip_vs_conn): where IPVS sent each client connection.

One line per connection of this network namespace (net/netfilter/ipvs/ip_vs_conn.c,
ip_vs_conn_seq_show): protocol, client address and port, virtual address and port, the
real server's address and port, the state and the seconds until it expires. IPv4 addresses
are 8 hex digits (host order after ntohl), IPv6 ones `%pI6` (full, colon separated); ports
4 hex digits:

    Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
    TCP 0A000001 D431 0A000064 0050 0A00000D 0050 SYN_RECV         57

The table of a busy director holds millions of lines, so `find_connections` streams it and
keeps only the lines of the client endpoints asked for, and stops after `MAX_LINES`.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass
from typing import Iterable, Optional

from lbtune.host.fs import HostFS

CONN_TABLE = "/proc/net/ip_vs_conn"
MAX_LINES = 2_000_000  # ~200 MB of table: beyond that the answer is "not found"


@dataclass(frozen=True)
class IpvsConnection:
    """One entry of the connection table."""

    protocol: str  # "tcp", "udp", "sctp"
    client: str  # canonical address
    cport: int
    vip: str
    vport: int
    dest: str  # the real server IPVS chose
    dport: int
    state: str  # SYN_RECV, ESTABLISHED, TIME_WAIT, ... (UDP: UDP)
    expires: int  # seconds


def _addr(text: str) -> Optional[str]:
    try:
        if ":" in text:
            return str(ipaddress.IPv6Address(text))
        return str(ipaddress.IPv4Address(int(text, 16)))
    except ValueError:
        return None


def parse_line(line: str) -> Optional[IpvsConnection]:
    """One table line; None for the header or a line of another shape."""
    f = line.split()
    if len(f) < 9 or f[0] == "Pro":
        return None
    client, vip, dest = _addr(f[1]), _addr(f[3]), _addr(f[5])
    try:
        cport, vport, dport, expires = int(f[2], 16), int(f[4], 16), int(f[6], 16), int(f[8])
    except ValueError:
        return None
    if client is None or vip is None or dest is None:
        return None
    return IpvsConnection(f[0].lower(), client, cport, vip, vport, dest, dport, f[7], expires)


def find_connections(
    fs: HostFS, clients: Iterable[tuple[str, int]]
) -> Optional[dict[tuple[str, int], list[IpvsConnection]]]:
    """The entries of the client endpoints (address, port) asked for, per endpoint; None
    when the table cannot be read (no IPVS)."""
    want = {(str(ipaddress.ip_address(a)), p) for a, p in clients}
    ports = {f"{p:04X}" for _a, p in want}
    out: dict[tuple[str, int], list[IpvsConnection]] = {}
    try:
        # inside the root (links resolved), never blocking on a FIFO, regular files only
        fd = os.open(fs.path(fs.realpath(CONN_TABLE)), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        with open(fd, encoding="ascii", errors="replace") as f:
            for n, line in enumerate(f):
                if n > MAX_LINES:
                    break
                parts = line.split(None, 3)
                if len(parts) < 3 or parts[2] not in ports:  # cheap filter: client port
                    continue
                conn = parse_line(line)
                if conn is not None and (conn.client, conn.cport) in want:
                    out.setdefault((conn.client, conn.cport), []).append(conn)
    except OSError:
        return None
    return out
