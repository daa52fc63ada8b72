"""The sampler's SYN-queue walk, skipped only when it cannot find anything (issue 33).

Counting half-open requests makes the kernel walk every bucket of its connection table each
tick. `Sampler` leaves the walk out while the last walk found every SYN queue empty and no
TCP segment has arrived since (Tcp.InSegs): a request is only made by an incoming SYN. Here,
in a throwaway namespace with the real kernel: an idle listener is walked once and then
not; spoofed SYNs that are never answered (tests.netns.faults.SynQueueFull) open the walk
at the next tick and are counted as the kernel's own SYN-RECV list has them; the walk goes
on while they wait, and closes again once they expired (tcp_synack_retries=0 in that
namespace: one SYN-ACK, then the request is dropped) and a walk has seen them gone.
"""

from __future__ import annotations

import time
from typing import Any

from lbtune.host.host import Host
from lbtune.observe.sampler import Sampler
from tests.netns.conftest import in_netns, ip
from tests.netns.faults import SynQueueFull, half_open, spy_syn_walks


def _ticks() -> list[dict[str, Any]]:
    host = Host.open("/")
    walks = spy_syn_walks(host)
    sampler = Sampler(host)
    fault = SynQueueFull(cookies=False, backlog=8, syns=5)
    fault.setup()
    out: list[dict[str, Any]] = []

    def tick(what: str) -> None:
        walks.clear()
        sample = sampler.take()
        mine = [s.syn_recv for s in sample.listen if s.port == fault.port]
        out.append({"what": what, "walked": walks == [True], "calls": list(walks),
                    "syn_recv": mine, "kernel": half_open()})  # fmt: skip

    try:
        tick("first")  # nothing known yet: walked
        tick("idle")  # nothing came in: not walked, 0 as the walk would say
        tick("idle again")
        fault.trigger()  # 5 spoofed SYNs: 5 requests wait, their SYN-ACKs vanish
        tick("after SYNs")
        tick("still waiting")  # requests pending: walked again, though nothing came in
        deadline = time.monotonic() + 15
        while half_open() and time.monotonic() < deadline:
            time.sleep(0.2)  # one SYN-ACK after 1 s, then the request is dropped
        tick("expired")  # the walk that sees them gone
        tick("idle after")
    finally:
        fault.close()
    return out


def test_the_syn_queue_walk_is_left_out_only_when_it_cannot_find_anything(netns: str) -> None:
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_syncookies=0")
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_synack_retries=0")
    ticks = {t["what"]: t for t in in_netns(netns, _ticks)}
    assert ticks["first"]["walked"] and ticks["first"]["syn_recv"] == [0], ticks
    for what in ("idle", "idle again"):
        assert ticks[what]["calls"] == [False], ticks  # listeners only: the walk left out
        assert ticks[what]["syn_recv"] == [0] and ticks[what]["kernel"] == 0, ticks
    # the SYNs changed Tcp.InSegs: walked, and the count is the kernel's own list
    assert ticks["after SYNs"]["walked"], ticks
    assert ticks["after SYNs"]["syn_recv"] == [5] == [ticks["after SYNs"]["kernel"]], ticks
    assert ticks["still waiting"]["walked"] and ticks["still waiting"]["syn_recv"] == [5], ticks
    assert ticks["expired"]["walked"] and ticks["expired"]["syn_recv"] == [0], ticks
    assert ticks["expired"]["kernel"] == 0, ticks
    assert ticks["idle after"]["calls"] == [False] and ticks["idle after"]["syn_recv"] == [0]


def _held_ticks() -> list[dict[str, Any]]:
    """A sampler with a 1 s `syn_walk_hold` (the monitor's): segments keep arriving (SYNs
    that wait in a queue without overflowing it), yet once no SYN overflow counter has moved
    for a second the queues are not read; an overflow opens the walk at the next tick."""
    host = Host.open("/")
    walks = spy_syn_walks(host)
    sampler = Sampler(host, syn_walk_hold=1.0)
    fault = SynQueueFull(cookies=False, backlog=8, syns=3)
    fault.setup()
    out: list[dict[str, Any]] = []

    def tick(what: str) -> None:
        walks.clear()
        sample = sampler.take()
        mine = [s.syn_recv for s in sample.listen if s.port == fault.port]
        out.append({"what": what, "calls": list(walks), "syn_recv": mine,
                    "kernel": half_open()})  # fmt: skip

    try:
        tick("first")  # nothing to compare yet: walked
        fault.trigger()  # 3 SYNs wait: Tcp.InSegs moved, no overflow
        tick("within the hold")
        time.sleep(1.2)
        fault.trigger()  # 3 more: segments came in, still no overflow
        tick("after the hold")
        fault.syns = 20  # more than the backlog: the queue overflows (TCPReqQFullDrop)
        fault.trigger()
        tick("overflow")
    finally:
        fault.close()
    return out


def test_with_a_hold_the_syn_queues_are_read_only_after_a_syn_overflow(netns: str) -> None:
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_syncookies=0")
    ticks = {t["what"]: t for t in in_netns(netns, _held_ticks)}
    assert ticks["first"]["calls"] == [True] and ticks["first"]["syn_recv"] == [0], ticks
    assert ticks["within the hold"]["calls"] == [True], ticks
    assert ticks["within the hold"]["syn_recv"] == [3] == [ticks["within the hold"]["kernel"]]
    # requests wait (the kernel lists them) but nothing overflowed: not read, and not 0
    assert ticks["after the hold"]["calls"] == [False], ticks
    assert ticks["after the hold"]["syn_recv"] == [None] and ticks["after the hold"]["kernel"]
    # the overflow is read at the tick that sees its counter move: the queue is full
    over = ticks["overflow"]
    assert over["calls"] == [True] and over["syn_recv"] == [over["kernel"]] == [9], ticks
