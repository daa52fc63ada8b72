"""Per-CPU softirq counts of /proc/softirqs (how often NET_RX, NET_TX... ran on each CPU).

The header names one column per *possible* CPU (`CPU0 CPU1 ...`, fs/proc/softirqs.c), so an
offline CPU has a column too, frozen at its last count; unlike /proc/interrupts, whose header
lists online CPUs only.
"""

from __future__ import annotations

from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.model import Softirqs

SOFTIRQS = "/proc/softirqs"


def parse_softirqs(text: str, source: str) -> Softirqs:
    """Parse /proc/softirqs into {softirq name: {cpu id: count}}."""
    lines = text.splitlines()
    if not lines:
        raise MalformedHostFile(source, "empty file")
    header = lines[0].split()
    if not header or not all(h.startswith("CPU") and h[3:].isdigit() for h in header):
        raise MalformedHostFile(source, f"bad header row {lines[0][:60]!r}")
    cpus = tuple(int(h[3:]) for h in header)
    counts: dict[str, dict[int, int]] = {}
    for line in lines[1:]:
        name, sep, rest = line.partition(":")
        name = name.strip()
        if not line.strip():
            continue
        values = rest.split()
        if not sep or not name or len(values) != len(cpus):
            raise MalformedHostFile(source, f"{name or line!r}: expected {len(cpus)} counts")
        try:
            counts[name] = dict(zip(cpus, map(int, values)))
        except ValueError:
            raise MalformedHostFile(source, f"{name}: non-integer count") from None
    return Softirqs(cpus=cpus, counts=counts)


def read_softirqs(fs: HostFS) -> Optional[Softirqs]:
    """The host's softirq counts; None when /proc/softirqs is absent."""
    text = fs.read(SOFTIRQS)
    return None if text is None else parse_softirqs(text, fs.path(SOFTIRQS))
