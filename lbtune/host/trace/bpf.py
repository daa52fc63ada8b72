"""The BPF loader: the only module that imports bcc.

It compiles one C text (all requested probes together: a bcc compile costs seconds and
~100 MB, so it happens once), loads the programs, attaches them to tracepoints, reads
per-CPU maps in one batch syscall each, reports each program's run time from the kernel's
BPF statistics, and detaches and closes everything on `close()`.

BPF run-time statistics are switched on with BPF_ENABLE_STATS, which returns a file
descriptor: the kernel counts run time only while some such descriptor is open and stops
by itself when it is closed, also when lbtune is killed. This is the same switch as the
host-global `kernel.bpf_stats_enabled` sysctl, but lbtune never writes the sysctl, so
nothing is left switched on behind it.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import platform
import struct
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from lbtune.errors import NeedsPrivilege

BPF_ENABLE_STATS = 32  # enum bpf_cmd, include/uapi/linux/bpf.h (Linux 5.8+)
BPF_STATS_RUN_TIME = 0
BPF_PROG_LOAD = 5
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_RAW_TRACEPOINT_OPEN = 17  # Linux 5.5+ for BTF-typed (tp_btf) programs
BPF_PROG_TYPE_TRACING = 26
BPF_TRACE_RAW_TP = 23  # enum bpf_attach_type: tp_btf
BPF_OBJ_NAME_LEN = 16
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351, "riscv64": 280}
BCC_FIX = (
    "apt-get install python3-bpfcc (dnf install python3-bcc), and run lbtune from the "
    "distribution's Python or a venv made with --system-site-packages (`make setup`)"
)
# The documented switch that makes lbtune behave as if bcc were not installed (README,
# docs/probes.md): what a host without bcc sees, testable on a host that has it.
NO_BCC_ENV = "LBTUNE_NO_BCC"


def bcc_problem() -> Optional[str]:
    """Why bcc cannot be used here (one line), or None when it imports."""
    if os.environ.get(NO_BCC_ENV, "") not in ("", "0"):
        return f"bcc is switched off ({NO_BCC_ENV}={os.environ[NO_BCC_ENV]})"
    try:
        import bcc  # noqa: F401
    except Exception as e:  # ImportError, or libbcc failing to load
        return f"the bcc Python module cannot be imported ({type(e).__name__}: {e})"
    return None


@dataclass(frozen=True)
class ProbeProblem:
    """Why the probes cannot run here, and how to get them (one line each)."""

    missing: str
    fix: str


def probe_problem() -> Optional[ProbeProblem]:
    """What stops the probes before anything is compiled: root, then bcc; None when both
    are there (the compile itself can still fail: `BpfProgram` says why)."""
    if os.geteuid() != 0:
        return ProbeProblem("not root", "run lbtune as root (BPF and tracefs need it)")
    problem = bcc_problem()
    if problem and os.environ.get(NO_BCC_ENV, "") not in ("", "0"):
        return ProbeProblem(problem, f"unset {NO_BCC_ENV}, or else {BCC_FIX}")
    if problem:
        return ProbeProblem(problem, BCC_FIX)
    return None


@dataclass(frozen=True)
class ProgramStats:
    """Kernel statistics of one loaded program (/proc/self/fdinfo of its fd)."""

    function: str
    prog_id: int
    run_cnt: int
    run_time_ns: int


class RunTimeStats:
    """BPF run-time statistics switched on for as long as this object is open."""

    def __init__(self) -> None:
        self.fd = -1
        self.problem: Optional[str] = None

    def open(self) -> bool:
        """Switch statistics on; False (with `problem` set) when the kernel cannot."""
        libc = ctypes.CDLL(None, use_errno=True)
        nr = _SYS_BPF.get(platform.machine())
        if nr is None:
            self.problem = f"BPF statistics: unknown bpf(2) number on {platform.machine()}"
            return False
        attr = (ctypes.c_uint32 * 2)(BPF_STATS_RUN_TIME, 0)
        fd = libc.syscall(nr, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
        if fd < 0:
            err = ctypes.get_errno()
            self.problem = f"BPF statistics unavailable: {os.strerror(err)} (needs Linux 5.8+)"
            return False
        self.fd = fd
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_LIBC: list[Any] = []  # ctypes' libc, opened once: the monitor asks every second


def _sys_bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    """bpf(2); the result, or -errno."""
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        return -errno.ENOSYS
    if not _LIBC:
        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    r = int(_LIBC[0].syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    return r if r >= 0 else -ctypes.get_errno()


# struct bpf_prog_info (include/uapi/linux/bpf.h) up to run_cnt (Linux 5.1+): id at 4,
# run_time_ns at 192, run_cnt at 200.
_PROG_INFO_LEN = 208


def _prog_info(fd: int) -> Optional[dict[str, int]]:
    """A program's id, run count and run time by BPF_OBJ_GET_INFO_BY_FD (one syscall, where
    /proc/self/fdinfo costs an open, a read and a parse: `stats()` runs every second); None
    when the kernel refuses."""
    info = ctypes.create_string_buffer(_PROG_INFO_LEN)
    attr = ctypes.create_string_buffer(16)  # union bpf_attr: info.bpf_fd, info_len, info
    struct.pack_into("=IIQ", attr, 0, fd, _PROG_INFO_LEN, ctypes.addressof(info))
    if _sys_bpf(BPF_OBJ_GET_INFO_BY_FD, attr) < 0:
        return None
    (prog_id,) = struct.unpack_from("=I", info, 4)
    run_time_ns, run_cnt = struct.unpack_from("=QQ", info, 192)
    return {"prog_id": prog_id, "run_cnt": run_cnt, "run_time_ns": run_time_ns}


class _Loaded:
    """A program lbtune loaded itself (a tp_btf program): its fd, as bcc's Function has."""

    def __init__(self, fd: int) -> None:
        self.fd = fd


