"""The kernel's tracefs: where it is mounted, mounting it, and tracepoint format files.

A tracepoint's record layout (field names, offsets, sizes) and its value tables (the
`__print_symbolic` lists of the print format) come from the running kernel's
`events/<system>/<event>/format` file. Probes are generated from that layout, so they read
the right bytes on any kernel, whatever headers bcc compiles against.

Mounting: tracefs may not be mounted (a fresh machine, or inside `--netns`, whose /sys is a
fresh sysfs). `ensure_tracefs` then mounts it in a private mount namespace of the calling
thread, so the host's mount table never changes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import NeedsPrivilege
from lbtune.host.fs import HostFS

TRACEFS = "/sys/kernel/tracing"
DEBUGFS_TRACING = "/sys/kernel/debug/tracing"
_FIELD = re.compile(
    r"^\s*field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
    r"(?:\s*signed:(?P<signed>-?\d+);)?"
)
_DECL = re.compile(r"^(?P<type>.*?)\s*(?P<name>[A-Za-z_]\w*)\s*(?:\[(?P<len>\w*)\])?\s*$")
_SYMBOLIC = re.compile(r"__print_symbolic\(\s*REC->(?P<field>\w+)\s*,")
_PAIR = re.compile(r"\{\s*(?P<value>-?(?:0[xX][0-9a-fA-F]+|\d+))\s*,\s*\"(?P<name>[^\"]*)\"\s*\}")


class FormatError(ValueError):
    """A tracepoint format file that does not have the kernel's layout."""


@dataclass(frozen=True)
class TpField:
    """One field of a tracepoint record, as the running kernel lays it out."""

    name: str
    ctype: str  # the declared C type: "void *", "u16", "enum skb_drop_reason", "char"
    offset: int
    size: int
    signed: bool
    data_loc: bool = False  # `__data_loc char[] name`: u32 = length << 16 | offset in record
    array: Optional[int] = None  # element count of a fixed array (`char name[16]`)


@dataclass(frozen=True)
class TracepointFormat:
    """A tracepoint's record layout and print format, parsed from its `format` file."""

    system: str
    event: str
    id: Optional[int]
    fields: tuple[TpField, ...]  # the event's own fields (common_* left out)
    print_fmt: str

    @property
    def name(self) -> str:
        return f"{self.system}:{self.event}"

    def field(self, name: str) -> Optional[TpField]:
        return next((f for f in self.fields if f.name == name), None)

    def symbols(self, field: str) -> dict[int, str]:
        """The `__print_symbolic(REC->field, {value, "NAME"}, ...)` table, empty when none."""
        return parse_print_symbolic(self.print_fmt, field)


def parse_format(text: str, system: str, event: str) -> TracepointFormat:
    """Parse the text of `events/<system>/<event>/format`; FormatError when it is not one."""
    tp_id: Optional[int] = None
    fields: list[TpField] = []
    print_fmt = ""
    saw_format = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("ID:"):
            value = stripped[3:].strip()
            if not value.isdigit():
                raise FormatError(f"{system}:{event}: bad ID line {stripped!r}")
            tp_id = int(value)
        elif stripped == "format:":
            saw_format = True
        elif stripped.startswith("field:"):
            fields.append(_parse_field(stripped, system, event))
        elif stripped.startswith("print fmt:"):
            print_fmt = stripped[len("print fmt:") :].strip()
    if not saw_format or not fields:
        raise FormatError(f"{system}:{event}: not a tracepoint format file (no fields)")
    own = tuple(f for f in fields if not f.name.startswith("common_"))
    return TracepointFormat(system, event, tp_id, own, print_fmt)


def _parse_field(line: str, system: str, event: str) -> TpField:
    m = _FIELD.match(line)
    if m is None:
        raise FormatError(f"{system}:{event}: bad field line {line!r}")
    decl = m.group("decl").strip()
    data_loc = decl.startswith("__data_loc ")
    if data_loc:
        decl = decl[len("__data_loc ") :]
    d = _DECL.match(decl)
    if d is None:
        raise FormatError(f"{system}:{event}: bad field declaration {decl!r}")
    length = d.group("len")
    array: Optional[int] = None
    if length:
        if not length.isdigit():
            raise FormatError(f"{system}:{event}: array length {length!r} is not a number")
        array = int(length)
    return TpField(
        name=d.group("name"),
        ctype=d.group("type").strip(),
        offset=int(m.group("offset")),
        size=int(m.group("size")),
        signed=m.group("signed") == "1",
        data_loc=data_loc,
        array=array,
    )


def parse_print_symbolic(print_fmt: str, field: str) -> dict[int, str]:
    """The value -> name table a print format gives `field` with `__print_symbolic`."""
    for m in _SYMBOLIC.finditer(print_fmt):
        if m.group("field") != field:
            continue
        table: dict[int, str] = {}
        pos = m.end()
        while True:
            p = _PAIR.match(print_fmt, pos) or _PAIR.match(print_fmt, _skip_comma(print_fmt, pos))
            if p is None:
                return table
            table[int(p.group("value"), 0)] = p.group("name")
            pos = p.end()
    return {}


def _skip_comma(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " ,\t":
        pos += 1
    return pos


# ---------------------------------------------------------------------------- the live kernel


def tracefs_dir(fs: HostFS) -> Optional[str]:
    """Kernel path of a mounted tracefs (one that has `events/`), None when not mounted."""
    for path in (TRACEFS, DEBUGFS_TRACING):
        if fs.isdir(f"{path}/events"):
            return path
    return None


def read_format(fs: HostFS, system: str, event: str) -> Optional[TracepointFormat]:
    """The format of tracepoint `system:event`; None when tracefs or the event is absent."""
    base = tracefs_dir(fs)
    if base is None:
        return None
    text = fs.read(f"{base}/events/{system}/{event}/format")
    if text is None:
        return None
    return parse_format(text, system, event)


def ensure_tracefs(fs: HostFS) -> str:
    """A mounted tracefs: the existing one, else one mounted now, privately.

    The mount happens in a new mount namespace of the calling thread (made private first),
    so neither the host nor other processes see it; the thread keeps it until it ends. A
    process in `--netns` already runs in its own mount namespace with a fresh /sys, where
    tracefs is never mounted. Needs root (NeedsPrivilege otherwise).
    """
    found = tracefs_dir(fs)
    if found is not None:
        return found
    if not fs.is_live:
        raise NeedsPrivilege("tracefs is only available on the running machine")
    if os.geteuid() != 0:
        raise NeedsPrivilege(
            f"tracefs is not mounted at {TRACEFS} and mounting it needs root: run as root, "
            f"or mount -t tracefs nodev {TRACEFS}"
        )
    from lbtune.host.net.netns import mount_private

    try:
        mount_private("tracefs", TRACEFS)
    except OSError as e:
        raise NeedsPrivilege(f"cannot mount tracefs on {TRACEFS}: {e.strerror}") from None
    if tracefs_dir(fs) is None:
        raise NeedsPrivilege(f"mounted tracefs on {TRACEFS} but it has no events/ directory")
    return TRACEFS
