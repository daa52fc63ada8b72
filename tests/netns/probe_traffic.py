"""Traffic with a known answer for the probe tests, made in throwaway namespaces.

* `VethPair`: namespaces A and B joined by a 4-queue veth pair with unique names (other
  tests on the same machine may have a `v0`, and tracepoints match devices by name). IPv6 is
  off on both ends before they come up and both have static neighbour entries, so the only
  packets on the link are the test's own. A's egress has a tc BPF classifier (cls_bpf,
  direct action) that steers UDP to ports 7000..7003 onto tx queues 0..3: it sets
  skb->queue_mapping = queue + 1, which the kernel's tx hash takes as "recorded queue + 1"
  (skb_tx_hash), so the queue is chosen deterministically. veth hands a packet to the
  peer's rx queue of the same number. With GRO on (the default here) B's veth receives
  through NAPI; without, through netif_rx and the per-CPU backlog.
* `closed_port_connects`: TCP connects to a closed port (each SYN is dropped NO_SOCKET).
* `ack_time_listen_overflow`: a burst whose overflows happen when the handshake's final
  ACK finds the accept queue full, the case the kernel reports as TCP_LISTEN_OVERFLOW.

Everything here runs in the caller's namespaces: call it from a forked child that joined
the namespace (`in_netns`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

PORT0 = 7000
STEER_C = r"""
#include <uapi/linux/pkt_cls.h>
int qsteer(struct __sk_buff *skb) {
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    unsigned char *p = data;
    if (data + 14 + 20 + 4 > end)
        return TC_ACT_OK;
    if (p[12] != 0x08 || p[13] != 0 || p[23] != 17)  /* IPv4, UDP, no IP options */
        return TC_ACT_OK;
    unsigned int dport = (p[36] << 8) | p[37];
    if (dport >= PORT0 && dport < PORT0 + 4)
        skb->queue_mapping = dport - PORT0 + 1;
    return TC_ACT_OK;
}
"""


def sh(*argv: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
    return proc.stdout


def netns_sysctl(ns: str, key: str, value: str) -> None:
    """A per-namespace network sysctl, written inside `ns` only."""
    assert key.startswith("net."), key
    sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", f"{key}={value}")


@dataclass(frozen=True)
class VethPair:
    a: str  # namespace of the sender
    b: str  # namespace of the receiver
    a_if: str
    b_if: str
    a_ip: str = "10.77.0.1"
    b_ip: str = "10.77.0.2"
    a_mac: str = "02:77:00:00:00:01"
    b_mac: str = "02:77:00:00:00:02"


def make_veth_pair(a: str, b: str, tag: str, gro: bool = True) -> VethPair:
    """The pair between existing namespaces `a` and `b` (see the module docstring); without
    `gro`, B's veth receives through netif_rx and the per-CPU backlog instead of NAPI."""
    pair = VethPair(a, b, f"lq{tag}a", f"lq{tag}b")
    sh("ip", "-n", a, "link", "add", pair.a_if, "numrxqueues", "4", "numtxqueues", "4",
       "address", pair.a_mac, "type", "veth", "peer", "name", pair.b_if,
       "netns", b, "numrxqueues", "4", "numtxqueues", "4", "address", pair.b_mac)  # fmt: skip
    for ns, dev, ip in ((a, pair.a_if, pair.a_ip), (b, pair.b_if, pair.b_ip)):
        netns_sysctl(ns, f"net.ipv6.conf.{dev}.disable_ipv6", "1")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "link", "set", dev, "up")
    # Static neighbours both ways: no ARP on the link (B answers the datagrams with ICMP
    # port unreachable, which would otherwise make it ask for A's address).
    sh("ip", "-n", a, "neigh", "add", pair.b_ip, "lladdr", pair.b_mac, "dev", pair.a_if)
    sh("ip", "-n", b, "neigh", "add", pair.a_ip, "lladdr", pair.a_mac, "dev", pair.b_if)
    # veth receives through NAPI when GRO is on and the packet is eligible: from a sender
    # with TSO (veth's default) a UDP packet is eligible only with UDP GRO forwarding on.
    if gro:
        sh("ip", "netns", "exec", b, "ethtool", "-K", pair.b_if, "gro", "on",
           "rx-udp-gro-forwarding", "on")  # fmt: skip
    return pair


def attach_steering(pair: VethPair) -> None:
    """The tc BPF classifier on A's egress (run inside namespace A)."""
    from bcc import BPF
    from pyroute2 import IPRoute

    prog = BPF(text=STEER_C, cflags=[f"-DPORT0={PORT0}"])
    fn = prog.load_func("qsteer", BPF.SCHED_CLS)
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=pair.a_if)[0]
        ipr.tc("add", "clsact", idx)
        ipr.tc("add-filter", "bpf", idx, ":1", fd=fn.fd, name=fn.name, parent="ffff:fff3",
               classid=1, direct_action=True)  # fmt: skip
    prog.cleanup()  # the filter keeps the program loaded while the device exists


