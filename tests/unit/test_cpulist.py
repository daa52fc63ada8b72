"""CPU lists (`0-3,8`) and hex masks (`ffff,ffffffff`) in the kernel's spellings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lbtune.host.kernel.cpulist import (
    MAX_CPUS,
    CpuListError,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
)

R750_HOUSEKEEPING = frozenset({0, 1, *range(12, 26), *range(36, 48)})


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3,8", {0, 1, 2, 3, 8}),
        ("0-11,24-35", set(range(12)) | set(range(24, 36))),
        ("0,24", {0, 24}),
        ("7", {7}),
        ("0-0", {0}),
        ("", set()),
        ("\n", set()),
        ("(null)", set()),
        (" 2-5 \n", {2, 3, 4, 5}),
        ("0-1,12-25,36-47", R750_HOUSEKEEPING),
        ("8191", {8191}),
        # the kernel's group syntax a-b:used/group (lib/bitmap.c)
        ("0-11:2/4", {0, 1, 4, 5, 8, 9}),
        ("9-38:4/10", {9, 10, 11, 12, 19, 20, 21, 22, 29, 30, 31, 32}),
        ("0-6:1/2", {0, 2, 4, 6}),
        ("0-7:4/4", set(range(8))),
        ("0-7:0/4", set()),
        ("3:1/2", {3}),
        ("1-5:2/4,8", {1, 2, 5, 8}),
    ],
)
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == frozenset(cpus)


@pytest.mark.parametrize(
    "text",
    [
        "0-x",
        "x",
        "1-0",
        "3,,4",
        ",",
        "0,",
        "-1",
        "0-",
        "-",
        "0x3",
        "0 3",
        "\uff11",  # FULLWIDTH DIGIT ONE: isdigit() but not ASCII
        str(MAX_CPUS),
        "0-11:2",  # ':' needs used/group; the kernel rejects a bare stride
        "0-3:5/4",  # used > group
        "0-3:1/0",
        "0-3:/4",
        "0-3:1/",
        "0-3:a/4",
        "N",
        "all",
    ],
)
def test_parse_cpulist_rejects(text):
    with pytest.raises(CpuListError):
        parse_cpulist(text)


@pytest.mark.parametrize(
    ("cpus", "text"),
    [
        ([], ""),
        ([5], "5"),
        ([3, 1, 2, 0, 8, 8], "0-3,8"),
        (range(48), "0-47"),
        ([0, 2, 4], "0,2,4"),
        ([0, 1, 12, 13, 14, 36], "0-1,12-14,36"),
    ],
)
def test_format_cpulist(cpus, text):
    assert format_cpulist(cpus) == text


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("ffff,ffffffff", set(range(48))),
        ("fff0,03fff003", R750_HOUSEKEEPING),
        ("0000000f,fc000ffc", set(range(2, 12)) | set(range(26, 36))),
        ("00000000,00000001", {0}),
        ("1,00000000", {32}),
        ("80000000,00000000,00000000", {95}),
        ("0000,00000000", set()),
        ("0", set()),
        ("00", set()),
        ("f", {0, 1, 2, 3}),
        ("3", {0, 1}),
        ("0x3", {0, 1}),
        ("ff\n", set(range(8))),
        # one word per comma, as bitmap_parse() and irqbalance read it
        ("f,c", {2, 3, 32, 33, 34, 35}),
        ("000000001", {0}),  # leading zeros do not widen a word
    ],
)
def test_parse_cpumask(text, cpus):
    assert parse_cpumask(text) == frozenset(cpus)


@pytest.mark.parametrize(
    "text", ["", ",", "xyz", "f,,f", "1ffffffff", "f f", "-1", "+f", "ff,zz", "0x"]
)
def test_parse_cpumask_rejects(text):
    with pytest.raises(CpuListError):
        parse_cpumask(text)


def test_parse_cpumask_bounds_width():
    with pytest.raises(CpuListError):
        parse_cpumask(",".join(["ffffffff"] * (MAX_CPUS // 32 + 1)))
    assert max(parse_cpumask(",".join(["ffffffff"] * (MAX_CPUS // 32)))) == MAX_CPUS - 1


@pytest.mark.parametrize(
    ("cpus", "nr", "text"),
    [
        (range(48), 48, "ffff,ffffffff"),
        (R750_HOUSEKEEPING, 48, "fff0,03fff003"),
        (set(), 48, "0000,00000000"),
        ({0}, 2, "1"),
        (set(), 2, "0"),
        (range(4), 4, "f"),
        (range(8), 8, "ff"),
        ({31}, 32, "80000000"),
        ({32}, 33, "1,00000000"),
        ({0}, 64, "00000000,00000001"),
        ({0}, 36, "0,00000001"),
        ({40}, 2, "00000100,00000000"),  # CPUs beyond nr_cpus widen the mask
    ],
)
def test_format_cpumask(cpus, nr, text):
    assert format_cpumask(frozenset(cpus), nr) == text


cpu_sets = st.frozensets(st.integers(min_value=0, max_value=MAX_CPUS - 1), max_size=64)


@given(cpu_sets)
def test_cpulist_round_trip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@given(cpu_sets, st.integers(min_value=1, max_value=MAX_CPUS))
def test_cpumask_round_trip(cpus, nr):
    text = format_cpumask(cpus, nr)
    assert parse_cpumask(text) == cpus
    words = text.split(",")
    assert all(len(w) == 8 for w in words[1:])  # only the leading word is trimmed
    assert 1 <= len(words[0]) <= 8


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 40)), min_size=1, max_size=8))
def test_format_of_parse_is_canonical(ranges):
    text = ",".join(f"{lo}-{lo + n}" if n else str(lo) for lo, n in ranges)
    cpus = parse_cpulist(text)
    assert cpus == frozenset(c for lo, n in ranges for c in range(lo, lo + n + 1))
    canonical = format_cpulist(cpus)
    assert parse_cpulist(canonical) == cpus
    assert format_cpulist(parse_cpulist(canonical)) == canonical