def load_typed_tracepoint(
    insns: bytes, name: str, license: bytes, btf_id: int
) -> tuple[int, str]:
    """Load compiled instructions as a BTF-typed tracepoint program (tp_btf: type
    TRACING, attach type BPF_TRACE_RAW_TP, attach_btf_id the kernel's `btf_trace_<event>`
    typedef); (fd, "") or (-errno, the verifier's last line).

    bcc 0.26 names its TRACING programs' attach types by function-name prefix and has none
    for tp_btf, so lbtune loads these itself; bcc already put its map fds into the
    instructions (`dump_func`). The kernel keeps 15 bytes of the name.
    """
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(license)
    log = ctypes.create_string_buffer(1 << 16)
    attr = ctypes.create_string_buffer(120)  # union bpf_attr, BPF_PROG_LOAD up to attach_prog_fd
    struct.pack_into("=IIQQIIQ", attr, 0, BPF_PROG_TYPE_TRACING, len(insns) // 8,
                     ctypes.addressof(code), ctypes.addressof(lic), 1, len(log),
                     ctypes.addressof(log))  # fmt: skip
    raw = name.encode()[: BPF_OBJ_NAME_LEN - 1]
    ctypes.memmove(ctypes.addressof(attr) + 48, raw, len(raw))  # prog_name
    struct.pack_into("=I", attr, 68, BPF_TRACE_RAW_TP)  # expected_attach_type
    struct.pack_into("=I", attr, 108, btf_id)  # attach_btf_id
    fd = _sys_bpf(BPF_PROG_LOAD, attr)
    if fd >= 0:
        return fd, ""
    lines = [ln.strip() for ln in log.value.decode("utf-8", "replace").splitlines() if ln.strip()]
    return fd, lines[-1] if lines else os.strerror(-fd)


def attach_typed_tracepoint(prog_fd: int) -> int:
    """Attach a tp_btf program to its tracepoint (the one its BTF id names): the link fd,
    or -errno. Closing the fd detaches it."""
    attr = ctypes.create_string_buffer(16)
    struct.pack_into("=QI", attr, 0, 0, prog_fd)  # raw_tracepoint.name NULL, prog_fd
    return _sys_bpf(BPF_RAW_TRACEPOINT_OPEN, attr)


def _flatten(value: Any) -> tuple[Any, ...]:
    """A ctypes value (struct, array, integer) as a flat tuple; char arrays as bytes."""
    if isinstance(value, int):
        return (value,)
    if isinstance(value, bytes):
        return (value,)
    if isinstance(value, ctypes.Array):
        if value._type_ is ctypes.c_char:
            return (bytes(value),)
        out: list[Any] = []
        for item in value:
            out.extend(_flatten(item))
        return tuple(out)
    if isinstance(value, ctypes.Structure):
        out = []
        for name, *_ in value._fields_:
            out.extend(_flatten(getattr(value, name)))
        return tuple(out)
    if hasattr(value, "value"):
        return (value.value,)
    raise TypeError(f"cannot read a {type(value).__name__} from a BPF map")


