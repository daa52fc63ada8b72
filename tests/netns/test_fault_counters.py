"""Each fault in tests/netns/faults.py moves exactly the kernel counters it claims to.

The faults are the ground truth of the diagnose scenario tests, so they are checked here on
their own: counters are read inside the namespace right before and after the trigger and
must move by the range the fault computes from what it did (attempted vs capacity). Each
fault also has a below-the-limit control that must move nothing, so the arithmetic is tested
as much as the kernel.
"""

from __future__ import annotations

import pytest

from tests.netns import faults as F


def run(netns: str, fault: F.Fault) -> F.Truth:
    # Each trigger waits for conditions with bounded deadlines; how long it took is not
    # asserted (a loaded CI machine made a 1 s limit fail): timing belongs in bench/.
    return F.run_in_netns(netns, fault)


def in_range(truth: F.Truth, key: str = "") -> int:
    d = truth.delta(key or None)
    assert truth.lo <= d <= truth.hi, (key or truth.counter, d, truth)
    return d


def test_listen_overflow_counts_each_client_beyond_the_accept_queue(netns):
    t = run(netns, F.ListenOverflow(port=18080, backlog=2, clients=20))
    assert t.capacity == 3  # min(2, somaxconn) + 1: the kernel drops when length > backlog
    assert t.lo == 17
    n = in_range(t)
    assert t.delta("TcpExt.ListenDrops") == n
    assert t.obj == "127.0.0.1:18080"
    assert t.knobs["backlog"] == "2"


def test_listen_below_the_backlog_overflows_nothing(netns):
    t = run(netns, F.ListenOverflow(port=18080, backlog=8, clients=5))
    assert t.lo == t.hi == 0
    assert t.delta() == 0
    assert t.delta("TcpExt.ListenDrops") == 0


def test_syn_queue_full_without_cookies_drops_requests(netns):
    t = run(netns, F.SynQueueFull(cookies=False, backlog=4, syns=40))
    assert t.capacity == 5
    assert t.counter == "TcpExt.TCPReqQFullDrop"
    n = in_range(t)
    assert n == 35
    assert t.delta("TcpExt.TCPReqQFullDoCookies") == 0
    assert t.delta("TcpExt.SyncookiesSent") == 0
    assert t.delta("TcpExt.ListenDrops") == n  # every queue-full drop is a listen drop
    assert t.delta("TcpExt.ListenOverflows") == 0  # the accept queue stays empty
    assert t.knobs["net.ipv4.tcp_syncookies"] == "0"


def test_syn_queue_full_with_cookies_sends_cookies(netns):
    t = run(netns, F.SynQueueFull(cookies=True, backlog=4, syns=40))
    assert t.counter == "TcpExt.TCPReqQFullDoCookies"
    n = in_range(t)
    assert n == 35
    assert t.delta("TcpExt.SyncookiesSent") == n
    assert t.delta("TcpExt.TCPReqQFullDrop") == 0
    assert t.delta("TcpExt.ListenDrops") == 0  # cookies answer: nothing is dropped
    assert t.knobs["net.ipv4.tcp_syncookies"] == "1"


def test_syn_queue_below_the_backlog_drops_nothing(netns):
    t = run(netns, F.SynQueueFull(cookies=False, backlog=16, syns=10))
    assert t.lo == t.hi == 0
    assert t.delta() == 0
    assert t.delta("TcpExt.ListenDrops") == 0


def test_udp_rcvbuf_errors_match_what_was_not_received(netns):
    t = run(netns, F.UdpRcvbufErrors(rcvbuf=4096, datagrams=200, size=1000))
    received = t.details["received"]
    assert 0 < received < 20  # a few KB of buffer holds a handful of 1000-byte datagrams
    assert t.lo == t.hi == 200 - received
    in_range(t)
    assert t.delta("Udp.InErrors") == t.lo
    assert t.delta("socket drops") == t.lo  # the socket's own sk_drops (ss -m d)
    assert t.delta("Udp.InDatagrams") == received
    assert int(t.knobs["SO_RCVBUF"]) >= 4096  # the kernel doubles the request


def test_udp_with_room_in_the_buffer_has_no_errors(netns):
    t = run(netns, F.UdpRcvbufErrors(rcvbuf=1 << 20, datagrams=50, size=100))
    assert t.details["received"] == 50
    assert t.delta() == 0
    assert t.delta("socket drops") == 0


def test_rp_filter_strict_drops_every_packet_on_the_asymmetric_path(netns):
    t = run(netns, F.RpFilterDrop(packets=50, mode=1))
    assert in_range(t) == 50
    assert t.delta("Udp.NoPorts") == 0  # none got as far as UDP
    assert t.knobs == {"net.ipv4.conf.all.rp_filter": "1", "net.ipv4.conf.ra0.rp_filter": "1"}


def test_rp_filter_loose_lets_the_asymmetric_path_through(netns):
    # the control: loose mode (2) only needs *a* route back, so nothing is dropped
    t = run(netns, F.RpFilterDrop(packets=50, mode=2))
    assert t.lo == t.hi == 0
    assert t.delta() == 0
    assert t.delta("Udp.NoPorts") == 50  # delivered up to UDP, which has no listener on 9


def test_tbf_qdisc_drops_the_flood(netns):
    t = run(netns, F.QdiscDrops(packets=300, size=1000))
    assert t.details["other_send_errors"] == 0
    n = in_range(t)
    assert n >= 250  # ~2 KB of queue and one burst: almost everything is dropped
    assert t.delta("Ip.OutDiscards") == n
    sent = t.delta("qdisc qd0 packets") + t.after["qdisc qd0 qlen"]
    assert sent + n == 300
    assert t.obj == "qd0"


def test_tbf_qdisc_below_its_rate_drops_nothing(netns):
    t = run(netns, F.QdiscDrops(packets=1, size=100))
    assert t.delta() == 0


def test_timewait_overflow_beyond_max_tw_buckets(netns):
    t = run(netns, F.TimeWaitOverflow(max_tw=4, conns=30))
    assert t.details["served"] == 30
    assert t.capacity == 4
    assert in_range(t) == 26
    assert t.after["sockstat TCP.tw"] == 4
    assert t.knobs["net.ipv4.tcp_max_tw_buckets"] == "4"


def test_timewait_within_the_buckets_does_not_overflow(netns):
    t = run(netns, F.TimeWaitOverflow(max_tw=16, conns=8))
    assert t.details["served"] == 8
    assert t.delta() == 0
    assert t.after["sockstat TCP.tw"] == 8


def test_the_conntrack_fault_refuses_to_run_on_the_host(netns):
    # Making conntrack track loads nf_conntrack, nf_tables, nft_ct or act_ct: the fault (the
    # full table and the tracking half) runs in the lab guest (tests/lab/test_conntrack_lab.py).
    with pytest.raises(AssertionError, match="runs only inside the lab guest"):
        run(netns, F.ConntrackFull(max_entries=None, conns=24))


def test_idle_namespace_moves_nothing(netns):
    t = run(netns, F.Idle())
    assert t.before == t.after
    assert all(v == 0 for v in t.after.values()), t.after


@pytest.mark.parametrize(
    "fault",
    [F.ListenOverflow(), F.UdpRcvbufErrors(), F.TimeWaitOverflow()],
    ids=lambda f: f.name,
)
def test_faults_release_their_ports(netns, fault):
    """A second run in the same namespace binds the same port and counts right again."""
    run(netns, fault)
    again = run(netns, type(fault)())
    assert again.lo <= again.delta() <= again.hi, again
