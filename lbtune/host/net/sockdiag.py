"""TCP and UDP sockets with their queues, buffers and drops: sock_diag (live) or `ss` text.

Listening TCP sockets (accept queue, backlog, SYN queue), bound UDP sockets (receive queue,
buffer) and connected TCP sockets under receive pressure (queued bytes vs receive buffer).
Live, the `dump_*` functions ask the kernel over NETLINK_SOCK_DIAG with plain sockets (see
`lbtune.host.net.netlink` for why not pyroute2). Recorded, `parse_ss` and `parse_ss_receivers`
read `ss -peaonmi` output as sosreport stores it (`sos_commands/networking/ss_-peaonmi`) and
the `ss -tlnm` / `ss -ulnm` subsets; `format_ss` writes that format so captures read back the
same. Struct layouts are from include/uapi/linux/inet_diag.h and include/uapi/linux/sock_diag.h.
"""

from __future__ import annotations

import re
import socket
import struct
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence, Union

from lbtune.errors import MalformedHostFile
from lbtune.host.net import netlink

# Where sosreport (and `lbtune capture`) keeps `ss -peaonmi` output, below the host root.
SS_RECORD = "/sos_commands/networking/ss_-peaonmi"


@dataclass(frozen=True)
class ListenSocket:
    """A listening TCP socket: accept queue now vs its limit, and drops."""

    family: int  # 4 or 6
    addr: str  # "0.0.0.0", "::", "10.0.0.1"
    port: int
    queue: int  # current accept-queue length (idiag_rqueue; ss Recv-Q)
    backlog: int  # sk_max_ack_backlog = min(app backlog, somaxconn) (idiag_wqueue; ss Send-Q)
    drops: Optional[int] = None  # sk_drops (SK_MEMINFO_DROPS; ss skmem d), None if not reported
    inode: int = 0
    # Half-open connection requests (TCP_NEW_SYN_RECV request sockets, ss SYN-RECV) waiting
    # for this listener now: its SYN queue. None when the source does not list them.
    syn_recv: Optional[int] = None


@dataclass(frozen=True)
class UdpSocket:
    """A bound UDP socket: receive queue vs buffer, and drops (receive-buffer errors)."""

    family: int  # 4 or 6
    addr: str
    port: int
    queue: int  # bytes waiting in the receive queue (idiag_rqueue; ss Recv-Q)
    rcvbuf: Optional[int] = None  # SK_MEMINFO_RCVBUF (ss skmem rb), None if not reported
    drops: Optional[int] = None  # sk_drops (SK_MEMINFO_DROPS; ss skmem d)
    inode: int = 0


@dataclass(frozen=True)
class TcpReceiver:
    """A connected TCP socket whose receive side is under pressure (see `under_pressure`).

    `rcvbuf` is the socket's receive buffer limit: TCP autotuning grows it from
    net.ipv4.tcp_rmem's default towards its maximum, unless the application fixed it with
    SO_RCVBUF (then it is twice the requested value and tcp_rmem no longer applies).
    """

    family: int  # 4 or 6
    addr: str  # local address
    port: int  # local port (the service port for an accepted connection)
    peer: str  # remote "addr:port" / "[addr]:port"
    state: str  # "ESTAB", "CLOSE-WAIT", ...
    unread: int  # bytes received and not yet read by the application (ss Recv-Q)
    queued: int  # receive memory in use, skb overhead included (SK_MEMINFO_RMEM_ALLOC; skmem r)
    rcvbuf: int  # receive buffer limit (SK_MEMINFO_RCVBUF; skmem rb)
    sndbuf: Optional[int] = None  # send buffer limit (SK_MEMINFO_SNDBUF; skmem tb)
    backlog: Optional[int] = None  # bytes in the socket backlog (SK_MEMINFO_BACKLOG; skmem bl)
    drops: Optional[int] = None  # segments this socket dropped (SK_MEMINFO_DROPS; skmem d)
    inode: int = 0


