"""The exporter's SYN-queue reads (issue 33): every scrape is a TCP connection, so Tcp.InSegs
has always moved and the sampler's own gate never leaves the walk of the connection table
out. The exporter's sampler (`syn_walk_hold=0`) reads the SYN queues only at a scrape whose
window saw a SYN overflow counter move, the only windows in which a rule reads them; else
`syn_recv` is None (not read), never a made-up 0. In a throwaway namespace with the real
kernel and spoofed SYNs that are never answered (tests.netns.faults.SynQueueFull)."""

from __future__ import annotations

from typing import Any

from lbtune.host.host import Host
from tests.netns.conftest import in_netns, ip
from tests.netns.faults import SynQueueFull, half_open, spy_syn_walks


def _exporter_ticks() -> list[dict[str, Any]]:
    from lbtune.exporter.collect import Exporter
    from lbtune.host.runtime import Runtime

    exp = Exporter(Runtime(), min_interval=0)  # the exporter's own sampler
    host: Host = exp.sampler.host
    walks = spy_syn_walks(host)
    fault = SynQueueFull(cookies=False, backlog=8, syns=5)
    fault.setup()
    out: list[dict[str, Any]] = []

    def tick(what: str) -> None:
        walks.clear()
        sample = exp.sampler.take()
        mine = [s.syn_recv for s in sample.listen if s.port == fault.port]
        out.append({"what": what, "calls": list(walks), "syn_recv": mine,
                    "kernel": half_open()})  # fmt: skip

    try:
        tick("first")
        fault.trigger()  # 5 requests wait in a queue of 9: Tcp.InSegs moved, nothing dropped
        tick("waiting, none dropped")
        fault.trigger()  # 5 more: 9 fit, 1 dropped (TcpExt.TCPReqQFullDrop)
        tick("dropped")
        fault.trigger()  # 5 more segments, all dropped (the queue is still full)
        tick("dropped again")
        tick("still full, no new drop")
    finally:
        fault.close()
        exp.close()
    return out


def test_the_exporter_reads_the_syn_queues_only_when_a_rule_can_read_them(netns: str) -> None:
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_syncookies=0")
    ip("netns", "exec", netns, "sysctl", "-qw", "net.ipv4.tcp_synack_retries=5")
    ticks = {t["what"]: t for t in in_netns(netns, _exporter_ticks)}
    assert ticks["first"]["calls"] == [True] and ticks["first"]["syn_recv"] == [0], ticks
    waiting = ticks["waiting, none dropped"]
    assert waiting["calls"] == [False] and waiting["syn_recv"] == [None], ticks
    assert waiting["kernel"] == 5, ticks  # they are there; no rule would look
    for what in ("dropped", "dropped again"):
        t = ticks[what]
        assert t["calls"] == [True] and t["syn_recv"] == [9] == [t["kernel"]], ticks
    still = ticks["still full, no new drop"]
    assert still["calls"] == [False] and still["syn_recv"] == [None], ticks
