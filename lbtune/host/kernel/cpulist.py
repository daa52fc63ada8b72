"""CPU sets in the kernel's two spellings: lists (`0-3,8,10-11`) and hex masks (`ff,0000000f`)."""

from __future__ import annotations

from typing import AbstractSet, Iterable, Optional

# Far above any real CPU count; bounds what hostile input can make us allocate.
MAX_CPUS = 8192


class CpuListError(ValueError):
    """Text that is not a valid CPU list or mask."""


def parse_cpulist(text: str) -> frozenset[int]:
    """Parse the kernel's list format: `0-3,8`, `` or `(null)` for none.

    Also the kernel's group syntax (lib/bitmap.c, bitmap_parselist): `a-b:used/group` takes the
    first `used` CPUs of every `group` from a to b, so `0-11:2/4` is 0,1,4,5,8,9. A bare
    `:n` (without `/group`) is rejected, as the kernel rejects it. The kernel's `N` (last CPU)
    and `all` need the CPU count and are not supported here.
    """
    text = text.strip()
    if text in ("", "(null)"):
        return frozenset()
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CpuListError(f"empty element in CPU list {text!r}")
        used: Optional[int] = None
        group = 1
        if ":" in part:
            part, _, pattern = part.partition(":")
            used_s, slash, group_s = pattern.partition("/")
            if not slash:
                raise CpuListError(f"':' needs 'used/group' in CPU list {text!r}")
            used, group = _number(used_s, text), _number(group_s, text)
            if group < 1 or used > group:
                raise CpuListError(f"bad group pattern ':{pattern}' in CPU list {text!r}")
        if "-" in part:
            lo_s, _, hi_s = part.partition("-")
            lo, hi = _number(lo_s, text), _number(hi_s, text)
            if hi < lo:
                raise CpuListError(f"range {part!r} goes backwards in {text!r}")
        else:
            lo = hi = _number(part, text)
        if used is None:
            cpus.update(range(lo, hi + 1))
        else:
            for start in range(lo, hi + 1, group):
                cpus.update(range(start, min(start + used, hi + 1)))
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
    """Parse a hex mask as in smp_affinity, rps_cpus: comma-separated 32-bit words, MSW first.

    Each word is one 32-bit chunk, as the kernel's bitmap_parse() and irqbalance read it, so
    `f,c` is CPUs 2-3 and 32-35 (not 0xfc); a word wider than 32 bits is an error.
    """
    text = text.strip()
    if text.startswith(("0x", "0X")):
        text = text[2:]
    if not text:
        raise CpuListError("empty CPU mask")
    words = text.split(",")
    if len(words) * 32 > MAX_CPUS:
        raise CpuListError("CPU mask wider than any supported host")
    value = 0
    for word in words:
        try:
            chunk = int(word, 16) if word and word.isascii() and word.isalnum() else -1
        except ValueError:
            chunk = -1
        if chunk < 0:
            raise CpuListError(f"not a hex CPU mask: {text!r}")
        if chunk > 0xFFFFFFFF:
            raise CpuListError(f"mask word {word!r} wider than 32 bits in {text!r}")
        value = value << 32 | chunk
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