# A socket counts as under receive pressure from half its receive buffer in use, or once it
# dropped anything; at most this many are kept (most drops, then fullest), so a host with a
# million connections costs a bounded sample.
PRESSURE_SHARE = 0.5
MAX_RECEIVERS = 256


def under_pressure(queued: int, rcvbuf: int, drops: Optional[int]) -> bool:
    """True for a socket worth a receive-pressure look (see `TcpReceiver`)."""
    return bool(drops) or (rcvbuf > 0 and queued >= PRESSURE_SHARE * rcvbuf)


def _keep_worst(receivers: list[TcpReceiver]) -> list[TcpReceiver]:
    receivers.sort(key=lambda r: (-(r.drops or 0), -r.queued / max(1, r.rcvbuf), r.port))
    return receivers[:MAX_RECEIVERS]


# ------------------------------------------------------------------------------ live

# include/uapi/linux/sock_diag.h
SOCK_DIAG_BY_FAMILY = 20
SK_MEMINFO_RMEM_ALLOC = 0
SK_MEMINFO_RCVBUF = 1
SK_MEMINFO_SNDBUF = 3
SK_MEMINFO_BACKLOG = 7
SK_MEMINFO_DROPS = 8
# include/uapi/linux/inet_diag.h: attribute types; a request asks for attribute N with bit N-1.
INET_DIAG_SKMEMINFO = 7
TCP_ESTABLISHED = 1  # include/net/tcp_states.h
TCP_FIN_WAIT1 = 4
TCP_FIN_WAIT2 = 5
TCP_CLOSE_WAIT = 8
TCP_LISTEN = 10
TCP_NEW_SYN_RECV = 12  # a request socket: one half-open connection in a listener's SYN queue
ALL_STATES = 0xFFFFFFFF

# struct inet_diag_req_v2 { __u8 sdiag_family; __u8 sdiag_protocol; __u8 idiag_ext;
#   __u8 pad; __u32 idiag_states; struct inet_diag_sockid id; }  (sockid: 48 bytes, all zero
#   = no filter)
_REQ_V2 = struct.Struct("=BBBxI48x")
# struct inet_diag_msg { __u8 idiag_family, idiag_state, idiag_timer, idiag_retrans;
#   struct inet_diag_sockid { __be16 sport, dport; __be32 src[4], dst[4]; __u32 if;
#   __u32 cookie[2]; } id; __u32 idiag_expires, idiag_rqueue, idiag_wqueue, idiag_uid,
#   idiag_inode; }  -- 72 bytes, attributes follow.
_MSG_HEAD = struct.Struct("=BBBB")
_MSG_PORTS = struct.Struct(">HH")  # at offset 4, network byte order
_MSG_TAIL = struct.Struct("=IIIII")  # at offset 52
_MSG_SIZE = 72
_FAMILIES = ((socket.AF_INET, 4), (socket.AF_INET6, 6))


@dataclass(frozen=True)
class _DiagEntry:
    family: int  # 4 or 6
    addr: str
    port: int
    rqueue: int
    wqueue: int
    inode: int
    meminfo: tuple[int, ...]  # SK_MEMINFO_* values, empty when the kernel sent none
    state: int = 0
    peer: str = ""


