"""IPVS over generic netlink: the one module that speaks to the kernel's virtual server table.

Reads services, destinations (with their connection counts and statistics), the TCP/UDP
timeouts, sync daemons and the version; adds, edits and deletes services and destinations.
Plain sockets, like `lbtune.host.netlink`, rather than pyroute2: one socket per session, the
family id resolved once, and requests pipelined (many messages per `sendmsg`, one ACK each),
which is what makes a reconcile of 10,000 destinations fast. Layouts and numbers are from
include/uapi/linux/ip_vs.h and include/uapi/linux/genetlink.h; the kernel side is
net/netfilter/ipvs/ip_vs_ctl.c (`ip_vs_genl_*`).

Kernel facts this module encodes (DESIGN.md section 3):

- an edit (`IPVS_CMD_SET_SERVICE/_DEST`) replaces every field: always send the complete
  service or destination, or thresholds and flags silently reset;
- the persistence netmask is a be32 mask for IPv4 but a plain prefix length for IPv6, and the
  kernel refuses an IPv6 service (fwmark ones too) without one;
- a DR destination must have the service's address family (only tunnels may mix);
- a dump holds one service's destinations, so reading the table is one dump per service.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import socket
import struct
import sys
import weakref
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Optional, Sequence

from lbtune.errors import BadInput, NeedsPrivilege
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.netlink import NLATTR, NLMSGHDR, align4, parse_attrs

# include/uapi/linux/netlink.h
NETLINK_GENERIC = 16
NLM_F_REQUEST = 0x01
NLM_F_ACK = 0x04
NLM_F_DUMP = 0x300
NLM_F_CAPPED = 0x100  # in an NLMSG_ERROR: the request's payload was left out
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR: extended-ack attributes follow
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLMSGERR_ATTR_MSG = 1
SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
SO_RCVBUFFORCE = 33

# include/uapi/linux/genetlink.h
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 1, 2
GENLMSGHDR = struct.Struct("=BBH")

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

# Every answer is an skb of its own and every recv() returns one: acking each change would
# cost a recv per change (in the UML lab about 0.2 ms each). Batches therefore ask for one
# ack at their end; failures answer anyway. Each answer costs the receive buffer a whole skb
# (~1 KiB of truesize), so the buffer is raised where the kernel allows and a batch stays
# below the default send buffer (212 KiB; netlink refuses larger messages).
_BATCH_BYTES = 128 << 10
PROC_IP_VS = "/proc/net/ip_vs"
_RCVBUF = 4 << 20
_RECV = 1 << 16
_TIMEOUT_S = 10.0


class IpvsUnavailable(NeedsPrivilege):
    """The running kernel has no IPVS (module not loaded, or not built)."""


class IpvsError(OSError):
    """The kernel refused an IPVS request; `errno` is its errno, str() one line."""

    def __str__(self) -> str:
        return str(self.strerror)


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

    @property
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

    @property
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
        for d in self.destinations:
            if d.key == key:
                return d
        return None


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


def _str(atype: int, text: str) -> bytes:
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


def _service_attrs(key: ServiceKey, settings: Optional[ServiceSettings] = None) -> bytes:
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
            _str(SVC_SCHED_NAME, settings.scheduler),
            _attr(SVC_FLAGS, struct.pack("=II", settings.flags & SERVICE_FLAG_MASK, 0xFFFFFFFF)),
            _u32(SVC_TIMEOUT, settings.timeout),
            _attr(SVC_NETMASK, _netmask_bytes(key.family, settings.netmask)),
        ]
        if settings.pe:
            parts.append(_str(SVC_PE_NAME, settings.pe))
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


def _get_u(attrs: dict[int, bytes], atype: int, default: int = 0) -> int:
    """An unsigned attribute of any width, in host byte order."""
    raw = attrs.get(atype)
    return default if raw is None else int.from_bytes(raw, sys.byteorder)


def _get_be16(attrs: dict[int, bytes], atype: int) -> int:
    raw = attrs.get(atype, b"\0\0")
    return int(struct.unpack("!H", raw[:2])[0])


def _get_str(attrs: dict[int, bytes], atype: int) -> str:
    return attrs.get(atype, b"").split(b"\0", 1)[0].decode(errors="replace")


def _decode_addr(family: int, raw: bytes) -> str:
    size = 4 if family == 4 else 16
    return socket.inet_ntop(AF[family], raw[:size].ljust(size, b"\0"))


def _decode_counters(attrs: dict[int, bytes]) -> Counters:
    raw = attrs.get(SVC_STATS64) or attrs.get(SVC_STATS)  # same numbers for dest attributes
    if raw is None:
        return Counters()
    s = parse_attrs(raw)
    return Counters(*(_get_u(s, i) for i in range(1, 11)))


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
    family = FAMILY_OF_AF.get(_get_u(a, SVC_AF))
    if family is None:
        return None
    if SVC_FWMARK in a and _get_u(a, SVC_FWMARK):
        key = ServiceKey.mark(_get_u(a, SVC_FWMARK), family)
    else:
        proto = {v: k for k, v in PROTOCOLS.items()}.get(_get_u(a, SVC_PROTOCOL), "")
        if not proto:
            return None
        key = ServiceKey(family, proto, _decode_addr(family, a.get(SVC_ADDR, b"")),
                         _get_be16(a, SVC_PORT))  # fmt: skip
    flags_raw = a.get(SVC_FLAGS, b"\0" * 8)
    flags = int(struct.unpack("=I", flags_raw[:4])[0]) & SERVICE_FLAG_MASK
    settings = ServiceSettings(
        scheduler=_get_str(a, SVC_SCHED_NAME),
        flags=flags,
        timeout=_get_u(a, SVC_TIMEOUT),
        netmask=_decode_netmask(family, a.get(SVC_NETMASK)),
        pe=_get_str(a, SVC_PE_NAME),
    )
    return Service(key, settings, _decode_counters(a) if counters else Counters())


def decode_dest(body: bytes, service_family: int, counters: bool = True) -> Optional[Destination]:
    """A destination from a GET_DEST reply body; None if not one."""
    top = parse_attrs(body, GENLMSGHDR.size)
    if CMD_ATTR_DEST not in top:
        return None
    a = parse_attrs(top[CMD_ATTR_DEST])
    family = FAMILY_OF_AF.get(_get_u(a, DEST_ADDR_FAMILY), service_family)
    key = DestKey(family, _decode_addr(family, a.get(DEST_ADDR, b"")), _get_be16(a, DEST_PORT))
    fwd = FWD_NAMES.get(_get_u(a, DEST_FWD_METHOD) & 0x7, "masq")
    settings = DestSettings(
        weight=_get_u(a, DEST_WEIGHT),
        fwd=fwd,
        u_threshold=_get_u(a, DEST_U_THRESH),
        l_threshold=_get_u(a, DEST_L_THRESH),
    )
    return Destination(
        key,
        settings,
        active=_get_u(a, DEST_ACTIVE_CONNS),
        inactive=_get_u(a, DEST_INACT_CONNS),
        persistent=_get_u(a, DEST_PERSIST_CONNS),
        counters=_decode_counters(a) if counters else Counters(),
    )


# ------------------------------------------------------------------------------ the socket


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


class IpvsSocket:
    """A generic netlink socket bound to the IPVS family of this network namespace."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC,
                                  NETLINK_GENERIC)  # fmt: skip
        try:
            self.sock.settimeout(_TIMEOUT_S)
            self._setopts()
            self.sock.bind((0, 0))
            self._seq = 0
            self.family_id = self._resolve_family()
        except BaseException:
            self.sock.close()
            raise

    def _setopts(self) -> None:
        for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE needs CAP_NET_ADMIN
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, opt, _RCVBUF)
                break
            except OSError:
                continue
        for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK):
            with contextlib.suppress(OSError):  # older kernels: full echoes, no error text
                self.sock.setsockopt(SOL_NETLINK, opt, 1)

    def close(self) -> None:
        self.sock.close()

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0x7FFFFFFF or 1
        return self._seq

    def _message(self, msg_type: int, flags: int, cmd: int, attrs: bytes, seq: int) -> bytes:
        payload = GENLMSGHDR.pack(cmd, IPVS_GENL_VERSION, 0) + attrs
        return NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, seq, 0) + payload

    def _resolve_family(self) -> int:
        seq = self._next_seq()
        msg = self._message(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, CTRL_CMD_GETFAMILY,
                            _str(CTRL_ATTR_FAMILY_NAME, IPVS_GENL_NAME), seq)  # fmt: skip
        try:
            replies = self._exchange(msg, {seq})
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise IpvsUnavailable("no IPVS in this kernel (module ip_vs not loaded)") from None
            raise
        for _seq, body in replies:
            attrs = parse_attrs(body, GENLMSGHDR.size)
            if CTRL_ATTR_FAMILY_ID in attrs:
                return _get_u(attrs, CTRL_ATTR_FAMILY_ID)
        raise IpvsUnavailable("the kernel did not name the IPVS netlink family")

    def _exchange(self, data: bytes, seqs: set[int], dump: bool = False) -> list[tuple[int, bytes]]:
        """Send `data` (one or more messages) and read until every seq is acked (or, for a
        dump, until NLMSG_DONE). Returns (seq, body) of data replies; raises the first error."""
        status, replies = self._send_collect(data, seqs, dump)
        failed = [e for e in status.values() if e is not None]
        if failed:
            raise failed[0]
        return replies

    def _send_collect(
        self, data: bytes, seqs: set[int], dump: bool, track: Optional[set[int]] = None
    ) -> tuple[dict[int, Optional[OSError]], list[tuple[int, bytes]]]:
        """Send, then read until every seq in `seqs` is answered. Answers to the other seqs
        in `track` (failures of un-acked messages sent before them) are collected too."""
        replies: list[tuple[int, bytes]] = []
        self.sock.send(data)
        pending = set(seqs)
        known = pending | (track or set())
        status: dict[int, Optional[OSError]] = {}
        while pending:
            try:
                chunk = self.sock.recv(_RECV)
            except socket.timeout:
                raise IpvsError(errno.ETIMEDOUT, "IPVS: the kernel did not answer") from None
            for mtype, flags, seq, body in _split(chunk):
                if seq not in known:
                    continue
                if mtype == NLMSG_DONE:
                    pending.discard(seq)
                    status[seq] = _done_status(body)
                elif mtype == NLMSG_ERROR:
                    code, text = _error_of(body, flags)
                    if code == 0 and dump:
                        continue
                    pending.discard(seq)
                    status[seq] = None if code == 0 else IpvsError(code, text)
                else:
                    replies.append((seq, body))
        return status, replies

    # -- requests ------------------------------------------------------------------------

    def request(self, cmd: int, attrs: bytes = b"") -> list[bytes]:
        """One doit request with an ACK; returns the bodies of its replies."""
        seq = self._next_seq()
        msg = self._message(self.family_id, NLM_F_REQUEST | NLM_F_ACK, cmd, attrs, seq)
        return [body for _s, body in self._exchange(msg, {seq})]

    def dump(self, cmd: int, attrs: bytes = b"") -> list[bytes]:
        seq = self._next_seq()
        msg = self._message(self.family_id, NLM_F_REQUEST | NLM_F_DUMP, cmd, attrs, seq)
        return [body for _s, body in self._exchange(msg, {seq}, dump=True)]

    def execute(self, ops: Sequence[Op]) -> list[Optional[OSError]]:
        """Run change requests in order, pipelined: returns one error (or None) per op.

        Many messages go in one `sendmsg` and the kernel handles them in turn, acking only
        failures (no NLM_F_ACK) and the batch's last message (NLM_F_ACK): its ack says the
        batch is done. Every op of a batch is attempted, even after one fails.
        """
        out: list[Optional[OSError]] = []
        start = 0
        while start < len(ops):
            size, end = 0, start
            while end < len(ops) and (end == start or size + len(ops[end].attrs) < _BATCH_BYTES):
                size += len(ops[end].attrs) + NLMSGHDR.size + GENLMSGHDR.size
                end += 1
            batch = ops[start:end]
            seqs = [self._next_seq() for _ in batch]
            last = len(batch) - 1
            data = b"".join(
                self._message(self.family_id,
                              NLM_F_REQUEST | (NLM_F_ACK if i == last else 0), op.cmd, op.attrs, s)
                for i, (op, s) in enumerate(zip(batch, seqs))
            )  # fmt: skip
            status, _ = self._send_collect(data, {seqs[-1]}, dump=False, track=set(seqs))
            for op, s in zip(batch, seqs):
                err = status.get(s)
                out.append(None if err is None else IpvsError(err.errno, f"{op.what}: {err}"))
            start = end
        return out


