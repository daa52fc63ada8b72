"""Enumerations from the kernel's BTF (`/sys/kernel/btf/vmlinux` and module BTF).

BTF is the kernel's own type information. lbtune reads only its enums, to name the values a
tracepoint carries when the tracepoint's print format has no table for them (drop reasons
on 5.17-5.19, subsystem drop reasons, `SKB_CONSUMED`). The same number means different
things on different kernels, so names always come from the running kernel, never from a
table compiled into lbtune.

Format: include/uapi/linux/btf.h. A blob is a header, a type section (each type a 12-byte
`btf_type` plus kind-specific data) and a string section. Module BTF is "split": its type
ids and string offsets continue those of vmlinux, so module strings below the base's string
length live in the base.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Optional

from lbtune.host.fs import HostFS

BTF_MAGIC = 0xEB9F
BTF_DIR = "/sys/kernel/btf"
KIND_ENUM = 6
KIND_ENUM64 = 19
# Bytes that follow the 12-byte btf_type header, per kind: (fixed, per vlen entry).
_EXTRA: dict[int, tuple[int, int]] = {
    1: (4, 0),  # INT
    2: (0, 0),  # PTR
    3: (12, 0),  # ARRAY
    4: (0, 12),  # STRUCT
    5: (0, 12),  # UNION
    6: (0, 8),  # ENUM
    7: (0, 0),  # FWD
    8: (0, 0),  # TYPEDEF
    9: (0, 0),  # VOLATILE
    10: (0, 0),  # CONST
    11: (0, 0),  # RESTRICT
    12: (0, 0),  # FUNC
    13: (0, 8),  # FUNC_PROTO
    14: (4, 0),  # VAR
    15: (0, 12),  # DATASEC
    16: (0, 0),  # FLOAT
    17: (4, 0),  # DECL_TAG
    18: (0, 0),  # TYPE_TAG
    19: (0, 12),  # ENUM64
}


class BtfError(ValueError):
    """A blob that is not BTF lbtune can read."""


@dataclass(frozen=True)
class BtfEnum:
    """One enumeration: its name ("" when anonymous) and its (name, value) members."""

    name: str
    members: tuple[tuple[str, int], ...]

    def value_names(self) -> dict[int, str]:
        """value -> first member name with that value."""
        out: dict[int, str] = {}
        for name, value in self.members:
            out.setdefault(value, name)
        return out


@dataclass(frozen=True)
class BtfStrings:
    """A blob's string section, and its length (module BTF continues the base's offsets)."""

    data: bytes

    def get(self, offset: int, base: Optional[BtfStrings] = None) -> str:
        data = self.data
        if base is not None:
            if offset < len(base.data):
                data = base.data
            else:
                offset -= len(base.data)
        if not 0 <= offset < len(data):
            raise BtfError(f"string offset {offset} outside the string section")
        end = data.find(b"\0", offset)
        return data[offset : end if end >= 0 else len(data)].decode("utf-8", "replace")


def _sections(blob: bytes) -> tuple[memoryview, BtfStrings, str]:
    if len(blob) < 24:
        raise BtfError("too short for a BTF header")
    magic, version, _flags, hdr_len = struct.unpack_from("<HBBI", blob, 0)
    endian = "<"
    if magic != BTF_MAGIC:
        magic, version, _flags, hdr_len = struct.unpack_from(">HBBI", blob, 0)
        endian = ">"
        if magic != BTF_MAGIC:
            raise BtfError("no BTF magic")
    if version != 1 or hdr_len < 24:
        raise BtfError(f"BTF version {version} / header length {hdr_len} not supported")
    type_off, type_len, str_off, str_len = struct.unpack_from(endian + "IIII", blob, 8)
    t0, s0 = hdr_len + type_off, hdr_len + str_off
    if t0 + type_len > len(blob) or s0 + str_len > len(blob):
        raise BtfError("BTF sections run past the end of the blob")
    return memoryview(blob)[t0 : t0 + type_len], BtfStrings(blob[s0 : s0 + str_len]), endian


def blob_strings(blob: bytes) -> BtfStrings:
    """The string section of a BTF blob (the base for reading module BTF)."""
    return _sections(blob)[1]


def parse_enums(blob: bytes, base: Optional[BtfStrings] = None) -> list[BtfEnum]:
    """Every enum (ENUM and ENUM64) in a BTF blob, in type order.

    `base` is vmlinux's string section when `blob` is a module's split BTF.
    """
    types, strings, e = _sections(blob)
    head = struct.Struct(e + "III")
    member32 = struct.Struct(e + "Ii")
    member32u = struct.Struct(e + "II")
    member64 = struct.Struct(e + "III")
    out: list[BtfEnum] = []
    pos, end = 0, len(types)
    while pos < end:
        if pos + 12 > end:
            raise BtfError("truncated type section")
        name_off, info, _size = head.unpack_from(types, pos)
        kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
        extra = _EXTRA.get(kind)
        if extra is None:
            raise BtfError(f"unknown BTF kind {kind} at type offset {pos}")
        body = pos + 12
        pos = body + extra[0] + extra[1] * vlen
        if pos > end:
            raise BtfError("truncated type section")
        if kind == KIND_ENUM:
            fmt = member32 if kflag else member32u
            members = tuple(
                (strings.get(n, base), v)
                for n, v in (fmt.unpack_from(types, body + 8 * i) for i in range(vlen))
            )
        elif kind == KIND_ENUM64:
            members = tuple(
                (strings.get(n, base), lo | (hi << 32))
                for n, lo, hi in (member64.unpack_from(types, body + 12 * i) for i in range(vlen))
            )
        else:
            continue
        out.append(BtfEnum(strings.get(name_off, base), members))
    return out


def kernel_enums(fs: HostFS, modules: bool = True) -> list[BtfEnum]:
    """Enums of the running kernel's BTF: vmlinux, then each module's (when asked).

    Empty when the kernel has no BTF (CONFIG_DEBUG_INFO_BTF off). A module blob lbtune
    cannot read is skipped: its enums are only ever a refinement.
    """
    vmlinux = fs.read_bytes(f"{BTF_DIR}/vmlinux")
    if not vmlinux:
        return []
    out = parse_enums(vmlinux)
    if not modules:
        return out
    base = blob_strings(vmlinux)
    for name in fs.listdir(BTF_DIR):
        if name == "vmlinux":
            continue
        blob = fs.read_bytes(f"{BTF_DIR}/{name}")
        if not blob:
            continue
        try:
            out.extend(parse_enums(blob, base))
        except BtfError:
            continue
    return out


# ------------------------------------------------------------------------------ struct layouts

KIND_STRUCT = 4
KIND_UNION = 5
KIND_TYPEDEF = 8


@dataclass(frozen=True)
class _Type:
    kind: int
    name: str
    vlen: int
    kflag: int
    size_or_type: int
    body: int  # offset of the kind-specific data in the type section


class BtfTypes:
    """The type section of a BTF blob, for named lookups: a typedef's id, a struct
    member's byte offset (through anonymous structs and unions) as this kernel lays it out.
    """

    def __init__(self, blob: bytes) -> None:
        self._types, self._strings, e = _sections(blob)
        self._head = struct.Struct(e + "III")
        self._member = struct.Struct(e + "III")
        self._list: list[_Type] = [_Type(0, "", 0, 0, 0, 0)]  # id 0 is void
        self._by_name: dict[tuple[int, str], int] = {}
        pos, end = 0, len(self._types)
        while pos < end:
            if pos + 12 > end:
                raise BtfError("truncated type section")
            name_off, info, size = self._head.unpack_from(self._types, pos)
            kind, vlen, kflag = (info >> 24) & 0x1F, info & 0xFFFF, info >> 31
            extra = _EXTRA.get(kind)
            if extra is None:
                raise BtfError(f"unknown BTF kind {kind} at type offset {pos}")
            name = self._strings.get(name_off) if name_off else ""
            self._by_name.setdefault((kind, name), len(self._list))
            self._list.append(_Type(kind, name, vlen, kflag, size, pos + 12))
            pos += 12 + extra[0] + extra[1] * vlen
            if pos > end:
                raise BtfError("truncated type section")

    def type_id(self, kind: int, name: str) -> Optional[int]:
        """The id of the first type of `kind` named `name`."""
        return self._by_name.get((kind, name))

    def _members(self, t: _Type) -> list[tuple[str, int, int, int]]:
        """(name, type id, bit offset, bitfield bits or 0) of a struct's or union's members."""
        out = []
        for i in range(t.vlen):
            name_off, type_id, offset = self._member.unpack_from(self._types, t.body + 12 * i)
            bits = 0
            if t.kflag:  # the high byte is a bitfield's size
                offset, bits = offset & 0xFFFFFF, offset >> 24
            out.append((self._strings.get(name_off) if name_off else "", type_id, offset, bits))
        return out

    def _find(self, type_id: int, member: str) -> Optional[tuple[int, int, int]]:
        """(bit offset, type id, bitfield bits) of `member` in a struct/union, searching
        anonymous members."""
        t = self._list[type_id]
        if t.kind not in (KIND_STRUCT, KIND_UNION):
            return None
        for name, mtype, offset, bits in self._members(t):
            if name == member:
                return offset, mtype, bits
            if not name and self._list[mtype].kind in (KIND_STRUCT, KIND_UNION):
                inner = self._find(mtype, member)
                if inner is not None:
                    return offset + inner[0], inner[1], inner[2]
        return None

    def size(self, type_id: int) -> Optional[int]:
        """Bytes of a type (through typedefs and qualifiers); None for void or functions."""
        for _ in range(32):  # a chain of typedefs and qualifiers, never a cycle in valid BTF
            if not 0 < type_id < len(self._list):
                return None
            t = self._list[type_id]
            if t.kind in (1, 4, 5, 6, 16, 19):  # INT, STRUCT, UNION, ENUM, FLOAT, ENUM64
                return t.size_or_type
            if t.kind == 2:  # PTR
                return 8
            if t.kind == 3:  # ARRAY: elem type, index type, nelems
                elem, _index, nelems = self._member.unpack_from(self._types, t.body)
                size = self.size(elem)
                return None if size is None else size * nelems
            if t.kind not in (8, 9, 10, 11, 18):  # TYPEDEF, VOLATILE, CONST, RESTRICT, TYPE_TAG
                return None
            type_id = t.size_or_type
        return None

    def member(self, struct_name: str, member: str) -> Optional[tuple[int, int]]:
        """(byte offset, byte size) of `member` in `struct struct_name`, None when there is
        no such member or it is a bitfield (not whole bytes)."""
        sid = self.type_id(KIND_STRUCT, struct_name)
        if sid is None:
            return None
        found = self._find(sid, member)
        if found is None or found[0] % 8 or found[2]:
            return None
        size = self.size(found[1])
        return None if size is None else (found[0] // 8, size)
