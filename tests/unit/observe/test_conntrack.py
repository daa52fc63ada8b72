"""/proc/net/stat/nf_conntrack by header name, across kernel versions; count and max."""

from __future__ import annotations

import os
import pathlib
from typing import Optional

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.conntrack import parse_nf_conntrack_stat, read_conntrack
from tests.conftest import DELL, HOSTS, KVM, TINY

# 5.17+ (ct_cpu_seq_show): the format of this machine's kernel.
NEW = (
    "entries  clashres found new invalid ignore delete chainlength insert insert_failed drop "
    "early_drop icmp_error  expect_new expect_create expect_delete search_restart\n"
    "00000fce  00000000 00000000 00000000 00000004 00000000 00000000 00000000 00000000 000000c8 "
    "000001d8 00000000 00000000  00000000 00000000 00000000 00000000\n"
    "00000fce  00000001 00000000 00000000 00000004 00000000 00000000 00000000 00000000 000000a2 "
    "0000016f 00000000 00000000  00000000 00000000 00000000 00000003\n"
)

# Older kernels: `searched` and `delete_list` where 5.x prints `clashres` and `chainlength`,
# `new`, `ignore`, `delete` still counted.
OLD = (
    "entries  searched found new invalid ignore delete delete_list insert insert_failed drop "
    "early_drop icmp_error  expect_new expect_create expect_delete search_restart\n"
    "0000a1b2  0012d687 0000beef 00001000 00000010 00020000 00000fff 00000ff0 00001001 00000002 "
    "00000005 00000001 00000000  00000000 00000000 00000000 00000009\n"
)


def test_new_header() -> None:
    rows = parse_nf_conntrack_stat(NEW, "stat")
    assert len(rows) == 2
    assert [(r["insert_failed"], r["drop"]) for r in rows] == [(0xC8, 0x1D8), (0xA2, 0x16F)]
    assert rows[1]["clashres"] == 1 and rows[1]["search_restart"] == 3
    assert "chainlength" in rows[0] and "delete_list" not in rows[0]


def test_old_header_other_columns() -> None:
    (row,) = parse_nf_conntrack_stat(OLD, "stat")
    assert row["searched"] == 0x12D687 and row["delete_list"] == 0xFF0
    assert (row["new"], row["ignore"], row["insert"]) == (0x1000, 0x20000, 0x1001)
    assert (row["insert_failed"], row["drop"], row["early_drop"]) == (2, 5, 1)
    assert "clashres" not in row


def test_columns_found_by_name_not_position() -> None:
    # the same numbers under a shuffled header land under the right names
    text = "drop insert_failed entries\n00000005 00000002 0000000a\n"
    assert parse_nf_conntrack_stat(text, "s") == ({"drop": 5, "insert_failed": 2, "entries": 10},)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty file"),
        ("00000001 00000002\n", "bad header"),
        ("entries drop\n00000001\n", "1 values for 2 columns"),
        ("entries drop\n00000001 0000000x\n", "not hexadecimal"),
        ("entries drop\n00000001 00000002\n00000001 0000000x\n", "line 3: not hexadecimal"),
        ("entries drop\n00000001 00000002\n00000001\n", "line 3: 1 values for 2 columns"),
    ],
)
def test_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile, match=problem):
        parse_nf_conntrack_stat(text, "stat")


def _tree(tmp_path: pathlib.Path, stat: str, count: Optional[str], limit: Optional[str]) -> HostFS:
    (tmp_path / "proc/net/stat").mkdir(parents=True)
    (tmp_path / "proc/sys/net/netfilter").mkdir(parents=True)
    (tmp_path / "proc/net/stat/nf_conntrack").write_text(stat)
    if count is not None:
        (tmp_path / "proc/sys/net/netfilter/nf_conntrack_count").write_text(count)
    if limit is not None:
        (tmp_path / "proc/sys/net/netfilter/nf_conntrack_max").write_text(limit)
    return HostFS(str(tmp_path))


