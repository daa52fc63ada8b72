"""vmxnet3 repeats its counter names in each queue's section of `ethtool -S`: both readers
(recorded text and the GSTRINGS ioctl's names) give each queue's counters their own name, and
the driver map turns them into per-queue drops. The text is a real guest's output
(tests/data/ethtool/README.md)."""

from __future__ import annotations

from pathlib import Path

from lbtune.host.net.ethtool import parse_ethtool_S, qualify_sections
from lbtune.observe.nicstats import map_queue_counters, nic_drop_counters

TEXT = (Path(__file__).parents[2] / "data" / "ethtool" / "vmxnet3-S.txt").read_text()


def test_recorded_text_keeps_every_queue_apart() -> None:
    stats = parse_ethtool_S(TEXT)
    assert stats["Rx Queue#0: pkts rx OOB"] == 265662
    assert [stats[f"Rx Queue#{q}: pkts rx OOB"] for q in (1, 2, 3)] == [0, 0, 0]
    assert stats["Tx Queue#0: ucast pkts tx"] == 26
    assert stats["Tx Queue#3: mcast pkts tx"] == 4
    # the section ends at the first name no deeper than its header
    assert stats["tx timeout count"] == 0 and "Rx Queue#3: tx timeout count" not in stats
    # nested names stay in their queue ("err" under "drv dropped rx total")
    assert "Rx Queue#2: err" in stats and "Tx Queue#1: giant hdr" in stats
    assert sum(1 for k in stats if k.startswith("Rx Queue#0: ")) == 14


def test_ioctl_names_are_qualified_the_same_way() -> None:
    # GSTRINGS gives the driver's own strings, indentation included ("  pkts rx OOB")
    raw: list[tuple[int, str]] = []
    for line in TEXT.splitlines()[1:]:
        name = line.split(":")[0]
        raw.append((len(name) - len(name.lstrip()), name.strip()))
    names = qualify_sections(raw)
    assert names is not None and len(names) == len(raw) == 141
    # a name repeated inside one section ("giant hdr" twice per tx queue) is one key of the dict
    assert list(parse_ethtool_S(TEXT)) == list(dict.fromkeys(names))


def test_names_of_other_drivers_are_unchanged() -> None:
    names = [(0, "rx_queue_0_packets"), (2, " odd"), (0, "tx_queue_0_packets")]
    assert qualify_sections(names) is None  # the caller keeps its names untouched
    text = "NIC statistics:\n     rx_queue_0_packets: 3\n       rx_queue_0_drops: 1\n"
    assert parse_ethtool_S(text) == {"rx_queue_0_packets": 3, "rx_queue_0_drops": 1}


def test_map_gives_per_queue_packets_and_ring_drops() -> None:
    stats = parse_ethtool_S(TEXT)
    qs = {(q.direction, q.queue): q for q in map_queue_counters("vmxnet3", stats)}
    assert sorted(qs) == [("rx", 0), ("rx", 1), ("rx", 2), ("rx", 3),
                          ("tx", 0), ("tx", 1), ("tx", 2), ("tx", 3)]  # fmt: skip
    assert (qs["rx", 0].packets, qs["rx", 0].bytes, qs["rx", 0].drops) == (62200, 6593200, 265662)
    assert qs["rx", 1].drops == 0 and qs["tx", 0].packets == 30 and qs["tx", 0].drops == 0
    assert qs["rx", 0].extra["drv dropped rx total"] == 0
    assert nic_drop_counters("vmxnet3", stats) == {}  # its drops are per queue