def _split(chunk: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    offset = 0
    while offset + NLMSGHDR.size <= len(chunk):
        length, mtype, flags, seq, _pid = NLMSGHDR.unpack_from(chunk, offset)
        if length < NLMSGHDR.size or offset + length > len(chunk):
            raise IpvsError(errno.EBADMSG, f"IPVS netlink: bad message length {length}")
        yield mtype, flags, seq, chunk[offset + NLMSGHDR.size : offset + length]
        offset += align4(length)


def _done_status(body: bytes) -> Optional[OSError]:
    if len(body) >= 4:
        (code,) = struct.unpack_from("=i", body)
        if code < 0:
            return IpvsError(-code, f"IPVS dump: {os.strerror(-code)}")
    return None


def _error_of(body: bytes, flags: int) -> tuple[int, str]:
    """(errno, message) of an NLMSG_ERROR; the kernel's extended-ack text when it sent one."""
    (code,) = struct.unpack_from("=i", body)
    code = -code
    if code == 0:
        return 0, ""
    text = os.strerror(code)
    if flags & NLM_F_ACK_TLVS:
        if flags & NLM_F_CAPPED:
            offset = 4 + NLMSGHDR.size
        else:
            (inner_len,) = struct.unpack_from("=I", body, 4)
            offset = 4 + align4(inner_len)
        msg = parse_attrs(body, offset).get(NLMSGERR_ATTR_MSG)
        if msg:
            detail = msg.split(b"\0", 1)[0].decode(errors="replace")
            text = f"{text} ({detail})"
    return code, text


# ------------------------------------------------------------------------------ operations


def add_service_op(key: ServiceKey, settings: ServiceSettings) -> Op:
    return Op(CMD_NEW_SERVICE, _service_attrs(key, settings), f"add service {key}", key,
              svc_settings=settings)  # fmt: skip


def edit_service_op(key: ServiceKey, settings: ServiceSettings) -> Op:
    return Op(CMD_SET_SERVICE, _service_attrs(key, settings), f"edit service {key}", key,
              svc_settings=settings)  # fmt: skip


def delete_service_op(key: ServiceKey) -> Op:
    return Op(CMD_DEL_SERVICE, _service_attrs(key), f"delete service {key}", key)


def add_dest_op(svc: ServiceKey, key: DestKey, settings: DestSettings) -> Op:
    return Op(CMD_NEW_DEST, _service_attrs(svc) + _dest_attrs(key, settings),
              f"add real server {key} to {svc}", svc, key, dest_settings=settings)  # fmt: skip


def edit_dest_op(svc: ServiceKey, key: DestKey, settings: DestSettings) -> Op:
    return Op(CMD_SET_DEST, _service_attrs(svc) + _dest_attrs(key, settings),
              f"edit real server {key} of {svc}", svc, key, dest_settings=settings)  # fmt: skip


def delete_dest_op(svc: ServiceKey, key: DestKey) -> Op:
    return Op(CMD_DEL_DEST, _service_attrs(svc) + _dest_attrs(key),
              f"delete real server {key} of {svc}", svc, key)  # fmt: skip


def set_timeouts_op(tcp: int = 0, tcpfin: int = 0, udp: int = 0) -> Op:
    """Set IPVS timeouts; 0 leaves that one unchanged (as `ipvsadm --set`)."""
    attrs = b""
    for atype, v in ((CMD_ATTR_TIMEOUT_TCP, tcp), (CMD_ATTR_TIMEOUT_TCP_FIN, tcpfin),
                     (CMD_ATTR_TIMEOUT_UDP, udp)):  # fmt: skip
        if v:
            attrs += _u32(atype, v)
    return Op(CMD_SET_CONFIG, attrs, f"set timeouts tcp={tcp} tcpfin={tcpfin} udp={udp}")


# ------------------------------------------------------------------------------ the session

_View = dict[ServiceKey, tuple[ServiceSettings, dict[DestKey, DestSettings]]]


class Ipvs:
    """IPVS of one host (the current network namespace): cached reads, batched changes.

    `table()` reads every service and its destinations once and keeps the result until a
    change is made: a plan of 10,000 knobs reads the kernel once, and the read-back after an
    apply once more. Changes go through `submit`. Normally each runs at once (an OSError
    carries the kernel's errno); inside `batching()` they are queued and sent pipelined
    (`IpvsSocket.execute`) when the queue is full, before any read, and when the block ends;
    the first failure of a batch is raised then. `planned_service`/`planned_dest` answer
    "what will the kernel hold once the queue is sent", which is what a change is based on.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self._sock: Optional[IpvsSocket] = None
        self._table: Optional[dict[ServiceKey, Service]] = None
        self._stale: set[ServiceKey] = set()  # changed since read: read again when asked
        self._counters = False  # the cached table has statistics
        self._timeouts: Optional[Timeouts] = None
        self._view: Optional[_View] = None
        self._queue: list[Op] = []
        self._batching = 0
        self.failed: set[tuple[Optional[ServiceKey], Optional[DestKey]]] = set()

    # -- connection ----------------------------------------------------------------------

    def available(self) -> bool:
        """IPVS is loaded here. Never loads it: the kernel loads ip_vs on the first lookup
        of its netlink family, so the family is only looked up once /proc/net/ip_vs shows
        the module is there (reads stay reads; `load` is the explicit change)."""
        if self._sock is None and not ipvs_loaded(self.host.fs):
            return False
        try:
            self.socket()
        except IpvsUnavailable:
            return False
        return True

    def socket(self) -> IpvsSocket:
        if self._sock is None:
            if not self.host.is_live:
                raise BadInput("IPVS is read from the running kernel: --root cannot be used")
            self._sock = IpvsSocket()
        return self._sock

    def load(self) -> None:
        """Make sure IPVS is there: `modprobe ip_vs` once if the family is missing (what
        ipvsadm does); IpvsUnavailable when the kernel has none."""
        if self.available():
            return
        res = self.host.runner.run(["modprobe", "ip_vs"], timeout=60)
        if not self.available():
            detail = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
            raise IpvsUnavailable(f"no IPVS in this kernel (modprobe ip_vs: {detail})")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- reads ---------------------------------------------------------------------------

    def assume(self, table: Iterable[Service]) -> None:
        """Take `table` as what the kernel holds, without reading it (tests, and planning
        against a recorded table); cleared by the next change."""
        self._table = {s.key: s for s in table}
        self._stale.clear()
        self._view = None

    def invalidate(self) -> None:
        self._table = None
        self._stale.clear()
        self._timeouts = None
        self._view = None

    def table(self, counters: bool = False) -> dict[ServiceKey, Service]:
        """Every service with its destinations; empty when IPVS is not loaded (then there
        is nothing in it by definition: a freshly loaded module starts empty). Statistics
        (`counters`) are decoded only when asked for; connection counts always are."""
        self.flush()
        if self._table is None or self._stale or (counters and not self._counters):
            if not self.available():
                return {}
            self._table = {s.key: s for s in read_table(self.socket(), counters)}
            self._counters = counters
            self._stale.clear()
        return self._table

    def service(self, key: ServiceKey, fresh: bool = False) -> Optional[Service]:
        """One service as the kernel has it (cached until it is changed; `fresh`: read it
        now, for its connection counts and statistics)."""
        self.flush()
        if fresh and self._table is not None:
            self._stale.add(key)
        if self._table is not None and key in self._stale and len(self._stale) <= _REREAD_ONE:
            # a few services changed: read those again rather than the whole table
            self._stale.discard(key)
            now = read_service(self.socket(), key)
            if now is None:
                self._table.pop(key, None)
            else:
                self._table[key] = now
            return now
        return self.table().get(key)

    def destinations(self, key: ServiceKey) -> Optional[tuple[Destination, ...]]:
        """The destinations of one service read now, with their connection counts; None
        when the service does not exist."""
        if not self.available():
            return None
        svc = self.service(key, fresh=True)
        return None if svc is None else svc.destinations

    def timeouts(self) -> Optional[Timeouts]:
        self.flush()
        if self._timeouts is None and self.available():
            self._timeouts = read_timeouts(self.socket())
        return self._timeouts

    def info(self) -> Optional[IpvsInfo]:
        return read_info(self.socket()) if self.available() else None

    def daemons(self) -> list[SyncDaemon]:
        return read_daemons(self.socket()) if self.available() else []

    # -- what the kernel will hold -------------------------------------------------------

    def _planned(self) -> _View:
        if self._view is None:
            self._view = {
                k: (s.settings, {d.key: d.settings for d in s.destinations})
                for k, s in self.table().items()
            }
        return self._view

    def planned_service(self, key: ServiceKey) -> Optional[ServiceSettings]:
        entry = self._planned().get(key)
        return None if entry is None else entry[0]

    def planned_dest(self, svc: ServiceKey, key: DestKey) -> Optional[DestSettings]:
        entry = self._planned().get(svc)
        return None if entry is None else entry[1].get(key)

    def _note(self, op: Op) -> None:
        view = self._planned()
        if op.svc is None:
            return
        if op.cmd in (CMD_NEW_SERVICE, CMD_SET_SERVICE) and op.svc_settings is not None:
            old = view.get(op.svc)
            view[op.svc] = (op.svc_settings, old[1] if old else {})
        elif op.cmd == CMD_DEL_SERVICE:
            view.pop(op.svc, None)
        elif op.dest is not None and op.svc in view:
            dests = view[op.svc][1]
            if op.cmd == CMD_DEL_DEST:
                dests.pop(op.dest, None)
            elif op.dest_settings is not None:
                dests[op.dest] = op.dest_settings

    # -- changes -------------------------------------------------------------------------

    def submit(self, op: Op) -> None:
        """Make one change: now, or queued inside `batching()`."""
        if self._batching and len(self._queue) >= _QUEUE:
            self.flush()  # before queueing: a failure then belongs to ops already submitted
        self._note(op)
        if self._batching:
            self._queue.append(op)
        else:
            self._send([op])

    def _send(self, ops: Sequence[Op]) -> None:
        # the kernel changes: cached reads of what the ops touch are stale, the view is not
        self._stale.update(op.svc for op in ops if op.svc is not None)
        if any(op.cmd == CMD_SET_CONFIG for op in ops):
            self._timeouts = None
        errors = self.socket().execute(ops)
        failures = [(op, e) for op, e in zip(ops, errors) if e is not None]
        if failures:
            self._view = None
            self.failed.update((op.svc, op.dest) for op, _e in failures)
            raise failures[0][1]

    def flush(self) -> None:
        """Send queued changes; raise the first failure (every queued op was attempted)."""
        if self._queue:
            ops, self._queue = self._queue, []
            self._send(ops)

    @contextlib.contextmanager
    def batching(self) -> Iterator[None]:
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self.flush()

    def execute(self, ops: Sequence[Op]) -> list[Optional[OSError]]:
        """Run ops pipelined now, returning one error or None each (no exception)."""
        self.flush()
        self.invalidate()
        return self.socket().execute(ops)

    def run(self, op: Op) -> None:
        """One op now; OSError (with the kernel's errno) when it fails."""
        self.flush()
        self._note(op)
        self._send([op])


_QUEUE = 2000
# Up to this many changed services are read one by one (two requests each); more, and the
# whole table is read again (one request per service plus one).
_REREAD_ONE = 64
_SESSIONS: weakref.WeakKeyDictionary[Host, Ipvs] = weakref.WeakKeyDictionary()


def ipvs_of(host: Host) -> Ipvs:
    """The IPVS session of `host` (one per Host object, so its cached table is shared)."""
    session = _SESSIONS.get(host)
    if session is None:
        session = _SESSIONS[host] = Ipvs(host)
    return session


def ipvs_loaded(fs: HostFS) -> bool:
    """The ip_vs module is loaded (it registers /proc/net/ip_vs in every namespace)."""
    return fs.exists(PROC_IP_VS)


def module_available(fs: HostFS) -> bool:
    """The running kernel could load ip_vs (built in, or a module in modules.dep)."""
    release = (fs.read("/proc/sys/kernel/osrelease") or "").strip()
    for name in ("modules.builtin", "modules.dep"):
        text = fs.read(f"/lib/modules/{release}/{name}") or ""
        if any(line.split(":", 1)[0].rsplit("/", 1)[-1].startswith("ip_vs.ko")
               for line in text.splitlines()):
            return True
    return False


def read_services(sock: IpvsSocket, counters: bool = True) -> list[Service]:
    return [s for s in (decode_service(b, counters) for b in sock.dump(CMD_GET_SERVICE))
            if s is not None]


def read_service(sock: IpvsSocket, key: ServiceKey) -> Optional[Service]:
    """One service and its destinations; None when it does not exist."""
    try:
        bodies = sock.request(CMD_GET_SERVICE, _service_attrs(key))
    except OSError as e:
        if e.errno in (errno.ESRCH, errno.ENOENT):
            return None
        raise
    for body in bodies:
        svc = decode_service(body)
        if svc is not None:
            return _with_dests(sock, svc)
    return None


def _with_dests(sock: IpvsSocket, svc: Service, counters: bool = True) -> Service:
    dests = [d for d in (decode_dest(b, svc.key.family, counters)
                         for b in sock.dump(CMD_GET_DEST, _service_attrs(svc.key)))
             if d is not None]  # fmt: skip
    return replace(svc, destinations=tuple(sorted(dests, key=lambda d: d.key)))


def read_table(sock: IpvsSocket, counters: bool = True) -> list[Service]:
    """Every service with its destinations; `counters=False` skips decoding statistics
    (a reconcile compares settings only). One dump for the services, then one per
    service for its destinations: a dump's request cannot be pipelined behind another's
    (the kernel answers EBUSY while one is unfinished; measured: slower, not faster)."""
    return sorted((_with_dests(sock, svc, counters) for svc in read_services(sock, counters)),
                  key=lambda s: s.key)


def read_timeouts(sock: IpvsSocket) -> Timeouts:
    for body in sock.request(CMD_GET_CONFIG):
        a = parse_attrs(body, GENLMSGHDR.size)
        return Timeouts(_get_u(a, CMD_ATTR_TIMEOUT_TCP), _get_u(a, CMD_ATTR_TIMEOUT_TCP_FIN),
                        _get_u(a, CMD_ATTR_TIMEOUT_UDP))  # fmt: skip
    raise IpvsError(errno.EIO, "IPVS_CMD_GET_CONFIG returned nothing")


def read_info(sock: IpvsSocket) -> IpvsInfo:
    for body in sock.request(CMD_GET_INFO):
        a = parse_attrs(body, GENLMSGHDR.size)
        code = _get_u(a, INFO_VERSION)
        return IpvsInfo(format_version(code), _get_u(a, INFO_CONN_TAB_SIZE), code)
    raise IpvsError(errno.EIO, "IPVS_CMD_GET_INFO returned nothing")


def read_daemons(sock: IpvsSocket) -> list[SyncDaemon]:
    out = []
    for body in sock.dump(CMD_GET_DAEMON):
        top = parse_attrs(body, GENLMSGHDR.size)
        if CMD_ATTR_DAEMON not in top:
            continue
        a = parse_attrs(top[CMD_ATTR_DAEMON])
        state = {1: "master", 2: "backup"}.get(_get_u(a, DAEMON_STATE), "none")
        out.append(SyncDaemon(state, _get_str(a, DAEMON_MCAST_IFN), _get_u(a, DAEMON_SYNC_ID)))
    return out


# ------------------------------------------------------------------------------ kernel facts


def available_schedulers(fs: HostFS) -> Optional[frozenset[str]]:
    """Schedulers the running kernel can load: `ip_vs_<name>` built in or as a module file
    (modules.builtin / modules.dep of /lib/modules/<release>). None when that cannot be
    told (no modules directory, e.g. a container): then the kernel decides at apply time."""
    release = (fs.read("/proc/sys/kernel/osrelease") or "").strip()
    if not release:
        return None
    base = f"/lib/modules/{release}"
    found: set[str] = set()
    seen_any = False
    for name in ("modules.builtin", "modules.dep"):
        text = fs.read(f"{base}/{name}")
        if text is None:
            continue
        seen_any = True
        for line in text.splitlines():
            path = line.split(":", 1)[0]
            mod = path.rsplit("/", 1)[-1]
            for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
                if mod.endswith(suffix):
                    mod = mod[: -len(suffix)]
                    break
            if mod.startswith("ip_vs_") and mod[6:] in KNOWN_SCHEDULERS:
                found.add(mod[6:])
    return frozenset(found) if seen_any else None


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
