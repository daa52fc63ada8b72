"""CPU sets in the kernel's two spellings: lists (`0-3,8,10-11`) and hex masks (`ff,0000000f`)."""

from __future__ import annotations

from typing import AbstractSet, Iterable

# Far above any real CPU count; bounds what hostile input can make us allocate.
MAX_CPUS = 8192


class CpuListError(ValueError):
    """Text that is not a valid CPU list or mask."""


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse the kernel's list format: `0-3,8`, `0-11:2` (stride), `` or `(null)` for none."""
    text = text.strip()
    if text in ("", "(null)"):
        return frozenset()
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CpuListError(f"empty element in CPU list {text!r}")
        stride = 1
        if ":" in part:
            part, _, step = part.partition(":")
            stride = _number(step, text)
            if stride < 1:
                raise CpuListError(f"stride must be positive in {text!r}")
            if "/" in part:  # kernel also allows 0-11:2/4 (group size); rare, not needed
                raise CpuListError(f"group syntax not supported in {text!r}")
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            lo, hi = _number(lo_s, text), _number(hi_s, text)
            if hi < lo:
                raise CpuListError(f"range {part!r} goes backwards in {text!r}")
            cpus.update(range(lo, hi + 1, stride))
        else:
            cpus.add(_number(part, text))
    return frozenset(cpus)


def _number(s: str, whole: str) -> int:
    s = s.strip()
    if not s.isdigit() or not s.isascii():
        raise CpuListError(f"not a CPU number: {s!r} in {whole!r}")
    n = int(s)
    if n >= MAX_CPUS:
        raise CpuListError(f"CPU {n} out of range in {whole!r}")
    return n


def format_cpulist(cpus: Iterable[int]) -> str:
    """Compact list format, as the kernel prints it: `0-3,8`."""
    ordered = sorted(set(cpus))
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)


def parse_cpumask(text: str) -> frozenset[int]:
    """Parse a hex mask as in smp_affinity, rps_cpus: comma-separated 32-bit words, MSW first."""
    text = text.strip().replace(",", "")
    if text.startswith(("0x", "0X")):
        text = text[2:]
    if not text:
        raise CpuListError("empty CPU mask")
    try:
        value = int(text, 16)
    except ValueError:
        raise CpuListError(f"not a hex CPU mask: {text!r}") from None
    if value.bit_length() > MAX_CPUS:
        raise CpuListError("CPU mask wider than any supported host")
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def format_cpumask(cpus: AbstractSet[int], nr_cpus: int) -> str:
    """Hex mask in the kernel's layout: 32-bit words separated by commas, MSW first.

    `nr_cpus` (the possible-CPU count) decides how many words the kernel would print.
    """
    value = 0
    for c in cpus:
        value |= 1 << c
    words = max(1, (max(nr_cpus, max(cpus, default=0) + 1) + 31) // 32)
    parts = [f"{(value >> (32 * w)) & 0xFFFFFFFF:08x}" for w in reversed(range(words))]
    # The kernel trims the leading word to the digits needed for nr_cpus.
    lead_digits = ((max(nr_cpus, 1) - 1) % 32) // 4 + 1
    if int(parts[0][:-lead_digits] or "0", 16) == 0:
        parts[0] = parts[0][-lead_digits:]
    return ",".join(parts)
