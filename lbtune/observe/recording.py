"""A recorded sample sequence: what `lbtune monitor --record FILE` writes and `--replay` plays.

The file is JSON lines. The first line is the header (`format`, the host's name, kernel,
namespace, the sampling interval, and the CPU topology and NICs the panels and rules use);
each further line is one tick: the `Sample` the sampler took (`sample`, the first tick; the
later ones hold only what changed since the tick before, `change`) and the `ProbeSample`
the probes gave at that tick (or null). Values are the observe/host frozen dataclasses
encoded field by field, and decoded by their type hints, so a recording reads back into
exactly the types a live run produces, and a file that does not match them is refused with
one line. Format /1 (every tick whole) is still read.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import types
import typing
from array import array
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.kernel.interrupts import CpuColumns, CpuCounts
from lbtune.host.net.nic import Nic
from lbtune.observe.model import Sample
from lbtune.observe.probes import ProbeSample

FORMAT = "lbtune-monitor-recording/2"
FORMATS = (FORMAT, "lbtune-monitor-recording/1")  # /1: every tick whole (still read)
MAX_LINE = 64 << 20  # one tick of a 48-CPU, 64-queue host is ~200 KB; refuse absurd lines


@dataclass(frozen=True)
class RecordingHeader:
    """What a recording says about the host it was made on."""

    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    interval: float
    topology: Optional[CpuTopology]
    nics: Mapping[str, Nic]
    created: float = 0.0


@dataclass(frozen=True)
class RecordedTick:
    sample: Sample
    probes: Optional[ProbeSample]


class Malformed(BadInput):
    """A recording that does not have the format (a one-line BadInput, exit 2)."""


# ------------------------------------------------------------------------------ codec


def encode(value: Any) -> Any:
    """A frozen dataclass value (nested) as JSON-able data: mapping keys become strings,
    tuples and sets become lists (sets sorted, so a recording is deterministic)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (frozenset, set)):
        return sorted(encode(v) for v in value)
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot record a {type(value).__name__}")