def test_read_totals(tmp_path: pathlib.Path) -> None:
    ct = read_conntrack(_tree(tmp_path, NEW, "4046\n", "65536\n"))
    assert ct is not None
    assert (ct.count, ct.max) == (4046, 65536)
    assert ct.totals["insert_failed"] == 0xC8 + 0xA2
    assert ct.totals["drop"] == 0x1D8 + 0x16F
    assert ct.totals["entries"] == 0xFCE  # the table-wide count, not summed over CPUs
    assert len(ct.per_cpu) == 2


def test_read_count_from_entries_without_sysctl(tmp_path: pathlib.Path) -> None:
    ct = read_conntrack(_tree(tmp_path, NEW, None, None))
    assert ct is not None and (ct.count, ct.max) == (0xFCE, None)


def test_not_loaded(tmp_path: pathlib.Path) -> None:
    assert read_conntrack(HostFS(str(tmp_path))) is None
    assert read_conntrack(HostFS(str(HOSTS / TINY))) is None


def test_fixture_r750_table_full() -> None:
    ct = read_conntrack(HostFS(str(HOSTS / DELL)))
    assert ct is not None
    assert (ct.count, ct.max) == (261000, 262144)
    assert len(ct.per_cpu) == 48  # a row per possible CPU
    assert "delete_list" in ct.per_cpu[0]  # 5.15 header
    assert ct.totals["insert_failed"] > 0 and ct.totals["drop"] > 0
    assert ct.totals["entries"] == 261000
    kvm = read_conntrack(HostFS(str(HOSTS / KVM)))
    assert kvm is not None and kvm.totals["drop"] == 0 and "chainlength" in kvm.totals


@pytest.mark.skipif(
    not os.path.exists("/proc/net/stat/nf_conntrack"),
    reason="capability: no conntrack in this kernel (tests never load nf_conntrack)",
)
def test_this_machine() -> None:
    ct = read_conntrack(HostFS("/"))
    assert ct is not None and ct.max is not None
    assert {"entries", "insert_failed", "drop", "early_drop"} <= set(ct.totals)
    possible = HostFS("/").read_cpulist("/sys/devices/system/cpu/possible")
    assert possible is not None and len(ct.per_cpu) == len(possible)


def test_totals_are_column_sums() -> None:
    """Event columns summed over the CPUs' rows, `entries` the largest (the same table-wide
    count on every row); a name the header repeats holds its last column."""
    from lbtune.observe.conntrack import _totals

    text = (
        "entries drop found drop\n0000000a 00000001 00000002 00000003\n"
        "0000000a 00000004 00000005 00000006\n0000000b 00000000 00000001 00000010\n"
    )
    rows = parse_nf_conntrack_stat(text, "s")
    assert rows[0] == {"entries": 10, "drop": 3, "found": 2}
    assert _totals(rows) == {"entries": 11, "drop": 3 + 6 + 16, "found": 8}
    assert list(_totals(rows)) == ["entries", "drop", "found"] and _totals(()) == {}


@pytest.mark.parametrize("words", [
    ("0003fb88", "00000025"), ("FFFFFFFF", "0000abCD"),  # eight digits: read all at once
    ("3fb88", "00000025"), ("0003fb88", "000000025"), ("0x3fb88", "00000025"),  # any other
    ("+003fb88", "00000025"), ("0_03fb88", "00000025"), ("0000000\u0661", "\u0660" * 8),
])  # fmt: skip
def test_values_read_as_int_base_16_reads_them(words: tuple[str, str]) -> None:
    text = "entries  found\n" + f"{words[0]} {words[1]}\n" * 3
    assert parse_nf_conntrack_stat(text, "t") == tuple(
        {"entries": int(words[0], 16), "found": int(words[1], 16)} for _ in range(3))


@pytest.mark.parametrize("word", ["0000000g", "00000-01", "0000000\u00e9", "zzzzzzzz"])
def test_a_word_int_cannot_read_is_malformed(word: str) -> None:
    with pytest.raises(MalformedHostFile, match="not hexadecimal"):
        parse_nf_conntrack_stat(f"entries found\n00000001 {word}\n", "t")
