"""IPVS values and their generic-netlink wire format (no socket, no kernel).

The kernel's numbers (include/uapi/linux/ip_vs.h), the frozen values lbtune works with
(`ServiceKey`, `DestKey`, their settings, `Service`, `Destination`, counters, timeouts), how
they are packed into netlink attributes and read back from the kernel's answers, the change
requests (`Op`) and the service-flag words. `lbtune.host.ipvs.table` sends and receives them (and
re-exports the public names); this module is pure and unit-tested without a kernel.
"""

from __future__ import annotations

import functools
import operator
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Iterable, Optional

from lbtune.errors import BadInput
from lbtune.host.net.netlink import GENLMSGHDR, NLATTR, align4, parse_attrs

# include/uapi/linux/ip_vs.h
IPVS_GENL_NAME = "IPVS"
IPVS_GENL_VERSION = 1
CMD_NEW_SERVICE, CMD_SET_SERVICE, CMD_DEL_SERVICE, CMD_GET_SERVICE = 1, 2, 3, 4
CMD_NEW_DEST, CMD_SET_DEST, CMD_DEL_DEST, CMD_GET_DEST = 5, 6, 7, 8
CMD_GET_DAEMON, CMD_SET_CONFIG, CMD_GET_CONFIG, CMD_GET_INFO = 11, 12, 13, 15
CMD_ATTR_SERVICE, CMD_ATTR_DEST, CMD_ATTR_DAEMON = 1, 2, 3
CMD_ATTR_TIMEOUT_TCP, CMD_ATTR_TIMEOUT_TCP_FIN, CMD_ATTR_TIMEOUT_UDP = 4, 5, 6
SVC_AF, SVC_PROTOCOL, SVC_ADDR, SVC_PORT, SVC_FWMARK = 1, 2, 3, 4, 5
SVC_SCHED_NAME, SVC_FLAGS, SVC_TIMEOUT, SVC_NETMASK, SVC_STATS = 6, 7, 8, 9, 10
SVC_PE_NAME, SVC_STATS64 = 11, 12
DEST_ADDR, DEST_PORT, DEST_FWD_METHOD, DEST_WEIGHT = 1, 2, 3, 4
DEST_U_THRESH, DEST_L_THRESH, DEST_ACTIVE_CONNS, DEST_INACT_CONNS = 5, 6, 7, 8
DEST_PERSIST_CONNS, DEST_STATS, DEST_ADDR_FAMILY, DEST_STATS64 = 9, 10, 11, 12
DAEMON_STATE, DAEMON_MCAST_IFN, DAEMON_SYNC_ID = 1, 2, 3
INFO_VERSION, INFO_CONN_TAB_SIZE = 1, 2

# Service flags. HASHED is the kernel's own bookkeeping, never part of a wanted state.
F_PERSISTENT, F_HASHED, F_ONEPACKET = 0x1, 0x2, 0x4
F_SCHED1, F_SCHED2, F_SCHED3 = 0x8, 0x10, 0x20
SERVICE_FLAG_MASK = F_PERSISTENT | F_ONEPACKET | F_SCHED1 | F_SCHED2 | F_SCHED3

PROTOCOLS = {"tcp": socket.IPPROTO_TCP, "udp": socket.IPPROTO_UDP, "sctp": 132}
FWD_METHODS = {"masq": 0, "local": 1, "tunnel": 2, "dr": 3}  # IP_VS_CONN_F_* & FWD_MASK
FWD_NAMES = {v: k for k, v in FWD_METHODS.items()}
AF: dict[int, int] = {4: int(socket.AF_INET), 6: int(socket.AF_INET6)}
FAMILY_OF_AF: dict[int, int] = {v: k for k, v in AF.items()}

# Schedulers IPVS has ever shipped (net/netfilter/ipvs/ip_vs_<name>.c); which of them a
# given kernel offers is `available_schedulers`.
KNOWN_SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo",
                    "ovf", "mh", "twos")  # fmt: skip

# ------------------------------------------------------------------------------ values