class _Bad(Exception):
    """A value that does not fit its type: the message, and the path to it from the value
    being decoded, innermost part first (parts are added only on the way out of an error)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


Decoder = Callable[[Any], Any]
_DECODERS: dict[Any, Decoder] = {}


def decode(tp: Any, data: Any, where: str = "value") -> Any:
    """`data` (from `encode`) as a value of type `tp`; Malformed when it does not fit.

    Each type's decoder is built once, from its type hints, and kept: a 48-CPU host's tick
    holds some 20,000 values, and working the hints out again for each value was most of
    what a replay cost. The place of a value that does not fit (`where.nics[eth0].queues[3]
    .packets`) is put together only when one does not.
    """
    try:
        return _decoder(tp)(data)
    except _Bad as e:
        raise Malformed(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


def _decoder(tp: Any) -> Decoder:
    found = _DECODERS.get(tp)
    if found is None:
        # (a placeholder first: a type that refers to itself gets the decoder, once built)
        _DECODERS[tp] = lambda data: _DECODERS[tp](data)
        found = _DECODERS[tp] = _build(tp)
    return found


def _build(tp: Any) -> Decoder:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return lambda data: data
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return _union(args)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass(tp)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _items(_decoder(args[0]))
        return _fixed(tuple(_decoder(a) for a in args))
    if origin in (frozenset, set):
        return _set(_decoder(args[0]))
    if origin in (dict, collections.abc.Mapping):
        return _mapping(args[0], _decoder(args[1]))
    if tp is CpuCounts:
        return _cpu_counts
    if tp in _LEAVES:
        return _LEAVES[tp]

    def cannot(data: Any) -> Any:
        raise _Bad(f"cannot read a {tp!r}")

    return cannot


def _union(args: tuple[Any, ...]) -> Decoder:
    nullable = type(None) in args
    choices = tuple(_decoder(a) for a in args if a is not type(None))

    def union(data: Any) -> Any:
        if data is None and nullable:
            return None
        first: Optional[_Bad] = None
        for choice in choices:
            try:
                return choice(data)
            except _Bad as e:
                first = first or e
        raise first or _Bad("unexpected null")

    return union


def _dataclass(tp: type) -> Decoder:
    hints = typing.get_type_hints(tp)
    fields = tuple(
        (f.name, f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(tp)
    )  # fmt: skip
    decoders = {name: _decoder(hints[name]) for name, _ in fields}
    expected = f"expected an object for {tp.__name__}"

    def dataclass(data: Any) -> Any:
        if not isinstance(data, dict):
            raise _Bad(expected)
        kwargs = {}
        for name, required in fields:
            if name in data:
                try:
                    kwargs[name] = decoders[name](data[name])
                except _Bad as e:
                    e.path.append(f".{name}")
                    raise
            elif required:
                raise _Bad(f"no {name}")
        return tp(**kwargs)

    return dataclass


def _items(item: Decoder) -> Decoder:
    def items(data: Any) -> Any:
        if not isinstance(data, list):
            raise _Bad("expected a list")
        try:
            return tuple([item(v) for v in data])
        except _Bad:
            pass
        for i, v in enumerate(data):  # (which item: only once one did not fit)
            try:
                item(v)
            except _Bad as e:
                e.path.append(f"[{i}]")
                raise
        raise AssertionError("an item failed once only")  # pragma: no cover

    return items


def _fixed(decoders: tuple[Decoder, ...]) -> Decoder:
    def fixed(data: Any) -> Any:
        if not isinstance(data, list):
            raise _Bad("expected a list")
        if len(decoders) != len(data):
            raise _Bad(f"expected {len(decoders)} items")
        out = []
        for i, (d, v) in enumerate(zip(decoders, data)):
            try:
                out.append(d(v))
            except _Bad as e:
                e.path.append(f"[{i}]")
                raise
        return tuple(out)

    return fixed


def _set(item: Decoder) -> Decoder:
    def members(data: Any) -> Any:
        if not isinstance(data, list):
            raise _Bad("expected a list")
        return frozenset([item(v) for v in data])

    return members


def _mapping(key_type: Any, value: Decoder) -> Decoder:
    int_keys = key_type is int
    plain = value is _LEAVES[int] or value is _LEAVES[str]
    leaf = int if value is _LEAVES[int] else str

    def mapping(data: Any) -> Any:
        if not isinstance(data, dict):
            raise _Bad("expected an object")
        keys = _int_keys(data) if int_keys else []
        if plain and (not data or set(map(type, data.values())) == {leaf}):
            # (the common maps: counters by name, per-CPU counts -- checked in one pass)
            return dict(zip(keys, data.values())) if int_keys else dict(data)
        out = {}
        for i, (k, v) in enumerate(data.items()):
            try:
                out[keys[i] if int_keys else k] = value(v)
            except _Bad as e:
                e.path.append(f"[{k}]")
                raise
        return out

    return mapping


def _cpu_counts(data: Any) -> Any:
    """An IRQ row's per-CPU counts, recorded as an object of CPU id -> count."""
    if not isinstance(data, dict):
        raise _Bad("expected an object")
    keys = _int_keys(data)
    if not set(map(type, data.values())) <= {int}:
        for k, v in data.items():
            if type(v) is not int:
                e = _Bad("expected an integer")
                e.path.append(f"[{k[:40]}]")
                raise e
    try:
        return CpuCounts(CpuColumns.of(tuple(keys)), array("q", data.values()))
    except OverflowError:
        raise _Bad("a count out of range") from None
    except ValueError:
        raise _Bad("a CPU named twice") from None


def _int_keys(data: dict[str, Any]) -> list[int]:
    try:
        return list(map(int, data))  # (per-CPU maps: 48 keys a row, converted in C)
    except ValueError:
        return [_int_key(k) for k in data]  # (which one, for the message)