# Struct formats of the ctypes types the maps hold (and which of their values are char
# arrays), or None for a type `_flatten` must walk.
_LAYOUTS: dict[type, Optional[tuple[struct.Struct, tuple[int, ...]]]] = {}
_INT_CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


def _fields(ctype: Any, base: int, out: list[tuple[int, str]], field: bool = False) -> bool:
    """Append (offset, struct code) of every scalar in a ctypes type; False if unsupported.

    A char array is supported as a structure's field (`field`), which ctypes reads as the
    bytes before the first NUL (`_flat` cuts them the same way).
    """
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Structure):
        for name, ftype, *bits in ctype._fields_:
            if bits or not _fields(ftype, base + getattr(ctype, name).offset, out, True):
                return False
        return True
    if isinstance(ctype, type) and issubclass(ctype, ctypes.Array):
        item: Any = getattr(ctype, "_type_")  # noqa: B009 (typed Any: mypy misreads it)
        length: int = getattr(ctype, "_length_")  # noqa: B009
        if item is ctypes.c_char:
            out.append((base, f"{length}s"))
            return field
        size = ctypes.sizeof(item)
        return all(_fields(item, base + i * size, out) for i in range(length))
    code = getattr(ctype, "_type_", None)
    if not isinstance(code, str) or code in "cz?fdgPOuZ" or len(code) != 1:
        return False
    size = ctypes.sizeof(ctype)
    signed = _INT_CODES.get(size)
    if signed is None:
        return False
    out.append((base, signed if code.islower() else signed.upper()))
    return True


def _layout(ctype: type) -> Optional[tuple[struct.Struct, tuple[int, ...]]]:
    """A struct.Struct reading a ctypes type's bytes into the flat tuple `_flatten` gives:
    the kernel fills per-CPU maps with thousands of entries per read, and walking each
    through ctypes was most of a monitor tick with the probes on."""
    if ctype not in _LAYOUTS:
        fields: list[tuple[int, str]] = []
        fmt = None
        if _fields(ctype, 0, fields):
            parts, at = ["="], 0
            for offset, code in sorted(fields):
                if offset < at:  # overlapping fields (a union): let _flatten walk it
                    parts = []
                    break
                parts.append(f"{offset - at}x" if offset > at else "")
                parts.append(code)
                at = offset + struct.calcsize("=" + code)
            if parts and at <= ctypes.sizeof(ctype):
                st = struct.Struct("".join(parts) + f"{ctypes.sizeof(ctype) - at}x")
                chars = tuple(i for i, (_, code) in enumerate(sorted(fields)) if code[-1] == "s")
                fmt = (st, chars)
        _LAYOUTS[ctype] = fmt
    return _LAYOUTS[ctype]


def _flat(value: Any) -> tuple[Any, ...]:
    """`_flatten`, through the type's struct layout when it has one."""
    if isinstance(value, int):
        return (value,)
    layout = _layout(type(value))
    if layout is None:
        return _flatten(value)
    st, chars = layout
    out = st.unpack(bytes(value))
    if not chars:
        return out
    cut = list(out)
    for i in chars:
        cut[i] = cut[i].split(b"\0", 1)[0]
    return tuple(cut)


_BLOCK = 64  # entries compared with zeros at once when looking for the used ones
# Array slots read in one run when the slots asked for are this close: one more batch call
# costs more than copying a few unused entries (bpf(2) through ctypes, ~10 us, against
# well under 1 us an entry).
_RUN_GAP = 16


def _runs(slots: Sequence[int], size: int) -> list[tuple[int, int]]:
    """Ascending array indexes as (first, count) runs of [0, size), runs whose gap is at
    most _RUN_GAP merged."""
    runs: list[tuple[int, int]] = []
    for i in sorted({s for s in slots if 0 <= s < size}):
        if runs and i - (runs[-1][0] + runs[-1][1]) <= _RUN_GAP:
            runs[-1] = (runs[-1][0], i - runs[-1][0] + 1)
        else:
            runs.append((i, 1))
    return runs


