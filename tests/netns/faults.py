"""Real kernel faults for the diagnose scenario tests, each made inside one network namespace.

A fault is an object with three steps, all run by a process that is already inside the target
namespace (a forked child that joined it, or the UML lab guest's init namespace):

* ``setup()``   builds what must exist before the diagnose window opens: links, per-netns
  sysctls, a listener whose port the finding should name;
* ``trigger()`` makes the loss happen, bounded in size and time (well under a second), and
  returns the ground truth: how much was attempted, how much the limit lets through, and the
  range the kernel's counter must move by (``lo``..``hi``);
* ``arrival``   names a second kernel counter, moved by the load itself whether or not the
  fault bites (``Tcp.PassiveOpens``, ``Udp.NoPorts``...): the positive control of a fix loop,
  which proves the second load arrived (by at least ``attempted``) before the fault's counter
  standing still can mean anything;
* ``close()``   releases sockets, threads and peer namespaces (links in the target namespace go
  away with the namespace itself);
* ``restart()`` restarts the "application" (a listener is closed and opened again, so that it
  takes the limits in force now, as a restarted server does); most faults have none.

``run_fault(fault)`` does all three in the current namespace and also reads the kernel counters
the fault names before and after the trigger (``Truth.before``/``after``/``delta``).
``Background(netns, fault)`` runs a fault in a forked child inside a named namespace: setup
first, the trigger on request after a delay (so it lands inside an ``lbtune diagnose`` window
that another forked child is sampling), as often as asked (the same load again after a fix),
a restart on request, the teardown when the ``with`` block ends.

Only per-netns sysctls are written, and only in the namespace the fault runs in; the host's
interfaces are never touched. Every fault's peer addresses live in private ranges of that
namespace (10.9/16 .. 10.12/16), so faults can share one namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import socket
import struct
import subprocess
import termios
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Mapping, Optional

CLONE_NEWNET = 0x40000000
SO_MEMINFO = 55  # getsockopt: u32[9] of SK_MEMINFO_*; index 8 is SK_MEMINFO_DROPS
SK_MEMINFO_DROPS = 8
IP_RECVERR = 11  # not exported by Python's socket module

# --------------------------------------------------------------------------- ground truth


@dataclass(frozen=True)
class Truth:
    """What a fault did, and how far the kernel's loss counter must move because of it.

    ``counter`` is the main kernel counter (``TcpExt.ListenOverflows``, ``qdisc qd0 drops``...);
    its delta over the trigger must lie in ``lo..hi`` (the fault's own arithmetic, not a
    reading). ``before``/``after`` hold the readings of every counter the fault names, taken in
    the namespace right before and after the trigger.
    """

    fault: str
    counter: str
    attempted: int  # connections / packets the fault sent
    capacity: int  # how many of them the limit lets through (queue size, bucket count...)
    lo: int  # expected counter movement, lower bound
    hi: int  # expected counter movement, upper bound
    obj: str  # the object a finding should name: "127.0.0.1:18080", "qd0", "ra0"
    knobs: Mapping[str, str]  # current values of the knobs a fix should name
    seconds: float = 0.0  # trigger duration
    setup_seconds: float = 0.0
    before: Mapping[str, int] = field(default_factory=dict)
    after: Mapping[str, int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    arrival: str = ""  # the fault's positive-control counter (Fault.arrival), in before/after

    def delta(self, key: Optional[str] = None) -> int:
        """Counter movement over the trigger (default: the fault's main counter)."""
        k = key or self.counter
        return self.after.get(k, 0) - self.before.get(k, 0)


# --------------------------------------------------------------------------- kernel helpers


def sh(*argv: str, timeout: float = 5.0) -> str:
    """Run a command (argv list, never a shell) in this process's namespaces."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout


def sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def tcp_listener(addr: str, port: int, backlog: int) -> socket.socket:
    """A listening IPv4 TCP socket that never accepts."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(backlog)
    return s


def read_sysctl(key: str) -> str:
    """Current value of a sysctl as the calling thread's namespace sees it."""
    with open(sysctl_path(key)) as f:
        return " ".join(f.read().split())


def write_sysctl(key: str, value: object) -> None:
    """Write a sysctl. Callers only pass per-netns keys, inside a throwaway namespace."""
    if not key.startswith(("net.ipv4.", "net.ipv6.", "net.core.", "net.netfilter.")):
        raise ValueError(f"{key}: faults only write network sysctls")
    with open(sysctl_path(key), "w") as f:
        f.write(f"{value}\n")


def _parse_pairs(path: str) -> dict[str, int]:
    """/proc/net/netstat and /proc/net/snmp: header line, value line, per group."""
    out: dict[str, int] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return out
    for head, vals in zip(lines[::2], lines[1::2]):
        group, _, names = head.partition(":")
        _, _, values = vals.partition(":")
        for name, value in zip(names.split(), values.split()):
            out[f"{group}.{name}"] = int(value)
    return out


def snmp_counters() -> dict[str, int]:
    """TcpExt/IpExt/MPTcpExt (netstat) and Ip/Icmp/Tcp/Udp (snmp) of the current namespace."""
    out = _parse_pairs("/proc/net/netstat")
    out.update(_parse_pairs("/proc/net/snmp"))
    return out


def sockstat() -> dict[str, int]:
    """/proc/net/sockstat as `{"TCP.tw": 4, "TCP.inuse": 1, ...}`."""
    out: dict[str, int] = {}
    with open("/proc/net/sockstat") as f:
        for line in f:
            group, _, rest = line.partition(":")
            words = rest.split()
            for name, value in zip(words[::2], words[1::2]):
                out[f"{group}.{name}"] = int(value)
    return out


def qdisc_stats(dev: str) -> dict[str, int]:
    """Root qdisc counters of dev from `tc -s -j qdisc show`: `{"qdisc dev drops": n, ...}`."""
    out: dict[str, int] = {}
    for q in json.loads(sh("tc", "-s", "-j", "qdisc", "show", "dev", dev) or "[]"):
        if q.get("root"):
            for k in ("packets", "drops", "overlimits", "requeues", "qlen", "backlog"):
                if isinstance(q.get(k), int):
                    out[f"qdisc {dev} {k}"] = q[k]
    return out


def conntrack_stats() -> dict[str, int]:
    """nf_conntrack count/max and the per-CPU stat columns summed, parsed by header."""
    out: dict[str, int] = {}
    for key in ("count", "max"):
        path = f"/proc/sys/net/netfilter/nf_conntrack_{key}"
        if os.path.exists(path):
            with open(path) as f:
                out[f"conntrack {key}"] = int(f.read())
    try:
        with open("/proc/net/stat/nf_conntrack") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        return out
    header = lines[0].split()
    for line in lines[1:]:
        for name, value in zip(header, line.split()):
            if name != "entries":  # a gauge repeated on every row, not a per-CPU counter
                out[f"conntrack stat {name}"] = out.get(f"conntrack stat {name}", 0) + int(
                    value, 16
                )
    return out


def socket_drops(sock: socket.socket) -> int:
    """sk_drops of one socket (SO_MEMINFO), the `d` of `ss -m`."""
    raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 9 * 4)
    return int(struct.unpack("9I", raw)[SK_MEMINFO_DROPS])


def link_up(*devs: str) -> None:
    for dev in devs:
        sh("ip", "link", "set", dev, "up")