def in_namespace_thread(ns: str, fn: Callable[[], object]) -> object:
    """Run fn in a new thread that joined named namespace `ns` (the rest of the process
    stays where it is)."""
    from tests.netns.faults import _call_in_thread

    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _call_in_thread(fn, fd)
    finally:
        os.close(fd)


def send_steered(pair: VethPair, per_queue: tuple[int, ...]) -> None:
    """per_queue[q] UDP datagrams (18-byte payload) to port PORT0 + q, from this namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((pair.a_ip, 0))
        for q, n in enumerate(per_queue):
            for _ in range(n):
                s.sendto(b"lbtune-probe-test!", (pair.b_ip, PORT0 + q))


def closed_port_connects(n: int, port: int = 9) -> int:
    """n TCP connects over IPv6 loopback to a closed port; returns how many were refused."""
    refused = 0
    for _ in range(n):
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as c:
            try:
                c.connect(("::1", port))
            except ConnectionRefusedError:
                refused += 1
    return refused


def listen_overflows() -> int:
    """TcpExt.ListenOverflows of the calling namespace."""
    with open("/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            return dict(zip(head.split()[1:], map(int, values.split()[1:])))["ListenOverflows"]
    raise RuntimeError("no TcpExt in /proc/net/netstat")


def ack_time_listen_overflow(backlog: int = 4, deferred: int = 5, port: int = 18090) -> int:
    """Make `deferred` handshakes overflow the accept queue at their final ACK (IPv6
    loopback), then close everything; returns the number of phase-1 clients. See
    `listen_overflow_burst`."""
    with listen_overflow_burst(backlog, deferred, port) as n:
        return n


@contextlib.contextmanager
def listen_overflow_burst(
    backlog: int = 4, deferred: int = 5, port: int = 18090
) -> Iterator[int]:
    """Make `deferred` handshakes overflow the accept queue at their final ACK (IPv6 loopback);
    the listener (full, never accepting) and the clients stay open inside the `with` block.

    The listener uses TCP_DEFER_ACCEPT, so a client's bare ACK leaves its request in the SYN
    queue. Phase 1: `deferred` clients connect (their SYNs find the accept queue empty).
    Phase 2: backlog + 1 more clients connect and send at once (SYN cookies: the SYN queue
    is full) and fill the accept queue. Phase 3: the phase-1 clients send data; each
    segment completes a handshake that finds the accept queue full: tcp_check_req drops it
    with SKB_DROP_REASON_TCP_LISTEN_OVERFLOW (Linux 6.15+) and counts ListenOverflows; a
    tail-loss probe repeats it. Yields the number of phase-1 clients.
    """
    socks: list[socket.socket] = []
    listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("::1", port))
        listener.listen(backlog)
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 10)

        def connect() -> socket.socket:
            c = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            c.setblocking(False)
            c.connect_ex(("::1", port))
            socks.append(c)
            return c

        first = [connect() for _ in range(deferred)]
        time.sleep(0.05)
        for _ in range(backlog + 1):
            c = connect()
            time.sleep(0.01)
            with contextlib.suppress(OSError):
                c.send(b"x")
        time.sleep(0.05)
        for c in first:
            with contextlib.suppress(OSError):
                c.send(b"y")
        time.sleep(0.3)
        yield deferred
    finally:
        for c in socks:
            c.close()
        listener.close()


def bpftool_programs() -> dict[int, str]:
    """id -> name of every loaded BPF program (bpftool prog show)."""
    import json

    out = sh("bpftool", "prog", "show", "--json")
    return {p["id"]: p.get("name", "") for p in json.loads(out or "[]")}


def lbtune_programs() -> set[int]:
    return {i for i, name in bpftool_programs().items() if name.startswith("lbt_")}


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


def read_sysctl_global(key: str) -> Optional[str]:
    """A host-global sysctl, read only (tests never write one)."""
    try:
        with open("/proc/sys/" + key.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def kernel_drop_reason(name: str) -> Optional[int]:
    """This kernel's number for drop reason `name` (`TCP_LISTEN_OVERFLOW`), read the way the
    probes read it (skb:kfree_skb's format and the BTF enums); None when the kernel has none."""
    from lbtune.host.fs import HostFS
    from lbtune.host.trace.btf import kernel_enums
    from lbtune.host.trace.tracefs import ensure_tracefs, read_format
    from lbtune.observe.dropreasons import resolve_drop_reasons

    fs = HostFS("/")
    ensure_tracefs(fs)
    kfree = read_format(fs, "skb", "kfree_skb")
    if kfree is None or kfree.field("reason") is None:
        return None
    return resolve_drop_reasons(kfree.symbols("reason"), kernel_enums(fs)).value(name)
