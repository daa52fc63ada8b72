"""IP addresses and links of this network namespace (rtnetlink): list, add, delete, MACs.

Used for VIPs: on the director's facing interface, and on `lo` (or a dummy interface) of a
DR real server. Plain rtnetlink messages through `lbtune.host.net.netlink` (not pyroute2, whose
import alone costs more than a whole reconcile's reads). Layouts from
include/uapi/linux/rtnetlink.h, if_addr.h and if_link.h. Live hosts only.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net import netlink

RTM_NEWLINK, RTM_GETLINK = 16, 18
RTM_NEWADDR, RTM_DELADDR, RTM_GETADDR = 20, 21, 22
# struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; }
IFINFOMSG = struct.Struct("=BxHiII")
# struct ifaddrmsg { u8 family; u8 prefixlen; u8 flags; u8 scope; u32 index; }
IFADDRMSG = struct.Struct("=BBBBI")
IFLA_ADDRESS, IFLA_IFNAME = 1, 3
IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
IFA_F_NODAD = 0x02  # usable at once, no duplicate address detection
RT_SCOPE_UNIVERSE = 0
_AF = {4: socket.AF_INET, 6: socket.AF_INET6}


@dataclass(frozen=True)
class IfAddress:
    """One address on one interface."""

    ifname: str
    addr: str  # canonical text form (inet_ntop)
    prefixlen: int
    family: int  # 4 or 6

    @property
    def cidr(self) -> str:
        return f"{self.addr}/{self.prefixlen}"


@dataclass(frozen=True)
class Link:
    index: int
    name: str
    mac: Optional[str]


def _live(host: Host) -> None:
    if not host.is_live:
        raise BadInput("interface addresses are read from the running kernel, not a --root tree")


def links(host: Host) -> list[Link]:
    _live(host)
    out = []
    for mtype, body in netlink.dump(netlink.NETLINK_ROUTE, RTM_GETLINK,
                                    IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if mtype != RTM_NEWLINK or len(body) < IFINFOMSG.size:
            continue
        index = IFINFOMSG.unpack_from(body)[2]
        attrs = netlink.parse_attrs(body, IFINFOMSG.size)
        name = attrs.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode(errors="replace")
        raw = attrs.get(IFLA_ADDRESS)
        mac = ":".join(f"{b:02x}" for b in raw) if raw and len(raw) == 6 else None
        out.append(Link(index, name, mac))
    return out


def addresses(host: Host) -> list[IfAddress]:
    """Every address of every interface in this network namespace."""
    names = {link.index: link.name for link in links(host)}
    out = []
    for mtype, body in netlink.dump(netlink.NETLINK_ROUTE, RTM_GETADDR,
                                    IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)):
        if mtype != RTM_NEWADDR or len(body) < IFADDRMSG.size:
            continue
        fam, prefixlen, _flags, _scope, index = IFADDRMSG.unpack_from(body)
        family = {socket.AF_INET: 4, socket.AF_INET6: 6}.get(fam)
        attrs = netlink.parse_attrs(body, IFADDRMSG.size)
        # IFA_LOCAL is the address itself; IFA_ADDRESS the peer on point-to-point links
        raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)
        if family is None or raw is None:
            continue
        addr = socket.inet_ntop(_AF[family], raw)
        out.append(IfAddress(names.get(index, "?"), addr, prefixlen, family))
    return out


def local_addresses(host: Host) -> set[str]:
    """Addresses configured on any interface here (the host answers for them)."""
    return {a.addr for a in addresses(host)}


def link_index(host: Host, ifname: str) -> Optional[int]:
    for link in links(host):
        if link.name == ifname:
            return link.index
    return None


def link_mac(host: Host, ifname: str) -> Optional[str]:
    for link in links(host):
        if link.name == ifname:
            return link.mac
    return None


def link_names(host: Host) -> list[str]:
    return sorted(link.name for link in links(host))


def _addr_message(index: int, addr: str, prefixlen: int) -> bytes:
    family = 6 if ":" in addr else 4
    raw = socket.inet_pton(_AF[family], addr)
    msg = IFADDRMSG.pack(_AF[family], prefixlen, 0, RT_SCOPE_UNIVERSE, index)
    msg += _attr(IFA_LOCAL, raw) + _attr(IFA_ADDRESS, raw)
    if family == 6:
        msg += _attr(IFA_FLAGS, struct.pack("=I", IFA_F_NODAD))
    return msg


def _attr(atype: int, payload: bytes) -> bytes:
    raw = netlink.NLATTR.pack(netlink.NLATTR.size + len(payload), atype) + payload
    return raw + b"\0" * (netlink.align4(len(raw)) - len(raw))


def add_address(host: Host, ifname: str, addr: str, prefixlen: int) -> None:
    """Add ADDR/PREFIX to IFNAME (IPv6 without duplicate-address detection, so a VIP is
    usable at once). An address already there is fine; OSError for anything else."""
    _live(host)
    index = link_index(host, ifname)
    if index is None:
        raise BadInput(f"interface {ifname}: no such interface here")
    try:
        netlink.request(netlink.NETLINK_ROUTE, RTM_NEWADDR,
                        netlink.NLM_F_CREATE | netlink.NLM_F_EXCL,
                        _addr_message(index, addr, prefixlen))
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise OSError(e.errno, f"add {addr}/{prefixlen} to {ifname}: {e.strerror}") from None


def delete_address(host: Host, ifname: str, addr: str, prefixlen: int) -> None:
    """Remove ADDR/PREFIX from IFNAME; an address not there is fine."""
    _live(host)
    index = link_index(host, ifname)
    if index is None:
        return
    try:
        netlink.request(netlink.NETLINK_ROUTE, RTM_DELADDR, 0,
                        _addr_message(index, addr, prefixlen))
    except OSError as e:
        if e.errno != errno.EADDRNOTAVAIL:
            raise OSError(e.errno, f"delete {addr}/{prefixlen} from {ifname}: {e.strerror}"
                          ) from None
