"""Write the BTF test blobs: real enums recorded from this machine, and synthetic ones.

    .venv/bin/python tests/data/btf/record.py          # rewrites the *.btf files here

A full vmlinux BTF is ~5 MB, so the recorded blob keeps only the enums the drop-reason code
reads, copied member for member from the running kernel (`/sys/kernel/btf/vmlinux`) into a
minimal valid BTF file (include/uapi/linux/btf.h: header, ENUM types, string section).
`write_enums` is also what the unit tests use to build hostile and synthetic blobs.
"""

from __future__ import annotations

import pathlib
import struct
import sys
from typing import Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
RECORDED = "vmlinux-6.18-drop-reasons.btf"
KEEP = ("skb_drop_reason", "skb_drop_reason_subsys")


def write_enums(
    enums: Sequence[tuple[str, Sequence[tuple[str, int]]]],
    base_strings: int = 0,
    extra_types: bytes = b"",
) -> bytes:
    """A BTF blob of ENUM types (name, members). `base_strings` > 0 makes it split BTF: its
    string offsets continue a base whose string section is that long (module BTF)."""
    strings = bytearray(b"\0")

    def s(text: str) -> int:
        off = len(strings)
        strings.extend(text.encode() + b"\0")
        return off + base_strings

    types = bytearray(extra_types)
    for name, members in enums:
        signed = any(v < 0 for _, v in members)
        info = (6 << 24) | len(members) | (int(signed) << 31)
        types += struct.pack("<III", s(name), info, 4)
        for member, value in members:
            types += struct.pack("<Ii" if signed else "<II", s(member), value)
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + bytes(types) + bytes(strings)


def record(vmlinux: str = "/sys/kernel/btf/vmlinux", out: Optional[pathlib.Path] = None) -> None:
    sys.path.insert(0, str(HERE.parents[2]))
    from lbtune.host.btf import parse_enums

    with open(vmlinux, "rb") as f:
        enums = [e for e in parse_enums(f.read()) if e.name in KEEP]
    blob = write_enums([(e.name, e.members) for e in enums])
    (out or HERE / RECORDED).write_bytes(blob)


if __name__ == "__main__":
    record()