def _int_key(key: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise _Bad(f"key {key[:40]!r} is not an integer") from None


def _bool(data: Any) -> Any:
    if not isinstance(data, bool):
        raise _Bad("expected true or false")
    return data


def _int(data: Any) -> Any:
    if isinstance(data, bool) or not isinstance(data, int):
        raise _Bad("expected an integer")
    return data


def _float(data: Any) -> Any:
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise _Bad("expected a number")
    return float(data)


def _str(data: Any) -> Any:
    if not isinstance(data, str):
        raise _Bad("expected a string")
    return data


_LEAVES: dict[Any, Decoder] = {bool: _bool, int: _int, float: _float, str: _str}


# ------------------------------------------------------------------------------ changes
#
# A tick of format /2 after the first holds only what changed since the tick before: a
# 48-CPU host's full tick is some 240 KB of JSON of which a few percent moves in a second,
# and parsing and decoding the rest again was most of what a replay cost. A change is, for
# an object or a list, an object of the keys (list indexes as strings) that changed, each
# with its own change; `[value]` puts a new value in place (a new key, a list whose length
# changed, a number); `[]` removes an object's key.


def changes(before: Any, after: Any) -> Any:
    """What turns the encoded value `before` into `after` (None: nothing changed)."""
    if type(before) is not type(after):
        return [after]
    if isinstance(after, dict):
        out = {}
        for k, v in after.items():
            if k in before:
                c = changes(before[k], v)
                if c is not None:
                    out[k] = c
            else:
                out[k] = [v]
        for k in before:
            if k not in after:
                out[k] = []
        return out or None
    if isinstance(after, list):
        if len(before) != len(after):
            return [after]
        out = {}
        for i, (a, b) in enumerate(zip(before, after)):
            c = changes(a, b)
            if c is not None:
                out[str(i)] = c
        return out or None
    return None if before == after else [after]


def apply_change(tp: Any, value: Any, change: Any, where: str = "value") -> Any:
    """`value` (of type `tp`) after `change`: the parts the change does not touch are kept
    as they are (the same objects), not decoded again; Malformed when it does not fit."""
    try:
        return _patcher(tp)(value, change)
    except _Bad as e:
        raise Malformed(f"{where}{''.join(reversed(e.path))}: {e.message}") from None


Patcher = Callable[[Any, Any], Any]
_PATCHERS: dict[Any, Patcher] = {}


def _patcher(tp: Any) -> Patcher:
    found = _PATCHERS.get(tp)
    if found is None:
        _PATCHERS[tp] = lambda value, change: _PATCHERS[tp](value, change)
        found = _PATCHERS[tp] = _build_patcher(tp)
    return found


def _new(change: Any) -> Any:
    """The value of a `[value]` change."""
    if type(change) is not list:
        raise _Bad("expected a change ([value] or an object of changes)")
    if len(change) != 1:
        raise _Bad("expected [value] (one item) to replace a value")
    return change[0]


def _build_patcher(tp: Any) -> Patcher:
    decoder = _decoder(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _patch_dataclass(tp, decoder)
    if origin in (dict, collections.abc.Mapping):
        return _patch_mapping(args[0], _decoder(args[1]), _patcher(args[1]), decoder)
    if tp is CpuCounts:
        return _patch_cpu_counts(decoder)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _patch_items(_decoder(args[0]), _patcher(args[0]), decoder)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        arms = tuple(a for a in args if a is not type(None))
        if len(arms) == 1:
            return _patch_optional(_patcher(arms[0]), decoder)
    return _whole(decoder)


def _whole(decoder: Decoder) -> Patcher:
    """A change of parts of a value (a set, a fixed tuple, a union of several types, an
    object a field of which is removed) applied to the value encoded again, then decoded."""

    def whole(value: Any, change: Any) -> Any:
        return decoder(_apply(encode(value), change))

    return whole


def _apply(doc: Any, change: Any) -> Any:
    """`change` applied to the encoded value `doc` (copies along the changed paths only)."""
    if not isinstance(change, dict):
        return _new(change)
    if isinstance(doc, dict):
        out = dict(doc)
        for k, c in change.items():
            if c == []:
                if k not in out:
                    raise _Bad(f"no {k[:40]!r} to remove")
                del out[k]
            elif isinstance(c, dict):
                if k not in out:
                    raise _Bad(f"no {k[:40]!r} to change")
                out[k] = _apply(out[k], c)
            else:
                out[k] = _new(c)
        return out
    if isinstance(doc, list):
        items = list(doc)
        for k, c in change.items():
            i = _index(k, len(items))
            try:
                items[i] = _apply(items[i], c)
            except _Bad as e:
                e.path.append(f"[{i}]")
                raise
        return items
    raise _Bad("a change of parts of a value that has none")


def _index(key: str, size: int) -> int:
    if not (key.isdigit() and key.isascii() and len(key) < 10 and int(key) < size):
        raise _Bad(f"no item {key[:40]!r} to change (the list has {size})")
    return int(key)


def _patch_dataclass(tp: type, decoder: Decoder) -> Patcher:
    names = tuple(f.name for f in dataclasses.fields(tp))
    fields = set(names)
    hints = typing.get_type_hints(tp)
    patchers = {name: _patcher(hints[name]) for name in fields}
    decoders = {name: _decoder(hints[name]) for name in fields}
    whole = _whole(decoder)
    # (a plain frozen dataclass is copied with its changed fields set: `replace` runs
    # __init__ with every field, and a 48-CPU tick changes hundreds of queue counters. Set
    # field by field, not through `__dict__`, which would give each copy, and the object
    # it copies, a dict of its own: two more objects per row for the garbage collector to
    # walk for as long as the monitor keeps the sample, a third of a 48-CPU sample's)
    set_field = object.__setattr__
    plain = (
        all(f.init for f in dataclasses.fields(tp))
        and not hasattr(tp, "__post_init__")
        and not hasattr(tp, "__slots__")
    )

    def patch(value: Any, change: Any) -> Any:
        if type(change) is not dict:
            return decoder(_new(change))
        if type(value) is not tp:
            raise _Bad(f"a change of parts of an object for {tp.__name__} that was not one")
        kwargs = {}
        for name, c in change.items():
            try:
                if type(c) is list:
                    if len(c) != 1 or name not in fields:  # (removed, unknown, or bad)
                        return whole(value, change)
                    kwargs[name] = decoders[name](c[0])
                elif name in fields:
                    kwargs[name] = patchers[name](getattr(value, name), c)
                else:
                    return whole(value, change)
            except _Bad as e:
                e.path.append(f".{name}")
                raise
        if plain:
            copied = object.__new__(tp)
            for name in names:
                set_field(copied, name, kwargs[name] if name in kwargs else getattr(value, name))
            return copied
        return dataclasses.replace(value, **kwargs)  # type: ignore[type-var]

    return patch


def _patch_mapping(key_type: Any, item: Decoder, item_patch: Patcher, decoder: Decoder) -> Patcher:
    int_keys = key_type is int

    def patch(value: Any, change: Any) -> Any:
        if type(change) is not dict:
            return decoder(_new(change))
        if not isinstance(value, dict):
            raise _Bad("a change of parts of an object that was not one")
        values = dict(value)
        for k, c in change.items():
            key = _int_key(k) if int_keys else k
            try:
                if type(c) is list:
                    if c:
                        values[key] = item(_new(c))
                    elif values.pop(key, _NONE) is _NONE:
                        raise _Bad("nothing to remove")
                elif type(c) is dict:
                    if key not in values:
                        raise _Bad("nothing to change")
                    values[key] = item_patch(values[key], c)
                else:
                    raise _Bad("expected a change ([value], [] or an object of changes)")
            except _Bad as e:
                e.path.append(f"[{k[:40]}]")
                raise
        return values

    return patch


_NONE = object()


def _patch_cpu_counts(decoder: Decoder) -> Patcher:
    """New counts of CPUs the row has, set in a copy of its numbers; any other change (a
    CPU added or removed) to the row encoded again, then decoded."""
    whole = _whole(decoder)

    def patch(value: Any, change: Any) -> Any:
        if type(change) is not dict:
            return decoder(_new(change))
        if not isinstance(value, CpuCounts):
            raise _Bad("a change of parts of an object that was not one")
        new = {}
        for k, c in change.items():
            if type(c) is not list or len(c) != 1 or type(c[0]) is not int:
                return whole(value, change)
            new[_int_key(k)] = c[0]
        try:
            return value.replaced(new)
        except KeyError:
            return whole(value, change)
        except OverflowError:
            raise _Bad("a count out of range") from None

    return patch


def _patch_items(item: Decoder, item_patch: Patcher, decoder: Decoder) -> Patcher:
    def patch(value: Any, change: Any) -> Any:
        if type(change) is not dict:
            return decoder(_new(change))
        if not isinstance(value, tuple):
            raise _Bad("a change of parts of a list that was not one")
        values = list(value)
        for k, c in change.items():
            i = _index(k, len(values))
            try:
                if type(c) is list:
                    values[i] = item(_new(c))
                else:
                    values[i] = item_patch(values[i], c)
            except _Bad as e:
                e.path.append(f"[{i}]")
                raise
        return tuple(values)

    return patch


def _patch_optional(arm: Patcher, decoder: Decoder) -> Patcher:
    def patch(value: Any, change: Any) -> Any:
        if type(change) is not dict:
            return decoder(_new(change))
        if value is None:
            raise _Bad("a change of parts of null")
        return arm(value, change)

    return patch


# ------------------------------------------------------------------------------ files


class RecordingWriter:
    """Appends ticks to an open text file, one JSON line each, flushed per tick."""

    def __init__(self, out: IO[str], header: RecordingHeader) -> None:
        self.out = out
        self.ticks = 0
        self._before: Any = None  # the last tick, encoded
        doc = {"format": FORMAT, **encode(header)}
        out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        out.flush()

    def write(self, sample: Sample, probes: Optional[ProbeSample]) -> None:
        """The first tick whole, each later one as what changed since the tick before
        (`changes`: of the sample and of the probes' counts)."""
        now = {"sample": encode(sample), "probes": None if probes is None else encode(probes)}
        doc = now if self._before is None else {"change": changes(self._before, now) or {}}
        self.out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self.out.flush()
        self._before = now
        self.ticks += 1


def _line(text: str, number: int, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise Malformed(f"{name} line {number}: not JSON ({e.msg})") from None
    except ValueError:
        raise Malformed(f"{name} line {number}: not JSON") from None
    except RecursionError:  # thousands of nested arrays
        raise Malformed(f"{name} line {number}: not JSON (nested too deeply)") from None


def _readline(stream: IO[str], number: int, name: str) -> str:
    """One line; Malformed when it is not UTF-8 (a binary file): a stream opened strictly
    fails in its read-ahead, one opened with surrogateescape (host/textfile.open_user_text)
    carries the bad bytes to this line's check."""
    try:
        text = stream.readline(MAX_LINE)
        text.encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        raise Malformed(f"{name} line {number}: not UTF-8 text (not a monitor recording)") from None
    return text


def read_recording(stream: IO[str], name: str) -> tuple[RecordingHeader, Iterator[RecordedTick]]:
    """The header (read now: a file that is not a recording fails at once) and the ticks
    (read lazily, one line at a time)."""
    first = _readline(stream, 1, name)
    if not first.strip():
        raise Malformed(f"{name}: empty, not a monitor recording")
    head = _line(first, 1, name)
    if not isinstance(head, dict) or head.get("format") not in FORMATS:
        raise Malformed(f"{name}: not a monitor recording (expected format {FORMAT})")
    header = decode(RecordingHeader, {k: v for k, v in head.items() if k != "format"},
                    f"{name} line 1: header")  # fmt: skip
    if not header.interval > 0:
        raise Malformed(f"{name}: the interval must be more than 0 seconds")

    def ticks() -> Iterator[RecordedTick]:
        number = 1
        tick: Optional[RecordedTick] = None  # the last tick read
        while True:
            number += 1
            text = _readline(stream, number, name)
            if not text:
                return
            if not text.endswith("\n") and len(text) >= MAX_LINE:
                raise Malformed(f"{name} line {number}: longer than {MAX_LINE} bytes")
            if not text.strip():
                continue
            doc = _line(text, number, name)
            where = f"{name} line {number}: "
            if isinstance(doc, dict) and "sample" in doc:
                tick = RecordedTick(
                    decode(Sample, doc["sample"], where + "sample"),
                    decode(Optional[ProbeSample], doc.get("probes"), where + "probes"),
                )
            elif isinstance(doc, dict) and "change" in doc:
                if tick is None:
                    raise Malformed(f"{where}a change, but no whole tick before it")
                tick = apply_change(RecordedTick, tick, doc["change"], where + "change")
            else:
                raise Malformed(f"{name} line {number}: not a recorded tick")
            yield tick

    return header, ticks()
