"""`tc -s qdisc show` parsing (sosreport's tc_-s_qdisc_show), its writer, and tc id formatting."""

from __future__ import annotations

from pathlib import Path

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.net.qdisc import (
    QdiscStats,
    format_handle,
    format_parent,
    format_tc_qdisc,
    parse_rate,
    parse_tc_qdisc,
)

# iproute2 6.1 style output: mq with fq_codel children (xstats lines), a tbf with a backlog
# printed in Kb, an ingress qdisc, a rate-estimator line, and an error line a capture kept.
TC_S = (
    "qdisc noqueue 0: dev lo root refcnt 2 \n"
    " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
    " backlog 0b 0p requeues 0\n"
    "qdisc mq 0: dev eth0 root \n"
    " Sent 9876543210 bytes 12345678 pkt (dropped 42, overlimits 0 requeues 17) \n"
    " backlog 3Mb 2100p requeues 17\n"
    "qdisc fq_codel 0: dev eth0 parent :2 limit 10240p flows 1024 quantum 1514 target"
    " 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 \n"
    " Sent 4938271605 bytes 6172839 pkt (dropped 21, overlimits 0 requeues 9) \n"
    " backlog 1514b 1p requeues 9\n"
    "  maxpacket 1514 drop_overlimit 0 new_flow_count 12 ecn_mark 0\n"
    "  new_flows_len 0 old_flows_len 1\n"
    "qdisc fq_codel 0: dev eth0 parent :1 limit 10240p flows 1024 quantum 1514 target"
    " 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64 \n"
    " Sent 4938271605 bytes 6172839 pkt (dropped 21, overlimits 0 requeues 8) \n"
    " backlog 0b 0p requeues 8\n"
    "  maxpacket 0 drop_overlimit 0 new_flow_count 0 ecn_mark 0\n"
    "  new_flows_len 0 old_flows_len 0\n"
    "qdisc tbf 8001: dev v0 root refcnt 5 rate 1Mbit burst 1600b lat 5ms \n"
    " Sent 123456 bytes 1234 pkt (dropped 56, overlimits 78 requeues 0) \n"
    " rate 8bit 0pps backlog 12Kb 8p requeues 0\n"
    "qdisc ingress ffff: dev v0 parent ffff:fff1 ---------------- \n"
    " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
    " backlog 0b 0p requeues 0\n"
    "RTNETLINK answers: Invalid argument\n"
    "qdisc pfifo 8002: dev v1 parent 8001:1 limit 1000p\n"
    " Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0) \n"
    " backlog 0b 0p requeues 0\n"
)


def q(dev, kind, handle, parent, packets, nbytes, drops, over, req, bb, bp, rate=None):  # type: ignore[no-untyped-def]
    return QdiscStats(dev, kind, handle, parent, packets, nbytes, drops, over, req, bb, bp, rate)


def test_parse_realistic_output():
    assert parse_tc_qdisc(TC_S, "tc_-s_qdisc_show") == [
        q("lo", "noqueue", "0:", "root", 0, 0, 0, 0, 0, 0, 0),
        q("eth0", "mq", "0:", "root", 12345678, 9876543210, 42, 0, 17, 3 * 1024 * 1024, 2100),
        q("eth0", "fq_codel", "0:", ":2", 6172839, 4938271605, 21, 0, 9, 1514, 1),
        q("eth0", "fq_codel", "0:", ":1", 6172839, 4938271605, 21, 0, 8, 0, 0),
        q("v0", "tbf", "8001:", "root", 1234, 123456, 56, 78, 0, 12 * 1024, 8, rate=1_000_000),
        q("v0", "ingress", "ffff:", "ffff:fff1", 0, 0, 0, 0, 0, 0, 0),
        q("v1", "pfifo", "8002:", "8001:1", 1, 10, 0, 0, 0, 0, 0),
    ]


def test_without_statistics_is_malformed():
    text = "qdisc noqueue 0: dev lo root refcnt 2 \nqdisc tbf 8001: dev v0 root refcnt 2\n"
    with pytest.raises(MalformedHostFile, match=r"line 1: .*no statistics"):
        parse_tc_qdisc(text, "tc_-s_qdisc_show")