def canonical_addr(addr: str, what: str) -> tuple[int, str]:
    """(4 or 6, canonical text). inet_pton/inet_ntop rather than ipaddress: a 10,000-server
    table parses 10,000 addresses, and this is ~10 times faster with the same strictness
    (no leading zeros, no shorthand IPv4)."""
    text = addr.strip("[]") if isinstance(addr, str) else ""
    for family, af in ((4, socket.AF_INET), (6, socket.AF_INET6)):
        try:
            return family, socket.inet_ntop(af, socket.inet_pton(af, text))
        except (OSError, ValueError):
            continue
    raise BadInput(f"{what}: {addr!r} is not an IP address")


def _hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _split_hostport(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not port.isascii() or int(port) > 65535:
        raise BadInput(f"{what}: {text!r} is not ADDRESS:PORT")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise BadInput(f"{what}: {text!r}: an IPv6 address needs brackets ([addr]:port)")
    return host, int(port)


@dataclass(frozen=True, order=True)
class ServiceKey:
    """What identifies a virtual service: protocol, address and port, or a firewall mark."""

    family: int  # 4 or 6
    protocol: str  # "tcp" | "udp" | "sctp" | "fwmark"
    addr: str = ""  # compressed text form; "" for fwmark services
    port: int = 0
    fwmark: int = 0

    @classmethod
    def of(cls, protocol: str, addr: str, port: int) -> ServiceKey:
        if protocol not in PROTOCOLS:
            raise BadInput(f"service protocol {protocol!r}: expected tcp, udp or sctp")
        family, text = canonical_addr(addr, f"{protocol} service")
        return cls(family, protocol, text, port)

    @classmethod
    def mark(cls, fwmark: int, family: int = 4) -> ServiceKey:
        return cls(family, "fwmark", "", 0, fwmark)

    @functools.cached_property  # plans name 10,000 real servers by their service
    def ident(self) -> str:
        """`tcp:10.0.0.1:80`, `udp:[2001:db8::1]:53`, `fwmark:7`, `fwmark:7:inet6`."""
        if self.protocol == "fwmark":
            return f"fwmark:{self.fwmark}" + (":inet6" if self.family == 6 else "")
        return f"{self.protocol}:{_hostport(self.addr, self.port)}"

    @classmethod
    def parse(cls, ident: str) -> ServiceKey:
        proto, sep, rest = ident.partition(":")
        if not sep:
            raise BadInput(f"IPVS service {ident!r}: expected PROTO:ADDR:PORT or fwmark:N")
        if proto == "fwmark":
            mark, _, fam = rest.partition(":")
            if not mark.isdigit() or not mark.isascii() or fam not in ("", "inet6"):
                raise BadInput(f"IPVS service {ident!r}: expected fwmark:N[:inet6]")
            return cls.mark(int(mark), 6 if fam else 4)
        host, port = _split_hostport(rest, f"IPVS service {ident!r}")
        return cls.of(proto, host, port)

    def __str__(self) -> str:
        return self.ident


@dataclass(frozen=True, order=True)
class DestKey:
    """A real server of a service: its address and port."""

    family: int
    addr: str
    port: int

    @classmethod
    def of(cls, addr: str, port: int) -> DestKey:
        family, text = canonical_addr(addr, "real server")
        return cls(family, text, port)

    @functools.cached_property
    def ident(self) -> str:
        return _hostport(self.addr, self.port)

    @classmethod
    def parse(cls, text: str) -> DestKey:
        host, port = _split_hostport(text, "real server")
        return cls.of(host, port)

    def __str__(self) -> str:
        return self.ident


@dataclass(frozen=True)
class ServiceSettings:
    """Everything an edit sends: scheduler, flags, persistence (timeout 0 = none)."""

    scheduler: str
    flags: int = 0  # SERVICE_FLAG_MASK bits (persistent, one-packet, scheduler flags)
    timeout: int = 0  # persistence timeout in seconds
    netmask: int = 32  # persistence granularity as a prefix length (IPv4 or IPv6)
    pe: str = ""  # persistence engine ("sip"), "" for none


@dataclass(frozen=True)
class DestSettings:
    """Everything an edit sends for a real server."""

    weight: int = 1
    fwd: str = "dr"  # FWD_METHODS key
    u_threshold: int = 0  # 0 = no limit
    l_threshold: int = 0


@dataclass(frozen=True)
class Counters:
    """IPVS statistics of a service or destination: totals since creation, and the kernel's
    2-second estimator rates (per second)."""

    conns: int = 0
    inpkts: int = 0
    outpkts: int = 0
    inbytes: int = 0
    outbytes: int = 0
    cps: int = 0
    inpps: int = 0
    outpps: int = 0
    inbps: int = 0
    outbps: int = 0


@dataclass(frozen=True)
class Destination:
    key: DestKey
    settings: DestSettings
    active: int = 0  # established connections
    inactive: int = 0  # other states (SYN_RECV, FIN_WAIT, TIME_WAIT, ...)
    persistent: int = 0  # persistence templates
    counters: Counters = Counters()


@dataclass(frozen=True)
class Service:
    key: ServiceKey
    settings: ServiceSettings
    counters: Counters = Counters()
    destinations: tuple[Destination, ...] = ()

    def dest(self, key: DestKey) -> Optional[Destination]:
        return self._by_key.get(key)

    @functools.cached_property
    def _by_key(self) -> dict[DestKey, Destination]:
        # a plan looks up 10,000 real servers: by key, not by a scan of each service's
        return {d.key: d for d in reversed(self.destinations)}  # the first wins

    @functools.cached_property
    def dest_settings(self) -> dict[DestKey, DestSettings]:
        """{real server: its settings} (built once; compare a whole service with it)."""
        return {d.key: d.settings for d in reversed(self.destinations)}


@dataclass(frozen=True)
class Timeouts:
    """IPVS connection timeouts in seconds (`ipvsadm --set tcp tcpfin udp`)."""

    tcp: int
    tcpfin: int
    udp: int


@dataclass(frozen=True)
class SyncDaemon:
    state: str  # "master" | "backup"
    ifname: str
    syncid: int


@dataclass(frozen=True)
class IpvsInfo:
    version: str  # "1.2.1"
    conn_tab_size: int
    version_code: int = 0  # 0x010201


def format_version(code: int) -> str:
    """IPVS packs its version as 0x00MMmmpp: 0x010201 -> "1.2.1"."""
    return f"{(code >> 16) & 0xFF}.{(code >> 8) & 0xFF}.{code & 0xFF}"


def default_netmask(family: int) -> int:
    return 32 if family == 4 else 128


# ------------------------------------------------------------------------------ encoding


def _attr(atype: int, payload: bytes) -> bytes:
    raw = NLATTR.pack(NLATTR.size + len(payload), atype) + payload
    return raw + b"\0" * (align4(len(raw)) - len(raw))


def _u16(atype: int, v: int) -> bytes:
    return _attr(atype, struct.pack("=H", v))


def _u32(atype: int, v: int) -> bytes:
    return _attr(atype, struct.pack("=I", v))


def _be16(atype: int, v: int) -> bytes:
    return _attr(atype, struct.pack("!H", v))


def str_attr(atype: int, text: str) -> bytes:
    return _attr(atype, text.encode() + b"\0")


def _nested(atype: int, parts: Iterable[bytes]) -> bytes:
    return _attr(atype | 0x8000, b"".join(parts))  # NLA_F_NESTED


def _addr16(family: int, addr: str) -> bytes:
    """union nf_inet_addr: 16 bytes, IPv4 in the first four."""
    return socket.inet_pton(AF[family], addr).ljust(16, b"\0")


def _netmask_bytes(family: int, prefix: int) -> bytes:
    if family == 4:  # a be32 mask
        return struct.pack("!I", (0xFFFFFFFF << (32 - prefix)) & 0xFFFFFFFF if prefix else 0)
    return struct.pack("=I", prefix)  # IPv6: the prefix length itself


def service_attrs(key: ServiceKey, settings: Optional[ServiceSettings] = None) -> bytes:
    if settings is None:
        return _service_id(key)
    return _service_full(key, settings)


@functools.lru_cache(maxsize=4096)
def _service_id(key: ServiceKey) -> bytes:
    """The attributes naming a service (every destination request carries them: built once
    per service)."""
    return _service_full(key, None)


def _service_full(key: ServiceKey, settings: Optional[ServiceSettings]) -> bytes:
    parts = [_u16(SVC_AF, AF[key.family])]
    if key.protocol == "fwmark":
        parts.append(_u32(SVC_FWMARK, key.fwmark))
    else:
        parts += [
            _u16(SVC_PROTOCOL, PROTOCOLS[key.protocol]),
            _attr(SVC_ADDR, _addr16(key.family, key.addr)),
            _be16(SVC_PORT, key.port),
        ]
    if settings is not None:
        parts += [
            str_attr(SVC_SCHED_NAME, settings.scheduler),
            _attr(SVC_FLAGS, struct.pack("=II", settings.flags & SERVICE_FLAG_MASK, 0xFFFFFFFF)),
            _u32(SVC_TIMEOUT, settings.timeout),
            _attr(SVC_NETMASK, _netmask_bytes(key.family, settings.netmask)),
        ]
        if settings.pe:
            parts.append(str_attr(SVC_PE_NAME, settings.pe))
    return _nested(CMD_ATTR_SERVICE, parts)


# A destination's attributes have a fixed layout, packed in one call (a plan builds 10,000):
# the nest header; ADDR (16 bytes); PORT (be16) and ADDR_FAMILY (u16), each padded to 4;
# then, for add/edit, FWD_METHOD, WEIGHT, U_THRESH and L_THRESH (u32 each).
_DEST_ID = struct.Struct("=HHHH16sHHH2xHHH2x")
_DEST_SETTINGS = struct.Struct("=HHIHHIHHIHHI")


def _dest_attrs(key: DestKey, settings: Optional[DestSettings] = None) -> bytes:
    size = _DEST_ID.size + (_DEST_SETTINGS.size if settings is not None else 0)
    out = _DEST_ID.pack(size, CMD_ATTR_DEST | 0x8000, 20, DEST_ADDR,
                        _addr16(key.family, key.addr), 6, DEST_PORT, socket.htons(key.port),
                        6, DEST_ADDR_FAMILY, AF[key.family])
    if settings is None:
        return out
    return out + _DEST_SETTINGS.pack(8, DEST_FWD_METHOD, FWD_METHODS[settings.fwd],
                                     8, DEST_WEIGHT, settings.weight,
                                     8, DEST_U_THRESH, settings.u_threshold,
                                     8, DEST_L_THRESH, settings.l_threshold)


# ------------------------------------------------------------------------------ decoding


def get_u(attrs: dict[int, bytes], atype: int, default: int = 0) -> int:
    """An unsigned attribute of any width, in host byte order."""
    raw = attrs.get(atype)
    return default if raw is None else int.from_bytes(raw, sys.byteorder)


def _get_be16(attrs: dict[int, bytes], atype: int) -> int:
    raw = attrs.get(atype, b"\0\0")
    return int(struct.unpack("!H", raw[:2])[0])


def get_str(attrs: dict[int, bytes], atype: int) -> str:
    return attrs.get(atype, b"").split(b"\0", 1)[0].decode(errors="replace")


def _decode_addr(family: int, raw: bytes) -> str:
    size = 4 if family == 4 else 16
    return socket.inet_ntop(AF[family], raw[:size].ljust(size, b"\0"))


def _decode_counters(attrs: dict[int, bytes]) -> Counters:
    raw = attrs.get(SVC_STATS64) or attrs.get(SVC_STATS)  # same numbers for dest attributes
    if raw is None:
        return Counters()
    s = parse_attrs(raw)
    return Counters(*(get_u(s, i) for i in range(1, 11)))


def _decode_netmask(family: int, raw: Optional[bytes]) -> int:
    if raw is None or len(raw) < 4:
        return default_netmask(family)
    if family == 6:
        return int(struct.unpack("=I", raw[:4])[0])
    mask = int(struct.unpack("!I", raw[:4])[0])
    return bin(mask).count("1")  # a non-contiguous mask cannot be configured by lbtune


def decode_service(body: bytes, counters: bool = True) -> Optional[Service]:
    """A service from a GET_SERVICE reply body (after the genl header); None if not one."""
    top = parse_attrs(body, GENLMSGHDR.size)
    if CMD_ATTR_SERVICE not in top:
        return None
    a = parse_attrs(top[CMD_ATTR_SERVICE])
    family = FAMILY_OF_AF.get(get_u(a, SVC_AF))
    if family is None:
        return None
    if SVC_FWMARK in a and get_u(a, SVC_FWMARK):
        key = ServiceKey.mark(get_u(a, SVC_FWMARK), family)
    else:
        proto = {v: k for k, v in PROTOCOLS.items()}.get(get_u(a, SVC_PROTOCOL), "")
        if not proto:
            return None
        key = ServiceKey(family, proto, _decode_addr(family, a.get(SVC_ADDR, b"")),
                         _get_be16(a, SVC_PORT))  # fmt: skip
    flags_raw = a.get(SVC_FLAGS, b"\0" * 8)
    flags = int(struct.unpack("=I", flags_raw[:4])[0]) & SERVICE_FLAG_MASK
    settings = ServiceSettings(
        scheduler=get_str(a, SVC_SCHED_NAME),
        flags=flags,
        timeout=get_u(a, SVC_TIMEOUT),
        netmask=_decode_netmask(family, a.get(SVC_NETMASK)),
        pe=get_str(a, SVC_PE_NAME),
    )
    if counters:
        return Service(key, settings, _decode_counters(a))
    return Service(key, settings)


def decode_dest(body: bytes, service_family: int, counters: bool = True) -> Optional[Destination]:
    """A destination from a GET_DEST reply body; None if not one."""
    top = parse_attrs(body, GENLMSGHDR.size)
    raw = top.get(CMD_ATTR_DEST)
    if raw is None:
        return None
    if not counters:
        return _dest_settings_only(raw, service_family)
    a = parse_attrs(raw)
    family = FAMILY_OF_AF.get(get_u(a, DEST_ADDR_FAMILY), service_family)
    key = DestKey(family, _decode_addr(family, a.get(DEST_ADDR, b"")), _get_be16(a, DEST_PORT))
    fwd = FWD_NAMES.get(get_u(a, DEST_FWD_METHOD) & 0x7, "masq")
    settings = DestSettings(
        weight=get_u(a, DEST_WEIGHT),
        fwd=fwd,
        u_threshold=get_u(a, DEST_U_THRESH),
        l_threshold=get_u(a, DEST_L_THRESH),
    )
    return Destination(
        key,
        settings,
        active=get_u(a, DEST_ACTIVE_CONNS),
        inactive=get_u(a, DEST_INACT_CONNS),
        persistent=get_u(a, DEST_PERSIST_CONNS),
        counters=_decode_counters(a),
    )


# The number attributes of a destination, read in one walk over its attributes (a table
# read decodes 10,000): attribute type -> slot in `_dest_settings_only`'s list.
_DEST_NUMS = {DEST_FWD_METHOD: 0, DEST_WEIGHT: 1, DEST_U_THRESH: 2, DEST_L_THRESH: 3,
              DEST_ACTIVE_CONNS: 4, DEST_INACT_CONNS: 5, DEST_PERSIST_CONNS: 6,
              DEST_ADDR_FAMILY: 7}  # fmt: skip
_NLA_TYPE_MASK = 0x3FFF


# How ip_vs_genl_fill_dest lays a destination out (5.3 and later): ADDR, PORT, FWD_METHOD,
# WEIGHT, TUN_TYPE, TUN_PORT, TUN_FLAGS, U_THRESH, L_THRESH, ACTIVE, INACT, PERSIST,
# ADDR_FAMILY, then the statistics. Unpacked in one call when the lengths and types match.
_KERNEL_DEST = struct.Struct("=HH16sHH2s2xHHIHHIHHB3xHHH2xHHH2xHHIHHIHHIHHIHHIHHH2x")
_KERNEL_DEST_HEADS = (20, DEST_ADDR, 6, DEST_PORT, 8, DEST_FWD_METHOD, 8, DEST_WEIGHT,
                      5, 13, 6, 14, 6, 15, 8, DEST_U_THRESH, 8, DEST_L_THRESH,
                      8, DEST_ACTIVE_CONNS, 8, DEST_INACT_CONNS, 8, DEST_PERSIST_CONNS,
                      6, DEST_ADDR_FAMILY)  # fmt: skip
_HEADS_OF = operator.itemgetter(0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18, 19, 21, 22, 24,
                                25, 27, 28, 30, 31, 33, 34, 36, 37)  # fmt: skip
# addr port fwd weight u_thresh l_thresh active inactive persistent family
_VALUES_OF = operator.itemgetter(2, 5, 8, 11, 23, 26, 29, 32, 35, 38)
_DEST_ATTRS = frozenset((*_DEST_NUMS, DEST_ADDR, DEST_PORT))


# Real servers' settings repeat (a few weights, one forwarding method): one frozen object
# per distinct value, shared (a table read of 10,000 allocates 10,000 fewer objects, and
# each new page of memory costs a fault, dear in the UML lab). Bounded: a long-running
# `adapt` sees many weights.
_SETTINGS: dict[tuple[int, int, int, int], DestSettings] = {}
_SETTINGS_MAX = 4096
# The same for their addresses (a real server often serves many services): the text of
# each raw address, for IPv6 ([False]) and IPv4 ([True]), bounded alike.
_ADDRS: tuple[dict[bytes, str], dict[bytes, str]] = ({}, {})


def _dest_settings_only(raw: bytes, service_family: int) -> Destination:
    """`decode_dest` without statistics: the same values (a later duplicate attribute
    wins, a truncated one ends the walk), without a dict of every attribute."""
    if len(raw) >= _KERNEL_DEST.size:
        f = _KERNEL_DEST.unpack_from(raw)
        if _HEADS_OF(f) == _KERNEL_DEST_HEADS and not _more_of(raw):
            addr, port, fwd, weight, u, lo, active, inactive, persistent, af = _VALUES_OF(f)
            family = FAMILY_OF_AF.get(af, service_family)
            text = _ADDRS[family == 4].get(addr)
            if text is None:
                text = _decode_addr(family, addr)
                if len(_ADDRS[family == 4]) < _SETTINGS_MAX:
                    _ADDRS[family == 4][addr] = text
            key = DestKey(family, text, int.from_bytes(port, "big"))
            settings = _SETTINGS.get((weight, fwd, u, lo))
            if settings is None:
                settings = DestSettings(weight, FWD_NAMES.get(fwd & 0x7, "masq"), u, lo)
                if len(_SETTINGS) < _SETTINGS_MAX:
                    _SETTINGS[weight, fwd, u, lo] = settings
            return Destination(key, settings, active, inactive, persistent)
    return _walk_dest(raw, service_family)


def _more_of(raw: bytes) -> bool:
    """An attribute after the kernel's layout that the walk would read (it would win)."""
    offset, end = _KERNEL_DEST.size, len(raw)
    while offset + 4 <= end:
        length, atype = NLATTR.unpack_from(raw, offset)
        if length < 4 or offset + length > end:
            return False
        if atype & _NLA_TYPE_MASK in _DEST_ATTRS:
            return True
        offset += (length + 3) & ~3
    return False


def _walk_dest(raw: bytes, service_family: int) -> Destination:
    nums = [0] * 8
    addr, port = b"", b"\0\0"
    offset, end = 0, len(raw)
    unpack, order, slots = NLATTR.unpack_from, sys.byteorder, _DEST_NUMS
    while offset + 4 <= end:
        length, atype = unpack(raw, offset)
        if length < 4 or offset + length > end:
            break
        atype &= _NLA_TYPE_MASK
        slot = slots.get(atype)
        if slot is not None:
            nums[slot] = int.from_bytes(raw[offset + 4 : offset + length], order)
        elif atype == DEST_ADDR:
            addr = raw[offset + 4 : offset + length]
        elif atype == DEST_PORT:
            port = raw[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    family = FAMILY_OF_AF.get(nums[7], service_family)
    key = DestKey(family, _decode_addr(family, addr), int(struct.unpack("!H", port[:2])[0]))
    settings = DestSettings(nums[1], FWD_NAMES.get(nums[0] & 0x7, "masq"), nums[2], nums[3])
    return Destination(key, settings, nums[4], nums[5], nums[6])


@dataclass(frozen=True)
class Op:
    """One change request: a genl command and its attributes (built by the `*_op` helpers)."""

    cmd: int
    attrs: bytes
    what: str  # for error messages: "add service tcp:10.0.0.1:80"
    svc: Optional[ServiceKey] = None
    dest: Optional[DestKey] = None
    svc_settings: Optional[ServiceSettings] = None
    dest_settings: Optional[DestSettings] = None


# ------------------------------------------------------------------------------ operations


def add_service_op(key: ServiceKey, settings: ServiceSettings) -> Op:
    return Op(CMD_NEW_SERVICE, service_attrs(key, settings), f"add service {key}", key,
              svc_settings=settings)  # fmt: skip


def edit_service_op(key: ServiceKey, settings: ServiceSettings) -> Op:
    return Op(CMD_SET_SERVICE, service_attrs(key, settings), f"edit service {key}", key,
              svc_settings=settings)  # fmt: skip


def delete_service_op(key: ServiceKey) -> Op:
    return Op(CMD_DEL_SERVICE, service_attrs(key), f"delete service {key}", key)


def add_dest_op(svc: ServiceKey, key: DestKey, settings: DestSettings) -> Op:
    return Op(CMD_NEW_DEST, service_attrs(svc) + _dest_attrs(key, settings),
              f"add real server {key} to {svc}", svc, key, dest_settings=settings)  # fmt: skip


def edit_dest_op(svc: ServiceKey, key: DestKey, settings: DestSettings) -> Op:
    return Op(CMD_SET_DEST, service_attrs(svc) + _dest_attrs(key, settings),
              f"edit real server {key} of {svc}", svc, key, dest_settings=settings)  # fmt: skip


def delete_dest_op(svc: ServiceKey, key: DestKey) -> Op:
    return Op(CMD_DEL_DEST, service_attrs(svc) + _dest_attrs(key),
              f"delete real server {key} of {svc}", svc, key)  # fmt: skip


def set_timeouts_op(tcp: int = 0, tcpfin: int = 0, udp: int = 0) -> Op:
    """Set IPVS timeouts; 0 leaves that one unchanged (as `ipvsadm --set`)."""
    attrs = b""
    for atype, v in ((CMD_ATTR_TIMEOUT_TCP, tcp), (CMD_ATTR_TIMEOUT_TCP_FIN, tcpfin),
                     (CMD_ATTR_TIMEOUT_UDP, udp)):  # fmt: skip
        if v:
            attrs += _u32(atype, v)
    return Op(CMD_SET_CONFIG, attrs, f"set timeouts tcp={tcp} tcpfin={tcpfin} udp={udp}")


def flag_names(flags: int, scheduler: str) -> list[str]:
    """Service flags in ipvsadm's words: `persistent`, `ops`, `sh-fallback`, `sh-port`,
    `mh-fallback`, `mh-port`, and `flag-1..3` for scheduler flags without a name."""
    words = []
    if flags & F_PERSISTENT:
        words.append("persistent")
    if flags & F_ONEPACKET:
        words.append("ops")
    for bit, n in ((F_SCHED1, 1), (F_SCHED2, 2), (F_SCHED3, 3)):
        if flags & bit:
            words.append(_SCHED_FLAG_NAMES.get((scheduler, bit), f"flag-{n}"))
    return words


def parse_flags(words: Iterable[str], scheduler: str) -> int:
    """The inverse of `flag_names`; BadInput for a word this scheduler has no flag for."""
    by_name = {name: bit for (sched, bit), name in _SCHED_FLAG_NAMES.items() if sched == scheduler}
    by_name.update({"persistent": F_PERSISTENT, "ops": F_ONEPACKET,
                    "flag-1": F_SCHED1, "flag-2": F_SCHED2, "flag-3": F_SCHED3})  # fmt: skip
    flags = 0
    for w in words:
        if w not in by_name:
            known = ", ".join(sorted(by_name))
            raise BadInput(f"service flag {w!r} (scheduler {scheduler}): expected one of {known}")
        flags |= by_name[w]
    return flags


# include/uapi/linux/ip_vs.h: IP_VS_SVC_F_SCHED_SH_FALLBACK/_PORT; mh uses the same bits
# (net/netfilter/ipvs/ip_vs_mh.c).
_SCHED_FLAG_NAMES = {
    ("sh", F_SCHED1): "sh-fallback",
    ("sh", F_SCHED2): "sh-port",
    ("mh", F_SCHED1): "mh-fallback",
    ("mh", F_SCHED2): "mh-port",
}
