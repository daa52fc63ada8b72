"""The netlink client on plain sockets: its constants, one-shot dumps and requests, and a
session (`Netlink`) for many.

pyroute2 costs 0.1-0.3 s to import; the two dumps lbtune repeats every second (sock_diag and
qdiscs) need only "send one dump request, read until NLMSG_DONE", and IPVS a socket that
sends thousands of requests (lbtune.host.ipvs.table, the no-op record's check in
lbtune.host.ipvs.memo), which is this module. Only the interpreter's C modules are imported
(`_socket`, `_struct`): the record's check runs before anything else is imported, and
`socket` alone (its enum tables) costs it more than its reads (bench/ipvs_profile.py).
Layouts are from include/uapi/linux/netlink.h (struct nlmsghdr, struct nlmsgerr, struct
nlattr), include/uapi/linux/genetlink.h and include/uapi/linux/rtnetlink.h (struct rtattr,
same layout as nlattr).
"""

from __future__ import annotations

import _socket
import _struct
import errno
import os
import sys

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    from collections.abc import Iterator

# include/uapi/linux/netlink.h
NETLINK_ROUTE = 0
NETLINK_SOCK_DIAG = 4
NETLINK_GENERIC = 16

NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_F_DUMP_INTR = 0x10
NLM_F_ROOT = 0x100
NLM_F_MATCH = 0x200
NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH
NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400  # new requests (the same bits as ROOT/MATCH for gets)
NLM_F_CAPPED = 0x100  # in an NLMSG_ERROR: the request's payload was left out
NLM_F_ACK_TLVS = 0x200  # in an NLMSG_ERROR: extended-ack attributes follow

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSGERR_ATTR_MSG = 1

SOL_NETLINK = 270
NETLINK_CAP_ACK, NETLINK_EXT_ACK = 10, 11
_SOL_SOCKET, _SO_RCVBUF = _socket.SOL_SOCKET, _socket.SO_RCVBUF
_SO_RCVTIMEO, _SO_SNDTIMEO = _socket.SO_RCVTIMEO, _socket.SO_SNDTIMEO
_SO_RCVBUFFORCE = 33  # include/uapi/asm-generic/socket.h (not in the socket module)

# struct nlmsghdr { __u32 nlmsg_len; __u16 nlmsg_type; __u16 nlmsg_flags;
#                   __u32 nlmsg_seq; __u32 nlmsg_pid; }
NLMSGHDR = _struct.Struct("=IHHII")
# struct nlattr / struct rtattr { __u16 nla_len; __u16 nla_type; }
NLATTR = _struct.Struct("=HH")
# The top two bits of nla_type are flags (NLA_F_NESTED, NLA_F_NET_BYTEORDER), not the type.
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF

# include/uapi/linux/genetlink.h: the header before every generic-netlink payload, and the
# controller that names the families
GENLMSGHDR = _struct.Struct("=BBH")
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2

# Big enough for any dump skb the kernel builds (it sizes them up to 32 KiB, more if the
# reader offers more), so no message is ever truncated.
_RECV_BUF = 1 << 16
_TIMEOUT_S = 5.0
_I32 = _struct.Struct("=i")


def align4(n: int) -> int:
    """NLMSG_ALIGN / NLA_ALIGN / RTA_ALIGN: round up to a multiple of 4."""
    return (n + 3) & ~3


def dump(protocol: int, msg_type: int, payload: bytes) -> Iterator[tuple[int, bytes]]:
    """Send one NLM_F_DUMP request and yield (nlmsg_type, payload) for every answer.

    `protocol` is the netlink family (NETLINK_ROUTE, NETLINK_SOCK_DIAG), `payload` the
    request's fixed header (struct tcmsg, struct inet_diag_req_v2 ...). Reads until
    NLMSG_DONE. A kernel error (NLMSG_ERROR, or a negative NLMSG_DONE status) raises
    OSError with the kernel's errno. The answers are read in full before the first is
    yielded, so the socket is closed even when the caller stops early.
    """
    return iter(_dump_all(protocol, msg_type, payload))


