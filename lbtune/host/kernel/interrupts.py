"""/proc/interrupts and the per-IRQ files under /proc/irq/N."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS

# line breaks str.splitlines() knows besides "\n"
_OTHER_BREAKS = ("\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
_TRIGGER = re.compile(r"(?:^|-)(?:edge|level|fasteoi)$", re.IGNORECASE)


@dataclass(frozen=True)
class IrqLine:
    """One numbered row of /proc/interrupts."""

    irq: int
    counts: dict[int, int]  # CPU id -> interrupts handled there
    chip: str  # e.g. "IR-PCI-MSIX-0000:81:00.0", "PCI-MSI"
    actions: tuple[str, ...]  # handler names: "eth0-TxRx-3", "mlx5_comp3@pci:0000:81:00.0"

    @property
    def total(self) -> int:
        return sum(self.counts.values())


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
    out: dict[int, IrqLine] = {}
    ncpus = len(cpu_ids)
    zero = dict.fromkeys(cpu_ids, 0)
    # lines with at least this many zero counts are read sparsely (CPU ids all distinct)
    sparse = ncpus // 2 if len(zero) == ncpus else ncpus + 1
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
        try:
            # Most rows are mostly zeros (an IRQ fires on the CPUs of its affinity): those
            # start from a copy of the all-zero row and convert only the other counters.
            if head.count("0") >= sparse:
                counts = zero.copy()
                for i, v in enumerate(head):
                    if v != "0":
                        counts[cpu_ids[i]] = int(v)
            else:
                counts = dict(zip(cpu_ids, map(int, head)))
        except ValueError:
            raise MalformedHostFile(source, f"IRQ {label}: non-numeric counter") from None
        described = _tails.get(rest)
        if described is None:
            if len(_tails) >= _TAILS_LIMIT:
                _tails.clear()
            described = _tails[rest] = _describe(tuple(rest.split()))
        irq = int(label)
        out[irq] = IrqLine(irq, counts, *described)
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
