"""The eBPF probes on this kernel, in throwaway namespaces, against traffic with a known answer.

Each probe session runs in a forked child that joined a namespace the way `--netns` does
(private mount namespace, fresh /sys), so the tracefs the probes mount is private too and
the host's mounts never change. BPF statistics are switched on through BPF_ENABLE_STATS
(a file descriptor), never through the host-global sysctl, which the tests only read.

Drops are host-wide (kfree_skb has no device or namespace): the tests make their drops
distinguishable by reason, protocol (IPv6, which no other test here uses for TCP) and kernel
function, and expect exact counts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from lbtune.host.host import Host
from lbtune.observe.probes import COST_PERIOD_S
from tests.conftest import needs_bcc
from tests.netns.conftest import in_netns, ip
from tests.netns.probe_traffic import (
    PORT0,
    VethPair,
    ack_time_listen_overflow,
    attach_steering,
    closed_port_connects,
    in_namespace_thread,
    lbtune_programs,
    listen_overflows,
    make_veth_pair,
    read_sysctl_global,
    send_steered,
)

pytestmark = needs_bcc
PER_QUEUE = (10, 20, 30, 40)  # distinct per queue, so a swapped queue cannot pass
PORT_KEY = ("tcp", "::1", 9)  # closed_port_connects' closed port


def _session(netns: str, probes: list[str], ifaces: list[str] | None = None,  # type: ignore[no-untyped-def]
             cost_window: float = 1.0, typed: bool = True):  # fmt: skip
    from lbtune.observe.probes import ProbeSession

    return ProbeSession.open(Host.open("/", netns=netns), probes, ifaces,
                             cost_window=cost_window, typed=typed)  # fmt: skip


# ---------------------------------------------------------------------------------- drops


def _closed_port(netns: str, n: int):  # type: ignore[no-untyped-def]
    ip("link", "set", "lo", "up")
    # Statistics on for the whole period: the connects must fall inside a cost window, and on
    # a loaded machine opening the session can outlast a 1 s window (then 0 events counted).
    with _session(netns, ["drops"], cost_window=COST_PERIOD_S) as s:
        refused = closed_port_connects(n)
        time.sleep(0.1)
        return refused, s.read()


def test_drops_counts_each_connect_to_a_closed_port_as_no_socket(netns):
    refused, sample = in_netns(netns, _closed_port, netns, 40)
    assert refused == 40
    key = ("NO_SOCKET", "IPv6", "tcp_v6_rcv")
    hits = [d for d in sample.drops if (d.reason, d.protocol, d.function) == key]
    assert sum(d.count for d in hits) == 40, sample.drops
    assert hits[0].reason_code == 3 and hits[0].location.startswith("tcp_v6_rcv+0x")
    assert sample.drops_scope == "host" and sample.drops_lost == 0
    assert any("host-wide" in n for n in sample.notes)  # said in --netns
    (cost,) = sample.costs
    assert cost.probe == "drops" and cost.events >= 40 and cost.ns_per_event is not None


def _listen_overflow(netns: str):  # type: ignore[no-untyped-def]
    ip("link", "set", "lo", "up")
    with _session(netns, ["drops"]) as s:
        reasons = s.plan.reasons
        if reasons is None or reasons.value("TCP_LISTEN_OVERFLOW") is None:
            return None
        before = listen_overflows()
        clients = ack_time_listen_overflow()
        overflows = listen_overflows() - before
        return clients, overflows, s.read()


def test_drops_reports_listen_overflow_during_a_burst(netns):
    result = in_netns(netns, _listen_overflow, netns)
    if result is None:
        pytest.skip("capability: this kernel has no TCP_LISTEN_OVERFLOW drop reason (< 6.15); "
                    "the vm tier asserts that path on 6.1 (tests/vm/test_probes_vm.py)")
    clients, overflows, sample = result
    hits = [d for d in sample.drops if d.reason == "TCP_LISTEN_OVERFLOW" and d.protocol == "IPv6"]
    counted = sum(d.count for d in hits)
    # Every overflow of this burst happens at the final ACK (none at SYN time: phase-1 SYNs
    # find the accept queue empty), and each is one drop: the kernel's own counter and the
    # probe must agree exactly. At least one per deferred client; retransmits add more.
    assert counted == overflows, sample.drops
    assert counted >= clients
    assert {d.function for d in hits} == {"tcp_v6_rcv"}


# ----------------------------------------------------------------------- queues and napi


@pytest.fixture(params=[True, False], ids=["gro", "nogro"])
def pair(netns, request):  # type: ignore[no-untyped-def]
    peer = f"{netns}-b"
    ip("netns", "add", peer)
    try:
        p = make_veth_pair(netns, peer, str(os.getpid() % 100000), gro=request.param)
        in_netns(netns, attach_steering, p)
        yield p
    finally:
        subprocess.run(["ip", "netns", "del", peer], check=False, capture_output=True)


def _count_in(ns: str, pair: VethPair, probes: list[str], dev: str,  # type: ignore[no-untyped-def]
              typed: bool = True):  # fmt: skip
    with _session(ns, probes, [dev], typed=typed) as s:
        in_namespace_thread(pair.a, lambda: send_steered(pair, PER_QUEUE))
        time.sleep(0.3)
        return s.read(), [a.btf_id is not None for a in s.plan.source.attach]


HAS_BTF = os.path.exists("/sys/kernel/btf/vmlinux")


@pytest.mark.parametrize("typed", [True, False], ids=["tp_btf", "records"])
def test_queues_counts_each_tx_queue_of_the_sender(pair, typed):
    sample, kinds = in_netns(pair.a, _count_in, pair.a, pair, ["queues"], pair.a_if, typed)
    assert any(kinds) == (typed and HAS_BTF)
    tx = [q for q in sample.queues if q.dev == pair.a_if and q.direction == "tx"]
    assert {q.queue: q.packets for q in tx} == dict(enumerate(PER_QUEUE))
    assert {q.source for q in tx} == {"probe"}
    for q in tx:  # 60-byte frames: all in the smallest size bucket
        assert q.sizes is not None and q.sizes[0] == q.packets and q.bytes == 60 * q.packets


@pytest.mark.parametrize("typed", [True, False], ids=["tp_btf", "records"])
def test_queues_and_napi_on_the_receiver(pair, request, typed):
    sample, kinds = in_netns(pair.b, _count_in, pair.b, pair, ["queues", "napi"], pair.b_if,
                             typed)  # fmt: skip
    # With BTF the rx entries are BTF-typed tracepoints reading the name in place; asked
    # not to (and on kernels without BTF) they copy it from the records: the same counts.
    assert any(kinds) == (typed and HAS_BTF)
    rx = {q.queue: q.packets for q in sample.queues if q.direction == "rx"}
    # The same with or without NAPI: a NAPI id shortcut (gro) or the name (nogro: the skb
    # field then holds the sending CPU, which must not be taken for a NAPI id).
    assert rx == dict(enumerate(PER_QUEUE)), sample.queues  # no unknown-queue row either
    napi = [n for n in sample.napi if n.dev == pair.b_if]
    if "nogro" in request.node.name:
        # Without NAPI on the veth its packets are polled from the per-CPU backlog, which
        # --iface leaves out: nothing to show for the device itself.
        assert sample.napi == ()
        return
    # veth with GRO on receives through one NAPI instance per queue: every packet is work
    # of a poll, and each poll is labelled with the queue of the packets it delivered.
    assert sum(n.work for n in napi) == sum(PER_QUEUE)
    assert len({n.instance for n in napi}) == 4 and all(n.polls > 0 for n in napi)
    per_queue: dict[int, int] = {}
    for n in napi:
        assert n.queue is not None and n.budget > 0 and n.exhausted <= n.polls
        per_queue[n.queue] = per_queue.get(n.queue, 0) + n.work
    assert per_queue == dict(enumerate(PER_QUEUE))
    assert {c.probe for c in sample.costs} == {"queues", "napi"}


def _gso_in(ns: str, pair: VethPair, typed: bool):  # type: ignore[no-untyped-def]
    def send() -> None:  # one UDP GSO skb (UDP_SEGMENT) of GSO_SEGS x 100 bytes, to queue 0
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_UDP, 103, 100)  # UDP_SEGMENT, include/uapi/linux/udp.h
            s.bind((pair.a_ip, 0))
            s.sendto(b"x" * 100 * GSO_SEGS, (pair.b_ip, PORT0))

    with _session(ns, ["queues"], [pair.a_if], typed=typed) as s:
        in_namespace_thread(pair.a, send)
        time.sleep(0.3)
        return s.read(), [a.btf_id is not None for a in s.plan.source.attach]


GSO_SEGS = 10


@pytest.mark.parametrize("typed", [True, False], ids=["tp_btf", "records"])
def test_queues_counts_the_wire_packets_of_a_gso_skb(pair, typed):
    sample, kinds = in_netns(pair.a, _gso_in, pair.a, pair, typed)
    assert any(kinds) == (typed and HAS_BTF)
    tx = {q.queue: q for q in sample.queues if q.dev == pair.a_if and q.direction == "tx"}
    # veth takes the GSO skb whole: one skb of 14 + 20 + 8 + 1000 bytes, 10 wire packets
    assert tx[0].packets == GSO_SEGS and tx[0].bytes == 1042, tx[0]
    assert tx[0].sizes is not None and tx[0].sizes[3] == 1
    assert all(q.packets == 0 for n, q in tx.items() if n != 0)


def test_queues_on_a_device_renamed_to_a_shorter_name(pair):
    """A rename leaves the longer old name's tail after the new name's NUL in the device's
    struct (the kernel copies the new name without padding): the rx programs that read
    the name in place must cut it at the NUL, as the tracepoints' copy does."""
    long_name = (pair.b_if + "renamed")[:15]
    for name, new in ((pair.b_if, long_name), (long_name, pair.b_if)):
        ip("-n", pair.b, "link", "set", "dev", name, "down")
        ip("-n", pair.b, "link", "set", "dev", name, "name", new)
        ip("-n", pair.b, "link", "set", "dev", new, "up")
    # down dropped B's static neighbour: no ARP reply may arrive on B's rx during the count
    ip("-n", pair.b, "neigh", "replace", pair.a_ip, "lladdr", pair.a_mac, "dev", pair.b_if)
    sample, kinds = in_netns(pair.b, _count_in, pair.b, pair, ["queues"], pair.b_if)
    assert any(kinds) == HAS_BTF
    rx = {q.queue: q.packets for q in sample.queues if q.direction == "rx"}
    assert rx == dict(enumerate(PER_QUEUE)), sample.queues