def _dump_all(protocol: int, msg_type: int, payload: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    sock = _sent(protocol, msg_type, NLM_F_REQUEST | NLM_F_DUMP, payload)
    try:
        while True:
            data = sock.recv(_RECV_BUF)
            if not data:
                raise OSError(errno.EIO, "netlink: socket closed during a dump")
            if _parse_datagram(data, _SEQ, out):
                return out
    finally:
        sock.close()


_SEQ = 1  # one request per socket: its sequence number


def dump_count(protocol: int, msg_type: int, payload: bytes) -> int:
    """Send one NLM_F_DUMP request and return how many answers of type `msg_type` came,
    without copying or decoding them (errors as `dump`).

    For a dump of 100,000 sockets every interval: each datagram is received into one
    buffer; when its answers all have the length of the first (sock_diag sends the same
    attributes for every socket of a request), their headers are checked with strided
    slices in C and counted at once; any other datagram is walked message by message."""
    n = 0
    buf = bytearray(_RECV_BUF)
    sock = _sent(protocol, msg_type, NLM_F_REQUEST | NLM_F_DUMP, payload)
    try:
        while True:
            size = sock.recv_into(buf)
            if not size:
                raise OSError(errno.EIO, "netlink: socket closed during a dump")
            got, done = count_datagram(memoryview(buf)[:size], msg_type, _SEQ)
            n += got
            if done:
                return n
    finally:
        sock.close()


def count_datagram(data: memoryview, msg_type: int, seq: int) -> tuple[int, bool]:
    """(answers of `msg_type` to `seq`, NLMSG_DONE seen) in one datagram; a kernel error
    (NLMSG_ERROR, a negative NLMSG_DONE status) or a bad length raises OSError."""
    size = len(data)
    n = 0
    offset = 0
    if size >= NLMSGHDR.size and size % 4 == 0:
        (first,) = _struct.unpack_from("=I", data, 0)
        if first >= NLMSGHDR.size and first % 4 == 0:
            step, k = first // 4, size // first
            words = data.cast("I")
            end = k * step
            # struct nlmsghdr as u32 words: len, type | flags << 16, seq, pid
            lens = words[0:end:step].tolist()
            types = [w & 0xFFFF for w in words[1:end:step].tolist()]
            seqs = words[2:end:step].tolist()
            if lens.count(first) == k and types.count(msg_type) == k and seqs.count(seq) == k:
                n, offset = k, k * first
    while offset + NLMSGHDR.size <= size:
        length, mtype, _flags, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > size:
            raise OSError(errno.EBADMSG, f"netlink: bad message length {length}")
        body = offset + NLMSGHDR.size
        offset += align4(length)
        if mseq != seq:
            continue
        if mtype == NLMSG_DONE:
            if length >= NLMSGHDR.size + 4:
                (status,) = _I32.unpack_from(data, body)
                if status < 0:
                    raise OSError(-status, f"netlink dump: {os.strerror(-status)}")
            return n, True
        if mtype == NLMSG_ERROR:
            (error,) = _I32.unpack_from(data, body)
            if error < 0:
                raise OSError(-error, f"netlink: {os.strerror(-error)}")
            continue
        if mtype == msg_type:
            n += 1
    return n, False


def _sent(protocol: int, msg_type: int, flags: int, payload: bytes) -> _socket.socket:
    """A netlink socket that has sent one request (`flags`, sequence _SEQ): the caller
    closes it."""
    msg = NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, _SEQ, 0) + payload
    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC, protocol)
    try:
        sock.settimeout(_TIMEOUT_S)
        sock.sendto(msg, (0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def request(protocol: int, msg_type: int, flags: int, payload: bytes) -> None:
    """Send one request (NLM_F_REQUEST | NLM_F_ACK | `flags`) and wait for its ack; a kernel
    error raises OSError with the kernel's errno. `query`, with its answers dropped."""
    query(protocol, msg_type, flags, payload)


def query(protocol: int, msg_type: int, flags: int, payload: bytes) -> list[tuple[int, bytes]]:
    """Send one request (NLM_F_REQUEST | NLM_F_ACK | `flags`) and return (nlmsg_type,
    payload) of every answer before the kernel's ack (a single RTM_GETROUTE, say); a kernel
    error raises OSError with the kernel's errno."""
    out: list[tuple[int, bytes]] = []
    sock = _sent(protocol, msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, payload)
    try:
        while True:
            data = sock.recv(_RECV_BUF)
            if not data:
                raise OSError(errno.EIO, "netlink: socket closed before the ack")
            offset = 0
            while offset + NLMSGHDR.size <= len(data):
                length, mtype, _f, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
                if length < NLMSGHDR.size or offset + length > len(data):
                    raise OSError(errno.EBADMSG, f"netlink: bad message length {length}")
                body = data[offset + NLMSGHDR.size : offset + length]
                offset += align4(length)
                if mseq != _SEQ:
                    continue
                if mtype == NLMSG_ERROR:
                    (error,) = _I32.unpack_from(body)
                    if error < 0:
                        raise OSError(-error, os.strerror(-error))
                    return out
                if mtype not in (NLMSG_NOOP, NLMSG_DONE):
                    out.append((mtype, body))
    finally:
        sock.close()


def _parse_datagram(data: bytes, seq: int, out: list[tuple[int, bytes]]) -> bool:
    """Append the messages of one datagram to `out`; True once NLMSG_DONE was seen."""
    offset = 0
    while offset + NLMSGHDR.size <= len(data):
        length, mtype, _flags, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
        if length < NLMSGHDR.size or offset + length > len(data):
            raise OSError(errno.EBADMSG, f"netlink: bad message length {length}")
        body = data[offset + NLMSGHDR.size : offset + length]
        offset += align4(length)
        if mseq != seq:
            continue  # not an answer to our request (cannot happen on a private socket)
        if mtype == NLMSG_DONE:
            # Since 4.x NLMSG_DONE carries the dump's final status (an int, 0 or -errno).
            if len(body) >= 4:
                (status,) = _I32.unpack_from(body)
                if status < 0:
                    raise OSError(-status, f"netlink dump: {os.strerror(-status)}")
            return True
        if mtype == NLMSG_ERROR:
            # struct nlmsgerr { int error; struct nlmsghdr msg; ... }; error 0 is an ACK.
            (error,) = _I32.unpack_from(body)
            if error < 0:
                raise OSError(-error, f"netlink: {os.strerror(-error)}")
            continue
        if mtype == NLMSG_NOOP:
            continue
        out.append((mtype, body))
    return False


def parse_attrs(buf: bytes, offset: int = 0) -> dict[int, bytes]:
    """Attributes (struct rtattr / struct nlattr, 4-byte aligned) from `offset` to the end.

    Returns {type: payload}; the flag bits of the type are dropped, a later duplicate wins,
    and a truncated trailing attribute is ignored.
    """
    attrs: dict[int, bytes] = {}
    end = len(buf)
    while offset + NLATTR.size <= end:
        length, atype = NLATTR.unpack_from(buf, offset)
        if length < NLATTR.size or offset + length > end:
            break
        attrs[atype & NLA_TYPE_MASK] = buf[offset + NLATTR.size : offset + length]
        offset += align4(length)
    return attrs


def attr(atype: int, payload: bytes) -> bytes:
    """One attribute (struct nlattr), padded to 4 bytes."""
    raw = NLATTR.pack(NLATTR.size + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def error_of(body: bytes, flags: int) -> tuple[int, str]:
    """(errno, message) of an NLMSG_ERROR's body (0 for an ack); the kernel's extended-ack
    text when it sent one (a socket with NETLINK_EXT_ACK)."""
    (code,) = _I32.unpack_from(body)
    code = -code
    if code == 0:
        return 0, ""
    text = os.strerror(code)
    if flags & NLM_F_ACK_TLVS:
        if flags & NLM_F_CAPPED:
            offset = 4 + NLMSGHDR.size
        else:
            (inner_len,) = _struct.unpack_from("=I", body, 4)
            offset = 4 + align4(inner_len)
        msg = parse_attrs(body, offset).get(NLMSGERR_ATTR_MSG)
        if msg:
            detail = msg.split(b"\0", 1)[0].decode(errors="replace")
            text = f"{text} ({detail})"
    return code, text


class Netlink:
    """One netlink socket for many requests and dumps, numbered in turn.

    Its timeout is the kernel's (SO_RCVTIMEO/SO_SNDTIMEO on a blocking socket: EAGAIN when
    it passes), not Python's settimeout, which polls before every send and receive: twice
    the syscalls of a table read of 1,001 dumps, each costly in the UML lab. `rcvbuf`
    raises the receive buffer where the kernel allows (SO_RCVBUFFORCE needs CAP_NET_ADMIN,
    else SO_RCVBUF), so answers that come faster than they are read are not lost; `ext_ack`
    asks for acks without the request echoed and with the kernel's error text."""

    def __init__(self, protocol: int, timeout: int = 5, rcvbuf: int = 0,
                 ext_ack: bool = False) -> None:
        self.sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC,
                                   protocol)  # fmt: skip
        try:
            timeval = _struct.pack("@ll", timeout, 0)
            self.sock.setsockopt(_SOL_SOCKET, _SO_RCVTIMEO, timeval)
            self.sock.setsockopt(_SOL_SOCKET, _SO_SNDTIMEO, timeval)
            for opt in (_SO_RCVBUFFORCE, _SO_RCVBUF) if rcvbuf else ():
                try:
                    self.sock.setsockopt(_SOL_SOCKET, opt, rcvbuf)
                    break
                except OSError:
                    continue
            for opt in (NETLINK_CAP_ACK, NETLINK_EXT_ACK) if ext_ack else ():
                try:
                    self.sock.setsockopt(SOL_NETLINK, opt, 1)
                except OSError:  # older kernels: full echoes, no error text
                    continue
            self.sock.bind((0, 0))
        except BaseException:
            self.sock.close()
            raise
        self._seq = 0

    def close(self) -> None:
        self.sock.close()

    def next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0x7FFFFFFF or 1
        return self._seq

    def talk(self, msg_type: int, flags: int, payload: bytes) -> list[bytes]:
        """Send one request; the payloads of its answers (a dump's until NLMSG_DONE, a
        request's until its ack). A kernel error raises OSError with its errno."""
        seq = self.next_seq()
        self.sock.send(NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, seq, 0)
                       + payload)  # fmt: skip
        out: list[bytes] = []
        unpack = NLMSGHDR.unpack_from
        while True:
            chunk = self.sock.recv(_RECV_BUF)
            at = 0
            while at + 16 <= len(chunk):
                length, kind, _f, got, _pid = unpack(chunk, at)
                if length < 16 or at + length > len(chunk):
                    raise OSError(errno.EBADMSG, f"netlink: bad message length {length}")
                body = chunk[at + 16 : at + length]
                at += (length + 3) & ~3
                if got != seq:
                    continue
                if kind == NLMSG_DONE:
                    status = _I32.unpack_from(body)[0] if len(body) >= 4 else 0
                    if status < 0:
                        raise OSError(-status, f"netlink dump: {os.strerror(-status)}")
                    return out
                if kind == NLMSG_ERROR:
                    (error,) = _I32.unpack_from(body)
                    if error < 0:
                        raise OSError(-error, f"netlink: {os.strerror(-error)}")
                    if not flags & NLM_F_DUMP:
                        return out
                    continue
                out.append(body)

    def family(self, name: str) -> int | None:
        """The id of the generic netlink family `name`; None when the kernel's answer does
        not name it. OSError ENOENT: the kernel has no such family (a module not loaded)."""
        payload = GENLMSGHDR.pack(CTRL_CMD_GETFAMILY, 1, 0) + attr(CTRL_ATTR_FAMILY_NAME,
                                                                   name.encode() + b"\0")
        for body in self.talk(GENL_ID_CTRL, NLM_F_REQUEST | NLM_F_ACK, payload):
            raw = parse_attrs(body, GENLMSGHDR.size).get(CTRL_ATTR_FAMILY_ID)
            if raw is not None and len(raw) >= 2:
                return int.from_bytes(raw[:2], sys.byteorder)
        return None
