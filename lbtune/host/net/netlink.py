"""A minimal netlink dump client on plain sockets, for reads that run on every sampling tick.

pyroute2 costs 0.1-0.3 s to import; the two dumps lbtune repeats every second (sock_diag and
qdiscs) need only "send one dump request, read until NLMSG_DONE", which is this module.
Layouts are from include/uapi/linux/netlink.h (struct nlmsghdr, struct nlmsgerr, struct
nlattr) and include/uapi/linux/rtnetlink.h (struct rtattr, same layout as nlattr).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from typing import Iterator

# include/uapi/linux/netlink.h
NETLINK_ROUTE = 0
NETLINK_SOCK_DIAG = 4

NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_DUMP_INTR = 0x10
NLM_F_ROOT = 0x100
NLM_F_MATCH = 0x200
NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH

NLMSG_NOOP = 1
NLMSG_ERROR = 2
NLMSG_DONE = 3

# struct nlmsghdr { __u32 nlmsg_len; __u16 nlmsg_type; __u16 nlmsg_flags;
#                   __u32 nlmsg_seq; __u32 nlmsg_pid; }
NLMSGHDR = struct.Struct("=IHHII")
# struct nlattr / struct rtattr { __u16 nla_len; __u16 nla_type; }
NLATTR = struct.Struct("=HH")
# The top two bits of nla_type are flags (NLA_F_NESTED, NLA_F_NET_BYTEORDER), not the type.
NLA_TYPE_MASK = 0x3FFF

# Big enough for any dump skb the kernel builds (it sizes them up to 32 KiB, more if the
# reader offers more), so no message is ever truncated.
_RECV_BUF = 1 << 16
_TIMEOUT_S = 5.0


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
    with _socket(protocol, msg_type, NLM_F_REQUEST | NLM_F_DUMP, payload) as sock:
        while True:
            data = sock.recv(_RECV_BUF)
            if not data:
                raise OSError(errno.EIO, "netlink: socket closed during a dump")
            if _parse_datagram(data, _SEQ, out):
                return out


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
    with _socket(protocol, msg_type, NLM_F_REQUEST | NLM_F_DUMP, payload) as sock:
        while True:
            size = sock.recv_into(buf)
            if not size:
                raise OSError(errno.EIO, "netlink: socket closed during a dump")
            got, done = count_datagram(memoryview(buf)[:size], msg_type, _SEQ)
            n += got
            if done:
                return n


def count_datagram(data: memoryview, msg_type: int, seq: int) -> tuple[int, bool]:
    """(answers of `msg_type` to `seq`, NLMSG_DONE seen) in one datagram; a kernel error
    (NLMSG_ERROR, a negative NLMSG_DONE status) or a bad length raises OSError."""
    size = len(data)
    n = 0
    offset = 0
    if size >= NLMSGHDR.size and size % 4 == 0:
        (first,) = struct.unpack_from("=I", data, 0)
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
                (status,) = struct.unpack_from("=i", data, body)
                if status < 0:
                    raise OSError(-status, f"netlink dump: {os.strerror(-status)}")
            return n, True
        if mtype == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", data, body)
            if error < 0:
                raise OSError(-error, f"netlink: {os.strerror(-error)}")
            continue
        if mtype == msg_type:
            n += 1
    return n, False


@contextlib.contextmanager
def _socket(protocol: int, msg_type: int, flags: int, payload: bytes) -> Iterator[socket.socket]:
    """A netlink socket that has sent one request (`flags`, sequence _SEQ); closed after."""
    msg = NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, _SEQ, 0) + payload
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, protocol)
    try:
        sock.settimeout(_TIMEOUT_S)
        sock.sendto(msg, (0, 0))
        yield sock
    finally:
        sock.close()


NLM_F_ACK = 0x04


def request(protocol: int, msg_type: int, flags: int, payload: bytes) -> None:
    """Send one request (NLM_F_REQUEST | NLM_F_ACK | `flags`) and wait for its ack; a kernel
    error raises OSError with the kernel's errno."""
    with _socket(protocol, msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, payload) as sock:
        while True:
            data = sock.recv(_RECV_BUF)
            offset = 0
            while offset + NLMSGHDR.size <= len(data):
                length, mtype, _f, mseq, _pid = NLMSGHDR.unpack_from(data, offset)
                if length < NLMSGHDR.size:
                    raise OSError(errno.EBADMSG, f"netlink: bad message length {length}")
                if mtype == NLMSG_ERROR and mseq == _SEQ:
                    (error,) = struct.unpack_from("=i", data, offset + NLMSGHDR.size)
                    if error < 0:
                        raise OSError(-error, os.strerror(-error))
                    return
                offset += align4(length)


def query(protocol: int, msg_type: int, flags: int, payload: bytes) -> list[tuple[int, bytes]]:
    """Send one request (NLM_F_REQUEST | NLM_F_ACK | `flags`) and return (nlmsg_type,
    payload) of every answer before the kernel's ack (a single RTM_GETROUTE, say); a kernel
    error raises OSError with the kernel's errno."""
    out: list[tuple[int, bytes]] = []
    with _socket(protocol, msg_type, NLM_F_REQUEST | NLM_F_ACK | flags, payload) as sock:
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
                    (error,) = struct.unpack_from("=i", body)
                    if error < 0:
                        raise OSError(-error, os.strerror(-error))
                    return out
                if mtype not in (NLMSG_NOOP, NLMSG_DONE):
                    out.append((mtype, body))


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
                (status,) = struct.unpack_from("=i", body)
                if status < 0:
                    raise OSError(-status, f"netlink dump: {os.strerror(-status)}")
            return True
        if mtype == NLMSG_ERROR:
            # struct nlmsgerr { int error; struct nlmsghdr msg; ... }; error 0 is an ACK.
            (error,) = struct.unpack_from("=i", body)
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
