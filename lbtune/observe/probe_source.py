"""The final C of a set of probes: what each probe needs from the kernel, and the program text.

Each probe is a C file in the top-level `probes/` directory (shipped as package data). The
text handed to bcc is, in order: the settings (`#define`s lbtune computed: map sizes, the
kernel's own drop-reason numbers), one `struct lbt_args_<system>_<event>` per tracepoint
generated from the running kernel's tracefs format (so a probe reads exactly the bytes the
kernel wrote, whatever headers bcc compiles against), the shared filter header, the probes'
files, and one handler per rx entry tracepoint this kernel has. `--print-c` shows this text.
All requested probes compile together: one bcc compile, one load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from lbtune.host.pkgdata import shipped_dir
from lbtune.host.trace.tracefs import TpField, TracepointFormat

PROBES = ("drops", "queues", "napi")
COMMON_HEADER = "lbtune.bpf.h"
# The rx entry tracepoints: each way a driver hands a packet to the stack has one (they share
# the net_dev_rx_verbose_template layout), and a packet passes exactly one of them per device.
# The flag says whether the entry runs inside a NAPI poll (used for napi's queue labels).
RX_EVENTS: tuple[tuple[str, bool], ...] = (
    ("netif_receive_skb_entry", True),
    ("napi_gro_receive_entry", True),
    ("napi_gro_frags_entry", True),
    ("netif_receive_skb_list_entry", True),
    ("netif_rx_entry", False),
)
_C_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Need:
    """A tracepoint a probe uses and the fields it reads; optional ones are used if present."""

    system: str
    event: str
    fields: tuple[str, ...]
    required: bool = True

    @property
    def name(self) -> str:
        return f"{self.system}:{self.event}"


NEEDS: Mapping[str, tuple[Need, ...]] = {
    "drops": (
        Need("skb", "kfree_skb", ("location", "protocol")),
        # closed ports (probes/drops.bpf.c): used where this kernel has them
        Need("tcp", "tcp_send_reset", ("saddr", "reason"), required=False),
        Need("icmp", "icmp_send", ("type", "code", "daddr", "sport", "dport"), required=False),
    ),
    "queues": (
        Need("net", "net_dev_start_xmit", ("name", "queue_mapping", "len", "gso_size", "gso_segs")),
        *(
            Need("net", e, ("name", "napi_id", "queue_mapping", "len"), required=False)
            for e, _ in RX_EVENTS
        ),
    ),
    "napi": (
        Need("napi", "napi_poll", ("napi", "dev_name", "work", "budget")),
        *(Need("net", e, ("queue_mapping",), required=False) for e, napi in RX_EVENTS if napi),
    ),
}
# Fields that must be __data_loc strings (device names).
_DATA_LOC = frozenset({"name", "dev_name"})


@dataclass(frozen=True)
class Attach:
    """One program to attach: the tracepoint, the C function, and the probe it belongs to."""

    probe: str
    tracepoint: str  # "system:event"
    function: str
    # tp_btf: the BTF id of the kernel's `btf_trace_<event>` typedef, the program loaded
    # as a BTF-typed raw tracepoint; None: a tracepoint program on the event's record
    btf_id: Optional[int] = None


@dataclass(frozen=True)
class ProbeSource:
    """The C text for bcc and the (tracepoint, function) pairs to attach after loading."""

    text: str
    attach: tuple[Attach, ...]


def probes_dir() -> Optional[Path]:
    """The probes' C files: wheel package data, else the source tree's `probes/`."""
    return shipped_dir("probes")


def check_needs(
    probes: Sequence[str], formats: Mapping[str, Optional[TracepointFormat]]
) -> list[str]:
    """What this kernel lacks for `probes`, one line each (empty: all there).

    `formats` maps "system:event" to the parsed format, None when the tracepoint is absent.
    """
    problems: list[str] = []
    for probe in probes:
        rx_present = 0
        for need in NEEDS[probe]:
            fmt = formats.get(need.name)
            if fmt is None:
                if need.required:
                    problems.append(f"{probe}: tracepoint {need.name} is not in this kernel")
                continue
            missing = [f for f in need.fields if fmt.field(f) is None]
            if missing:
                if need.required:
                    problems.append(
                        f"{probe}: tracepoint {need.name} has no field {', '.join(missing)}"
                    )
                continue
            bad = [
                f for f in need.fields if f in _DATA_LOC and not _field(fmt, f).data_loc
            ]
            if bad:
                problems.append(
                    f"{probe}: {need.name} field {bad[0]} is not a __data_loc string here"
                )
                continue
            if not need.required:
                rx_present += 1
        if probe == "queues" and rx_present == 0:
            problems.append(
                "queues: none of the rx entry tracepoints (net:"
                + ", net:".join(e for e, _ in RX_EVENTS)
                + ") has name, napi_id, queue_mapping and len on this kernel"
            )
    return problems


def _field(fmt: TracepointFormat, name: str) -> TpField:
    f = fmt.field(name)
    assert f is not None
    return f


def usable(need: Need, formats: Mapping[str, Optional[TracepointFormat]]) -> bool:
    """True when the tracepoint exists with every field the need reads."""
    fmt = formats.get(need.name)
    return fmt is not None and all(fmt.field(f) is not None for f in need.fields)


# ------------------------------------------------------------------------------ name filter

MASK64 = (1 << 64) - 1
IFNAMSIZ = 16


@dataclass(frozen=True)
class NameHash:
    """A perfect hash of device names: `slot(name)` differs for every name it was made for.

    The probes compute the same function in C (lbt_name_slot in probes/lbtune.bpf.h) on the
    name's 16 NUL-padded bytes read as two little-endian 64-bit words.
    """

    bits: int
    h1: int
    h2: int

    @property
    def size(self) -> int:
        return 1 << self.bits

    def slot(self, name: str) -> int:
        w0, w1 = name_words(name)
        return (((w0 ^ ((w1 * self.h2) & MASK64)) * self.h1) & MASK64) >> (64 - self.bits)


def name_words(name: str) -> tuple[int, int]:
    """A device name as the filter compares it: 16 NUL-padded bytes, two 64-bit words."""
    raw = name.encode()
    if not 0 < len(raw) < IFNAMSIZ:
        raise ValueError(f"{name!r}: not a device name (1-15 bytes)")
    raw = raw.ljust(IFNAMSIZ, b"\0")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def perfect_hash(names: Sequence[str]) -> NameHash:
    """Multipliers under which `names` all land in different slots of a table of about n^2
    slots (at least 8; a random multiplier then succeeds about 60% of the time). The search
    is deterministic (splitmix64 from a fixed seed), so the same names give the same C."""
    unique = sorted(set(names))
    bits = max(3, (len(unique) ** 2 - 1).bit_length())
    state = 0x6C627475  # "lbtu"

    def rand() -> int:
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    while True:
        for _ in range(2000):
            h = NameHash(bits, rand() | 1, rand() | 1)
            if len({h.slot(n) for n in unique}) == len(unique):
                return h
        bits += 1


# ------------------------------------------------------------------------------ C generation


def _scalar(f: TpField) -> str:
    if "*" in f.ctype:
        return {8: "u64", 4: "u32"}.get(f.size, "")
    if f.size in (1, 2, 4, 8):
        return ("s" if f.signed else "u") + str(f.size * 8)
    return ""


def args_struct(fmt: TracepointFormat) -> str:
    """The C struct of a tracepoint record at the running kernel's offsets.

    Fields become fixed-width integers of their size (pointers u64, `__data_loc` u32, arrays
    byte arrays); gaps become padding; each offset is checked at compile time.
    """
    sname = f"lbt_args_{fmt.system}_{fmt.event}"
    lines = [f"/* {fmt.name}, from the running kernel's tracefs format */", f"struct {sname} {{"]
    asserts: list[str] = []
    cur = 0
    for i, f in enumerate(sorted(fmt.fields, key=lambda f: f.offset)):
        name = f.name if _C_NAME.fullmatch(f.name) else f"__lbt_field{i}"
        if f.offset < cur:
            raise ValueError(f"{fmt.name}: field {f.name} overlaps the one before it")
        if f.offset > cur:
            lines.append(f"\tu8 __lbt_pad{i}[{f.offset - cur}];")
        if f.data_loc:
            decl = f"u32 {name}; /* __data_loc {f.ctype}: length << 16 | offset */"
        elif f.array is not None or not _scalar(f) or f.offset % f.size:
            decl = f"u8 {name}[{f.size}]; /* {f.ctype} */"
        else:
            decl = f"{_scalar(f)} {name}; /* {f.ctype} */"
        lines.append(f"\t{decl}")
        asserts.append(
            f'_Static_assert(__builtin_offsetof(struct {sname}, {name}) == {f.offset}, '
            f'"{fmt.name} {f.name}");'
        )
        cur = f.offset + f.size
    lines.append("};")
    return "\n".join(lines + asserts)


Define = Union[int, str, None]


def build_source(
    probes: Sequence[str],
    formats: Mapping[str, Optional[TracepointFormat]],
    defines: Mapping[str, Define],
    c_dir: Path,
    header: str = "",
    typed: Optional[Mapping[str, int]] = None,
) -> ProbeSource:
    """The final C for `probes` (checked with `check_needs` first) and what to attach.

    `defines` become `#define NAME VALUE` (None: `#define NAME`), settings lbtune computed
    for this run. `header` is a comment naming the kernel and options. `typed` maps the
    queues probe's events (tx, rx entries) to their `btf_trace_<event>` BTF id where it
    reads them as BTF-typed tracepoints, tp_btf (the defines then carry LBT_Q_BTF_TX /
    LBT_Q_BTF and the BTF offsets, `lbtune.observe.probe_plan._typed_queues`).
    """
    typed = typed or {}
    wanted = [p for p in PROBES if p in probes]
    used: dict[str, TracepointFormat] = {}
    attach: list[Attach] = []
    instances: list[str] = []
    for probe in wanted:
        for need in NEEDS[probe]:
            if not usable(need, formats):
                continue
            fmt = formats[need.name]
            assert fmt is not None
            if probe == "queues" and need.event in typed:
                if need.event != "net_dev_start_xmit":
                    in_poll = int(dict(RX_EVENTS)[need.event])
                    instances.append(f"LBT_QUEUES_RX_BTF({need.event}, {in_poll})")
                attach.append(Attach(probe, need.name, f"lbt_{probe}_{need.event}",
                                     typed[need.event]))  # fmt: skip
                continue  # reads no record: no args struct
            if need.system == "net" and need.event != "net_dev_start_xmit":
                napi_context = dict(RX_EVENTS)[need.event]
                if probe == "queues":
                    instances.append(f"LBT_QUEUES_RX({need.event}, {int(napi_context)})")
                elif "queues" in wanted:
                    continue  # the queues handler on this event sets napi's labels
                else:
                    instances.append(f"LBT_NAPI_RX({need.event})")
            used[need.name] = fmt
            attach.append(Attach(probe, need.name, f"lbt_{probe}_{need.event}"))
    parts = [f"/* {header} */" if header else "", "/* settings */"]
    for name, value in defines.items():
        parts.append(f"#define {name}" + ("" if value is None else f" {value}"))
    label = "lbt_napi_label(qm)" if "napi" in wanted else "do { } while (0)"
    parts.append(f"#define LBT_NAPI_LABEL(qm) {label}")
    parts.append("")
    parts.extend(args_struct(fmt) + "\n" for fmt in used.values())
    files = [COMMON_HEADER] + [f"{p}.bpf.c" for p in ("napi", "queues", "drops") if p in wanted]
    for name in files:
        parts.append(f"/* ---- probes/{name} ---- */")
        parts.append((c_dir / name).read_text(encoding="utf-8"))
    if instances:
        parts.append("/* ---- handlers for the rx entry tracepoints of this kernel ---- */")
        parts.extend(instances)
    return ProbeSource("\n".join(p for p in parts if p is not None) + "\n", tuple(attach))