def test_broken_header_is_malformed():
    with pytest.raises(MalformedHostFile, match=r"line 1"):
        parse_tc_qdisc("qdisc tbf 8001: root\n Sent 0 bytes 0 pkt (dropped 0, overlimits 0 "
                       "requeues 0)\n", "t")  # fmt: skip


def test_empty_output():
    assert parse_tc_qdisc("", "t") == []
    assert parse_tc_qdisc('Cannot find device "eth9"\n', "t") == []


def test_round_trip_exact():
    stats = [
        *parse_tc_qdisc(TC_S, "t"),
        q("eth1", "pfifo_fast", "0:", "", 2**40, 2**50, 2**32 - 1, 3, 4, 123457, 99),
        q(
            "eth1", "tbf", "8003:", "root", 1, 2, 3, 4, 5, 6, 7, rate=1_234_567_896
        ),  # not "1234Mbit"
        q("eth1", "tbf", "8004:", "root", 1, 2, 3, 4, 5, 6, 7, rate=8 * 2**40),  # > 2^32 bytes/s
    ]
    text = format_tc_qdisc(stats)
    assert parse_tc_qdisc(text, "formatted") == stats
    assert "qdisc tbf 8001: dev v0 root rate 1000000bit " in text
    assert format_tc_qdisc([]) == ""


@pytest.mark.parametrize(
    ("value", "handle", "parent"),
    [
        (0xFFFFFFFF, "ffff:", "root"),
        (0x80010000, "8001:", "8001:"),
        (0x80010001, "8001:", "8001:1"),
        (0x00000001, "0:", ":1"),
        (0x0000000A, "0:", ":a"),
        (0xFFFFFFF1, "ffff:", "ffff:fff1"),
        (0, "0:", ""),
    ],
)
def test_tc_id_formatting(value, handle, parent):
    assert format_handle(value) == handle
    assert format_parent(value) == parent


