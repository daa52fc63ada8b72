"""Kernel addresses to function names, from /proc/kallsyms.

The drops probe records where each packet was freed (the tracepoint's `location`, a return
address inside the kernel). `Kallsyms.name(addr)` turns it into `tcp_v4_rcv+0x91` using the
running kernel's own symbol table. Non-root readers (kptr_restrict) see all-zero addresses;
then `available` is false and addresses are shown as hex.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Optional

from lbtune.host.fs import HostFS

_TEXT = frozenset("tTwW")  # code symbols (weak ones included); data never holds a location


@dataclass(frozen=True)
class Symbol:
    name: str
    module: Optional[str]  # "[nf_conntrack]" module name without brackets; None for vmlinux


class Kallsyms:
    """A sorted table of kernel text symbols."""

    def __init__(self, entries: list[tuple[int, Symbol]]) -> None:
        entries.sort(key=lambda e: e[0])
        self._addrs = [a for a, _ in entries]
        self._syms = [s for _, s in entries]

    @classmethod
    def parse(cls, text: str) -> Kallsyms:
        """Parse kallsyms text (`ffffffff81000000 T _stext [module]` per line)."""
        entries: list[tuple[int, Symbol]] = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) < 3 or parts[1] not in _TEXT:
                continue
            try:
                addr = int(parts[0], 16)
            except ValueError:
                continue
            if addr == 0:
                continue
            module = parts[3].strip("[]") if len(parts) > 3 else None
            entries.append((addr, Symbol(parts[2], module)))
        return cls(entries)

    @property
    def available(self) -> bool:
        """False when the table is empty (not root, or kptr_restrict hides addresses)."""
        return bool(self._addrs)

    def lookup(self, addr: int) -> Optional[tuple[Symbol, int]]:
        """The symbol containing `addr` and the offset into it; None when below every symbol."""
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0:
            return None
        return self._syms[i], addr - self._addrs[i]

    def name(self, addr: int) -> str:
        """`func+0x1a`, `func+0x1a [module]`, or the hex address when unknown."""
        hit = self.lookup(addr) if addr else None
        if hit is None:
            return f"0x{addr:x}"
        sym, off = hit
        text = f"{sym.name}+0x{off:x}"
        return f"{text} [{sym.module}]" if sym.module else text


def read_kallsyms(fs: HostFS) -> Kallsyms:
    """The running kernel's symbol table (empty when /proc/kallsyms is unreadable)."""
    return Kallsyms.parse(fs.read("/proc/kallsyms") or "")
