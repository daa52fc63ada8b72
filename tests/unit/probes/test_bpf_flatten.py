"""Map values read through a struct layout equal what walking the ctypes value gives: the
fast path the monitor reads per-CPU maps with (thousands of entries a second) must not
change a single number."""

from __future__ import annotations

import ctypes

from lbtune.host.trace.bpf import _RUN_GAP, _flat, _flatten, _layout, _runs


class Inner(ctypes.Structure):
    _fields_ = [("a", ctypes.c_uint8), ("b", ctypes.c_uint16), ("c", ctypes.c_int32)]


class Entry(ctypes.Structure):
    _fields_ = [
        ("location", ctypes.c_uint64),
        ("reason", ctypes.c_uint32),
        ("protocol", ctypes.c_uint16),
        ("pad", ctypes.c_uint8),
        ("name", ctypes.c_char * 16),
        ("inner", Inner * 2),
        ("signed", ctypes.c_int64),
        ("count", ctypes.c_ulonglong),
    ]


class Either(ctypes.Union):
    _fields_ = [("x", ctypes.c_uint32), ("y", ctypes.c_uint16)]


def test_struct_layout_reads_what_the_ctypes_walk_reads():
    e = Entry(0xFFFFFFFF81000000, 77, 17, 3, b"eth0", (Inner(1, 65535, -5), Inner(2, 7, 2**31 - 1)),
              -(2**40), 2**64 - 1)  # fmt: skip
    assert _layout(Entry) is not None
    assert _flat(e) == _flatten(e)
    assert _flat(e)[4] == b"eth0" and _flat(e)[-2:] == (-(2**40), 2**64 - 1)
    per_cpu = (Entry * 3)()
    per_cpu[1].count = 9
    assert [_flat(v) for v in per_cpu] == [_flatten(v) for v in per_cpu]
    assert _flat(ctypes.c_uint64(5).value) == (5,)
    arr = (ctypes.c_uint32 * 4)(1, 2, 3, 4)
    assert _flat(arr) == _flatten(arr) == (1, 2, 3, 4)


def test_types_without_a_layout_are_walked():
    assert _layout(Either) is None  # overlapping fields
    name = (ctypes.c_char * 8)(*b"ab")
    assert _layout(type(name)) is None and _flat(name) == _flatten(name) == (b"ab" + b"\0" * 6,)


def test_slots_are_read_in_runs_with_small_gaps_merged():
    assert _runs([], 4096) == []
    assert _runs([7], 4096) == [(7, 1)]
    # sorted, duplicates once, gaps of up to _RUN_GAP slots read through, larger ones not
    assert _runs([40, 3, 3, 3 + 1 + _RUN_GAP], 4096) == [(3, 2 + _RUN_GAP), (40, 1)]
    assert _runs([3, 3 + 2 + _RUN_GAP], 4096) == [(3, 1), (3 + 2 + _RUN_GAP, 1)]
    assert _runs([-1, 0, 4095, 4096], 4096) == [(0, 1), (4095, 1)]  # only the map's slots