# ----------------------------------------------------------------- detach and statistics


def _open_close_twice(netns: str):  # type: ignore[no-untyped-def]
    from lbtune.host.trace.bpf import BpfProgram

    seen = []
    for _ in range(2):
        # Statistics on for the whole session (the default samples 1 s of every 5, which a
        # loaded machine can spend before the connects below): every event has its cost.
        s = _session(netns, ["drops", "napi"], cost_window=3600.0)
        ids = set(s.program_ids())
        during = lbtune_programs()
        closed_port_connects(5)
        costs = s.read().costs
        s.close()
        seen.append((ids, during, lbtune_programs(), costs))
    # Statistics are off again: a program loaded now counts no runs.
    plan = s.plan
    bare = BpfProgram(plan.text)
    try:
        bare.attach("skb:kfree_skb", "lbt_drops_kfree_skb")
        closed_port_connects(5)
        runs = sum(st.run_cnt for st in bare.stats())
    finally:
        bare.close()
    return seen, runs


def test_session_close_unloads_everything_and_switches_statistics_off(netns):
    sysctl = read_sysctl_global("kernel.bpf_stats_enabled")
    before = lbtune_programs()
    in_netns(netns, ip, "link", "set", "lo", "up")
    seen, runs_without_stats = in_netns(netns, _open_close_twice, netns)
    for ids, during, after, costs in seen:
        assert ids and ids <= during  # the check can fail: the programs were listed
        assert not ids & after  # and are gone after close(), in a process still running
        assert all(c.ns_per_event is not None for c in costs if c.probe == "drops")
    assert runs_without_stats == 0
    assert lbtune_programs() == before
    assert read_sysctl_global("kernel.bpf_stats_enabled") == sysctl