def _attr(atype: int, payload: bytes) -> bytes:
    import struct

    raw = struct.pack("=HH", 4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def test_netlink_stats_stats2_and_legacy_fallback():
    import struct

    from lbtune.host.net import qdisc

    basic = struct.pack("=QI4x", 5000, 7)
    queue = struct.pack("=IIIII", 2, 3028, 9, 1, 11)
    stats2 = _attr(qdisc.TCA_STATS2, _attr(qdisc.TCA_STATS_BASIC, basic)
                   + _attr(qdisc.TCA_STATS_QUEUE, queue))  # fmt: skip
    from lbtune.host.net.netlink import parse_attrs

    attrs = parse_attrs(_attr(qdisc.TCA_KIND, b"tbf\0") + stats2)
    assert attrs[qdisc.TCA_KIND] == b"tbf\0"
    assert qdisc._stats(attrs) == (7, 5000, 9, 11, 1, 3028, 2)
    # 64-bit packet counter wins over the 32-bit one
    pkt64 = _attr(qdisc.TCA_STATS_PKT64, struct.pack("=Q", 2**33))
    attrs = parse_attrs(_attr(qdisc.TCA_STATS2, _attr(qdisc.TCA_STATS_BASIC, basic)
                              + _attr(qdisc.TCA_STATS_QUEUE, queue) + pkt64))  # fmt: skip
    assert qdisc._stats(attrs)[0] == 2**33
    # kernels without TCA_STATS2 (or qdiscs that only fill struct tc_stats)
    legacy = struct.pack("=QIIIIIII4x", 6000, 8, 4, 5, 100, 10, 1, 1514)
    assert qdisc._stats(parse_attrs(_attr(qdisc.TCA_STATS, legacy))) == (8, 6000, 4, 5, 0, 1514, 1)
    assert qdisc._stats({}) == (0, 0, 0, 0, 0, 0, 0)


def test_parse_attrs_masks_flags_and_stops_at_truncation():
    from lbtune.host.net.netlink import parse_attrs

    nested_flag = 0x8000
    buf = _attr(3 | nested_flag, b"abcde") + _attr(1, b"") + b"\x08\x00\x02\x00ab"
    assert parse_attrs(buf) == {3: b"abcde", 1: b""}
    assert parse_attrs(b"xx" + _attr(2, b"1234"), 2) == {2: b"1234"}


def test_recorded_host_reads_tc_file_or_says_unavailable(tmp_path):
    from lbtune.host.host import Host

    assert Host.open(str(tmp_path)).qdiscs() is None
    rec = tmp_path / "sos_commands" / "networking"
    rec.mkdir(parents=True)
    (rec / "tc_-s_qdisc_show").write_text(TC_S)
    got = Host.open(str(tmp_path)).qdiscs()
    assert got == parse_tc_qdisc(TC_S, "t")
    (rec / "tc_-s_qdisc_show").write_text("qdisc tbf 8001: dev v0 root\n")
    with pytest.raises(MalformedHostFile, match=r"tc_-s_qdisc_show: line 1"):
        Host.open(str(tmp_path)).qdiscs()


@pytest.mark.parametrize(
    ("text", "bps"),
    [
        ("1Mbit", 1_000_000),  # what tc prints (iproute2 print_rate: SI, integer, "bit")
        ("1500Kbit", 1_500_000),
        ("8bit", 8),
        ("1234Mbit", 1_234_000_000),
        ("40Gbit", 40_000_000_000),
        ("2Tbit", 2_000_000_000_000),
        ("1Mibit", 2**20),  # tc -iec
        ("1Kibit", 1024),
        ("3Gibit", 3 * 2**30),
        ("1Tibit", 2**40),
        ("1mbit", 1_000_000),  # what a user types: case does not matter
        ("1MBIT", 1_000_000),
        ("1.5mbit", 1_500_000),
        ("64000", 64_000),  # a plain number is bits/s
        ("125bps", 1000),  # ...but "bps" is BYTES per second
        ("125Bps", 1000),
        ("125kbps", 1_000_000),
        ("125KBps", 1_000_000),
        ("1KiBps", 8192),
        ("1mbps", 8_000_000),
        ("1MiBps", 8 * 2**20),
        ("1gbps", 8_000_000_000),
        ("1GiBps", 8 * 2**30),
        ("1tbps", 8 * 10**12),
        ("1TiBps", 8 * 2**40),
    ],
)
def test_parse_rate_units(text, bps):
    assert parse_rate(text) == bps


@pytest.mark.parametrize("text", ["", "Mbit", "1Mbits", "1 Mbit", "1Xbit", "-1bit", "1e6bit"])
def test_parse_rate_rejects(text):
    with pytest.raises(ValueError, match="not a tc rate"):
        parse_rate(text)


def test_rate_from_header_only_for_tbf():
    text = (
        # peakrate and the estimator's "rate 8bit" are not the configured rate
        "qdisc tbf 8001: dev v0 root refcnt 2 rate 500Kbit burst 1600b peakrate 2Mbit minburst"
        " 1600b lat 5ms \n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        " rate 8bit 0pps backlog 0b 0p requeues 0\n"
        "qdisc tbf 8002: dev v1 parent 1:1 rate 34359Mbit burst 1Mb lat 1ms \n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        # netem's rate is not read (yet): live reads tbf only, recorded must agree
        "qdisc netem 8003: dev v2 root refcnt 2 limit 1000 rate 1Mbit\n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        "qdisc htb 1: dev v3 root refcnt 2 r2q 10 default 0x10 direct_packets_stat 0\n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        " rate 1Mbit 100pps backlog 0b 0p requeues 0\n"
    )
    got = parse_tc_qdisc(text, "t")
    assert [(x.kind, x.rate_bps) for x in got] == [
        ("tbf", 500_000),
        ("tbf", 34_359_000_000),
        ("netem", None),
        ("htb", None),
    ]


def test_bad_tbf_rate_is_malformed():
    text = (
        "qdisc noqueue 0: dev lo root refcnt 2 \n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
        "qdisc tbf 8001: dev v0 root refcnt 2 rate fast burst 1600b lat 5ms\n"
        " Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0) \n"
    )
    with pytest.raises(MalformedHostFile, match=r"tc_-s_qdisc_show: line 3: not a tc rate"):
        parse_tc_qdisc(text, "tc_-s_qdisc_show")


def test_netlink_tbf_rate_parms_and_rate64():
    import struct

    from lbtune.host.net import qdisc
    from lbtune.host.net.netlink import parse_attrs

    def ratespec(bytes_per_s: int) -> bytes:  # cell_log, linklayer, overhead, align, mpu, rate
        return struct.pack("=BBHhHI", 3, 1, 0, -1, 0, bytes_per_s)

    # tc qdisc add ... tbf rate 1mbit burst 1600 latency 5ms; peakrate 2mbit to tell them apart
    qopt = ratespec(125_000) + ratespec(250_000) + struct.pack("=III", 3225, 1600, 1514)
    assert len(qopt) == 36  # sizeof(struct tc_tbf_qopt)
    options = _attr(qdisc.TCA_TBF_PARMS, qopt) + _attr(6, struct.pack("=I", 1600))  # BURST
    attrs = parse_attrs(
        _attr(qdisc.TCA_KIND, b"tbf\0") + _attr(qdisc.TCA_OPTIONS | 0x8000, options)
    )
    assert qdisc._rate_bps("tbf", attrs) == 1_000_000
    # other kinds: None, whatever their options hold
    assert qdisc._rate_bps("netem", attrs) is None
    assert qdisc._rate_bps("tbf", {}) is None
    truncated = parse_attrs(_attr(qdisc.TCA_OPTIONS, _attr(qdisc.TCA_TBF_PARMS, qopt[:20])))
    assert qdisc._rate_bps("tbf", truncated) is None
    # 40 Gbit/s does not fit the 32-bit field: the kernel saturates it and adds RATE64
    big = 5_000_000_000
    qopt = ratespec(0xFFFFFFFF) + ratespec(0) + struct.pack("=III", 0, 1600, 0)
    options = _attr(qdisc.TCA_TBF_PARMS, qopt) + _attr(qdisc.TCA_TBF_RATE64, struct.pack("=Q", big))
    assert qdisc._rate_bps("tbf", parse_attrs(_attr(qdisc.TCA_OPTIONS, options))) == 8 * big


def _qdisc_texts() -> list[str]:
    hosts = Path(__file__).resolve().parent.parent / "data" / "hosts"
    return [p.read_text() for p in sorted(hosts.glob("*/sos_commands/networking/tc_-s_qdisc_show"))]


def _both(text: str) -> tuple[object, object]:
    """(the whole-qdisc reading, the line-by-line one) of `text`: qdiscs or the error."""
    from lbtune.host.net.qdisc import _parse_blocks, _parse_lines

    out = []
    for parse in (_parse_blocks, _parse_lines):
        try:
            out.append(parse(text, "t"))
        except MalformedHostFile as e:
            out.append(("error", str(e)))
    return out[0], out[1]


@pytest.mark.parametrize("text", _qdisc_texts())
def test_recorded_hosts_are_read_whole_qdiscs_at_a_time_as_line_by_line(text):
    fast, lines = _both(text)
    assert fast is not None and len(lines) > 0  # (the recorded hosts take the fast way)
    assert fast == lines == parse_tc_qdisc(text, "t")


def test_any_edit_of_a_line_reads_as_line_by_line():
    """Every line of a real listing changed in ways tc does not print (or does: a second
    Sent or backlog line among fq_codel's, a tab, a missing newline at the end): the
    whole-qdisc reading gives up (None) or reads what the line-by-line reading reads."""
    import random

    text = _qdisc_texts()[0]
    lines = text.split("\n")
    edits = [lambda s: "", lambda s: s + " x", lambda s: "\t" + s,
             lambda s: s.replace(" ", "  ", 1),
             lambda s: "  Sent 1 bytes 2 pkt (dropped 3, overlimits 4 requeues 5)",
             lambda s: "  backlog 3Kb 2p requeues 0", lambda s: s.replace("0", "x", 1),
             lambda s: s.replace("dev", "dew"), lambda s: s + "\r", lambda s: "garbage " + s,
             lambda s: s.replace("1", "\u0661")]  # fmt: skip
    rng = random.Random(33)  # noqa: S311 (a fixed sequence of edits, not a secret)
    tried = 0
    for i in rng.sample(range(len(lines)), 40):
        for edit in edits:
            changed = "\n".join([*lines[:i], edit(lines[i]), *lines[i + 1 :]])
            for variant in (changed, changed.rstrip("\n")):
                fast, slow = _both(variant)
                assert fast is None or fast == slow, (i, lines[i])
                try:
                    got: object = parse_tc_qdisc(variant, "t")
                except MalformedHostFile as e:
                    got = ("error", str(e))
                assert got == slow
                tried += 1
    assert tried > 400
