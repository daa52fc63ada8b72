"""Runs inside the VM guest (Debian's 6.1): the eBPF probes against traffic with a known answer.

Called from tests/vm/test_probes_vm.py with ``VmGuest.call``. bcc compiles are slow under TCG,
so `session` compiles the three probes once (one ProbeSession) and makes every case inside it:

* NO_SOCKET: N UDP datagrams to a closed port on loopback;
* the rcvbuf case: M datagrams at a socket with the smallest receive buffer that never reads;
  the kernel's UDP RcvbufErrors and the datagrams the socket kept say how many were dropped;
* an ACK-time listen overflow (6.1 has no TCP_LISTEN_OVERFLOW: ListenOverflows moves, the
  probe has no such row);
* tx on each of eth0's 4 virtio queues (XPS: queue q <- CPU q, the sender pinned to CPU q);
* rx on eth0: the host injects frames into the tap (their flow hash picks the tap queue,
  which is the guest's rx queue); the host writes FLAGDIR/sent when done.

eth0's per-queue counts come from the probe itself here (the plan's choice of the driver's
ethtool counters is recorded, then set aside), so virtio's own per-queue counters are an
independent answer to compare with.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable

GUEST_IP, HOST_IP = "10.99.0.2", "10.99.0.1"
RX_PORT = 7000
CLOSED_PORT = 9
RCVBUF_PORT = 7100
SO_RCVBUFFORCE = 33  # Linux; not in Python's socket module


def _sh(*argv: str) -> str:
    from tests.netns.probe_traffic import sh

    return sh(*argv)


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _snmp(section: str, key: str) -> int:
    with open("/proc/net/snmp" if section in ("Udp", "Ip", "Tcp") else "/proc/net/netstat") as f:
        lines = f.read().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith(section + ":"):
            return dict(zip(head.split()[1:], map(int, values.split()[1:])))[key]
    raise KeyError(f"{section}.{key}")


def reasons() -> dict[str, Any]:
    """This kernel's drop reason numbers, read as the probes read them (tracefs format + BTF)."""
    from tests.netns.probe_traffic import kernel_drop_reason

    names = ("NOT_SPECIFIED", "NO_SOCKET", "SOCKET_RCVBUFF", "TCP_LISTEN_OVERFLOW", "CONSUMED")
    return {"kernel": os.uname().release, "reasons": {n: kernel_drop_reason(n) for n in names}}


def _setup_eth0(host_mac: str) -> str:
    """eth0 up with GUEST_IP, no IPv6, a permanent neighbour for HOST_IP (no ARP), XPS
    tx-q <- CPU q; returns eth0's MAC."""
    _sh("sysctl", "-q", "-w", "net.ipv6.conf.eth0.disable_ipv6=1")
    _sh("ip", "addr", "add", f"{GUEST_IP}/24", "dev", "eth0")
    _sh("ip", "link", "set", "eth0", "up")
    _sh("ip", "neigh", "replace", HOST_IP, "lladdr", host_mac, "dev", "eth0", "nud", "permanent")
    for q in range(4):
        Path(f"/sys/class/net/eth0/queues/tx-{q}/xps_cpus").write_text(f"{1 << q:x}\n")
    return Path("/sys/class/net/eth0/address").read_text().strip()


def _eth0_queue_packets() -> dict[str, int]:
    from lbtune.host.host import Host
    from lbtune.observe.nicstats import read_nic_counters

    host = Host.open("/")
    c = read_nic_counters(host.fs, host.ethtool, "eth0")
    return {f"{q.direction}{q.queue}": int(q.packets or 0) for q in c.queues}


def _send_tx(per_queue: list[int]) -> None:
    """per_queue[q] datagrams from a thread pinned to CPU q (XPS maps it to tx queue q)."""

    def one(q: int, n: int) -> None:
        os.sched_setaffinity(0, {q})  # this thread only
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(n):
                s.sendto(b"lbtune-vm-tx", (HOST_IP, 7200 + q))

    for q, n in enumerate(per_queue):
        t = threading.Thread(target=one, args=(q, n))
        t.start()
        t.join(60)