def _lookup_batch_raw(
    t: Any, slots: Optional[Sequence[int]] = None
) -> Optional[tuple[memoryview, memoryview, int]]:
    """Every entry of a map as two buffers (the keys', the values') and their count, by
    BPF_MAP_LOOKUP_BATCH calls as bcc's `items_lookup_batch` makes them, without the ctypes
    object bcc makes of each entry (5,000 entries a second with the probes on, most of the
    monitor's CPU). `slots`: only these indexes of an array map (and the few unused ones
    between close ones: `_runs`), one batch call per run. None where that cannot be done
    (no batch calls, another bcc)."""
    try:
        from bcc.libbcc import lib  # loaded with bcc by then (the map is bcc's)

        # The key and value arrays, kept on the table (bcc tables are unhashable): it is read
        # every second, and a read rewrites the entries [0, total) it returns.
        buffers = getattr(t, "_lbtune_batch", None)
        if buffers is None:
            buffers = t._alloc_keys_values(alloc_k=True, alloc_v=True)
            t._lbtune_batch = buffers
        size, keys, values = buffers
        ksize, vsize = ctypes.sizeof(t.Key), ctypes.sizeof(t.Leaf)
    except Exception:
        return None
    if slots is not None:
        total = _lookup_runs(lib, t, (ksize, vsize, keys, values), _runs(slots, size.value))
        if total is None:
            return None
    else:
        out_batch = count = ctypes.c_uint32(0)  # one object, as bcc passes it
        total = 0
        while True:
            count.value = size.value - total
            res = lib.bpf_lookup_batch(
                t.map_fd,
                ctypes.byref(out_batch) if total else None,
                ctypes.byref(out_batch),
                ctypes.byref(keys, ksize * total),
                ctypes.byref(values, vsize * total),
                ctypes.byref(count),
            )
            err = ctypes.get_errno()
            total += count.value
            if res != 0 and err != errno.ENOENT:
                return None  # the caller's fallback reads the map key by key
            if res != 0 or total == size.value or count.value == 0:
                break
    # views, not copies: a direct-mapped cache is 4,096 entries per CPU
    kview, vview = memoryview(keys).cast("B"), memoryview(values).cast("B")
    return kview[: ksize * total], vview[: vsize * total], total


def _lookup_runs(
    lib: Any, t: Any, buffers: tuple[int, int, Any, Any], runs: Sequence[tuple[int, int]]
) -> Optional[int]:
    """Array entries [first, first + count) of each run, one after the other into the
    table's batch buffers; how many were read, or None when a batch call fails. A batch
    starts after the key its `in_batch` names (an array's next key is index + 1)."""
    ksize, vsize, keys, values = buffers
    in_batch, out_batch, count = ctypes.c_uint32(0), ctypes.c_uint32(0), ctypes.c_uint32(0)
    total = 0
    for first, n in runs:
        done = 0
        while done < n:
            in_batch.value = first + done - 1
            count.value = n - done
            res = lib.bpf_lookup_batch(
                t.map_fd,
                ctypes.byref(in_batch) if first + done else None,
                ctypes.byref(out_batch),
                ctypes.byref(keys, ksize * total),
                ctypes.byref(values, vsize * total),
                ctypes.byref(count),
            )
            err = ctypes.get_errno()
            done += count.value
            total += count.value
            if res != 0 and err != errno.ENOENT:
                return None
            if res != 0 or count.value == 0:
                break
    return total


Rows = list[tuple[tuple[Any, ...], list[tuple[Any, ...]]]]


def _raw_layouts(t: Any) -> Optional[tuple[struct.Struct, struct.Struct]]:
    """Struct layouts of a map's key and per-CPU value when both have one without char
    arrays (what `_rows_from_raw` reads); None otherwise."""
    try:
        key_layout = _layout(t.Key)
        value_layout = _layout(getattr(t.Leaf, "_type_", t.Leaf))
        vsize = ctypes.sizeof(t.Leaf)
    except Exception:
        return None
    if key_layout is None or key_layout[1] or value_layout is None or value_layout[1]:
        return None
    if not vsize or vsize % value_layout[0].size:
        return None
    return key_layout[0], value_layout[0]


def _read_percpu_raw(
    t: Any, skip_zero: bool, slots: Optional[Sequence[int]] = None
) -> Optional[Rows]:
    """`BpfProgram.read_percpu` from the raw buffers of one batch lookup; None where that
    cannot be done (see _raw_layouts, _lookup_batch_raw)."""
    layouts = _raw_layouts(t)
    raw = None if layouts is None else _lookup_batch_raw(t, slots)
    if layouts is None or raw is None:
        return None
    return _rows_from_raw(t, layouts, raw, skip_zero)


