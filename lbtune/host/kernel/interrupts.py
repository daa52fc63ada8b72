"""/proc/interrupts and the per-IRQ files under /proc/irq/N."""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass
from operator import itemgetter
from typing import Callable, ItemsView, Iterable, Iterator, Mapping, Optional, ValuesView

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS

# line breaks str.splitlines() knows besides "\n"
_OTHER_BREAKS = ("\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
_TRIGGER = re.compile(r"(?:^|-)(?:edge|level|fasteoi)$", re.IGNORECASE)


class CpuCounts(Mapping[int, int]):
    """A row's per-CPU counts: CPU id -> interrupts handled there, in the columns' order.

    The CPU ids are a tuple that every row of one read shares (with the index of each id
    in it), the counts one array of numbers in that order: a 48-CPU row is ~0.5 KB where
    a dict of its counts was 2.3 KB before the numbers, and the monitor keeps ten minutes
    of samples of a hundred such rows. Two rows' counts compare, and are read and
    subtracted column by column, in C (`numbers`, `same_cpus`); the mapping's own methods
    work for the few readers that look up one CPU.
    """

    __slots__ = ("_columns", "cpus", "numbers")

    cpus: tuple[int, ...]
    numbers: array[int]
    _columns: CpuColumns

    def __init__(self, columns: CpuColumns, numbers: array[int]) -> None:
        if len(numbers) != len(columns.cpus):
            raise ValueError(f"{len(numbers)} counts for {len(columns.cpus)} CPUs")
        self.cpus = columns.cpus
        self._columns = columns
        self.numbers = numbers

    @classmethod
    def of(cls, counts: Mapping[int, int]) -> CpuCounts:
        """The counts of a mapping of CPU id -> count, in its order (OverflowError for a
        count outside a signed 64-bit number)."""
        return cls(CpuColumns.of(tuple(counts)), array("q", counts.values()))

    def __getitem__(self, cpu: int) -> int:
        return self.numbers[self._columns.index[cpu]]

    def __iter__(self) -> Iterator[int]:
        return iter(self.cpus)

    def __len__(self) -> int:
        return len(self.cpus)

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._columns.index

    def values(self) -> ValuesView[int]:
        return _Numbers(self)

    def items(self) -> ItemsView[int, int]:
        return _Pairs(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CpuCounts) and self.same_cpus(other):
            return self.numbers == other.numbers
        return super().__eq__(other)  # (as mappings: the same CPUs in another order too)

    __hash__ = None  # type: ignore[assignment]  # (a mapping: not hashable)

    def __repr__(self) -> str:
        return f"CpuCounts({dict(self.items())!r})"

    def __reduce__(self) -> tuple[Callable[[dict[int, int]], CpuCounts], tuple[dict[int, int]]]:
        return CpuCounts.of, (dict(self.items()),)

    def same_cpus(self, other: CpuCounts) -> bool:
        """The same CPU ids in the same order (the same tuple, for rows of one read)."""
        return self.cpus is other.cpus or self.cpus == other.cpus

    def picker(self, cpus: Iterable[int]) -> Callable[[CpuCounts], tuple[int, ...]]:
        """A function giving the counts of `cpus` (KeyError for one this row has not) from
        a row with this row's CPUs, in C."""
        index = self._columns.index
        getter = itemgetter(*[index[c] for c in cpus], -1)  # (-1: always a tuple)
        return lambda counts: getter(counts.numbers)[:-1]

    def replaced(self, changes: Mapping[int, int]) -> CpuCounts:
        """These counts with those of `changes` (CPU id -> count) in their place: KeyError
        for a CPU this row has not, OverflowError for a count out of range."""
        numbers = self.numbers[:]
        index = self._columns.index
        for cpu, n in changes.items():
            numbers[index[cpu]] = n
        return CpuCounts(self._columns, numbers)


class _Numbers(ValuesView[int]):
    _mapping: CpuCounts

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping.numbers)


class _Pairs(ItemsView[int, int]):
    _mapping: CpuCounts

    def __iter__(self) -> Iterator[tuple[int, int]]:
        m = self._mapping
        return zip(m.cpus, m.numbers)


class CpuColumns:
    """The CPU ids of a read's columns and the index of each: one object shared by every
    row of the read (and by the rows of later reads with the same ids)."""

    __slots__ = ("cpus", "index")

    def __init__(self, cpus: tuple[int, ...]) -> None:
        self.cpus = cpus
        self.index = {c: i for i, c in enumerate(cpus)}
        if len(self.index) != len(cpus):
            raise ValueError(f"a CPU named twice in {cpus[:8]!r}")

    @classmethod
    def of(cls, cpus: tuple[int, ...]) -> CpuColumns:
        found = _columns.get(cpus)
        if found is None:
            if len(_columns) >= _COLUMNS_LIMIT:
                _columns.clear()
            found = _columns[cpus] = cls(cpus)
        return found


# A host's CPUs are the same every second: their columns are made once.
_columns: dict[tuple[int, ...], CpuColumns] = {}
_COLUMNS_LIMIT = 64