def _ignore_sigint() -> None:  # runs in the child before exec
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _lbtune(*args: str, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "lbtune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ignore_sigint if sigint_ignored else None)  # fmt: skip


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_detaches_on_signal_and_reports(netns, sig):
    before = lbtune_programs()
    # SIGINT starts ignored (a background job of a script): lbtune must still take Ctrl-C.
    proc = _lbtune("--netns", netns, "probe", "drops", "napi", "--duration", "60", "--json",
                   sigint_ignored=sig == signal.SIGINT)  # fmt: skip
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # progress lines until the window starts
            lines.append(line)
            if line.startswith("lbtune: counting for"):
                break
        else:
            raise AssertionError(f"the window never started: {lines}")
        running = lbtune_programs() - before  # every program attached; the window is running
        assert len(running) >= 2
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    doc = json.loads(out)
    assert doc["stopped_by"] == sig.name and doc["netns"] == netns
    assert set(doc["probes"]) == {"drops", "napi"} and doc["seconds"] < 60
    assert lbtune_programs() == before


def test_cli_normal_exit_leaves_nothing(netns):
    before = lbtune_programs()
    proc = _lbtune("--netns", netns, "probe", "queues", "--duration", "0.5")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "queues: per queue" in out and "probe cost" in out
    assert lbtune_programs() == before


def _from_worker_threads(netns: str):  # type: ignore[no-untyped-def]
    import threading

    from lbtune.observe.probes import ProbeSession

    ip("link", "set", "lo", "up")
    box: dict[str, object] = {}

    def opener() -> None:  # the monitor opens the session off its UI thread
        box["session"] = ProbeSession.open(Host.open("/", netns=netns), ["drops"])

    t = threading.Thread(target=opener)
    t.start()
    t.join(60)
    session = box["session"]
    closed_port_connects(7)
    time.sleep(0.1)
    reads = []
    reader = threading.Thread(target=lambda: reads.extend([session.read(), session.read()]))
    reader.start()
    reader.join(30)
    ids = set(session.program_ids())
    session.close()
    session.close()  # idempotent
    return reads, ids, lbtune_programs()


def test_session_opened_and_read_from_worker_threads(netns):
    (first, second), ids, after = in_netns(netns, _from_worker_threads, netns)
    key = ("NO_SOCKET", "IPv6", "tcp_v6_rcv")
    assert sum(d.count for d in first.drops if (d.reason, d.protocol, d.function) == key) == 7
    # A second read right away has only what happened in between: deltas, not totals.
    assert sum(d.count for d in second.drops if (d.reason, d.protocol, d.function) == key) == 0
    assert ids and not ids & after


def _both_reads(netns: str):  # type: ignore[no-untyped-def]
    import ctypes

    import lbtune.host.trace.bpf as bpf

    ip("link", "set", "lo", "up")
    with _session(netns, ["drops", "napi"]) as s:
        closed_port_connects(5)
        time.sleep(0.1)
        out = {}
        for table, skip in (("lbt_drops_cache", True), ("lbt_drops", False),
                            ("lbt_napi_cache", True), ("lbt_drops_cache", False)):  # fmt: skip
            t = s._program._bpf[table.encode()]
            layouts = bpf._raw_layouts(t)
            raw = bpf._lookup_batch_raw(t)
            if layouts is None or raw is None:
                out[(table, skip)] = (None, None)
                continue
            fast = bpf._rows_from_raw(t, layouts, raw, skip)
            # the same snapshot as bcc's ctypes objects, read the way bcc's own reading is
            keys, values, total = raw
            k = (t.Key * total).from_buffer_copy(bytes(keys))
            v = (t.Leaf * total).from_buffer_copy(bytes(values))
            slow = bpf._rows_from_items([(k[i], v[i]) for i in range(total)], skip)
            out[(table, skip)] = (fast, slow, ctypes.sizeof(t.Leaf))
        return out


def test_maps_read_from_one_buffer_as_entry_by_entry(netns):
    """The per-CPU maps are read from the raw buffers of one batch lookup (no ctypes object
    per entry: 5,000 a second); the entries are those bcc's own reading gives, empty ones
    of the direct-mapped caches left out the same way (both read one snapshot: the maps are
    host-wide and move on a busy host)."""
    reads = in_netns(netns, _both_reads, netns)
    for (table, skip), (fast, slow, *_) in reads.items():
        assert fast is not None, f"{table}: not read from the batch buffers"
        assert fast == slow, (table, skip)
    used = reads[("lbt_drops_cache", True)][0]
    assert used and len(used) < len(reads[("lbt_drops_cache", False)][0])  # zeros left out


def _reads_of_known_entries(netns: str):  # type: ignore[no-untyped-def]
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one CPU: its entries settle
    ip("link", "set", "lo", "up")
    key = ("NO_SOCKET", "IPv6", "tcp_v6_rcv")
    out = []
    with _session(netns, ["drops", "napi"]) as s:
        program, tables = s._program, []
        real = program.read_percpu

        def spy(table, skip_zero=False, slots=None):  # type: ignore[no-untyped-def]
            tables.append((table, slots is not None))
            return real(table, skip_zero, slots)

        program.read_percpu = spy
        for n in (3, 1, 4, 1, 5, 9, 2, 6):
            closed_port_connects(n)
            time.sleep(0.05)
            tables.clear()
            sample = s.read()
            drops = sum(d.count for d in sample.drops if (d.reason, d.protocol, d.function) == key)
            ports = sum(p.count for p in sample.ports if (p.proto, p.addr, p.port) == PORT_KEY)
            out.append((n, drops, ports, ("lbt_drops_cache", True) in tables,
                        ("lbt_ports_cache", True) in tables))  # fmt: skip
        # one snapshot of this test's entries (IPv6: no other test here makes IPv6 drops),
        # read whole and by their slots plus a never used one: the same rows
        program.read_percpu = real
        t = "lbt_drops_cache"
        whole = real(t, True)
        slots = [key[0] for key, per_cpu in whole if any(v[2] == 0x86DD for v in per_cpu)]
        free = next(i for i in range(4096) if i not in {key[0] for key, _ in whole})
        part = real(t, True, slots=[*slots, free])
    return out, _ipv6(whole), _ipv6(part)


def _ipv6(rows):  # type: ignore[no-untyped-def]
    """The drop cache's IPv6 entries per slot (other CPUs' entries of a slot move on)."""
    return [(key, [v for v in per_cpu if v[2] == 0x86DD]) for key, per_cpu in rows
            if any(v[2] == 0x86DD for v in per_cpu)]  # fmt: skip


def test_reads_copy_only_the_known_cache_entries_and_count_exactly(netns):
    """While no cache entry is taken, a read copies only the entries it knows (not the
    4,096 of the drop cache): the counts stay exact through those reads, and a read of the
    used slots gives the entries a whole read gives."""
    rounds, whole, part = in_netns(netns, _reads_of_known_entries, netns)
    assert [(n, d, p) for n, d, p, _, _ in rounds] == [(n, n, n) for n, *_ in rounds]
    assert not any(r[3] or r[4] for r in rounds[:2])  # the first two reads read it whole
    assert any(r[3] for r in rounds[2:]) and any(r[4] for r in rounds[2:]), rounds
    assert whole and part == whole


def _program_info(netns: str):  # type: ignore[no-untyped-def]
    import lbtune.host.trace.bpf as bpf

    ip("link", "set", "lo", "up")
    with _session(netns, ["drops"], cost_window=2.0) as s:
        closed_port_connects(5)
        time.sleep(2.5)  # statistics off until the next window (COST_PERIOD_S): counts still
        fds = {name: fn.fd for name, fn in s._program._functions.items()}
        return [(bpf._prog_info(fd), bpf._fdinfo(fd)) for fd in fds.values()]


def test_program_statistics_by_syscall_equal_fdinfo(netns):
    """`stats()` asks bpf(2) (BPF_OBJ_GET_INFO_BY_FD) what /proc/self/fdinfo also says."""
    both = in_netns(netns, _program_info, netns)
    for info, fdinfo in both:
        assert info is not None
        assert info == {k: fdinfo[k] for k in ("prog_id", "run_cnt", "run_time_ns")}
    assert any(info["run_cnt"] >= 5 and info["run_time_ns"] > 0 for info, _ in both)