def _closed_port(n: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _ in range(n):
            s.sendto(b"x", ("127.0.0.1", CLOSED_PORT))


def _rcvbuf(m: int) -> dict[str, int]:
    """m datagrams at a socket with the smallest receive buffer; how many it kept."""
    before = _snmp("Udp", "RcvbufErrors")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as r:
        r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum
        r.bind(("127.0.0.1", RCVBUF_PORT))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(m):
                s.sendto(b"r" * 200, ("127.0.0.1", RCVBUF_PORT))
        r.setblocking(False)
        kept = 0
        while True:
            try:
                r.recv(2048)
            except BlockingIOError:
                break
            kept += 1
    return {"sent": m, "kept": kept, "rcvbuf_errors": _snmp("Udp", "RcvbufErrors") - before}


def _listen_overflow() -> dict[str, int]:
    from tests.netns.probe_traffic import ack_time_listen_overflow, listen_overflows

    before = listen_overflows()
    clients = ack_time_listen_overflow()
    return {"clients": clients, "overflows": listen_overflows() - before}


def _drops(sample: Any) -> list[dict[str, Any]]:
    return [{"reason": d.reason, "code": d.reason_code, "function": d.function,
             "protocol": d.protocol, "count": d.count} for d in sample.drops]  # fmt: skip


def _queues(sample: Any) -> list[dict[str, Any]]:
    return [{"dev": q.dev, "dir": q.direction, "queue": q.queue, "packets": q.packets,
             "bytes": q.bytes, "source": q.source} for q in sample.queues]  # fmt: skip


def _napi(sample: Any) -> list[dict[str, Any]]:
    return [{"dev": n.dev, "instance": n.instance, "queue": n.queue, "cpu": n.cpu,
             "polls": n.polls, "work": n.work, "budget": n.budget}
            for n in sample.napi]  # fmt: skip


def session(flagdir: str, host_mac: str, n_closed: int, m_rcvbuf: int, per_queue: list[int],
            n_rx: int) -> dict[str, Any]:  # fmt: skip
    """One ProbeSession (drops, queues, napi on eth0); the cases of the module docstring.
    Writes FLAGDIR/guest.json ({"mac": eth0's}) when the host may inject n_rx frames."""
    import json

    import lbtune.observe.probe_plan as probe_plan
    from lbtune.host.host import Host
    from lbtune.observe.probes import COST_PERIOD_S, ProbeSession
    from tests.netns.probe_traffic import lbtune_programs

    flags = Path(flagdir)
    mac = _setup_eth0(host_mac)
    host = Host.open("/")
    planned = probe_plan._counter_sources(host, ["eth0"])
    out: dict[str, Any] = {"planned_sources": {f"{d}:{k}": v for (d, k), v in planned.items()}}
    probe_plan._counter_sources = lambda host, devs: {}  # the probe counts eth0 itself
    before_programs = lbtune_programs()
    t0 = time.monotonic()
    s = ProbeSession.open(host, ["drops", "queues", "napi"], ["eth0"], cost_window=COST_PERIOD_S)
    try:
        out["open_seconds"] = round(time.monotonic() - t0, 1)
        names = ("NO_SOCKET", "SOCKET_RCVBUFF", "TCP_LISTEN_OVERFLOW")
        known = s.plan.reasons
        out["reasons"] = {n: known.value(n) if known else None for n in names}
        out["programs"] = len(set(s.program_ids()) & lbtune_programs())
        out["typed"] = sorted(a.tracepoint for a in s.plan.source.attach if a.btf_id is not None)
        s.read()  # the start: whatever happened while attaching is not counted below
        q0 = _eth0_queue_packets()
        _closed_port(n_closed)
        out["rcvbuf"] = _rcvbuf(m_rcvbuf)
        out["overflow"] = _listen_overflow()
        _send_tx(per_queue)
        time.sleep(0.2)
        first = s.read()
        q1 = _eth0_queue_packets()
        out["local"] = {"drops": _drops(first), "queues": _queues(first), "napi": _napi(first),
                        "costs": [c.probe for c in first.costs]}  # fmt: skip
        out["driver_tx"] = {k: q1[k] - q0[k] for k in q1 if k.startswith("tx")}
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as r:
            r.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            r.bind((GUEST_IP, RX_PORT))
            # rx: the host injects now, into the tap
            # written whole, then renamed: the host polls for the name over the shared
            # directory and must never read it half written (CI read it empty once)
            (flags / "guest.json.tmp").write_text(json.dumps({"mac": mac}))
            os.replace(flags / "guest.json.tmp", flags / "guest.json")
            _wait(lambda: (flags / "sent").exists(), 300, "the host's frames")
            r.settimeout(10)
            got = 0
            try:
                while got < n_rx:
                    r.recv(2048)
                    got += 1
            except socket.timeout:
                pass
        out["rx_received"] = got
        second = s.read()
        q2 = _eth0_queue_packets()
        out["remote"] = {"queues": _queues(second), "napi": _napi(second)}
        out["driver_rx"] = {k: q2[k] - q1[k] for k in q2 if k.startswith("rx")}
    finally:
        s.close()
    out["programs_left"] = len(lbtune_programs() - before_programs)
    return out


def diagnose_overflow() -> dict[str, Any]:
    """tests/netns/test_diagnose_probes.py's diagnose run (probes on, an ACK-time listen
    overflow made once they are attached) in a namespace of the guest."""
    import tests.netns.test_diagnose_probes as netns_test
    from tests.netns.conftest import in_netns
    from tests.netns.test_diagnose_probes import _diagnose_overflow

    netns_test.WAIT = 1500.0  # bcc compiles for minutes under TCG on a loaded machine

    _sh("ip", "netns", "add", "lbt-diag")
    try:
        _report, doc, clients, names = in_netns("lbt-diag", _diagnose_overflow, "lbt-diag")
    finally:
        _sh("ip", "netns", "del", "lbt-diag")
    return {"doc": doc, "clients": clients, "names": sorted(names)}


def cli_probe(n_closed: int, per_queue: list[int]) -> dict[str, Any]:
    """`lbtune probe drops queues napi --iface eth0 --json` as a user runs it (eth0 set up by
    `session` earlier in this boot): the traffic is made once the window runs, then SIGINT."""
    import json
    import signal
    import subprocess
    import sys

    argv = [sys.executable, "-m", "lbtune", "probe", "drops", "queues", "napi", "--iface",
            "eth0", "--duration", "1200", "--json"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # progress lines until the window starts
            lines.append(line)
            if line.startswith("lbtune: counting for"):
                break
        else:
            raise AssertionError(f"the window never started: {lines}")
        _closed_port(n_closed)
        _send_tx(per_queue)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return {"code": proc.returncode, "stderr": err[-2000:], "doc": json.loads(out or "null")}