def _rows_from_raw(
    t: Any, layouts: tuple[struct.Struct, struct.Struct],
    raw: tuple[memoryview, memoryview, int], skip_zero: bool,
) -> Rows:  # fmt: skip
    kst, vst = layouts
    keys, values, total = raw
    ksize, vsize = ctypes.sizeof(t.Key), ctypes.sizeof(t.Leaf)
    if skip_zero:  # a direct-mapped cache is mostly empty: compare blocks, then entries
        flat = bytes(values)
        block = vsize * _BLOCK
        zero_block, zero = bytes(block), bytes(vsize)
        entries: Sequence[int] = [
            i
            for start in range(0, len(flat), block)
            if flat[start : start + block] != zero_block[: len(flat) - start]
            for i in range(start // vsize, min(total, (start + block) // vsize))
            if flat[i * vsize : (i + 1) * vsize] != zero
        ]
    else:
        entries = range(total)
    return [
        (kst.unpack_from(keys, i * ksize),
         list(vst.iter_unpack(values[i * vsize : (i + 1) * vsize])))
        for i in entries
    ]  # fmt: skip


def _rows_from_items(items: Sequence[tuple[Any, Any]], skip_zero: bool) -> Rows:
    """`BpfProgram.read_percpu` from bcc's (key, per-CPU leaf) ctypes pairs."""
    out = []
    zero = b""
    layout: Optional[tuple[struct.Struct, tuple[int, ...]]] = None
    for k, values in items:
        if layout is None:  # bcc's per-CPU leaf is an array of the map's value type
            layout = _layout(getattr(type(values), "_type_", type(values)))
        raw = bytes(values)
        if skip_zero:
            if len(zero) != len(raw):
                zero = bytes(len(raw))
            if raw == zero:
                continue
        if layout is not None and not layout[1]:
            rows = list(layout[0].iter_unpack(raw))
        else:
            rows = [_flat(v) for v in values]
        out.append((_flat(k), rows))
    return out


def _fill(target: Any, values: Sequence[Any]) -> Any:
    """Set a ctypes struct's fields, in declaration order, from a flat sequence."""
    it = iter(values)
    for name, ctype, *_ in target._fields_:
        if issubclass(ctype, ctypes.Array) and ctype._type_ is ctypes.c_char:
            setattr(target, name, next(it))
        elif issubclass(ctype, ctypes.Array):
            arr = getattr(target, name)
            for i in range(len(arr)):
                arr[i] = next(it)
        else:
            setattr(target, name, next(it))
    return target


class BpfProgram:
    """Compiled and loaded probes: attach, read maps, statistics, close."""

    def __init__(self, text: str) -> None:
        """Compile and load `text` (all functions stay unattached until `attach`)."""
        if os.geteuid() != 0:
            raise NeedsPrivilege("loading BPF programs needs root: run lbtune as root")
        problem = bcc_problem()
        if problem:
            raise NeedsPrivilege(f"{problem}: {BCC_FIX}")
        from bcc import BPF

        with _StderrCapture() as err:
            try:
                self._bpf: Any = BPF(text=text.encode())
            except Exception as e:
                why = err.first_error() or _one_line(e)
                raise NeedsPrivilege(f"bcc could not compile the probes: {why}") from None
        atexit.unregister(self._bpf.cleanup)  # close() does it; keep no reference behind
        self._attached: list[int] = []  # perf event fds, one per (tracepoint, program)
        self._links: list[int] = []  # tp_btf link fds and program fds, closed on close()
        self._functions: dict[str, Any] = {}
        self._closed = False

    def attach(self, tracepoint: str, function: str) -> None:
        """Load `function` as a tracepoint program and attach it to `system:event`."""
        from bcc import BPF, lib

        fn = self._functions.get(function)
        if fn is None:
            with _StderrCapture() as err:
                try:
                    fn = self._bpf.load_func(function.encode(), BPF.TRACEPOINT)
                except Exception as e:
                    why = err.first_error() or _one_line(e)
                    raise NeedsPrivilege(f"the kernel refused program {function}: {why}") from None
            self._functions[function] = fn
        system, _, event = tracepoint.partition(":")
        # bcc's own attach_tracepoint keeps one fd per tracepoint name; two programs on one
        # tracepoint would leak the first, so the perf fds are kept here.
        fd = lib.bpf_attach_tracepoint(fn.fd, system.encode(), event.encode())
        if fd < 0:
            raise NeedsPrivilege(f"cannot attach {function} to tracepoint {tracepoint}")
        self._attached.append(fd)

    def attach_btf(self, tracepoint: str, function: str, btf_id: int) -> None:
        """Load `function` as a BTF-typed tracepoint program (tp_btf) on the tracepoint
        whose `btf_trace_<event>` typedef has BTF id `btf_id`, and attach it."""
        from bcc import lib

        fn = self._functions.get(function)
        if fn is None:
            insns = self._bpf.dump_func(function.encode())
            license = lib.bpf_module_license(self._bpf.module) or b"GPL"
            fd, why = load_typed_tracepoint(insns, function, license, btf_id)
            if fd < 0:
                raise NeedsPrivilege(f"the kernel refused program {function}: {why}")
            self._links.append(fd)
            fn = self._functions[function] = _Loaded(fd)
        link = attach_typed_tracepoint(fn.fd)
        if link < 0:
            raise NeedsPrivilege(
                f"cannot attach {function} to tracepoint {tracepoint} (tp_btf): "
                f"{os.strerror(-link)}"
            )
        self._links.append(link)

    def update(self, table: str, key: Sequence[Any], value: Sequence[Any]) -> None:
        """Set one entry of a (non per-CPU) map; key and value as flat field sequences (an
        array's key is its index)."""
        t = self._bpf[table.encode()]
        k = _fill(t.Key(), key) if hasattr(t.Key, "_fields_") else t.Key(*key)
        t[k] = _fill(t.Leaf(), value)

    def read_percpu(
        self, table: str, skip_zero: bool = False, slots: Optional[Sequence[int]] = None
    ) -> Rows:
        """Every entry of a per-CPU map as (key, [value per possible CPU]), flattened;
        `skip_zero` leaves out entries that are zero on every CPU (a direct-mapped cache is
        mostly empty, and the monitor reads it every second). `slots`, for an array map:
        read only the entries at these indexes (the rows may include a few others between
        close ones, `_runs`), ascending.

        One BPF_MAP_LOOKUP_BATCH call where the kernel has it (5.6+), else key by key. The
        entries are unpacked from the batch's own buffers (`_read_percpu_raw`) when the key
        and value have struct layouts, else from bcc's ctypes object of each entry, each
        entry's values for all CPUs from one buffer. Not for two threads at once on one
        table (the batch buffers are the table's; the probe session reads under its lock).
        """
        t = self._bpf[table.encode()]
        fast = _read_percpu_raw(t, skip_zero, slots)
        if fast is not None:
            return fast
        if slots is not None:
            wanted = sorted({i for i in slots if 0 <= i < t.max_entries})
            items = [(t.Key(i), t.getvalue(t.Key(i))) for i in wanted]
            return _rows_from_items(items, skip_zero)
        try:
            items = list(t.items_lookup_batch())
        except Exception:
            items = [(k, t.getvalue(k)) for k in t]
        return _rows_from_items(items, skip_zero)

    def stats(self) -> list[ProgramStats]:
        """Run count and run time of every loaded program (zero while statistics are off)."""
        out = []
        for name, fn in self._functions.items():
            info = _prog_info(fn.fd) or _fdinfo(fn.fd)
            out.append(
                ProgramStats(
                    name,
                    info.get("prog_id", 0),
                    info.get("run_cnt", 0),
                    info.get("run_time_ns", 0),
                )
            )
        return out

    def close(self) -> None:
        """Detach every program and close every program and map (idempotent)."""
        if self._closed:
            return
        self._closed = True
        from bcc import lib

        for fd in self._attached:
            lib.bpf_close_perf_event_fd(fd)
        self._attached.clear()
        for fd in reversed(self._links):  # links first, then their programs
            os.close(fd)
        self._links.clear()
        self._functions.clear()
        self._bpf.cleanup()


def _fdinfo(fd: int) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                value = value.strip()
                if value.isdigit():
                    out[key.strip()] = int(value)
    except OSError:
        pass
    return out


class _StderrCapture:
    """Collect what libbcc/LLVM write to fd 2 (compiler diagnostics, the verifier log), so a
    failure becomes one line and a success prints nothing."""

    def __enter__(self) -> _StderrCapture:
        import tempfile

        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.close()

    def text(self) -> str:
        self._file.seek(0)
        return self._file.read(1 << 20).decode("utf-8", "replace")

    def first_error(self) -> str:
        lines = self.text().splitlines()
        for line in lines:
            if "error:" in line:
                return line.split("error:", 1)[1].strip()
        # verifier logs end with the reason ("invalid mem access 'scalar'", ...)
        tail = [ln.strip() for ln in lines if ln.strip()]
        return tail[-1] if tail else ""


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
