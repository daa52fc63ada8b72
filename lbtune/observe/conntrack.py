"""Connection-tracking table fill and per-CPU event counters (/proc/net/stat/nf_conntrack).

The stat file has a header row and one hex row per *possible* CPU (ct_cpu_seq_show in
net/netfilter/nf_conntrack_standalone.c). Its columns changed during 5.x (`searched` became
`clashres`, `delete_list` became `chainlength`, and several now always print 0), so columns are
looked up by the names in the header, never by position. `entries` is the
table-wide count repeated on every row, not a per-CPU value.
"""

from __future__ import annotations

import functools
import itertools
import struct
from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.model import ConntrackStats

STAT = "/proc/net/stat/nf_conntrack"
COUNT = "/proc/sys/net/netfilter/nf_conntrack_count"
MAX = "/proc/sys/net/netfilter/nf_conntrack_max"
MAX_LEGACY = "/proc/sys/net/nf_conntrack_max"  # init namespace only, older distributions
# Columns that are not per-CPU event counts: not summed over rows.
GAUGES = frozenset({"entries"})


_hex = functools.partial(int, base=16)


def parse_nf_conntrack_stat(text: str, source: str) -> tuple[dict[str, int], ...]:
    """Rows of /proc/net/stat/nf_conntrack as {header column name: value}, in file order."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise MalformedHostFile(source, "empty file")
    header = lines[0].split()
    if not header or any(not h.replace("_", "").isalpha() for h in header):
        raise MalformedHostFile(source, f"bad header row {lines[0][:60]!r}")
    width = len(header)
    words = [line.split() for line in lines[1:]]
    for n, values in enumerate(words, 2):
        if len(values) != width:
            raise MalformedHostFile(
                source, f"line {n}: {len(values)} values for {len(header)} columns"
            )
    try:  # every row's values in one pass (a row per possible CPU)
        flat = _words32(words)
        if flat is None:
            flat = list(map(_hex, itertools.chain.from_iterable(words)))
    except ValueError:
        for n, values in enumerate(words, 2):
            try:
                list(map(_hex, values))
            except ValueError:
                raise MalformedHostFile(source, f"line {n}: not hexadecimal") from None
        raise
    return tuple(dict(zip(header, flat[i : i + width])) for i in range(0, len(flat), width))


def _words32(rows: list[list[str]]) -> Optional[list[int]]:
    """Every value at once when each is eight hex digits, as the kernel prints them
    (`%08x`): the digits as bytes, read as big-endian 32-bit words in C instead of an
    int(word, 16) each. None for anything else (then int(word, 16) reads each)."""
    flat = list(itertools.chain.from_iterable(rows))
    if not flat or set(map(len, flat)) != {8}:
        return None
    digits = "".join(flat)
    if not digits.isascii() or not digits.isalnum():  # hex digits only: no "+", "_", "x"
        return None
    try:
        raw = bytes.fromhex(digits)
    except ValueError:  # a letter beyond f
        return None
    return list(struct.unpack(f">{len(flat)}I", raw))


def _totals(rows: tuple[dict[str, int], ...]) -> dict[str, int]:
    """Each column summed over the rows (GAUGES: the largest, at least 0). Every row has
    the header's names in its order, so the columns are the rows' values zipped."""
    if not rows:
        return {}
    columns = zip(*(row.values() for row in rows))
    return {name: max(max(column), 0) if name in GAUGES else sum(column)
            for name, column in zip(rows[0], columns)}  # fmt: skip


def read_conntrack(fs: HostFS) -> Optional[ConntrackStats]:
    """Conntrack count, limit and per-CPU counters; None when conntrack is not loaded.

    `totals` sums each event column over the CPUs; `entries` is taken once (it is the
    table-wide count on every row). The count comes from nf_conntrack_count, else from
    `entries`.
    """
    count = fs.read_int(COUNT)
    text = fs.read(STAT)
    if count is None and text is None:
        return None
    rows = parse_nf_conntrack_stat(text, fs.path(STAT)) if text is not None else ()
    totals = _totals(rows)
    if count is None:
        count = totals.get("entries", 0)
    limit = fs.read_int(MAX)
    if limit is None:
        limit = fs.read_int(MAX_LEGACY)
    return ConntrackStats(count=count, max=limit, totals=totals, per_cpu=rows)