@dataclass(frozen=True)
class IrqLine:
    """One numbered row of /proc/interrupts."""

    irq: int
    counts: CpuCounts  # CPU id -> interrupts handled there
    chip: str  # e.g. "IR-PCI-MSIX-0000:81:00.0", "PCI-MSI"
    actions: tuple[str, ...]  # handler names: "eth0-TxRx-3", "mlx5_comp3@pci:0000:81:00.0"

    @property
    def total(self) -> int:
        return sum(self.counts.numbers)


def parse_interrupts(text: str, source: str = "/proc/interrupts") -> dict[int, IrqLine]:
    """Parse /proc/interrupts. Columns are the *online* CPUs named in the header row."""
    if any(c in text for c in _OTHER_BREAKS):
        lines = text.splitlines()
    else:  # (the same lines, found by looking for "\n" alone: a 48-CPU host's is 90 kB)
        lines = text.split("\n") if text else []
        if text.endswith("\n"):
            lines.pop()
    if not lines:
        raise MalformedHostFile(source, "empty file")
    header = lines[0].split()
    try:
        cpu_ids = [int(h[3:]) for h in header if h.startswith("CPU")]
    except ValueError:
        raise MalformedHostFile(source, f"bad header row {lines[0][:80]!r}") from None
    if not cpu_ids or len(cpu_ids) != len(header):
        raise MalformedHostFile(source, f"bad header row {lines[0][:80]!r}")
    ncpus = len(cpu_ids)
    # A CPU named twice (no kernel does) has its last column, in the place of its first.
    last = {c: i for i, c in enumerate(cpu_ids)}
    keep = None if len(last) == ncpus else itemgetter(*last.values(), -1)
    columns = CpuColumns.of(tuple(last))
    out: dict[int, IrqLine] = {}
    zero = array("q", bytes(8 * len(last)))
    # lines with at least this many zero counts are read sparsely
    sparse = ncpus // 2 if keep is None else ncpus + 1
    for line in lines[1:]:
        label, sep, rest = line.partition(":")
        label = label.strip()
        if not sep:
            raise MalformedHostFile(source, f"line without ':' {line[:80]!r}")
        if not label.isdigit():
            continue  # NMI, LOC, ERR, MIS ... are not device IRQs
        head = rest.split(None, ncpus)  # the counters, then the rest of the line as it is
        if len(head) < ncpus:
            raise MalformedHostFile(source, f"IRQ {label}: fewer counters than CPUs")
        rest = head.pop() if len(head) > ncpus else ""
        if keep is not None:
            head = list(keep(head)[:-1])
        try:
            # Most rows are mostly zeros (an IRQ fires on the CPUs of its affinity): those
            # start from a copy of the all-zero row and convert only the other counters.
            if head.count("0") >= sparse:
                numbers = zero[:]
                for i, v in enumerate(head):
                    if v != "0":
                        numbers[i] = int(v)
            else:
                numbers = array("q", map(int, head))
        except ValueError:
            raise MalformedHostFile(source, f"IRQ {label}: non-numeric counter") from None
        except OverflowError:
            raise MalformedHostFile(source, f"IRQ {label}: counter out of range") from None
        described = _tails.get(rest)
        if described is None:
            if len(_tails) >= _TAILS_LIMIT:
                _tails.clear()
            described = _tails[rest] = _describe(tuple(rest.split()))
        irq = int(label)
        out[irq] = IrqLine(irq, CpuCounts(columns, numbers), *described)
    return out


# A line's tail (chip, trigger, actions) is the same every second: described once.
_tails: dict[str, tuple[str, tuple[str, ...]]] = {}
_TAILS_LIMIT = 8192


def _describe(tail: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(chip, actions) of the words after an IRQ's counters."""
    chip = tail[0] if tail else ""
    # Actions follow the trigger word ("5-edge", "IR-PCI-MSI-edge", "fasteoi").
    start = next((i + 1 for i, t in enumerate(tail) if _TRIGGER.search(t)), None)
    if start is None:
        start = len(tail) - 1 if len(tail) > 1 else len(tail)
    names = " ".join(tail[start:])
    return chip, tuple(a.strip() for a in names.split(",") if a.strip())


def read_interrupts(fs: HostFS) -> dict[int, IrqLine]:
    text = fs.read("/proc/interrupts")
    if text is None:
        return {}
    return parse_interrupts(text, fs.path("/proc/interrupts"))


@dataclass(frozen=True)
class IrqAffinity:
    """Where an IRQ may run (smp_affinity_list), where it does run, and the driver's hint."""

    irq: int
    affinity: Optional[frozenset[int]]
    effective: Optional[frozenset[int]]
    hint: Optional[frozenset[int]]  # None when absent or all-zero (no hint)
    node: Optional[int]


def read_irq_affinity(fs: HostFS, irq: int) -> IrqAffinity:
    base = f"/proc/irq/{irq}"
    hint = fs.read_cpumask(f"{base}/affinity_hint")
    return IrqAffinity(
        irq=irq,
        affinity=fs.read_cpulist(f"{base}/smp_affinity_list"),
        effective=fs.read_cpulist(f"{base}/effective_affinity_list"),
        hint=hint or None,
        node=fs.read_int(f"{base}/node"),
    )