def veth(a: str, b: str, mac_a: str, mac_b: str, peer_netns: Optional[str] = None) -> None:
    """A veth pair a<->b with fixed MACs and IPv6 off on a (no DAD/RS/MLD noise on it).

    peer_netns: a path to a netns file (`/proc/PID/fd/N`) to put b in; default here.
    """
    peer = ["peer", "name", b, "address", mac_b]
    if peer_netns:
        peer += ["netns", peer_netns]
    sh("ip", "link", "add", a, "address", mac_a, "type", "veth", *peer)
    write_sysctl(f"net.ipv6.conf.{a}.disable_ipv6", 1)
    if not peer_netns:
        write_sysctl(f"net.ipv6.conf.{b}.disable_ipv6", 1)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _call_in_thread(fn: Callable[[], Any], netns_fd: Optional[int] = None) -> Any:
    """Run fn in a fresh thread (first joined to netns_fd if given); return or re-raise.

    A thread may switch network namespace alone: the process and its other threads stay
    where they are, and sockets or child processes made by the thread belong to its namespace.
    """
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            if netns_fd is not None and _libc().setns(netns_fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns: {os.strerror(err)}")
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():
        raise TimeoutError("thread in peer namespace did not finish in 10 s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class PeerNetns:
    """An anonymous namespace next to the current one, held by a file descriptor only.

    No name in /run/netns and no process: it disappears (with the veth ends moved into it)
    when `close()` drops the descriptor.
    """

    def __init__(self) -> None:
        def make() -> int:
            if _libc().unshare(CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}")
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

        self.fd: int = _call_in_thread(make)

    @property
    def path(self) -> str:
        """A path `ip ... netns PATH` accepts."""
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def call(self, fn: Callable[[], Any]) -> Any:
        return _call_in_thread(fn, self.fd)

    def sh(self, *argv: str) -> str:
        return str(self.call(lambda: sh(*argv)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()
    socks.clear()


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def tcp_syn(src: str, sport: int, dst: str, dport: int, seq: int) -> bytes:
    """An IPv4 packet holding one bare TCP SYN (no options), checksums filled in."""
    s, d = socket.inet_aton(src), socket.inet_aton(dst)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x02, 65535, 0, 0)
    csum = _checksum(s + d + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", csum) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), sport, 0, 64, 6, 0, s, d)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return ip + tcp


# --------------------------------------------------------------------------- faults


class Fault:
    """Base: a fault that runs inside the current namespace. Subclasses fill in the steps."""

    name = "fault"
    counters: tuple[str, ...] = ()  # snmp keys to read before/after
    # An snmp key (or a key of the fault's own snapshot) that the load moves by at least
    # `attempted` once nothing is lost: proof that a load arrived (module docstring).
    arrival = ""

    def setup(self) -> None:
        link_up("lo")

    def trigger(self) -> Truth:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def restart(self) -> None:
        """Restart the application side (default: there is none)."""

    def snapshot(self) -> dict[str, int]:
        """The counters this fault moves (and its arrival counter), read now in the current
        namespace."""
        snmp = snmp_counters()
        keys = (*self.counters, self.arrival) if "." in self.arrival else self.counters
        return {k: snmp.get(k, 0) for k in keys}


class ListenOverflow(Fault):
    """A listener with a tiny backlog that never accepts; more clients than it can queue.

    The accept queue holds backlog+1 connections (the kernel drops when length > backlog).
    Each further client's SYN is dropped with ListenOverflows+1 and ListenDrops+1. The clients
    are closed 0.1 s later, before their 1 s SYN retransmit, so each overflows once; an ACK
    that raced a full queue (overflow counted at the ACK, then again at the client's FIN) can
    at most double a client's count, hence hi = 2*lo. The listener stays open (and full) until
    close().
    """

    name = "listen-overflow"
    counters = ("TcpExt.ListenOverflows", "TcpExt.ListenDrops")
    arrival = "Tcp.PassiveOpens"  # one per handshake that got a child socket

    def __init__(self, port: int = 18080, backlog: int = 2, clients: int = 20,
                 addr: str = "127.0.0.1", somaxconn: Optional[int] = None) -> None:  # fmt: skip
        """`somaxconn`: set the namespace's net.core.somaxconn first (then, with a larger
        `backlog`, somaxconn is the limit)."""
        self.addr, self.port, self.backlog, self.clients = addr, port, backlog, clients
        self.somaxconn = somaxconn
        self.listener: Optional[socket.socket] = None
        self.socks: list[socket.socket] = []

    def setup(self) -> None:
        super().setup()
        if self.somaxconn is not None:
            write_sysctl("net.core.somaxconn", self.somaxconn)
        s = tcp_listener(self.addr, self.port, self.backlog)
        self.listener = s

    def restart(self) -> None:
        """A restarted server: a new listener, with the backlog limit in force now."""
        if self.listener is not None:
            self.listener.close()
        self.listener = tcp_listener(self.addr, self.port, self.backlog)

    def trigger(self) -> Truth:
        somaxconn = int(read_sysctl("net.core.somaxconn"))
        effective = min(self.backlog, somaxconn)
        refused = 0
        for _ in range(self.clients):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            err = c.connect_ex((self.addr, self.port))
            if err not in (0, errno.EINPROGRESS):
                refused += 1
            self.socks.append(c)
        time.sleep(0.1)
        _close_all(self.socks)
        cap = effective + 1
        over = max(self.clients - cap, 0)
        return Truth(
            fault=self.name, counter="TcpExt.ListenOverflows", attempted=self.clients,
            capacity=cap, lo=over, hi=2 * over, obj=f"{self.addr}:{self.port}",
            knobs={"backlog": str(self.backlog), "net.core.somaxconn": str(somaxconn)},
            details={"effective_backlog": effective, "connect_errors": refused},
        )  # fmt: skip

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        _close_all(self.socks)


def half_open() -> int:
    """The kernel's own count of half-open requests in this namespace (`ss state syn-recv`)."""
    out = subprocess.run(["ss", "-tnH", "state", "syn-recv"], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return len(out.splitlines())


def spy_syn_walks(host: Any) -> list[bool]:
    """Note each `host.listen_sockets` call's kind (True: a SYN-queue walk) in the returned
    list; the real dump still runs."""
    walks: list[bool] = []
    real = host.listen_sockets

    def spy(syn_recv: bool = True) -> Any:
        walks.append(syn_recv)
        return real(syn_recv=syn_recv)

    host.listen_sockets = spy
    return walks


class SynQueueFull(Fault):
    """Half-open connections that never complete fill a listener's SYN queue.

    Raw SYNs from spoofed sources in 10.99.0.0/16 reach a listener on 10.9.0.1 (over lo, the
    address is local); the route back to 10.99/16 goes out veth sq0 to a neighbour whose MAC
    belongs to nobody, so the SYN-ACKs vanish on sq1 and no RST ever comes. The SYN queue holds
    backlog+1 requests (full when length > backlog). With net.ipv4.tcp_syncookies=0 each
    further SYN is dropped (TcpExt.TCPReqQFullDrop); with 1 it is answered with a cookie
    (TCPReqQFullDoCookies and SyncookiesSent). No retransmits: spoofed SYNs are sent once.
    """

    name = "syn-queue-full"
    arrival = "Tcp.InSegs"  # each spoofed SYN is one segment received

    def __init__(self, cookies: bool = False, port: int = 18081, backlog: int = 4,
                 syns: int = 40, somaxconn: Optional[int] = None) -> None:  # fmt: skip
        self.cookies, self.port, self.backlog, self.syns = cookies, port, backlog, syns
        self.somaxconn = somaxconn
        self.addr = "10.9.0.1"
        self.round = 0
        self.listener: Optional[socket.socket] = None
        self.counters = (
            "TcpExt.TCPReqQFullDrop", "TcpExt.TCPReqQFullDoCookies", "TcpExt.SyncookiesSent",
            "TcpExt.ListenDrops", "TcpExt.ListenOverflows",
        )  # fmt: skip

    def setup(self) -> None:
        super().setup()
        write_sysctl("net.ipv4.tcp_syncookies", 1 if self.cookies else 0)
        if self.somaxconn is not None:
            write_sysctl("net.core.somaxconn", self.somaxconn)
        veth("sq0", "sq1", "02:00:00:09:00:01", "02:00:00:09:00:02")
        sh("ip", "addr", "add", f"{self.addr}/24", "dev", "sq0")
        link_up("sq0", "sq1")
        sh("ip", "neigh", "replace", "10.9.0.2", "lladdr", "02:00:00:09:00:99", "dev", "sq0",
           "nud", "permanent")  # fmt: skip
        sh("ip", "route", "add", "10.99.0.0/16", "via", "10.9.0.2", "dev", "sq0")
        s = tcp_listener(self.addr, self.port, self.backlog)
        self.listener = s

    def trigger(self) -> Truth:
        somaxconn = int(read_sysctl("net.core.somaxconn"))
        effective = min(self.backlog, somaxconn)
        raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        base = self.round * self.syns  # each round from new sources: no SYN is a retransmit
        self.round += 1
        try:
            for i in range(base, base + self.syns):
                src = f"10.99.{i // 250}.{i % 250 + 1}"
                pkt = tcp_syn(src, 20000 + i, self.addr, self.port, 1000003 * (i + 1))
                raw.sendto(pkt, (self.addr, 0))
        finally:
            raw.close()
        time.sleep(0.02)  # let the last SYNs through the backlog softirq
        cap = effective + 1
        over = max(self.syns - cap, 0)
        cookies = read_sysctl("net.ipv4.tcp_syncookies") == "1"
        counter = "TcpExt.TCPReqQFullDoCookies" if cookies else "TcpExt.TCPReqQFullDrop"
        return Truth(
            fault=self.name + ("-cookies" if self.cookies else ""), counter=counter,
            attempted=self.syns, capacity=cap, lo=over, hi=over,
            obj=f"{self.addr}:{self.port}",
            knobs={
                "backlog": str(self.backlog), "net.core.somaxconn": str(somaxconn),
                "net.ipv4.tcp_syncookies": read_sysctl("net.ipv4.tcp_syncookies"),
                "net.ipv4.tcp_max_syn_backlog": read_sysctl("net.ipv4.tcp_max_syn_backlog"),
            },
        )  # fmt: skip

    def restart(self) -> None:
        """A restarted server: a new listener (its half-open requests die with the old one)."""
        if self.listener is not None:
            self.listener.close()
        self.listener = tcp_listener(self.addr, self.port, self.backlog)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None


class UdpRcvbufErrors(Fault):
    """A UDP socket with a tiny receive buffer, flooded over lo without reading.

    Sends `datagrams` of `size` bytes, then drains what was queued: drops = sent - received,
    exactly (lo loses nothing else at this rate). Udp.RcvbufErrors and the socket's own drop
    counter (SO_MEMINFO, `ss -m` d) both move by that much. The socket stays bound until
    close() so sock_diag can name it.
    """

    name = "udp-rcvbuf-errors"
    counters = ("Udp.RcvbufErrors", "Udp.InErrors", "Udp.InDatagrams")
    arrival = "Udp.InDatagrams"  # each datagram the application read

    def __init__(self, port: int = 15353, rcvbuf: int = 4096, datagrams: int = 200,
                 size: int = 1000, addr: str = "127.0.0.1") -> None:  # fmt: skip
        self.addr, self.port, self.rcvbuf = addr, port, rcvbuf
        self.datagrams, self.size = datagrams, size
        self.rx: Optional[socket.socket] = None

    def setup(self) -> None:
        super().setup()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if self.rcvbuf:  # 0: the application leaves it at net.core.rmem_default
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        rx.bind((self.addr, self.port))
        rx.setblocking(False)
        self.rx = rx

    def snapshot(self) -> dict[str, int]:
        out = super().snapshot()
        if self.rx is not None:
            out["socket drops"] = socket_drops(self.rx)
        return out

    def trigger(self) -> Truth:
        assert self.rx is not None
        payload = b"x" * self.size
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in range(self.datagrams):
                tx.sendto(payload, (self.addr, self.port))
        finally:
            tx.close()
        received = 0
        while True:
            try:
                self.rx.recv(65536)
            except BlockingIOError:
                break
            received += 1
        lost = self.datagrams - received
        effective = self.rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        return Truth(
            fault=self.name, counter="Udp.RcvbufErrors", attempted=self.datagrams,
            capacity=received, lo=lost, hi=lost, obj=f"{self.addr}:{self.port}",
            knobs={
                "SO_RCVBUF": str(effective),
                "net.core.rmem_max": read_sysctl("net.core.rmem_max"),
                "net.core.rmem_default": read_sysctl("net.core.rmem_default"),
            },
            details={"received": received, "requested_rcvbuf": self.rcvbuf},
        )  # fmt: skip

    def close(self) -> None:
        if self.rx is not None:
            self.rx.close()
            self.rx = None


def _paced(n: int, seconds: float) -> Any:
    """range(n), paced as ten even bursts a second over `seconds` (0: all at once)."""
    bursts = max(1, int(seconds * 10))
    start = time.monotonic()
    for b in range(bursts):
        yield from range(n * b // bursts, n * (b + 1) // bursts)
        wait = start + (b + 1) * seconds / bursts - time.monotonic()
        if wait > 0 and b + 1 < bursts:
            time.sleep(wait)


class UdpNoPort(Fault):
    """Datagrams to a UDP port nothing is bound to (a dead DNS server, say), over lo.

    An unconnected sender ignores the ICMP port unreachable that answers each one, so every
    datagram is sent: Udp.NoPorts moves by exactly `datagrams` (drop reason NO_SOCKET). They
    go out in ten bursts a second over `seconds` (a steady stream, as from clients of a dead
    DNS server), so a window that opens late still sees most of them.
    """

    name = "udp-no-port"
    counters = ("Udp.NoPorts", "Udp.InDatagrams")

    def __init__(self, port: int = 15354, datagrams: int = 300, addr: str = "127.0.0.1",
                 seconds: float = 0.0) -> None:  # fmt: skip
        self.addr, self.port, self.datagrams, self.seconds = addr, port, datagrams, seconds

    def trigger(self) -> Truth:
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for _ in _paced(self.datagrams, self.seconds):
                tx.sendto(b"dns?", (self.addr, self.port))
        finally:
            tx.close()
        return Truth(
            fault=self.name, counter="Udp.NoPorts", attempted=self.datagrams, capacity=0,
            lo=self.datagrams, hi=self.datagrams, obj=f"{self.addr}:{self.port}", knobs={},
        )  # fmt: skip


class TcpNoListener(Fault):
    """Connections to a TCP port nothing listens on, over lo: each SYN is answered with a
    reset (reason NO_SOCKET) and each connect fails with ECONNREFUSED, so Tcp.OutRsts moves by
    exactly `connects` (nothing else in the namespace sends resets)."""

    name = "tcp-no-listener"
    counters = ("Tcp.OutRsts", "Tcp.AttemptFails")

    def __init__(self, port: int = 18090, connects: int = 200, addr: str = "127.0.0.1",
                 seconds: float = 0.0) -> None:  # fmt: skip
        self.addr, self.port, self.connects, self.seconds = addr, port, connects, seconds

    def trigger(self) -> Truth:
        refused = 0
        for _ in _paced(self.connects, self.seconds):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                c.connect((self.addr, self.port))
            except ConnectionRefusedError:
                refused += 1
            finally:
                c.close()
        assert refused == self.connects, f"{self.connects - refused} connects were not refused"
        return Truth(
            fault=self.name, counter="Tcp.OutRsts", attempted=self.connects, capacity=0,
            lo=self.connects, hi=self.connects, obj=f"{self.addr}:{self.port}", knobs={},
        )  # fmt: skip


class VipNotOnLo(Fault):
    """A DR real server without the VIP on lo: the director's frames reach it (MAC rewritten
    to the real server's, destination still the VIP) and the kernel, not owning the address
    and not forwarding, drops them (Ip.InAddrErrors, drop reason IP_INADDRERRORS).

    A veth va0 (10.10.3.1/24) joins this namespace to an anonymous peer (va1, 10.10.3.2) that
    plays the director: a static neighbour entry sends the VIP 10.10.3.100 to va0's MAC, and
    `datagrams` UDP datagrams to VIP:80 go out paced over `seconds`. IP forwarding is off in a
    new namespace: Ip.InAddrErrors moves by exactly `datagrams`.
    """

    name = "vip-not-on-lo"
    counters = ("Ip.InAddrErrors", "Udp.NoPorts")
    vip = "10.10.3.100"

    def __init__(self, datagrams: int = 400, seconds: float = 2.0) -> None:
        self.datagrams, self.seconds = datagrams, seconds
        self.peer: Optional[PeerNetns] = None

    def setup(self) -> None:
        super().setup()
        peer = self.peer = PeerNetns()
        veth("va0", "va1", "02:00:00:10:03:01", "02:00:00:10:03:02", peer.path)
        sh("ip", "addr", "add", "10.10.3.1/24", "dev", "va0")
        link_up("va0")
        assert read_sysctl("net.ipv4.ip_forward") == "0"

        def configure_peer() -> None:
            write_sysctl("net.ipv6.conf.va1.disable_ipv6", 1)
            sh("ip", "link", "set", "lo", "up")
            sh("ip", "addr", "add", "10.10.3.2/24", "dev", "va1")
            sh("ip", "link", "set", "va1", "up")
            sh("ip", "neigh", "replace", self.vip, "lladdr", "02:00:00:10:03:01",
               "dev", "va1", "nud", "permanent")  # fmt: skip

        peer.call(configure_peer)

    def trigger(self) -> Truth:
        assert self.peer is not None
        n, secs, vip = self.datagrams, self.seconds, self.vip

        def send() -> None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                for _ in _paced(n, secs):
                    s.sendto(b"GET", (vip, 80))
            finally:
                s.close()

        self.peer.call(send)
        time.sleep(0.02)
        return Truth(
            fault=self.name, counter="Ip.InAddrErrors", attempted=n, capacity=0, lo=n, hi=n,
            obj=self.vip, knobs={"net.ipv4.ip_forward": read_sysctl("net.ipv4.ip_forward")},
        )  # fmt: skip

    def close(self) -> None:
        if self.peer is not None:
            self.peer.close()
            self.peer = None


class RpFilterDrop(Fault):
    """Strict reverse-path filtering on an asymmetric path: every packet is dropped.

    Two veth links join this namespace to an anonymous peer namespace: ra0 (10.10.1.1/24) and
    rb0 (10.10.2.1/24); the route back to 10.10.9.0/24 goes via rb0. The peer sends UDP from
    10.10.9.9 into ra0 (its neighbour entry for 10.10.1.1 is static: an ARP request from that
    source would fail the same check and never be answered). With rp_filter=1 on `all` and ra0
    each packet fails the check: TcpExt.IPReversePathFilter moves by exactly `packets`. With
    mode=2 (loose) they pass and reach UDP (no listener: Udp.NoPorts).
    """

    name = "rp-filter-drop"
    counters = ("TcpExt.IPReversePathFilter", "Udp.NoPorts")
    arrival = "Udp.NoPorts"  # a packet the filter let through reaches UDP: no listener

    def __init__(self, packets: int = 50, mode: int = 1) -> None:
        self.packets, self.mode = packets, mode
        self.peer: Optional[PeerNetns] = None

    def setup(self) -> None:
        super().setup()
        peer = self.peer = PeerNetns()
        veth("ra0", "ra1", "02:00:00:10:01:01", "02:00:00:10:01:02", peer.path)
        veth("rb0", "rb1", "02:00:00:10:02:01", "02:00:00:10:02:02", peer.path)
        sh("ip", "addr", "add", "10.10.1.1/24", "dev", "ra0")
        sh("ip", "addr", "add", "10.10.2.1/24", "dev", "rb0")
        link_up("ra0", "rb0")
        sh("ip", "route", "add", "10.10.9.0/24", "via", "10.10.2.2", "dev", "rb0")
        write_sysctl("net.ipv4.conf.all.rp_filter", self.mode)
        write_sysctl("net.ipv4.conf.ra0.rp_filter", self.mode)

        def configure_peer() -> None:
            for dev in ("ra1", "rb1"):
                write_sysctl(f"net.ipv6.conf.{dev}.disable_ipv6", 1)
            sh("ip", "link", "set", "lo", "up")
            sh("ip", "addr", "add", "10.10.1.2/24", "dev", "ra1")
            sh("ip", "addr", "add", "10.10.2.2/24", "dev", "rb1")
            sh("ip", "addr", "add", "10.10.9.9/32", "dev", "lo")
            sh("ip", "link", "set", "ra1", "up")
            sh("ip", "link", "set", "rb1", "up")
            sh("ip", "neigh", "replace", "10.10.1.1", "lladdr", "02:00:00:10:01:01",
               "dev", "ra1", "nud", "permanent")  # fmt: skip

        peer.call(configure_peer)

    def trigger(self) -> Truth:
        assert self.peer is not None

        def send() -> None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("10.10.9.9", 0))
                for _ in range(self.packets):
                    s.sendto(b"rp", ("10.10.1.1", 9))
            finally:
                s.close()

        self.peer.call(send)
        time.sleep(0.02)
        strict = self.mode == 1  # loose (2) only needs some route back; 0 checks nothing
        lost = self.packets if strict else 0
        return Truth(
            fault=self.name, counter="TcpExt.IPReversePathFilter", attempted=self.packets,
            capacity=0 if strict else self.packets, lo=lost, hi=lost, obj="ra0",
            knobs={
                "net.ipv4.conf.all.rp_filter": read_sysctl("net.ipv4.conf.all.rp_filter"),
                "net.ipv4.conf.ra0.rp_filter": read_sysctl("net.ipv4.conf.ra0.rp_filter"),
            },
            details={"source": "10.10.9.9", "in_dev": "ra0", "route_back_dev": "rb0"},
        )  # fmt: skip

    def close(self) -> None:
        if self.peer is not None:
            self.peer.close()
            self.peer = None


class QdiscDrops(Fault):
    """A UDP flood out of a veth whose root qdisc is a slow tbf.

    tbf rate 1mbit burst 1600 latency 5ms queues about 2 KB; the rest is dropped by the qdisc.
    The sender sets IP_RECVERR so each qdisc drop comes back as ENOBUFS: the count of ENOBUFS
    is the exact number of qdisc drops. The next hop 10.11.0.2 has a static neighbour entry
    (no ARP queueing); the frames die on qd1 as not addressed to it.
    """

    name = "qdisc-drop"
    counters = ("Ip.OutDiscards", "Udp.SndbufErrors")

    def __init__(self, packets: int = 300, size: int = 1000, dev: str = "qd0") -> None:
        self.packets, self.size, self.dev = packets, size, dev
        self.peer_dev = dev[:-1] + "1" if dev.endswith("0") else dev + "p"

    def setup(self) -> None:
        super().setup()
        veth(self.dev, self.peer_dev, "02:00:00:11:00:01", "02:00:00:11:00:02")
        sh("ip", "addr", "add", "10.11.0.1/24", "dev", self.dev)
        link_up(self.dev, self.peer_dev)
        sh("ip", "neigh", "replace", "10.11.0.2", "lladdr", "02:00:00:11:00:99",
           "dev", self.dev, "nud", "permanent")  # fmt: skip
        sh("tc", "qdisc", "add", "dev", self.dev, "root", "tbf", "rate", "1mbit",
           "burst", "1600", "latency", "5ms")  # fmt: skip

    def snapshot(self) -> dict[str, int]:
        out = super().snapshot()
        out.update(qdisc_stats(self.dev))
        return out

    def trigger(self) -> Truth:
        payload = b"q" * self.size
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        dropped = other = 0
        try:
            for _ in range(self.packets):
                try:
                    s.sendto(payload, ("10.11.0.2", 9))
                except OSError as e:
                    if e.errno == errno.ENOBUFS:
                        dropped += 1
                    else:
                        other += 1
        finally:
            s.close()
        return Truth(
            fault=self.name, counter=f"qdisc {self.dev} drops", attempted=self.packets,
            capacity=self.packets - dropped, lo=dropped, hi=dropped, obj=self.dev,
            knobs={"qdisc": "tbf", "rate": "1mbit", "burst": "1600", "latency": "5ms"},
            details={"other_send_errors": other},
        )  # fmt: skip


class TimeWaitOverflow(Fault):
    """More actively closed connections than net.ipv4.tcp_max_tw_buckets allows.

    A server thread accepts, reads to EOF and closes (passive close: no TIME_WAIT there); the
    client connects and closes first, so each client socket needs a TIME_WAIT bucket. The
    namespace holds at most `max_tw` buckets (TIME_WAIT lasts 60 s, nothing expires during the
    test); every further close is TcpExt.TCPTimeWaitOverflow+1: exactly conns - max_tw.
    """

    name = "timewait-overflow"
    counters = ("TcpExt.TCPTimeWaitOverflow",)
    arrival = "Tcp.PassiveOpens"

    def __init__(self, port: int = 18082, max_tw: int = 4, conns: int = 30,
                 addr: str = "127.0.0.1") -> None:  # fmt: skip
        self.addr, self.port, self.max_tw, self.conns = addr, port, max_tw, conns
        self.listener: Optional[socket.socket] = None
        self.thread: Optional[threading.Thread] = None
        self.stop = threading.Event()
        self.served = 0
        self.served_cv = threading.Condition()

    def setup(self) -> None:
        super().setup()
        write_sysctl("net.ipv4.tcp_max_tw_buckets", self.max_tw)
        # tcp_tw_reuse=2 (the default) lets a new loopback connect take over a TIME_WAIT
        # socket's port, which ends that TIME_WAIT early: one bucket short now and then.
        write_sysctl("net.ipv4.tcp_tw_reuse", 0)
        # A client segment the loopback backlog of one CPU delivers late (after the server
        # socket has closed) reaches the listener, which answers with a reset, and a reset
        # ends a TIME_WAIT (RFC 1337 "assassination", tcp_rfc1337=0): one bucket short in 10 of
        # 672 stress runs, traced with tcp:tcp_send_reset (state=TCP_LISTEN,
        # reason=TCP_FLAGS). With tcp_rfc1337=1 TIME_WAIT ignores resets.
        write_sysctl("net.ipv4.tcp_rfc1337", 1)
        s = tcp_listener(self.addr, self.port, 128)
        s.settimeout(0.1)
        self.listener = s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        assert self.listener is not None
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    while conn.recv(4096):
                        pass
                except OSError:
                    pass
            with self.served_cv:
                self.served += 1
                self.served_cv.notify_all()

    def snapshot(self) -> dict[str, int]:
        out = super().snapshot()
        out["sockstat TCP.tw"] = sockstat().get("TCP.tw", 0)
        return out

    def trigger(self) -> Truth:
        tw_before = sockstat().get("TCP.tw", 0)
        start = self.served
        for _ in range(self.conns):
            c = socket.create_connection((self.addr, self.port), timeout=2)
            c.close()
        # Wait for the server to have closed every connection, then for the client sockets
        # to have moved from FIN_WAIT2 to TIME_WAIT (the server's FIN is processed in softirq
        # context; on a loaded machine either can lag). Deadlines are generous waits for a
        # condition, not timing claims.
        deadline = time.monotonic() + 10
        with self.served_cv:
            while self.served - start < self.conns and time.monotonic() < deadline:
                self.served_cv.wait(0.05)
        expected_tw = min(tw_before + self.conns, self.max_tw)
        deadline = time.monotonic() + 5
        while sockstat().get("TCP.tw", 0) < expected_tw and time.monotonic() < deadline:
            time.sleep(0.02)
        room = max(self.max_tw - tw_before, 0)
        over = max(self.conns - room, 0)
        return Truth(
            fault=self.name, counter="TcpExt.TCPTimeWaitOverflow", attempted=self.conns,
            capacity=room, lo=over, hi=over, obj=f"{self.addr}:{self.port}",
            knobs={"net.ipv4.tcp_max_tw_buckets": read_sysctl("net.ipv4.tcp_max_tw_buckets")},
            details={"tw_before": tw_before, "served": self.served - start},
        )  # fmt: skip

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(2)
            self.thread = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None


class ConntrackFull(Fault):
    """More TCP connections over lo than net.netfilter.nf_conntrack_max allows.

    Conntrack only tracks in a namespace once a ruleset needs it. Two ways, tried in order
    (`tracker="auto"`):

    * ``nft``: table `ip lbtune_test`, `ct state new accept` on input. Conntrack itself drops
      the SYN at LOCAL_OUT when the table is full. Needs nf_tables with the ip family (the
      host kernel has it; Debian's UML 6.1 kernel does not: CONFIG_NF_TABLES_IPV4 is off).
    * ``tc``: clsact on lo, egress `matchall action ct commit`, then `flower ct_state
      +trk+inv action drop`. act_ct counts the failed allocation in the same `drop` column but
      lets the packet through; the flower filter drops it, as nf_conntrack would (so the
      connection does not go on untracked). Needs act_ct, cls_matchall, cls_flower (UML has
      them as modules; the host kernel does not).

    nf_conntrack_max is host-global (read-only in a child namespace), so the full table runs
    in the UML lab guest's init namespace; with `max_entries=None` the fault only shows that
    tracking works (count rises by one per connection), in a namespace of the guest. Both
    trackers load modules (nf_conntrack, nf_tables, nft_ct, act_ct...; the kernel autoloads
    them for an nft table or a tc ct action even without modprobe), so the fault refuses to
    set up anywhere but inside a lab guest: tests never load a module on the host.
    Each established connection over lo is one ASSURED entry, which early_drop cannot evict;
    once count == max each further SYN is dropped and the `drop` column of
    /proc/net/stat/nf_conntrack moves by one. Clients are closed after 0.1 s, before the 1 s
    SYN retransmit, so each extra client drops exactly once.
    """

    name = "conntrack-full"
    counters = ()
    arrival = "Tcp.PassiveOpens"  # a SYN conntrack dropped never completes a handshake
    TABLE = "lbtune_test"

    CLOSING = ("close_wait", "fin_wait", "last_ack", "time_wait", "close")

    def __init__(self, max_entries: Optional[int] = 16, conns: int = 24, port: int = 18083,
                 tracker: str = "auto", close_timeout: Optional[int] = None) -> None:  # fmt: skip
        """`close_timeout`: seconds an entry of a closing connection lives (the namespace's
        nf_conntrack_tcp_timeout_{close_wait,fin_wait,...}), so that a round's connections
        leave the table soon after it (a restart then waits for them to go)."""
        if tracker not in ("auto", "nft", "tc"):
            raise ValueError(f"tracker {tracker!r}: auto, nft or tc")
        self.max_entries, self.conns, self.port, self.tracker = max_entries, conns, port, tracker
        self.close_timeout = close_timeout
        self.old_timeouts: dict[str, str] = {}
        self.addr = "127.0.0.1"
        self.listener: Optional[socket.socket] = None
        self.socks: list[socket.socket] = []
        self.old_max: Optional[str] = None
        self.used: Optional[str] = None

    @staticmethod
    def _modprobe(*mods: str) -> None:
        for mod in mods:  # built-in or absent modules: the rule set-up says what is missing
            if not os.path.isdir(f"/sys/module/{mod}"):
                subprocess.run(["modprobe", mod], capture_output=True, check=False, timeout=20)

    def _track_with_nft(self) -> None:
        self._modprobe("nf_conntrack", "nf_tables", "nft_ct")
        sh("nft", "add", "table", "ip", self.TABLE)
        sh("nft", "add", "chain", "ip", self.TABLE, "input",
           "{ type filter hook input priority 0 ; policy accept ; }")  # fmt: skip
        sh("nft", "add", "rule", "ip", self.TABLE, "input", "ct", "state", "new", "accept")

    def _track_with_tc(self) -> None:
        self._modprobe("nf_conntrack", "act_ct", "sch_ingress", "cls_matchall", "cls_flower",
                       "act_gact")  # fmt: skip
        sh("tc", "qdisc", "add", "dev", "lo", "clsact")
        sh("tc", "filter", "add", "dev", "lo", "egress", "chain", "0", "prio", "1", "matchall",
           "action", "ct", "commit", "pipe", "action", "goto", "chain", "1")  # fmt: skip
        sh("tc", "filter", "add", "dev", "lo", "egress", "chain", "1", "prio", "1",
           "protocol", "ip", "flower", "ct_state", "+trk+inv", "action", "drop")  # fmt: skip

    def setup(self) -> None:
        from lbtune.lab.inguest.entry import in_lab

        if not in_lab():
            raise RuntimeError(
                "the conntrack fault loads kernel modules (nf_conntrack, nf_tables, nft_ct, "
                "act_ct): it runs only inside the lab guest (tests/lab/), never on the host"
            )
        super().setup()
        errors = []
        for how in ("nft", "tc") if self.tracker == "auto" else (self.tracker,):
            try:
                (self._track_with_nft if how == "nft" else self._track_with_tc)()
            except (RuntimeError, OSError) as e:
                errors.append(f"{how}: {e}")
                self._untrack()
                continue
            self.used = how
            break
        else:
            raise RuntimeError("cannot make conntrack track: " + "; ".join(errors))
        if self.max_entries is not None:
            self.old_max = read_sysctl("net.netfilter.nf_conntrack_max")
            write_sysctl("net.netfilter.nf_conntrack_max", self.max_entries)
        if self.close_timeout is not None:
            for state in self.CLOSING:
                key = f"net.netfilter.nf_conntrack_tcp_timeout_{state}"
                self.old_timeouts[key] = read_sysctl(key)
                write_sysctl(key, self.close_timeout)
        s = tcp_listener(self.addr, self.port, 1024)
        self.listener = s

    def snapshot(self) -> dict[str, int]:
        out = conntrack_stats()
        out[self.arrival] = snmp_counters().get(self.arrival, 0)
        return out

    def trigger(self) -> Truth:
        count0 = conntrack_stats().get("conntrack count", 0)
        errors: dict[str, int] = {}
        for _ in range(self.conns):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            err = c.connect_ex((self.addr, self.port))
            if err not in (0, errno.EINPROGRESS):
                name = errno.errorcode.get(err, str(err))
                errors[name] = errors.get(name, 0) + 1
            self.socks.append(c)
        time.sleep(0.1)
        count_full = conntrack_stats().get("conntrack count", 0)
        _close_all(self.socks)
        details = {"count_before": count0, "count_full": count_full, "connect_errors": errors,
                   "tracker": self.used}  # fmt: skip
        if self.max_entries is None:  # tracking only: one entry per connection
            return Truth(
                fault=self.name + "-tracking", counter="conntrack count", attempted=self.conns,
                capacity=self.conns, lo=self.conns, hi=self.conns, obj="conntrack",
                knobs={"net.netfilter.nf_conntrack_max":
                       read_sysctl("net.netfilter.nf_conntrack_max")},
                details=details,
            )  # fmt: skip
        room = max(self.max_entries - count0, 0)
        over = max(self.conns - room, 0)
        # Entries left by an earlier round (closed connections) may expire while this one
        # runs and make room: at most all of them, so the drops lie in [lo, over].
        lo = max(self.conns - self.max_entries, 0)
        return Truth(
            fault=self.name, counter="conntrack stat drop", attempted=self.conns,
            capacity=room, lo=lo, hi=over, obj="conntrack",
            knobs={"net.netfilter.nf_conntrack_max": str(self.max_entries)}, details=details,
        )  # fmt: skip

    def restart(self) -> None:
        """A restarted server: the listener closes and opens again; then waits (at most
        75 s) until the entries of the connections it had are gone, so the next round starts
        from an empty table. With `close_timeout` they expire in seconds, but the count
        drops only when something removes them: the GC worker, whose next run may be up to
        60 s away on 6.1 (a fix loop with a control restarts twice and met that: 16 entries
        still counted after 20 s), or a read of the table, which removes the expired entries
        it meets (/proc/net/nf_conntrack), read here while waiting."""
        if self.listener is not None:
            self.listener.close()
        self.listener = tcp_listener(self.addr, self.port, 1024)
        deadline = time.monotonic() + 75
        while time.monotonic() < deadline and conntrack_stats().get("conntrack count", 0) > 2:
            with contextlib.suppress(OSError), open("/proc/net/nf_conntrack") as f:
                f.read()
            time.sleep(0.5)

    def _untrack(self) -> None:
        if self.used in (None, "nft"):
            subprocess.run(["nft", "delete", "table", "ip", self.TABLE], capture_output=True,
                           check=False, timeout=5)  # fmt: skip
        if self.used in (None, "tc"):
            subprocess.run(["tc", "qdisc", "del", "dev", "lo", "clsact"], capture_output=True,
                           check=False, timeout=5)  # fmt: skip

    def close(self) -> None:
        _close_all(self.socks)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        # A lab guest dies right after; restore anyway so a second round starts clean.
        self._untrack()
        if self.old_max is not None:
            write_sysctl("net.netfilter.nf_conntrack_max", self.old_max)
            self.old_max = None
        for key, value in self.old_timeouts.items():
            write_sysctl(key, value)
        self.old_timeouts = {}


class Idle(Fault):
    """Nothing wrong: lo and a veth pair up, no traffic."""

    name = "idle"
    counters = ("TcpExt.ListenOverflows", "TcpExt.ListenDrops", "Udp.RcvbufErrors")

    def setup(self) -> None:
        super().setup()
        veth("id0", "id1", "02:00:00:12:00:01", "02:00:00:12:00:02")
        sh("ip", "addr", "add", "10.12.0.1/24", "dev", "id0")
        link_up("id0", "id1")

    def trigger(self) -> Truth:
        return Truth(fault=self.name, counter="TcpExt.ListenDrops", attempted=0, capacity=0,
                     lo=0, hi=0, obj="", knobs={})  # fmt: skip


# --------------------------------------------------------------------------- running


def run_fault(fault: Fault) -> Truth:
    """setup, read counters, trigger, read counters, close, all in the current namespace."""
    t0 = time.monotonic()
    try:
        fault.setup()
        t1 = time.monotonic()
        before = fault.snapshot()
        t2 = time.monotonic()
        truth = fault.trigger()
        t3 = time.monotonic()
        after = fault.snapshot()
    finally:
        fault.close()
    return replace(truth, setup_seconds=t1 - t0, seconds=t3 - t2, before=before, after=after,
                   arrival=truth.arrival or fault.arrival)


def _child(conn: Connection, netns: Optional[str], fault: Fault) -> None:
    """The Background child: protocol over conn, always ends with os._exit."""
    code = 0
    try:
        if netns is not None:
            from lbtune.host.net.netns import enter_netns

            enter_netns(netns)
        t0 = time.monotonic()
        fault.setup()
        setup_s = time.monotonic() - t0
        conn.send(("ready", setup_s))
        while True:  # "go" (again and again), "restart", until "stop" or EOFError
            msg = conn.recv()
            if msg[0] == "restart":
                fault.restart()
                conn.send(("restarted", None))
                continue
            if msg[0] != "go":
                break
            time.sleep(msg[1])
            before = fault.snapshot()
            t1 = time.monotonic()
            truth = fault.trigger()
            t2 = time.monotonic()
            after = fault.snapshot()
            conn.send(("truth", replace(truth, setup_seconds=setup_s, seconds=t2 - t1,
                                        before=before, after=after,
                                        arrival=truth.arrival or fault.arrival)))  # fmt: skip
    except BaseException:
        code = 1
        with contextlib.suppress(OSError, EOFError):
            conn.send(("error", traceback.format_exc()))
    finally:
        try:
            fault.close()
        except BaseException:
            code = 1
        with contextlib.suppress(OSError, EOFError):
            conn.send(("closed", code))
        os._exit(code)


class Background:
    """Run `fault` in a forked child inside namespace `netns` (None: the current one).

    ``with Background(ns, fault) as bg:`` returns after setup; ``bg.trigger(after=0.7)``
    starts the trigger that many seconds later in the child and returns at once;
    ``bg.truth()`` waits for it. Trigger again for the same load once more (after a fix);
    ``bg.restart()`` restarts the fault's application. Leaving the block closes the fault
    and reaps the child.
    """

    def __init__(self, netns: Optional[str], fault: Fault, timeout: float = 10.0) -> None:
        self.netns, self.fault, self.timeout = netns, fault, timeout
        self.pid = 0
        self.conn: Optional[Connection] = None
        self.setup_seconds = 0.0
        self._truth: Optional[Truth] = None

    def __enter__(self) -> Background:
        parent, child = Pipe(duplex=True)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            parent.close()
            _child(child, self.netns, self.fault)
        child.close()
        self.pid, self.conn = pid, parent
        try:
            self.setup_seconds = float(self._expect("ready"))
        except BaseException:
            self._reap()
            raise
        return self

    def _expect(self, kind: str) -> Any:
        assert self.conn is not None
        if not self.conn.poll(self.timeout):
            raise TimeoutError(f"{self.fault.name}: no {kind!r} from the fault child")
        msg = self.conn.recv()
        if msg[0] == "error":
            raise AssertionError(f"{self.fault.name} failed in its namespace:\n{msg[1]}")
        if msg[0] != kind:
            raise AssertionError(f"{self.fault.name}: expected {kind!r}, got {msg[0]!r}")
        return msg[1]

    def trigger(self, after: float = 0.0) -> None:
        assert self.conn is not None
        self._truth = None
        self.conn.send(("go", after))

    def restart(self) -> None:
        assert self.conn is not None
        self.conn.send(("restart", None))
        self._expect("restarted")

    def forget(self) -> None:
        """The next truth() waits for a new result: for a trigger sent by a forked child that
        inherited this object (trigger_in_window around `run_cli("--netns", ...)`)."""
        self._truth = None

    def truth(self) -> Truth:
        if self._truth is None:
            self._truth = self._expect("truth")
        assert self._truth is not None
        return self._truth

    def _reap(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(OSError, EOFError):
                self.conn.send(("stop", None))
            if self.conn.poll(self.timeout):
                with contextlib.suppress(EOFError):
                    self.conn.recv()
            self.conn.close()
            self.conn = None
        if self.pid:
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.01)
            else:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            self.pid = 0

    def __exit__(self, *exc: object) -> None:
        self._reap()


@contextlib.contextmanager
def trigger_in_window(bg: Background) -> Iterator[list[str]]:
    """Make the next diagnose window taken in this process - or in a child forked inside the
    block (`run_cli("--netns", ...)`) - contain the whole of bg's fault, by conditions, not
    delays: once the window's first sample is in, the trigger starts; every later sample
    first waits (up to bg.timeout) until the fault's result is in. Yields the order of
    events as this process saw them: "sample", "trigger", "fault done" (or "fault not done").
    Read the result with bg.truth() after the block."""
    from lbtune.observe.sampler import Sampler

    orig = Sampler.take
    events: list[str] = []

    def take(self: Any) -> Any:
        if "trigger" in events and not any(e.startswith("fault ") for e in events):
            assert bg.conn is not None
            events.append("fault done" if bg.conn.poll(bg.timeout) else "fault not done")
        sample = orig(self)
        events.append("sample")
        if "trigger" not in events:
            bg.trigger()
            events.append("trigger")
        return sample

    bg.forget()
    Sampler.take = take  # type: ignore[method-assign]
    try:
        yield events
    finally:
        Sampler.take = orig  # type: ignore[method-assign]


def run_in_netns(netns: str, fault: Fault) -> Truth:
    """run_fault in a forked child inside netns (the host process stays where it is)."""
    with Background(netns, fault) as bg:
        bg.trigger(0.0)
        return bg.truth()


# --------------------------------------------------------------------------- faults where the
# sysctl is not the cause (issue 9 item 10): the fix lbtune proposes must be the one that works


class PinnedRcvbufPrune(Fault):
    """A TCP receiver whose application pins a tiny SO_RCVBUF and never reads: pruning.

    A connection over lo is accepted with the default receive buffer (so the window it
    advertised is large), then the application sets SO_RCVBUF to `rcvbuf` on the accepted
    socket and stops reading. The sender keeps sending inside the advertised window, the
    receive memory passes the now tiny buffer, and the kernel prunes (PruneCalled) and drops
    (RcvPruned, TCPRcvQDrop, the socket's own sk_drops). Measured on 6.18: 1-2 prunes per
    trigger, then the sender's retransmits (RTO backoff) prune again while the window lasts.
    Raising net.ipv4.tcp_rmem changes nothing for this socket: SO_RCVBUF switched its
    autotuning off. Both ends stay open until close() so sock_diag shows the full socket.
    """

    name = "pinned-rcvbuf-prune"
    counters = ("TcpExt.PruneCalled", "TcpExt.RcvPruned", "TcpExt.TCPRcvQDrop")

    def __init__(self, port: int = 18090, rcvbuf: int = 2048, chunk: int = 1000,
                 total: int = 200_000, addr: str = "127.0.0.1") -> None:  # fmt: skip
        self.addr, self.port, self.rcvbuf, self.chunk, self.total = addr, port, rcvbuf, chunk, total
        self.socks: list[socket.socket] = []
        self.receiver: Optional[socket.socket] = None

    def setup(self) -> None:
        super().setup()
        srv = tcp_listener(self.addr, self.port, 8)
        tx = socket.create_connection((self.addr, self.port), timeout=2)
        rx, _ = srv.accept()
        srv.close()
        tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tx.setblocking(False)
        self.socks += [tx, rx]
        self.receiver = rx

    def trigger(self) -> Truth:
        assert self.receiver is not None
        tx = self.socks[0]
        self.receiver.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        pinned = self.receiver.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        sent, deadline = 0, time.monotonic() + 0.5
        while sent < self.total and time.monotonic() < deadline:
            try:
                sent += tx.send(b"x" * self.chunk)
            except BlockingIOError:
                time.sleep(0.005)
        time.sleep(0.05)
        return Truth(
            fault=self.name, counter="TcpExt.PruneCalled", attempted=sent, capacity=pinned,
            lo=1, hi=1_000, obj=f"{self.addr}:{self.port}",
            knobs={"SO_RCVBUF": str(pinned),
                   "net.ipv4.tcp_rmem": read_sysctl("net.ipv4.tcp_rmem")},
            details={"receiver_drops": socket_drops(self.receiver)},
        )  # fmt: skip

    def close(self) -> None:
        self.receiver = None
        _close_all(self.socks)


class TcpRmemPrune(Fault):
    """An autotuned TCP receiver (no SO_RCVBUF) in a namespace whose net.ipv4.tcp_rmem is
    tiny, sent one-byte segments it does not read: tcp_rmem is the cause.

    `setup()` sets the namespace's tcp_rmem to `rmem` ("4096 4096 4096": the socket's buffer
    starts at the default and may grow to the maximum) and opens a listener. Each trigger
    opens a new connection over lo (so the window is open again) and sends `segments` bytes
    one at a time (TCP_NODELAY, paced by `pause`): every byte is a segment of its own whose
    memory (its skb, ~1 KiB) is far more than the byte the window counted, so the receive
    memory passes the buffer. The kernel then calls tcp_prune_queue: tcp_clamp_window grows
    the buffer to the memory in use, up to tcp_rmem's maximum; at the maximum it must
    collapse the queue (TCPRcvCollapsed, the data copied into compact buffers) and, when that
    is not enough, drop (RcvPruned). Measured on 6.18 (bench/results/receive_faults.md):
    1-2 prunes and 9-18 collapsed segments with the maximum at 4096; with 16777216 the
    buffer grows (PruneCalled counts every growth) and nothing is collapsed. The arrival is
    the bytes that reached the receiver (SIOCINQ, waited for up to `wait` seconds): all of
    them once nothing is lost.
    """

    name = "tcp-rmem-prune"
    counters = ("TcpExt.TCPRcvCollapsed", "TcpExt.RcvPruned", "TcpExt.PruneCalled")
    arrival = "bytes arrived"

    def __init__(self, port: int = 18092, rmem: str = "4096 4096 4096", segments: int = 300,
                 pause: float = 0.001, wait: float = 5.0) -> None:  # fmt: skip
        self.port, self.rmem, self.segments = port, rmem, segments
        self.pause, self.wait = pause, wait
        self.addr = "127.0.0.1"
        self.listener: Optional[socket.socket] = None
        self.socks: list[socket.socket] = []
        self.arrived = 0

    def setup(self) -> None:
        super().setup()
        write_sysctl("net.ipv4.tcp_rmem", self.rmem)
        self.listener = tcp_listener(self.addr, self.port, 8)

    def snapshot(self) -> dict[str, int]:
        return {**super().snapshot(), "bytes arrived": self.arrived}

    def trigger(self) -> Truth:
        assert self.listener is not None
        _close_all(self.socks)  # the last round's full connection: its window is shut
        tx = socket.create_connection((self.addr, self.port), timeout=2)
        rx, _ = self.listener.accept()
        self.socks += [tx, rx]
        tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = _one_byte_segments(tx, self.segments, self.pause, self.wait)
        # bounded wait on the receiver's queue (SIOCINQ), not a fixed delay
        inq, deadline = 0, time.monotonic() + self.wait
        while time.monotonic() < deadline:
            inq = _inq(rx)
            if inq >= sent:
                break
            time.sleep(0.01)
        self.arrived += inq
        rcvbuf = rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        return Truth(
            fault=self.name, counter="TcpExt.TCPRcvCollapsed", attempted=sent,
            capacity=rcvbuf, lo=1, hi=sent, obj="tcp sockets",
            knobs={"net.ipv4.tcp_rmem": read_sysctl("net.ipv4.tcp_rmem")},
            details={"received": inq, "rcvbuf_after": rcvbuf},
        )  # fmt: skip

    def close(self) -> None:
        _close_all(self.socks)
        if self.listener is not None:
            self.listener.close()
            self.listener = None


class _Stall:
    """One anonymous page registered with userfaultfd (missing mode): a copy into it blocks
    in the kernel until `release()`. A recv() into it stalls inside tcp_recvmsg with the
    socket lock held, as an application does whose buffer page is swapped out."""

    SYS_USERFAULTFD = 323  # x86_64
    UFFDIO_API, UFFDIO_REGISTER, UFFDIO_COPY = 0xC018AA3F, 0xC020AA00, 0xC028AA03
    UFFD_EVENT_PAGEFAULT = 0x12
    PAGE = 4096

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]  # fmt: skip
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.libc = libc
        self.fd = libc.syscall(self.SYS_USERFAULTFD, os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "userfaultfd")
        self._ioctl(self.UFFDIO_API, struct.pack("QQQ", 0xAA, 0, 0))
        # PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS
        self.addr = libc.mmap(None, self.PAGE, 3, 0x22, -1, 0)
        self._ioctl(self.UFFDIO_REGISTER, struct.pack("QQQQ", self.addr, self.PAGE, 1, 0))
        self.buf = memoryview((ctypes.c_char * self.PAGE).from_address(self.addr)).cast("B")

    def _ioctl(self, req: int, arg: bytes) -> None:
        b = ctypes.create_string_buffer(arg)
        if self.libc.ioctl(self.fd, req, b) != 0:
            raise OSError(ctypes.get_errno(), f"userfaultfd ioctl {req:#x}")

    def wait_fault(self) -> None:
        """Block until a copy into the page faults (the copier is then stalled)."""
        msg = os.read(self.fd, 32)
        if msg[0] != self.UFFD_EVENT_PAGEFAULT:
            raise RuntimeError(f"userfaultfd: unexpected event {msg[0]:#x}")

    def release(self) -> None:
        """Fill the page: the stalled copy completes."""
        src = ctypes.create_string_buffer(self.PAGE)
        arg = struct.pack("QQQQq", self.addr, ctypes.addressof(src), self.PAGE, 0, 0)
        self._ioctl(self.UFFDIO_COPY, arg)

    def close(self) -> None:
        self.buf.release()
        self.libc.munmap(self.addr, self.PAGE)
        os.close(self.fd)


class SocketBacklogFull(Fault):
    """A TCP receiver stalled in recv() while segments arrive: its backlog overflows.

    The namespace's tcp_rmem is `rmem` ("4096 4096 4096") and tcp_wmem "4096 16384 16384",
    so the receiver's buffers are small; the route to 127.0.0.1 gets initcwnd 1000 and the
    sender a large SO_SNDBUF (the sender is not the socket under diagnosis), so the sender
    is limited by neither. Each trigger opens a new connection, queues one byte, and has a
    thread recv() it into a page registered with userfaultfd: the copy faults and stalls
    with the socket lock held (_Stall). While it stalls, `segments` one-byte segments arrive
    into the socket's backlog, whose limit is the receive + send buffer + 64 KiB as they are
    (tcp_add_backlog, 6.18): each one-byte segment costs ~1 KiB, so past ~70 of them the
    kernel drops (TCPBacklogDrop). Then the stall is released; the sender retransmits.
    Measured on 6.18 with 150 segments (bench/results/receive_faults.md, 5 rounds): a median
    of 53 drops at "4096 4096 4096" and at "4096 4096 16777216" (the maximum alone changes
    nothing), 0 at "4096 131072 16777216".

    `pin`: the application sets SO_RCVBUF to this on the accepted socket (the case where
    tcp_rmem is not the cause). The arrival: the bytes that reached the receiver (SIOCINQ
    plus the byte read), waited for up to `wait` seconds.
    """

    name = "socket-backlog-full"
    counters = ("TcpExt.TCPBacklogDrop",)
    arrival = "bytes arrived"

    def __init__(self, port: int = 18093, rmem: str = "4096 4096 4096", segments: int = 150,
                 pin: int = 0, wait: float = 5.0) -> None:  # fmt: skip
        self.port, self.rmem, self.segments, self.pin, self.wait = port, rmem, segments, pin, wait
        self.addr = "127.0.0.1"
        self.listener: Optional[socket.socket] = None
        self.socks: list[socket.socket] = []
        self.arrived = 0

    def setup(self) -> None:
        super().setup()
        write_sysctl("net.ipv4.tcp_rmem", self.rmem)
        write_sysctl("net.ipv4.tcp_wmem", "4096 16384 16384")
        sh("ip", "route", "replace", "local", self.addr, "dev", "lo", "table", "local",
           "proto", "kernel", "scope", "host", "src", self.addr, "initcwnd", "1000")  # fmt: skip
        self.listener = tcp_listener(self.addr, self.port, 8)

    def snapshot(self) -> dict[str, int]:
        return {**super().snapshot(), "bytes arrived": self.arrived}

    def restart(self) -> None:
        """A restarted server: a new listener, whose accepted sockets start from the
        tcp_rmem default in force now (a child socket takes its listener's buffer)."""
        if self.listener is not None:
            self.listener.close()
        self.listener = tcp_listener(self.addr, self.port, 8)

    def trigger(self) -> Truth:
        assert self.listener is not None
        _close_all(self.socks)
        tx = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        tx.settimeout(2)
        tx.connect((self.addr, self.port))
        rx, _ = self.listener.accept()
        self.socks += [tx, rx]
        if self.pin:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.pin)
        tx.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        tx.sendall(b"a")
        deadline = time.monotonic() + self.wait
        while _inq(rx) < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        stall = _Stall()
        got: list[int] = []
        reader = threading.Thread(target=lambda: got.append(rx.recv_into(stall.buf, 1)))
        try:
            reader.start()
            stall.wait_fault()  # the receiver is inside recv(), holding its socket
            t0, in_segs = time.monotonic(), snmp_counters()["Tcp.InSegs"]
            sent = _one_byte_segments(tx, self.segments, 0.0005, self.wait)
            # release only once TCP has taken every segment in (Tcp.InSegs: into the
            # backlog or dropped from it): on a loaded machine the softirq that delivers
            # them over lo may run late, after a release, and then no backlog fills
            deadline = time.monotonic() + self.wait
            while snmp_counters()["Tcp.InSegs"] - in_segs < sent:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            in_segs_seen = snmp_counters()["Tcp.InSegs"] - in_segs
            stalled = time.monotonic() - t0
        finally:
            stall.release()
            reader.join(self.wait)
            stall.close()
        inq, deadline = 0, time.monotonic() + self.wait
        while time.monotonic() < deadline:  # the retransmits of what was dropped
            inq = _inq(rx)
            if inq >= sent:
                break
            time.sleep(0.01)
        self.arrived += inq + sum(got)
        return Truth(
            fault=self.name, counter="TcpExt.TCPBacklogDrop", attempted=sent,
            capacity=rx.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), lo=1, hi=sent,
            obj=f"{self.addr}:{self.port}",
            knobs={"net.ipv4.tcp_rmem": read_sysctl("net.ipv4.tcp_rmem"),
                   "SO_RCVBUF": str(self.pin or "not set")},
            details={"received": inq, "in_segs": in_segs_seen, "stalled_s": round(stalled, 3)},
        )  # fmt: skip

    def close(self) -> None:
        _close_all(self.socks)
        if self.listener is not None:
            self.listener.close()
            self.listener = None


SIOCOUTQNSD = 0x894B  # bytes in a TCP socket's send queue not yet sent


def _one_byte_segments(tx: socket.socket, n: int, pause: float, wait: float) -> int:
    """Send `n` bytes one segment each: after each send, wait (bounded: `wait` seconds for
    all of them) until the byte has left, so a loaded machine - whose softirqs run late -
    cannot merge bytes that are still unsent into one segment. Returns the bytes sent."""
    deadline = time.monotonic() + wait
    sent = 0
    for _ in range(n):
        sent += tx.send(b"x")
        while time.monotonic() < deadline:
            raw = fcntl.ioctl(tx, SIOCOUTQNSD, b"\0" * 4)
            if struct.unpack("i", raw)[0] == 0:
                break
            time.sleep(0.0002)
        time.sleep(pause)
    return sent


def _inq(sock: socket.socket) -> int:
    """Bytes waiting in a socket's receive queue (SIOCINQ)."""
    return int(struct.unpack("i", fcntl.ioctl(sock, termios.FIONREAD, b"\0" * 4))[0])


class UdpDefaultRcvbuf(UdpRcvbufErrors):
    """As UdpRcvbufErrors, but the application sets no SO_RCVBUF: the socket has
    net.core.rmem_default, so that sysctl (host-global: read-only in a namespace) is the fix."""

    name = "udp-default-rcvbuf"

    def __init__(self, port: int = 15354, datagrams: int = 600, size: int = 1000) -> None:
        super().__init__(port=port, rcvbuf=0, datagrams=datagrams, size=size)

    def setup(self) -> None:
        link_up("lo")
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((self.addr, self.port))
        rx.setblocking(False)
        self.rx = rx

    def restart(self) -> None:
        """A restarted server: a new socket, which takes net.core.rmem_default now."""
        self.close()
        self.setup()


class PortRangeExhausted(Fault):
    """Every port of a tiny ip_local_port_range held by connections to one listener.

    The namespace's range is set to `ports` ports (a per-namespace sysctl), `ports`
    connections to one listener over lo take them all, and one more connect() fails with
    EADDRNOTAVAIL: the range is used up, not "nearly". The connections stay open until
    close() so the diagnose window sees them.
    """

    name = "port-range-exhausted"
    counters = ()
    arrival = "Tcp.ActiveOpens"  # a connect() that found a port sent its SYN

    def __init__(self, ports: int = 10, low: int = 40000, port: int = 18091) -> None:
        self.ports, self.low, self.port = ports, low, port
        self.addr = "127.0.0.1"
        self.socks: list[socket.socket] = []

    def setup(self) -> None:
        super().setup()
        write_sysctl("net.ipv4.ip_local_port_range", f"{self.low} {self.low + self.ports - 1}")
        self.socks.append(tcp_listener(self.addr, self.port, 128))

    def trigger(self) -> Truth:
        errors: dict[str, int] = {}
        for _ in range(self.ports + 1):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                c.connect((self.addr, self.port))
            except OSError as e:
                name = errno.errorcode.get(e.errno or 0, str(e.errno))
                errors[name] = errors.get(name, 0) + 1
                c.close()
                continue
            self.socks.append(c)
        held = len(self.socks) - 1
        return Truth(
            fault=self.name, counter="ports in use", attempted=self.ports + 1,
            capacity=self.ports, lo=self.ports, hi=self.ports, obj="ip_local_port_range",
            knobs={"net.ipv4.ip_local_port_range": read_sysctl("net.ipv4.ip_local_port_range")},
            details={"held": held, "connect_errors": errors},
        )  # fmt: skip

    def close(self) -> None:
        _close_all(self.socks)


# --------------------------------------------------------------------------- host-global faults
# Their sysctls belong to the kernel, not to a namespace: they run only inside the UML lab
# guest (its init namespace), never on the host. `write_global_sysctl` refuses elsewhere.


def tcp_memory_pressure() -> bool:
    """Whether TCP is under memory pressure now (/proc/net/protocols, its `press` column)."""
    with open("/proc/net/protocols") as f:
        head = f.readline().split()
        for line in f:
            cols = line.split()
            if cols and cols[0] == "TCP":
                return cols[head.index("press")] == "yes"
    raise RuntimeError("/proc/net/protocols has no TCP line")


def write_global_sysctl(key: str, value: object) -> None:
    """Write a host-global sysctl: only inside the lab guest (a UML kernel of its own)."""
    from lbtune.lab.inguest.entry import running_on_uml

    if not running_on_uml():
        raise RuntimeError(f"{key} is host-global: written only inside the UML lab guest")
    with open(sysctl_path(key), "w") as f:
        f.write(f"{value}\n")


def softnet_totals() -> dict[str, int]:
    """/proc/net/softnet_stat summed over CPUs: processed, dropped, time_squeeze."""
    out = {"softnet processed": 0, "softnet dropped": 0, "softnet time_squeeze": 0}
    with open("/proc/net/softnet_stat") as f:
        for line in f:
            cols = [int(x, 16) for x in line.split()]
            out["softnet processed"] += cols[0]
            out["softnet dropped"] += cols[1]
            out["softnet time_squeeze"] += cols[2]
    return out


class BacklogFlood(Fault):
    """Broadcasts flooded by a bridge to `ports` veth ports fill the CPU's input backlog.

    The bridge bf0 (10.13.0.1/24) has `ports` veth ports whose peers are up: one broadcast
    sent out of bf0 is copied to every port with bottom halves off, and each copy reaches its
    peer through netif_rx, i.e. this CPU's input backlog, before the receive softirq runs.
    The backlog takes a packet while it holds at most net.core.netdev_max_backlog, so with
    `max_backlog` set each broadcast loses ports - (max_backlog + 1) copies
    (softnet_stat column 2). With `budget` set (net.core.netdev_budget), one softirq round
    processes all `ports` copies (a backlog poll takes up to 64) and so exceeds the budget:
    one time squeeze (column 3) per broadcast. Both sysctls are host-global: lab only.
    """

    name = "backlog-flood"
    arrival = "softnet processed"  # every copy the backlog took

    def __init__(self, ports: int = 20, broadcasts: int = 20, max_backlog: Optional[int] = None,
                 budget: Optional[int] = None) -> None:  # fmt: skip
        self.ports, self.broadcasts = ports, broadcasts
        self.max_backlog, self.budget = max_backlog, budget

    def setup(self) -> None:
        super().setup()
        sh("ip", "link", "add", "bf0", "type", "bridge")
        write_sysctl("net.ipv6.conf.bf0.disable_ipv6", 1)
        for i in range(self.ports):
            a, b = f"bfa{i}", f"bfb{i}"
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            for dev in (a, b):
                write_sysctl(f"net.ipv6.conf.{dev}.disable_ipv6", 1)
            sh("ip", "link", "set", a, "master", "bf0")
            link_up(a, b)
        sh("ip", "addr", "add", "10.13.0.1/24", "dev", "bf0")
        link_up("bf0")
        if self.max_backlog is not None:
            write_global_sysctl("net.core.netdev_max_backlog", self.max_backlog)
        if self.budget is not None:
            write_global_sysctl("net.core.netdev_budget", self.budget)

    def snapshot(self) -> dict[str, int]:
        return softnet_totals()

    def trigger(self) -> Truth:
        max_backlog = int(read_sysctl("net.core.netdev_max_backlog"))
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        try:
            for _ in range(self.broadcasts):
                s.sendto(b"b" * 64, ("10.13.0.255", 9))
                time.sleep(0.005)  # one broadcast's copies drained before the next
        finally:
            s.close()
        per = max(self.ports - (max_backlog + 1), 0)
        squeeze = self.budget is not None
        return Truth(
            fault=self.name, counter="softnet time_squeeze" if squeeze else "softnet dropped",
            attempted=self.broadcasts * self.ports, capacity=max_backlog + 1,
            lo=self.broadcasts if squeeze else per * self.broadcasts,
            hi=2 * self.broadcasts if squeeze else per * self.broadcasts, obj="cpu 0",
            knobs={"net.core.netdev_max_backlog": str(max_backlog),
                   "net.core.netdev_budget": read_sysctl("net.core.netdev_budget")},
        )  # fmt: skip

    def close(self) -> None:
        """The links go (in the lab guest no namespace takes them away)."""
        for dev in ["bf0", *(f"bfa{i}" for i in range(self.ports))]:
            subprocess.run(["ip", "link", "del", dev], capture_output=True, check=False,
                           timeout=5)  # fmt: skip


class OrphanFlood(Fault):
    """Closed connections with unsent data become orphans; past tcp_max_orphans they reset.

    A server accepts and never reads (receive buffer 4 KB); each client fills the window and
    its own send buffer, then closes: the socket is orphaned in FIN-WAIT-1 with data queued,
    probing a zero window. The kernel compares its orphan count (a cache refreshed every
    100 ms) with net.ipv4.tcp_max_orphans at each close: after the first `first` closes and
    a pause, each further close finds too many orphans, resets the connection and counts
    TcpExt.TCPAbortOnMemory. tcp_max_orphans is host-global: lab only.
    """

    name = "orphan-flood"
    counters = ("TcpExt.TCPAbortOnMemory",)
    arrival = "Tcp.PassiveOpens"

    def __init__(self, max_orphans: Optional[int] = 4, first: int = 8, more: int = 12,
                 port: int = 18092) -> None:  # fmt: skip
        self.max_orphans, self.first, self.more, self.port = max_orphans, first, more, port
        self.addr = "127.0.0.1"
        self.listener: Optional[socket.socket] = None
        self.accepted: list[socket.socket] = []
        self.clients: list[socket.socket] = []

    def setup(self) -> None:
        super().setup()
        if self.max_orphans is not None:
            write_global_sysctl("net.ipv4.tcp_max_orphans", self.max_orphans)
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.bind((self.addr, self.port))
        s.listen(256)
        self.listener = s

    def _filled_client(self) -> socket.socket:
        assert self.listener is not None
        c = socket.create_connection((self.addr, self.port), timeout=2)
        conn, _ = self.listener.accept()
        self.accepted.append(conn)
        c.setblocking(False)
        try:
            while True:
                c.send(b"o" * 16384)
        except BlockingIOError:
            pass
        return c

    def trigger(self) -> Truth:
        clients = [self._filled_client() for _ in range(self.first + self.more)]
        for c in clients[: self.first]:
            c.close()
        time.sleep(0.35)  # the orphan count cache is refreshed every 100 ms
        for c in clients[self.first :]:
            c.close()
        time.sleep(0.05)
        cap = int(read_sysctl("net.ipv4.tcp_max_orphans"))
        over = self.more if cap < self.first else 0
        return Truth(
            fault=self.name, counter="TcpExt.TCPAbortOnMemory",
            attempted=self.first + self.more, capacity=cap, lo=over,
            hi=self.first + self.more if over else 0, obj="tcp",
            knobs={"net.ipv4.tcp_max_orphans": str(cap)},
            details={"orphans": sockstat().get("TCP.orphan", 0)},
        )  # fmt: skip

    def close(self) -> None:
        _close_all(self.accepted)  # the peers go away: the orphans' connections reset
        if self.listener is not None:
            self.listener.close()
            self.listener = None


class TcpMemPressure(Fault):
    """TCP memory above net.ipv4.tcp_mem's pressure threshold: TCPMemoryPressures counts it.

    `tcp_mem` is set low (pages: min pressure max, with max far above the load), a server
    accepts `conns` connections and never reads, and each client sends `kbytes` KB: the data
    waits in receive and send queues, TCP's allocated memory passes the pressure threshold
    and the kernel enters memory pressure (TCPMemoryPressures counts the entry, once: it
    stays under pressure until usage falls below min). Since 6.0 each CPU keeps up to 1 MB
    of TCP memory in reserve before the global count moves, so the load is a few MB. The
    data stays queued until the next round (or close()), so sockstat's `mem` shows it at the
    end of a window. tcp_mem is host-global: lab only.

    Each round starts out of pressure, or a second round could not count an entry whatever
    tcp_mem says (the fix loop's control found exactly that on UML 6.1: the counter stood
    still without the fix, the kernel still under pressure from the round before). Usage
    falling below a min of 16 pages cannot be waited for: the count the kernel compares is
    the global one, which the per-CPU reserve leaves up to 1 MB away from the real use. So
    the last round's connections are closed with tcp_mem's min above any use, which makes
    the kernel leave pressure as they free their memory, and tcp_mem is then put back as it
    was (the fault's value, or the fix applied since); the round checks that TCP is out of
    pressure (/proc/net/protocols) before it loads.
    """

    name = "tcp-mem-pressure"
    counters = ("TcpExt.TCPMemoryPressures",)
    arrival = "Tcp.PassiveOpens"

    def __init__(self, tcp_mem: Optional[str] = "16 32 8192", conns: int = 16,
                 kbytes: int = 192, port: int = 18093) -> None:  # fmt: skip
        self.tcp_mem, self.conns, self.kbytes, self.port = tcp_mem, conns, kbytes, port
        self.addr = "127.0.0.1"
        self.listener: Optional[socket.socket] = None
        self.socks: list[socket.socket] = []

    def setup(self) -> None:
        super().setup()
        if self.tcp_mem is not None:
            write_global_sysctl("net.ipv4.tcp_mem", self.tcp_mem)
        self.listener = tcp_listener(self.addr, self.port, 64)

    def _out_of_pressure(self) -> None:
        """Close the last round's connections so that the kernel leaves memory pressure (the
        class docstring says why), with tcp_mem as it was afterwards; RuntimeError if TCP is
        still under pressure then."""
        assert self.listener is not None
        was = read_sysctl("net.ipv4.tcp_mem")
        huge = 1 << 40  # pages: above any use, so every free leaves pressure
        write_global_sysctl("net.ipv4.tcp_mem", f"{huge} {huge} {huge}")
        try:
            _close_all(self.socks)  # the previous round's data goes
            time.sleep(0.05)
            if tcp_memory_pressure():  # nothing was freed since it entered: free some now
                with socket.create_connection((self.addr, self.port), timeout=2) as c:
                    conn, _ = self.listener.accept()
                    c.sendall(b"p" * 65536)
                    time.sleep(0.05)
                    conn.close()
        finally:
            write_global_sysctl("net.ipv4.tcp_mem", was)
        if tcp_memory_pressure():
            raise RuntimeError("TCP still under memory pressure before the load")

    def trigger(self) -> Truth:
        assert self.listener is not None
        self._out_of_pressure()
        for _ in range(self.conns):
            c = socket.create_connection((self.addr, self.port), timeout=2)
            conn, _ = self.listener.accept()
            self.socks += [c, conn]
            c.setblocking(False)
            left = self.kbytes * 1024
            deadline = time.monotonic() + 1.0
            while left > 0 and time.monotonic() < deadline:
                try:
                    left -= c.send(b"m" * min(left, 16384))
                except BlockingIOError:
                    time.sleep(0.005)
        time.sleep(0.05)
        return Truth(
            fault=self.name, counter="TcpExt.TCPMemoryPressures", attempted=self.conns,
            capacity=0, lo=1, hi=self.conns, obj="tcp",
            knobs={"net.ipv4.tcp_mem": read_sysctl("net.ipv4.tcp_mem")},
            details={"pages": sockstat().get("TCP.mem", 0)},
        )  # fmt: skip

    def close(self) -> None:
        _close_all(self.socks)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
