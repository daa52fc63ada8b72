"""Debian 12's kernel (6.1): drop-reason names from its own kfree_skb format, and the rules
whose reason 6.1 lacks explained by their counters alone (issue 19 item 5, the part that needs
no VM). The format is tests/data/tracefs/linux-6.1/, derived from Debian's
linux-headers-6.1.0-56-common (see the README there); the live check on the VM's kernel is
the vm tier's."""

from __future__ import annotations

import pathlib

from lbtune.diagnose.finding import Evidence, Finding
from lbtune.diagnose.probe_evidence import REASONS, explain
from lbtune.host.trace.tracefs import parse_format
from lbtune.observe.dropreasons import resolve_drop_reasons
from lbtune.observe.probes import DropCount, ProbeSample
from lbtune.vocab import Level

DATA = pathlib.Path(__file__).resolve().parents[2] / "data" / "tracefs"


def table(kernel: str) -> dict[int, str]:
    path = DATA / kernel / "events" / "skb" / "kfree_skb" / "format"
    return parse_format(path.read_text(), "skb", "kfree_skb").symbols("reason")


def test_61_names_resolve_with_61_numbering_not_618s() -> None:
    r61 = resolve_drop_reasons(table("linux-6.1"), [])
    r618 = resolve_drop_reasons(table("linux-6.18"), [])
    assert r61.source == "tracepoint format"
    # SKB_NOT_DROPPED_YET = 0, then NOT_SPECIFIED = 1 on 6.1 (6.18 has CONSUMED = 1 first)
    assert (r61.name(1), r61.name(2), r61.name(3), r61.name(4)) == (
        "NOT_SPECIFIED", "NO_SOCKET", "PKT_TOO_SMALL", "TCP_CSUM")  # fmt: skip
    assert (r618.name(3), r618.name(4)) == ("NO_SOCKET", "SOCKET_CLOSE")
    assert r61.value("NO_SOCKET") == 2 and r618.value("NO_SOCKET") == 3
    assert r61.value("SOCKET_BACKLOG") == 20 and r61.value("QDISC_DROP") == 45
    assert r61.value("TC_CHAIN_NOTFOUND") == 65 and r61.name(66) == "MAX"
    # the same number names different reasons on the two kernels
    differ = [v for v in r61.names if v in r618.names and r61.names[v] != r618.names[v]]
    assert len(differ) > 50, differ
    # reasons 6.1 does not have
    for missing in ("TCP_LISTEN_OVERFLOW", "TCP_REQQFULLDROP", "SOCKET_CLOSE", "CONSUMED"):
        assert r61.value(missing) is None, missing
    assert r618.value("TCP_LISTEN_OVERFLOW") == 40 and r618.value("SOCKET_CLOSE") == 4


def _finding(rule: str) -> Finding:
    return Finding(rule, "t", Level.FAIL, "tcp 127.0.0.1:80", "cause.", 10, "packets", 1.0,
                   (Evidence("TcpExt.ListenOverflows", 10, 5.0, "/proc/net/netstat"),),
                   ())  # fmt: skip


def test_rules_whose_reasons_61_lacks_fall_back_to_counter_evidence() -> None:
    """On 6.1 a listen overflow's packets are freed under a generic reason (6.1 has no
    TCP_LISTEN_OVERFLOW or TCP_REQQFULLDROP): every drop the probe can report there is named
    from 6.1's table, none of those names is one of these rules' reasons, so the findings
    keep exactly their counter evidence and cause: no probe row is attached and nothing is
    claimed. With 6.18's names the same rule gets the kernel's row (the positive control)."""
    r61 = resolve_drop_reasons(table("linux-6.1"), [])
    lacking = [rule for rule, reasons in REASONS.items()
               if all(r61.value(x) is None for x in reasons)]  # fmt: skip
    assert {"accept-queue-overflow", "syn-queue-full"} <= set(lacking), lacking
    # every reason 6.1 can report, at the places the listen path frees packets
    drops = tuple(
        DropCount(name, code, f"{fn}+0x1a", fn, "IPv4", 3)
        for code, name in sorted(r61.names.items()) if name != "MAX"
        for fn in ("tcp_v4_rcv", "tcp_v4_syn_recv_sock", "tcp_conn_request")
    )  # fmt: skip
    sample = ProbeSample(("drops",), 2.0, drops, 0, "host", (), (), 0, ())
    for rule in lacking:
        (f,) = explain([_finding(rule)], sample)
        assert f.evidence == _finding(rule).evidence, (rule, f.evidence)
        assert f.cause == "cause.", (rule, f.cause)
    # positive control: 6.18's number 40 is TCP_LISTEN_OVERFLOW, and it is explained
    r618 = resolve_drop_reasons(table("linux-6.18"), [])
    hit = DropCount(r618.name(40), 40, "tcp_v4_rcv+0x1a", "tcp_v4_rcv", "IPv4", 3)
    (f,) = explain([_finding("accept-queue-overflow")], ProbeSample(
        ("drops",), 2.0, (hit,), 0, "host", (), (), 0, ()))  # fmt: skip
    assert len(f.evidence) == 2 and "TCP_LISTEN_OVERFLOW" in f.cause
    # and the rules whose reasons 6.1 has are still explained on 6.1
    code = r61.value("SOCKET_BACKLOG")
    assert code is not None
    row = DropCount(r61.name(code), code, "tcp_add_backlog+0x1a", "tcp_add_backlog", "IPv4", 3)
    (f,) = explain([_finding("socket-backlog-drop")], ProbeSample(
        ("drops",), 2.0, (row,), 0, "host", (), (), 0, ()))  # fmt: skip
    assert "SOCKET_BACKLOG" in f.cause
