"""Routing decisions and neighbours of this network namespace, asked of the kernel (rtnetlink).

Two questions, both answered by the kernel's own lookup code rather than by reading tables:

- `route_to(host, dst, src)`: the FIB entry an output packet to `dst` (from local address
  `src`) would use: its prefix and every nexthop device (`ip route get fibmatch DST from
  SRC`). This is the lookup reverse-path filtering makes for a received packet's source
  (net/ipv4/fib_frontend.c, __fib_validate_source: daddr = the packet's source, saddr = its
  destination, iif = loopback, as in an output lookup).
- `input_refused(host, dst, src, iif)`: would a packet from `src` to `dst` arriving on `iif`
  be accepted (`ip route get DST from SRC iif IIF`)? The kernel runs its input route lookup,
  rp_filter included, with the live sysctls; a refusal comes back as an error (EINVAL on
  6.x kernels, EXDEV on older ones, for rp_filter).

`neighbour_state(host, addr)` is the ARP/NDP entry of a neighbour (`ip neigh`): FAILED or
INCOMPLETE for a real server the director cannot reach on its segment.

Plain messages through `lbtune.host.net.netlink`; layouts from include/uapi/linux/rtnetlink.h
(struct rtmsg, struct rtnexthop). Live hosts only; IPv4 and IPv6.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net import addr as addrs
from lbtune.host.net import netlink

RTM_NEWROUTE, RTM_GETROUTE = 24, 26
# struct rtmsg { u8 family, dst_len, src_len, tos, table, protocol, scope, type; u32 flags; }
RTMSG = struct.Struct("=BBBBBBBBI")
# struct rtnexthop { u16 rtnh_len; u8 rtnh_flags; u8 rtnh_hops; s32 rtnh_ifindex; }
RTNEXTHOP = struct.Struct("=HBBi")
RTA_DST, RTA_SRC, RTA_IIF, RTA_OIF, RTA_GATEWAY, RTA_MULTIPATH = 1, 2, 3, 4, 5, 9
RTM_F_FIB_MATCH = 0x2000  # answer with the matching FIB entry, all nexthops
RTN_UNICAST = 1
# errors of a lookup that found no usable route (unreachable, prohibit, blackhole, none)
_NO_ROUTE = (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EACCES, errno.EINVAL, errno.EPERM)


@dataclass(frozen=True)
class Route:
    """The FIB entry a lookup matched."""

    prefix: str  # "default", or "198.51.100.0/24"
    prefixlen: int
    devices: tuple[str, ...]  # every nexthop's device
    gateway: Optional[str]  # the first nexthop's gateway, if any
    unicast: bool  # a plain unicast route (not local, broadcast, blackhole ...)


def _family(text: str) -> tuple[int, bytes]:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise BadInput(f"{text!r}: not an IP address") from None
    fam = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    return fam, ip.packed


def _attr(atype: int, payload: bytes) -> bytes:
    body = netlink.NLATTR.pack(netlink.NLATTR.size + len(payload), atype) + payload
    return body + b"\0" * (netlink.align4(len(body)) - len(body))


def _request(dst: str, src: Optional[str], iif: int, flags: int) -> bytes:
    fam, raw = _family(dst)
    attrs = _attr(RTA_DST, raw)
    src_len = 0
    if src is not None:
        sfam, sraw = _family(src)
        if sfam != fam:
            raise BadInput(f"{src} and {dst}: not of the same address family")
        attrs += _attr(RTA_SRC, sraw)
        src_len = len(sraw) * 8
    if iif:
        attrs += _attr(RTA_IIF, struct.pack("=i", iif))
    return RTMSG.pack(fam, len(raw) * 8, src_len, 0, 0, 0, 0, 0, flags) + attrs


def _ifindex(host: Host, name: str) -> int:
    index = addrs.link_index(host, name)
    if index is None:
        raise BadInput(f"{name}: no such interface here")
    return index


def route_to(host: Host, dst: str, src: Optional[str] = None) -> Optional[Route]:
    """The route an output packet to `dst` (source `src`, which must be a local address)
    takes; None when the kernel has no usable route to it."""
    addrs.links(host)  # live hosts only (BadInput otherwise)
    try:
        answers = netlink.query(netlink.NETLINK_ROUTE, RTM_GETROUTE, 0,
                                _request(dst, src, 0, RTM_F_FIB_MATCH))
    except OSError as e:
        if e.errno in _NO_ROUTE:
            return None
        raise
    names = {link.index: link.name for link in addrs.links(host)}
    for mtype, body in answers:
        if mtype != RTM_NEWROUTE or len(body) < RTMSG.size:
            continue
        fam, dst_len, _s, _t, _tb, _p, _sc, rtype, _f = RTMSG.unpack_from(body)
        attrs = netlink.parse_attrs(body, RTMSG.size)
        devices: list[int] = []
        gateway = _addr(fam, attrs.get(RTA_GATEWAY))
        if RTA_OIF in attrs:
            devices.append(struct.unpack("=i", attrs[RTA_OIF][:4])[0])
        hops = attrs.get(RTA_MULTIPATH, b"")
        offset = 0
        while offset + RTNEXTHOP.size <= len(hops):
            length, _fl, _h, index = RTNEXTHOP.unpack_from(hops, offset)
            if length < RTNEXTHOP.size:
                break
            devices.append(index)
            if gateway is None:
                sub = netlink.parse_attrs(hops[offset:offset + length], RTNEXTHOP.size)
                gateway = _addr(fam, sub.get(RTA_GATEWAY))
            offset += netlink.align4(length)
        prefix = f"{_addr(fam, attrs.get(RTA_DST))}/{dst_len}" if dst_len else "default"
        return Route(prefix, dst_len, tuple(names.get(i, f"if{i}") for i in devices), gateway,
                     rtype == RTN_UNICAST)
    return None


def _addr(fam: int, raw: Optional[bytes]) -> Optional[str]:
    if not raw:
        return None
    return socket.inet_ntop(fam, raw)


def input_refused(host: Host, dst: str, src: str, iif: str) -> Optional[OSError]:
    """None when the kernel accepts a packet from `src` to `dst` arriving on interface `iif`
    (reverse-path filter included); else the error its input route lookup gave."""
    try:
        netlink.query(netlink.NETLINK_ROUTE, RTM_GETROUTE, 0,
                      _request(dst, src, _ifindex(host, iif), 0))
    except OSError as e:
        return e
    return None


RTM_NEWNEIGH, RTM_GETNEIGH = 28, 30
# struct ndmsg { u8 family; u8 pad1; u16 pad2; s32 ifindex; u16 state; u8 flags; u8 type; }
NDMSG = struct.Struct("=BxxxiHBB")
NDA_DST = 1
NUD_STATES = {0x01: "INCOMPLETE", 0x02: "REACHABLE", 0x04: "STALE", 0x08: "DELAY",
              0x10: "PROBE", 0x20: "FAILED", 0x40: "NOARP", 0x80: "PERMANENT"}


def neighbour_state(host: Host, addr: str) -> Optional[str]:
    """The neighbour (ARP/NDP) entry of `addr` here: REACHABLE, STALE, INCOMPLETE, FAILED
    ... (`ip neigh`); None when there is none."""
    addrs.links(host)  # live hosts only
    fam, raw = _family(addr)
    for mtype, body in netlink.dump(netlink.NETLINK_ROUTE, RTM_GETNEIGH,
                                    NDMSG.pack(fam, 0, 0, 0, 0)):
        if mtype != RTM_NEWNEIGH or len(body) < NDMSG.size:
            continue
        state = NDMSG.unpack_from(body)[2]
        if netlink.parse_attrs(body, NDMSG.size).get(NDA_DST) == raw:
            return NUD_STATES.get(state, f"0x{state:x}")
    return None