def _diag_dump(protocol: int, states: int, with_mem: bool = True,
               bytecode: bytes = b"") -> list[_DiagEntry]:  # fmt: skip
    """Every socket of `protocol` in `states` (bit mask), IPv4 then IPv6, with skmeminfo
    unless `with_mem` is False (request and TIME_WAIT sockets have none anyway); only those
    the filter program `bytecode` (see `port_bytecode`) accepts, when given."""
    entries: list[_DiagEntry] = []
    ext = 1 << (INET_DIAG_SKMEMINFO - 1) if with_mem else 0
    for af, version in _FAMILIES:
        request = diag_request(af, protocol, states, ext, bytecode)
        for _mtype, body in netlink.dump(netlink.NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, request):
            if len(body) < _MSG_SIZE:
                continue
            _family, state, _timer, _retrans = _MSG_HEAD.unpack_from(body, 0)
            sport, dport = _MSG_PORTS.unpack_from(body, 4)
            width = 4 if af == socket.AF_INET else 16
            raw_src, raw_dst = body[8 : 8 + width], body[24 : 24 + width]
            _exp, rqueue, wqueue, _uid, inode = _MSG_TAIL.unpack_from(body, 52)
            mem = netlink.parse_attrs(body, _MSG_SIZE).get(INET_DIAG_SKMEMINFO, b"")
            meminfo = struct.unpack(f"={len(mem) // 4}I", mem[: len(mem) // 4 * 4])
            addr = socket.inet_ntop(af, raw_src)
            peer = _endpoint(version, socket.inet_ntop(af, raw_dst), dport)
            entries.append(
                _DiagEntry(version, addr, sport, rqueue, wqueue, inode, meminfo, state, peer)
            )
    return entries


# include/uapi/linux/inet_diag.h: a filter program run by the kernel on every socket of a
# dump, sent as the request's INET_DIAG_REQ_BYTECODE attribute. struct inet_diag_bc_op
# { __u8 code; __u8 yes; __u16 no; }: on a true test go on `yes` bytes, else `no` bytes;
# a socket matches when the program runs off its end exactly (a jump past it rejects).
# A port comparison is two ops: the test, then an op whose `no` holds the port.
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_BC_S_GE = 2
INET_DIAG_BC_S_LE = 3
_BC_OP = struct.Struct("=BBH")


def port_bytecode(low: int, high: int) -> bytes:
    """The filter program "local port in [low, high]" (`ss '( sport >= :LOW and sport <=
    :HIGH )'`); S_GE and S_LE, which every kernel with sock_diag knows (S_EQ came in 4.17)."""
    if not 0 <= low <= high <= 0xFFFF:
        raise ValueError(f"port range {low}-{high}: 0 to 65535, low first")
    # Each test: yes = 8 (past the test and its operand), no = past the end by 4.
    return (_BC_OP.pack(INET_DIAG_BC_S_GE, 8, 20) + _BC_OP.pack(0, 0, low)
            + _BC_OP.pack(INET_DIAG_BC_S_LE, 8, 12) + _BC_OP.pack(0, 0, high))  # fmt: skip


def diag_request(af: int, protocol: int, states: int, ext: int = 0,
                 bytecode: bytes = b"") -> bytes:  # fmt: skip
    """struct inet_diag_req_v2 for a dump of `states` (bit mask), with the filter program
    `bytecode` as its INET_DIAG_REQ_BYTECODE attribute when given."""
    req = _REQ_V2.pack(af, protocol, ext, states)
    if not bytecode:
        return req
    attr = netlink.NLATTR.pack(netlink.NLATTR.size + len(bytecode), INET_DIAG_REQ_BYTECODE)
    return req + attr + bytecode


def count_tcp(states: int, low: int, high: int) -> int:
    """TCP sockets of this network namespace in `states` (bit mask) whose local port is in
    [low, high], IPv4 and IPv6 (a v4-mapped connection to a dual-stack listener is IPv6).

    The kernel filters by state and port (the bytecode) and sends only the matching sockets
    without any extension; they are counted, not decoded. Raises OSError when the kernel
    refuses."""
    code = port_bytecode(low, high)
    return sum(
        netlink.dump_count(netlink.NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY,
                           diag_request(af, socket.IPPROTO_TCP, states, 0, code))
        for af, _version in _FAMILIES
    )  # fmt: skip


def count_established(port: int) -> int:
    """Established TCP connections whose local port is `port` (`ss -Htn state established
    '( sport = :PORT )' | wc -l`), from sock_diag; OSError when the kernel refuses."""
    return count_tcp(1 << TCP_ESTABLISHED, port, port)


# /proc/net/tcp{,6} line: "  sl: LOCAL_ADDR:PORT REM_ADDR:PORT ST ...", hex, state 01 =
# ESTABLISHED. Read only when sock_diag refuses.
PROC_TCP = ("/proc/net/tcp", "/proc/net/tcp6")


def count_established_proc(paths: Sequence[str], port: int) -> int:
    """Established TCP connections whose local port is `port`, from /proc/net/tcp-format
    files at `paths` (live paths; each read whole, streamed in chunks). OSError when one
    cannot be read."""
    # ":PORT REMOTE:RPORT 01 " occurs only where PORT is the local port: the remote port is
    # followed by the state (2 hex digits), never by an address:port.
    line = re.compile(rb":%04X [0-9A-F]{8,32}:[0-9A-F]{4} 01 " % port)
    n = 0
    for path in paths:
        with open(path, "rb") as f:
            rest = b""
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                text = rest + chunk
                cut = text.rfind(b"\n") + 1
                n += len(line.findall(text, 0, cut))
                rest = text[cut:]
            n += len(line.findall(rest))
    return n


def _meminfo(values: tuple[int, ...], index: int) -> Optional[int]:
    return values[index] if len(values) > index else None


_Endpoint = tuple[int, str, int]  # (4|6, address, port)


def _count_requests(listeners: Sequence[_Endpoint], requests: Iterable[_Endpoint]) -> list[int]:
    """Half-open requests per listener (same order as `listeners`).

    A request socket carries its listener's port as local port and, as local address, the
    address the SYN was sent to; sock_diag names no listener. So a request belongs to a
    listener on its port and family (an IPv4 SYN to a dual-stack `[::]` listener becomes an
    IPv6 request with a v4-mapped address), preferring the listener bound to exactly its local
    address, else the first listed (the wildcard one; listeners sharing one address and port
    with SO_REUSEPORT cannot be told apart, so the first gets them all). A request whose port
    has no listener of its family goes to the first listener on the port; one whose port has
    no listener at all (closed since) is not counted.
    """
    by_port: dict[int, list[int]] = {}
    for i, (_family, _addr, port) in enumerate(listeners):
        by_port.setdefault(port, []).append(i)
    counts = [0] * len(listeners)
    for family, addr, port in requests:
        candidates = by_port.get(port, [])
        same_family = [i for i in candidates if listeners[i][0] == family] or candidates
        exact = [i for i in same_family if listeners[i][1] == addr] or same_family
        if exact:
            counts[exact[0]] += 1
    return counts


def dump_listen_sockets(port: Optional[int] = None, syn_recv: bool = True) -> list[ListenSocket]:
    """Listening TCP sockets of this network namespace (sock_diag); only those on `port`
    when given (the kernel filters), without their SYN queue (`syn_recv` None) when
    `syn_recv` is False: then the kernel walks only its listening sockets, not every
    connection of the host (the agent's case: a walk of 200,000 sockets costs tens of ms).

    `queue` is the accept-queue length and `backlog` its limit (the kernel accepts up to
    backlog + 1 connections before dropping SYNs); `drops` counts SYNs and handshakes the
    listener dropped (ListenDrops for this socket); `syn_recv` the half-open requests waiting
    for it now (its SYN queue, also full at backlog + 1; see `_count_requests` for how a
    request finds its listener), read by a second dump of TCP_NEW_SYN_RECV sockets.
    Raises OSError when the kernel refuses.
    """
    # One dump per family for both states (the monitor runs this every second): the kernel
    # walks the listening sockets first, then the request sockets (which it reports as
    # SYN_RECV, with no meminfo).
    states = (1 << TCP_LISTEN) | ((1 << TCP_NEW_SYN_RECV) if syn_recv else 0)
    code = b"" if port is None else port_bytecode(port, port)
    both = _diag_dump(socket.IPPROTO_TCP, states, bytecode=code)
    listeners = [e for e in both if e.state == TCP_LISTEN]
    requests = [e for e in both if e.state != TCP_LISTEN]
    counts: Sequence[Optional[int]] = _count_requests(
        [(e.family, e.addr, e.port) for e in listeners],
        [(r.family, r.addr, r.port) for r in requests],
    ) if syn_recv else [None] * len(listeners)  # fmt: skip
    return [
        ListenSocket(
            family=e.family,
            addr=e.addr,
            port=e.port,
            queue=e.rqueue,
            backlog=e.wqueue,
            drops=_meminfo(e.meminfo, SK_MEMINFO_DROPS),
            inode=e.inode,
            syn_recv=n,
        )
        for e, n in zip(listeners, counts)
    ]


def count_tcp_local_ports(low: int, high: int) -> int:
    """The ephemeral ports of [low, high] held toward one destination, for the busiest
    (source address, destination address and port) pair: TCP sockets in any state but
    LISTEN and half-open requests, TIME_WAIT included.

    The kernel picks a local port per such pair (one port may serve many destinations), so
    the range runs out per pair, never "host-wide": a count over all destinations could
    exceed the range. Used only when /proc/net/sockstat says the range may be nearly full;
    the kernel sends only the sockets in those states with a local port in the range (a
    state mask and a port filter program): a server's accepted connections on its service
    port are not sent.
    """
    states = ALL_STATES & ~(1 << TCP_LISTEN) & ~(1 << TCP_NEW_SYN_RECV)
    found = _diag_dump(socket.IPPROTO_TCP, states, with_mem=False,
                       bytecode=port_bytecode(low, high))  # fmt: skip
    return busiest_pair((e.addr, e.peer) for e in found if low <= e.port <= high)


def busiest_pair(pairs: Iterable[tuple[str, str]]) -> int:
    """How many of `pairs` (source address, destination endpoint) the commonest one has."""
    counts: dict[tuple[str, str], int] = {}
    for p in pairs:
        counts[p] = counts.get(p, 0) + 1
    return max(counts.values(), default=0)


def dump_udp_sockets() -> list[UdpSocket]:
    """UDP sockets of this network namespace in any state (sock_diag).

    `queue` is the receive queue in bytes (memory charged, as `ss` Recv-Q), `rcvbuf` its limit
    and `drops` the datagrams dropped on this socket (mostly receive-buffer full).
    """
    return [
        UdpSocket(
            family=e.family,
            addr=e.addr,
            port=e.port,
            queue=e.rqueue,
            rcvbuf=_meminfo(e.meminfo, SK_MEMINFO_RCVBUF),
            drops=_meminfo(e.meminfo, SK_MEMINFO_DROPS),
            inode=e.inode,
        )
        for e in _diag_dump(socket.IPPROTO_UDP, ALL_STATES)
    ]


# Connected states in which data can still arrive for the application to read.
_RECEIVING = {
    TCP_ESTABLISHED: "ESTAB",
    TCP_FIN_WAIT1: "FIN-WAIT-1",
    TCP_FIN_WAIT2: "FIN-WAIT-2",
    TCP_CLOSE_WAIT: "CLOSE-WAIT",
}


def dump_tcp_receivers() -> list[TcpReceiver]:
    """Connected TCP sockets of this namespace under receive pressure (`under_pressure`),
    at most MAX_RECEIVERS of them, most drops first. Walks every connected TCP socket."""
    states = sum(1 << s for s in _RECEIVING)
    out = []
    for e in _diag_dump(socket.IPPROTO_TCP, states):
        queued = _meminfo(e.meminfo, SK_MEMINFO_RMEM_ALLOC)
        rcvbuf = _meminfo(e.meminfo, SK_MEMINFO_RCVBUF)
        drops = _meminfo(e.meminfo, SK_MEMINFO_DROPS)
        if queued is None or rcvbuf is None or not under_pressure(queued, rcvbuf, drops):
            continue
        out.append(
            TcpReceiver(
                family=e.family,
                addr=e.addr,
                port=e.port,
                peer=e.peer,
                state=_RECEIVING.get(e.state, str(e.state)),
                unread=e.rqueue,
                queued=queued,
                rcvbuf=rcvbuf,
                sndbuf=_meminfo(e.meminfo, SK_MEMINFO_SNDBUF),
                backlog=_meminfo(e.meminfo, SK_MEMINFO_BACKLOG),
                drops=drops,
                inode=e.inode,
            )
        )
    return _keep_worst(out)


# -------------------------------------------------------------------------- recorded

# ss state names (misc/ss.c sstate_name); a line starting with one has no Netid column.
_SS_STATES = frozenset(
    ("UNKNOWN", "ESTAB", "SYN-SENT", "SYN-RECV", "FIN-WAIT-1", "FIN-WAIT-2", "TIME-WAIT",
     "UNCONN", "CLOSE-WAIT", "LAST-ACK", "LISTEN", "CLOSING")
)  # fmt: skip
# Without a Netid column (`ss -tlnm`, `ss -ulnm`, `ss -tan`) the state tells the protocol we
# care about (SYN-RECV is TCP's; a unix or UDP socket never shows it).
_NETID_BY_STATE = {"LISTEN": "tcp", "UNCONN": "udp", "SYN-RECV": "tcp"}
# The last match wins: the process column (users:(("name",...))) comes before these and a
# process name may contain anything.
_INO = re.compile(r"(?:^|\s)ino:(\d+)")
_SKMEM = re.compile(r"skmem:\(([^)]*)\)")
_SKMEM_FIELD = re.compile(r"([a-z]+)(\d+)")
_IPV4_ANY = "0.0.0.0"  # noqa: S104 (an address shown, nothing is bound)
# iproute2 before ~4.15 printed IPv6 unbracketed (":::22") and IPv4 "any" as "*"; newer ss
# prints "0.0.0.0" and keeps "*" for a dual-stack IPv6 socket. An unbracketed ":::" tells.
_OLD_STYLE = re.compile(r"(?:^|\s):::(?:\d+|\*)(?:\s|$)", re.MULTILINE)


def _records(text: str) -> list[tuple[int, str, str]]:
    """(line number, first line, whole record) per socket: tab-indented lines continue one."""
    records: list[tuple[int, list[str]]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line[0] in " \t":
            if records:
                records[-1][1].append(line)
            continue
        records.append((n, [line]))
    return [(n, lines[0], " ".join(lines)) for n, lines in records]


def _parse_endpoint(text: str, old_style: bool) -> tuple[int, str, int]:
    """`0.0.0.0:80`, `[::]:80`, `*:80`, `10.0.0.1%eth0:53`, `[fe80::1]%eth0:53` -> (4|6, addr, port)

    Raises ValueError when it is not an inet endpoint.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ValueError(text)
    port = 0 if port_text == "*" else int(port_text)
    if not 0 <= port <= 0xFFFF:
        raise ValueError(text)
    host = host.split("%", 1)[0]  # interface scope: the socket is bound to a device
    if host == "*":
        return (4, _IPV4_ANY, port) if old_style else (6, "::", port)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    af, version = (socket.AF_INET6, 6) if ":" in host else (socket.AF_INET, 4)
    return version, socket.inet_ntop(af, socket.inet_pton(af, host)), port


@dataclass(frozen=True)
class _SsLine:
    """One tcp/udp socket line of an `ss` listing, its columns read."""

    netid: str
    state: str
    rq: int
    sq: int
    family: int
    addr: str
    port: int
    peer: str
    mem: Mapping[str, int]  # skmem fields by name (r, rb, tb, bl, d ...)
    inode: int


def _ss_lines(text: str, source: str, tcp_states: Sequence[str]) -> tuple[list[_SsLine], bool]:
    """The tcp (in `tcp_states`) and udp lines of an `ss` listing, and whether it has a
    Netid column. See `parse_ss` for what is skipped and what raises."""
    out: list[_SsLine] = []
    netid_column = False
    # (the substring test first: the expression tries every position of a long listing)
    old_style = ":::" in text and _OLD_STYLE.search(text) is not None
    for lineno, first, record in _records(text):
        tokens = first.split()
        if tokens[0] in ("Netid", "State"):
            netid_column = netid_column or tokens[0] == "Netid"
            continue  # header
        explicit = tokens[0] not in _SS_STATES
        if explicit:
            netid, fields = tokens[0], tokens[1:]
        else:
            netid, fields = _NETID_BY_STATE.get(tokens[0], ""), tokens
        where = f"line {lineno}"
        if netid not in ("tcp", "udp"):
            continue
        netid_column = netid_column or explicit
        if not fields:
            raise MalformedHostFile(source, f"{where}: {netid} line without a state")
        if netid == "tcp" and fields[0] not in tcp_states:
            continue
        try:
            if len(fields) < 5:
                raise ValueError("too few columns")
            rq, sq = int(fields[1]), int(fields[2])
            family, addr, port = _parse_endpoint(fields[3], old_style)
        except (ValueError, OSError) as e:
            if not explicit:
                continue  # e.g. a unix socket in a listing without a Netid column
            raise MalformedHostFile(source, f"{where}: not an {netid} socket line ({e})") from None
        inos = _INO.findall(record)
        skmems = _SKMEM.findall(record)
        mem = {k: int(v) for k, v in _SKMEM_FIELD.findall(skmems[-1])} if skmems else {}
        out.append(
            _SsLine(netid, fields[0], rq, sq, family, addr, port, fields[4], mem,
                    int(inos[-1]) if inos else 0)
        )  # fmt: skip
    return out, netid_column


def parse_ss(text: str, source: str) -> tuple[list[ListenSocket], list[UdpSocket]]:
    """Listening TCP and all UDP sockets from `ss -peaonmi` (or `ss -tlnm`/`-ulnm`) output.

    Other netids (u_str, nl, p_raw ...) and TCP states other than LISTEN and SYN-RECV are
    skipped, as are lines without a Netid column that are not inet sockets. A tcp/udp line
    whose queues or local address cannot be read raises MalformedHostFile naming `source` and
    the line.

    `syn_recv` counts the SYN-RECV lines (half-open requests) of each listener, attributed
    as live (see `_count_requests`). It is known, 0 when a listener has none, when the listing
    shows every state: when it has a Netid column (`ss -peaonmi`, as sosreport and `lbtune
    capture` record it) or any SYN-RECV line. A single-protocol listing without either
    (`ss -tlnm`: `-l` hides SYN-RECV) gives None. (`ss -tulnm` has a Netid column yet hides
    SYN-RECV: it reads as 0.)
    """
    listen: list[ListenSocket] = []
    udp: list[UdpSocket] = []
    requests: list[_Endpoint] = []
    lines, netid_column = _ss_lines(text, source, ("LISTEN", "SYN-RECV"))
    for x in lines:
        drops = x.mem.get("d")
        if x.netid == "udp":
            udp.append(UdpSocket(x.family, x.addr, x.port, x.rq, x.mem.get("rb"), drops, x.inode))
        elif x.state == "SYN-RECV":
            requests.append((x.family, x.addr, x.port))
        else:
            listen.append(ListenSocket(x.family, x.addr, x.port, x.rq, x.sq, drops, x.inode))
    if netid_column or requests:
        counts = _count_requests([(s.family, s.addr, s.port) for s in listen], requests)
        listen = [replace(s, syn_recv=n) for s, n in zip(listen, counts)]
    return listen, udp


def parse_ss_receivers(text: str, source: str) -> list[TcpReceiver]:
    """Connected TCP sockets under receive pressure from `ss -peaonmi` output (Netid column
    and skmem needed: lines without skmem `r` and `rb` are skipped), as `dump_tcp_receivers`."""
    lines, _ = _ss_lines(text, source, tuple(_RECEIVING.values()))
    out = []
    for x in lines:
        queued, rcvbuf, drops = x.mem.get("r"), x.mem.get("rb"), x.mem.get("d")
        if x.netid != "tcp" or queued is None or rcvbuf is None:
            continue
        if under_pressure(queued, rcvbuf, drops):
            out.append(
                TcpReceiver(x.family, x.addr, x.port, x.peer, x.state, x.rq, queued, rcvbuf,
                            x.mem.get("tb"), x.mem.get("bl"), drops, x.inode)
            )  # fmt: skip
    return _keep_worst(out)


def _endpoint(family: int, addr: str, port: Union[int, str]) -> str:
    shown = "*" if port == 0 else str(port)
    return f"[{addr}]:{shown}" if family == 6 else f"{addr}:{shown}"


def _skmem(**fields: Optional[int]) -> str:
    # Only the fields lbtune knows; parse_ss (and a reader) take skmem fields by name.
    parts = [f"{k}{v}" for k, v in fields.items() if v is not None]
    return f"\n\t skmem:({','.join(parts)})" if parts else ""


def format_ss(
    listen: Sequence[ListenSocket],
    udp: Sequence[UdpSocket],
    receivers: Sequence[TcpReceiver] = (),
) -> str:
    """`ss -peaonmi`-style text for these sockets (tcp LISTEN, tcp connected and udp lines),
    read back by parse_ss and parse_ss_receivers.

    Only what the dataclasses hold is written: no process column, skmem with `r`, `rb`,
    `tb`, `bl` and `d` where known.
    A listener's `syn_recv` becomes that many `tcp SYN-RECV 0 0 ADDR:PORT *:*` lines after
    it, with the listener's own address so parse_ss gives them back to it. When listeners
    exist and none knows `syn_recv` (read from `ss -tlnm`), the Netid column is left out,
    as in `ss -tlnm` + `ss -ulnm`, so parse_ss reads None back rather than 0.
    """
    rows: list[tuple[str, str, int, int, str, str, str]] = []
    for s in listen:
        tail = f"ino:{s.inode} <->" + _skmem(d=s.drops)
        peer = _endpoint(s.family, "::" if s.family == 6 else _IPV4_ANY, "*")
        local = _endpoint(s.family, s.addr, s.port)
        rows.append(("tcp", "LISTEN", s.queue, s.backlog, local, peer, tail))
        rows.extend(("tcp", "SYN-RECV", 0, 0, local, "*:*", "") for _ in range(s.syn_recv or 0))
    for u in udp:
        tail = f"ino:{u.inode} <->" + _skmem(rb=u.rcvbuf, d=u.drops)
        peer = _endpoint(u.family, "::" if u.family == 6 else _IPV4_ANY, "*")
        rows.append(("udp", "UNCONN", u.queue, 0, _endpoint(u.family, u.addr, u.port), peer, tail))
    for r in receivers:
        mem = _skmem(r=r.queued, rb=r.rcvbuf, tb=r.sndbuf, bl=r.backlog, d=r.drops)
        local = _endpoint(r.family, r.addr, r.port)
        rows.append(("tcp", r.state, r.unread, 0, local, r.peer, f"ino:{r.inode} <->" + mem))
    # Connected sockets are read back only from a listing with a Netid column.
    netid = not listen or bool(receivers) or any(s.syn_recv is not None for s in listen)
    width = max([len(r[4]) for r in rows] + [len("Local Address:Port")])
    state_width = max([len(r[1]) for r in rows] + [len("State")])
    head = f"{'State':<{state_width}} Recv-Q Send-Q {'Local Address:Port':>{width}}"
    lines = [("Netid " if netid else "") + f"{head} {'Peer Address:Port':<17} Process"]
    for netid_name, state, rq, sq, local, peer, tail in rows:
        line = f"{state:<{state_width}} {rq:<6} {sq:<6} {local:>{width}} {peer:<17} {tail}"
        lines.append((f"{netid_name:<5} " if netid else "") + line.rstrip())
    return "\n".join(lines) + "\n"
