"""A recorded sample sequence: what `lbtune monitor --record FILE` writes and `--replay` plays.

The file is JSON lines. The first line is the header (`format`, the host's name, kernel,
namespace, the sampling interval, and the CPU topology and NICs the panels and rules use);
each further line is one tick: the `Sample` the sampler took and the `ProbeSample` the
probes gave at that tick (or null). Values are the observe/host frozen dataclasses encoded
field by field, and decoded by their type hints, so a recording reads back into exactly the
types a live run produces, and a file that does not match them is refused with one line.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import IO, Any, Iterator, Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.kernel.cputopology import CpuTopology
from lbtune.host.net.nic import Nic
from lbtune.observe.model import Sample
from lbtune.observe.probes import ProbeSample

FORMAT = "lbtune-monitor-recording/1"
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


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def decode(tp: Any, data: Any, where: str = "value") -> Any:
    """`data` (from `encode`) as a value of type `tp`; Malformed when it does not fit."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return data
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        if data is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return decode(arg, data, where)
            except Malformed as e:
                errors.append(str(e))
        raise Malformed(errors[0] if errors else f"{where}: unexpected null")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(data, dict):
            raise Malformed(f"{where}: expected an object for {tp.__name__}")
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = decode(hints[f.name], data[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise Malformed(f"{where}: no {f.name}")
        return tp(**kwargs)
    if origin in (tuple,):
        if not isinstance(data, list):
            raise Malformed(f"{where}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(decode(args[0], v, f"{where}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise Malformed(f"{where}: expected {len(args)} items")
        return tuple(decode(a, v, f"{where}[{i}]") for i, (a, v) in enumerate(zip(args, data)))
    if origin in (frozenset, set):
        if not isinstance(data, list):
            raise Malformed(f"{where}: expected a list")
        return frozenset(decode(args[0], v, where) for v in data)
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(data, dict):
            raise Malformed(f"{where}: expected an object")
        kt, vt = args
        return {_key(kt, k, where): decode(vt, v, f"{where}[{k}]") for k, v in data.items()}
    if tp is bool:
        if not isinstance(data, bool):
            raise Malformed(f"{where}: expected true or false")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise Malformed(f"{where}: expected an integer")
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise Malformed(f"{where}: expected a number")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise Malformed(f"{where}: expected a string")
        return data
    raise Malformed(f"{where}: cannot read a {tp!r}")


def _key(tp: Any, key: str, where: str) -> Any:
    if tp is int:
        try:
            return int(key)
        except ValueError:
            raise Malformed(f"{where}: key {key[:40]!r} is not an integer") from None
    return key


# ------------------------------------------------------------------------------ files


class RecordingWriter:
    """Appends ticks to an open text file, one JSON line each, flushed per tick."""

    def __init__(self, out: IO[str], header: RecordingHeader) -> None:
        self.out = out
        self.ticks = 0
        doc = {"format": FORMAT, **encode(header)}
        out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        out.flush()

    def write(self, sample: Sample, probes: Optional[ProbeSample]) -> None:
        doc = {"sample": encode(sample), "probes": None if probes is None else encode(probes)}
        self.out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self.out.flush()
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
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise Malformed(f"{name}: not a monitor recording (expected format {FORMAT})")
    header = decode(RecordingHeader, {k: v for k, v in head.items() if k != "format"},
                    f"{name} line 1: header")  # fmt: skip
    if not header.interval > 0:
        raise Malformed(f"{name}: the interval must be more than 0 seconds")

    def ticks() -> Iterator[RecordedTick]:
        number = 1
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
            if not isinstance(doc, dict) or "sample" not in doc:
                raise Malformed(f"{name} line {number}: not a recorded tick")
            where = f"{name} line {number}: "
            yield RecordedTick(
                decode(Sample, doc["sample"], where + "sample"),
                decode(Optional[ProbeSample], doc.get("probes"), where + "probes"),
            )

    return header, ticks()
