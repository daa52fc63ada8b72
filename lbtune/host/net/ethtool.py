"""NIC settings that live behind ethtool rather than in files: driver info, rings, channels, stats.

Two sources share one interface: `LiveEthtool` asks the running kernel (the SIOCETHTOOL
ioctl), `RecordedEthtool` reads `ethtool` command output stored the way sosreport
stores it (`sos_commands/networking/ethtool_-g_eth0`), so fixture trees, lbtune captures and
real sosreports all work with `--root`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import re
import socket
import struct
import threading
from dataclasses import dataclass, fields
from typing import Callable, Iterator, Mapping, Optional, Protocol, Sequence, TypeVar

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net import nicio, rss
from lbtune.host.net.nicparams import (
    COALESCE_FLAGS,
    U32_MAX,
    Coalesce,
    Features,
    Pause,
    parse_ethtool_a,
    parse_ethtool_c,
    parse_ethtool_k,
    rewrite_ethtool_a,
    rewrite_ethtool_c,
    rewrite_ethtool_k,
)
from lbtune.host.net.rss import NtupleRule, Rxfh

RECORD_DIR = "/sos_commands/networking"


@dataclass(frozen=True)
class DriverInfo:
    driver: str
    version: str = ""
    firmware: str = ""
    bus_info: str = ""


@dataclass(frozen=True)
class RingSizes:
    """Descriptor ring sizes (`ethtool -g`): current and driver maximum, None = not reported."""

    rx: Optional[int] = None
    tx: Optional[int] = None
    rx_max: Optional[int] = None
    tx_max: Optional[int] = None
    rx_mini: Optional[int] = None
    rx_mini_max: Optional[int] = None
    rx_jumbo: Optional[int] = None
    rx_jumbo_max: Optional[int] = None


@dataclass(frozen=True)
class Channels:
    """Queue counts (`ethtool -l`): current and maximum per kind, None = not reported."""

    rx: Optional[int] = None
    tx: Optional[int] = None
    other: Optional[int] = None
    combined: Optional[int] = None
    rx_max: Optional[int] = None
    tx_max: Optional[int] = None
    other_max: Optional[int] = None
    combined_max: Optional[int] = None


class EthtoolSource(Protocol):
    """Per-NIC ethtool data; each method returns None when the driver does not support it."""

    def driver_info(self, dev: str) -> Optional[DriverInfo]: ...
    def rings(self, dev: str) -> Optional[RingSizes]: ...
    def channels(self, dev: str) -> Optional[Channels]: ...
    def stats(self, dev: str) -> Optional[dict[str, int]]: ...
    def set_rings(self, dev: str, rx: Optional[int] = None, tx: Optional[int] = None) -> None: ...
    def set_channels(
        self,
        dev: str,
        rx: Optional[int] = None,
        tx: Optional[int] = None,
        combined: Optional[int] = None,
        other: Optional[int] = None,
    ) -> None: ...
    # coalescing, features, pause (lbtune.host.net.nicparams)
    def coalesce(self, dev: str) -> Optional[Coalesce]: ...
    def set_coalesce(self, dev: str, changes: Mapping[str, int]) -> None: ...
    def features(self, dev: str) -> Optional[Features]: ...
    def set_features(self, dev: str, changes: Mapping[str, bool]) -> None: ...
    def pause(self, dev: str) -> Optional[Pause]: ...
    def set_pause(
        self,
        dev: str,
        autoneg: Optional[bool] = None,
        rx: Optional[bool] = None,
        tx: Optional[bool] = None,
    ) -> None: ...
    # RSS and flow steering (lbtune.host.net.rss)
    def rx_flow_hash(self, dev: str, flow_type: str) -> Optional[str]: ...
    def set_rx_flow_hash(self, dev: str, flow_type: str, fields: str) -> None: ...
    def rxfh(self, dev: str) -> Optional[Rxfh]: ...
    def set_rxfh(
        self,
        dev: str,
        indir: Optional[Sequence[int]] = None,
        key: Optional[bytes] = None,
        default: bool = False,
    ) -> None: ...
    def ntuple_rules(self, dev: str) -> Optional[tuple[NtupleRule, ...]]: ...
    def ntuple_table_size(self, dev: str) -> Optional[int]: ...
    def add_ntuple_rule(self, dev: str, rule: NtupleRule) -> int: ...
    def delete_ntuple_rule(self, dev: str, location: int) -> None: ...


class _RecordedNicParams:
    """`ethtool -c/-k/-a` recordings; the setters rewrite the recorded text in place."""

    def _text(self, flag: str, dev: str) -> tuple[Optional[str], str]:
        raise NotImplementedError

    def _rewrite(self, flag: str, dev: str, text: str) -> None:
        fs: HostFS = self.fs  # type: ignore[attr-defined]
        fs.write_file(f"{RECORD_DIR}/ethtool_-{flag}_{dev}", text.encode(errors="surrogateescape"))

    def _recorded(self, flag: str, dev: str) -> tuple[str, str]:
        """The recorded text as it is on disk (HostFS.read strips the last newline; a
        rewrite keeps every byte), and its path for messages."""
        text, src = self._text(flag, dev)
        if text is None:
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        fs: HostFS = self.fs  # type: ignore[attr-defined]
        raw = fs.read_bytes(f"{RECORD_DIR}/ethtool_-{flag}_{dev}") or b""
        return raw.decode(errors="surrogateescape"), src

    def coalesce(self, dev: str) -> Optional[Coalesce]:
        text, src = self._text("c", dev)
        return None if text is None else parse_ethtool_c(text, src)

    def set_coalesce(self, dev: str, changes: Mapping[str, int]) -> None:
        text, src = self._recorded("c", dev)
        have = dict(parse_ethtool_c(text, src).values)
        for name, value in changes.items():
            if name not in have:
                raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
            if not 0 <= value <= (1 if name in COALESCE_FLAGS else U32_MAX):
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        self._rewrite("c", dev, rewrite_ethtool_c(text, changes))

    def features(self, dev: str) -> Optional[Features]:
        text, src = self._text("k", dev)
        return None if text is None else parse_ethtool_k(text, src)

    def set_features(self, dev: str, changes: Mapping[str, bool]) -> None:
        text, src = self._recorded("k", dev)
        feats = {f.name: f for f in parse_ethtool_k(text, src).entries}
        for name in changes:
            f = feats.get(name)
            if f is None:
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
            if f.fixed:
                raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        self._rewrite("k", dev, rewrite_ethtool_k(text, changes))

    def pause(self, dev: str) -> Optional[Pause]:
        text, src = self._text("a", dev)
        return None if text is None else parse_ethtool_a(text, src)

    def set_pause(
        self,
        dev: str,
        autoneg: Optional[bool] = None,
        rx: Optional[bool] = None,
        tx: Optional[bool] = None,
    ) -> None:
        text, src = self._recorded("a", dev)
        parse_ethtool_a(text, src)
        wanted = {"autoneg": autoneg, "rx": rx, "tx": tx}
        changes = {k: v for k, v in wanted.items() if v is not None}
        self._rewrite("a", dev, rewrite_ethtool_a(text, changes))


_T = TypeVar("_T")


def _or_none(read: Callable[[], _T]) -> Optional[_T]:
    """A read the driver refuses (EOPNOTSUPP, EINVAL, ENODEV ...): None, "not supported"."""
    try:
        return read()
    except OSError:
        return None


def _driver_error(dev: str, write: Callable[[], None]) -> None:
    """A write; any OSError it raises becomes an EthtoolIoctlError carrying its errno."""
    try:
        write()
    except EthtoolIoctlError:
        raise
    except OSError as e:
        raise EthtoolIoctlError(e.errno, f"{dev}: {e.strerror or e}") from None


class _LiveNicParams:
    """The kernel's coalescing (ethtool netlink), features and pause (SIOCETHTOOL)."""

    def coalesce(self, dev: str) -> Optional[Coalesce]:
        return _or_none(lambda: nicio.get_coalesce(dev, ethtool_ioctl))

    def set_coalesce(self, dev: str, changes: Mapping[str, int]) -> None:
        _driver_error(dev, lambda: nicio.set_coalesce(dev, changes, ethtool_ioctl))

    def features(self, dev: str) -> Optional[Features]:
        return _or_none(lambda: nicio.get_features(dev, ethtool_ioctl))

    def set_features(self, dev: str, changes: Mapping[str, bool]) -> None:
        _driver_error(dev, lambda: nicio.set_features(dev, changes, ethtool_ioctl))

    def pause(self, dev: str) -> Optional[Pause]:
        return _or_none(lambda: nicio.get_pause(dev, ethtool_ioctl))

    def set_pause(
        self,
        dev: str,
        autoneg: Optional[bool] = None,
        rx: Optional[bool] = None,
        tx: Optional[bool] = None,
    ) -> None:
        _driver_error(dev, lambda: nicio.set_pause(dev, ethtool_ioctl, autoneg, rx, tx))


# ---------------------------------------------------------------- recorded (text output)

_SECTION_KEYS = {
    "RX": "rx",
    "TX": "tx",
    "RX Mini": "rx_mini",
    "RX Jumbo": "rx_jumbo",
    "Other": "other",
    "Combined": "combined",
}


def _parse_two_sections(text: str, source: str) -> dict[str, Optional[int]]:
    """Parse `ethtool -g`/`-l` output: a 'Pre-set maximums' and a 'Current' section."""
    values: dict[str, Optional[int]] = {}
    suffix: Optional[str] = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith("pre-set maximums"):
            suffix = "_max"
            continue
        if stripped.lower().startswith("current hardware settings"):
            suffix = ""
            continue
        if suffix is None or ":" not in stripped:
            continue
        label, _, value = stripped.partition(":")
        key = _SECTION_KEYS.get(label.strip())
        if key is None:
            continue  # RX Buf Len, CQE Size, TX Push ... not used
        value = value.strip()
        if value in ("n/a", ""):
            values[key + suffix] = None
        elif value.isdigit():
            values[key + suffix] = int(value)
        else:
            raise MalformedHostFile(source, f"{label.strip()}: not a number: {value!r}")
    if suffix is None:
        raise MalformedHostFile(source, "no 'Pre-set maximums' section")
    return values


def parse_ethtool_g(text: str, source: str = "ethtool -g") -> RingSizes:
    v = _parse_two_sections(text, source)
    return RingSizes(**{f.name: v.get(f.name) for f in fields(RingSizes)})


def parse_ethtool_l(text: str, source: str = "ethtool -l") -> Channels:
    v = _parse_two_sections(text, source)
    return Channels(**{f.name: v.get(f.name) for f in fields(Channels)})


def parse_ethtool_i(text: str, source: str = "ethtool -i") -> DriverInfo:
    kv = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            kv[k.strip()] = v.strip()
    if "driver" not in kv:
        raise MalformedHostFile(source, "no 'driver:' line")
    return DriverInfo(
        driver=kv["driver"],
        version=kv.get("version", ""),
        firmware=kv.get("firmware-version", ""),
        bus_info=kv.get("bus-info", ""),
    )


_STAT = re.compile(r"^\s+(\S.*?):\s+(-?\d+)\s*$")
# vmxnet3 repeats its per-queue counter names ("pkts rx OOB") under one header per queue
# ("Rx Queue#", value the queue's index), the members indented deeper than the header.
_QUEUE_SECTION = re.compile(r"(Rx|Tx) Queue#")


def qualify_sections(names: Sequence[tuple[int, str]]) -> Optional[list[str]]:
    """Unique counter names for drivers that repeat them per queue section.

    `names` are (indentation, name) in the driver's order. After an ``Rx Queue#`` or ``Tx
    Queue#`` header (the Nth of its direction is queue N; vmxnet3 lists them in order), each
    deeper-indented name becomes ``"Rx Queue#N: name"`` and the header itself ``"Rx Queue#N"``;
    the first name indented no deeper than the header ends the section. None when there is
    no header: the caller keeps its names as they are, so no other driver's names change.
    """
    out: list[str] = []
    seen = {"Rx": 0, "Tx": 0}
    section, base = "", 0
    for indent, name in names:
        m = _QUEUE_SECTION.fullmatch(name)
        if m:
            section, base = f"{m[1]} Queue#{seen[m[1]]}", indent
            seen[m[1]] += 1
            out.append(section)
        elif section and indent > base:
            out.append(f"{section}: {name}")
        else:
            section = ""
            out.append(name)
    return out if seen["Rx"] or seen["Tx"] else None


# The whole text at once (a 48-channel mlx5 prints thousands of lines, read on every scrape
# of a recorded host): every counter line, and every blank one, split on "\n" only.
_STAT_LINES = re.compile(r"^([^\S\n]+)(\S[^\n]*):[^\S\n]+(-?\d+)[^\S\n]*$", re.M)
_BLANK_LINES = re.compile(r"^[^\S\n]*$", re.M)
# line breaks str.splitlines() knows besides "\n": a text with one takes the line-by-line way
_OTHER_BREAKS = ("\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _stats_plain(body: str) -> Optional[dict[str, int]]:
    """The counters of a body in the shape the kernel's ethtool prints, every line
    `<spaces or tabs>name:<spaces or tabs>[-]digits[<spaces or tabs>]` or blank, in ASCII;
    None for anything else (then the regular expression decides). Three times faster than
    the expression on a 48-channel mlx5's thousand lines, and the same result."""
    if not body.isascii() or "\x1f" in body:  # with _OTHER_BREAKS: only " " and "\t" are space
        return None
    out: dict[str, int] = {}
    for line in body.split("\n"):
        name, sep, value = line.rpartition(":")
        if not sep:
            if line.strip(" \t"):
                return None
            continue
        key = name.lstrip(" \t")
        number = value.strip(" \t")
        digits = number[1:] if number[:1] == "-" else number
        if not key or len(key) == len(name) or value[:1] not in (" ", "\t") or not digits.isdigit():
            return None
        out[key] = int(number)
    return out


# A counter's value with what separates it from its name and ends its line; `split` leaves
# the rest of each line (indent and name) between the values.
_STAT_VALUE = re.compile(r":[ \t]+(-?[0-9]+)[ \t]*(?:\n|\Z)")
# Texts `_stats_plain` read, by everything but their values (the lines' indents and names,
# and what lies between them): a port's names are the same on every read.
_LAYOUTS: dict[tuple[str, ...], tuple[str, ...]] = {}
_LAYOUTS_LIMIT = 32


# The same layouts as whitespace-separated words, for a body whose every line is one word
# of name and one of value: the text between the values and the names, found by the count
# of words and three of the names (`_words_key`; hashing every name cost a tenth of the
# read). A body is that layout when it is this text with its own values (words of
# `-?[0-9]+`) put in: then the expression would split it into that layout and these values.
_WORDS: dict[tuple[int, str, str, str], tuple[list[str], tuple[str, ...]]] = {}
_INTEGERS = re.compile(r"-?[0-9]+(?: -?[0-9]+)*")


def _words_key(words: list[str]) -> tuple[int, str, str, str]:
    """Where `_WORDS` keeps the layout of these words, if they are names and values."""
    n = len(words)
    if n < 2:
        return (n, "", "", "")
    return (n, words[0], words[(n // 4) * 2], words[-2])


def _stats_words(body: str) -> Optional[dict[str, int]]:
    """The counters of a body in a layout `_stats_layout` kept, found by splitting it into
    words (one C call) instead of the expression (six times slower); None if it is not."""
    words = body.split()
    known = _WORDS.get(_words_key(words))
    if known is None:
        return None
    between, keys = known
    values = words[1::2]
    digits = "".join(values)
    if not digits.isascii() or not (digits.isdigit() or _INTEGERS.fullmatch(" ".join(values))):
        return None
    text = between.copy()
    text[1::2] = values
    if "".join(text) != body:
        return None
    return dict(zip(keys, map(int, values)))


def _keep_words(body: str, keys: tuple[str, ...]) -> None:
    """Keep the layout of a body `_stats_layout` kept for `_stats_words`, when every line
    of it is a name word and a value word."""
    words = body.split()
    if not words or len(words) != 2 * len(keys):
        return
    between: list[str] = []
    at = 0
    for m in _STAT_VALUE.finditer(body):
        between += [body[at : m.start(1)], ""]
        at = m.end(1)
    between.append(body[at:])
    if len(between) != len(words) + 1 or between[1::2] != [""] * len(keys):
        return
    values = [body[m.start(1) : m.end(1)] for m in _STAT_VALUE.finditer(body)]
    if values != words[1::2]:
        return
    if len(_WORDS) >= _LAYOUTS_LIMIT:
        _WORDS.clear()
    _WORDS[_words_key(words)] = (between, keys)


def _stats_layout(body: str) -> Optional[dict[str, int]]:
    """`_stats_plain(body)` of a body `_stats_words` did not know, taking the names from a
    text read before whose every part but the values is this one's (then each line is that
    text's line with another value, the value alone is parsed: half the time on a
    48-channel mlx5); else `_stats_plain` reads it and, when its counters are those of the
    split, its layout is kept."""
    parts = _STAT_VALUE.split(body)
    layout = tuple(parts[0::2])
    keys = _LAYOUTS.get(layout)
    if keys is not None:
        _keep_words(body, keys)  # (another layout of the same names was kept)
        return dict(zip(keys, map(int, parts[1::2])))
    plain = _stats_plain(body)
    if plain is None:
        return None
    keys = tuple(p.rpartition("\n")[2].lstrip(" \t") for p in parts[0:-1:2])
    if len(set(keys)) == len(keys) and dict(zip(keys, map(int, parts[1::2]))) == plain:
        if len(_LAYOUTS) >= _LAYOUTS_LIMIT:
            _LAYOUTS.clear()
        _LAYOUTS[layout] = keys
        _keep_words(body, keys)
    return plain


def parse_ethtool_S(text: str, source: str = "ethtool -S") -> dict[str, int]:
    head, nl, body = text.partition("\n")
    if nl and head.startswith("NIC statistics") and not any(c in text for c in _OTHER_BREAKS):
        # A kept layout came from a body without "Queue#": neither has this body then.
        plain = _stats_words(body)
        if plain is not None:
            return plain
        if "Queue#" not in body:
            plain = _stats_layout(body)
            if plain is not None:
                return plain
        found = _STAT_LINES.findall(body)
        blank = len(_BLANK_LINES.findall(body))
        if len(found) == body.count("\n") + 1 - blank:  # every other line is a counter
            values = [int(v) for _, _, v in found]
            if "Queue#" in body:  # vmxnet3's per-queue sections (qualify_sections)
                names = [(len(ws), name) for ws, name, _ in found]
                keys = qualify_sections(names) or [name for _, name in names]
            else:
                keys = [name for _, name, _ in found]
            return dict(zip(keys, values))
    return _parse_ethtool_S_lines(text, source)  # the exact error, or the odd line breaks


def _parse_ethtool_S_lines(text: str, source: str) -> dict[str, int]:
    lines = text.splitlines()
    if not lines or not lines[0].startswith("NIC statistics"):
        raise MalformedHostFile(source, "does not start with 'NIC statistics:'")
    names: list[tuple[int, str]] = []
    values: list[int] = []
    for line in lines[1:]:
        m = _STAT.match(line)
        if m:
            names.append((m.start(1), m.group(1)))
            values.append(int(m.group(2)))
        elif line.strip():
            raise MalformedHostFile(source, f"unexpected line {line!r}")
    keys = qualify_sections(names) or [name for _, name in names]
    return dict(zip(keys, values))


_VALUE_LINE = re.compile(r"^(\s*)([A-Za-z][A-Za-z ]*?)(:\s*)(\S+)(\s*)$", re.DOTALL)


class RecordedRss:
    """RSS hash fields, indirection table and key, and ntuple rules from recorded ethtool
    text: `ethtool_-x_DEV`, `ethtool_-n_DEV_rx-flow-hash_FLOW` and `ethtool_-n_DEV` (the
    rule listing). Setters rewrite the text as the kernel would change it (lbtune.host.net.rss
    formats it in ethtool 6.1's layout) and refuse as the kernel does, so a host tree
    behaves like a host under plan/apply/rollback."""

    fs: HostFS
    # a recording does not carry the rule table's size (ETHTOOL_GRXCLSRLCNT data); this is
    # mlx5's (MAX_NUM_OF_ETHTOOL_RULES), the location lbtune picks is its last free slot
    RULE_TABLE_SIZE = 1024
    # by driver where it differs: i40e reports its PF's Flow Director filters (guaranteed +
    # best effort, i40e_get_fd_cnt_all), 7424 on the XL710 PF of ntop/PF_RING#259, where
    # ethtool put two rules at 7423 and 7422
    RULE_TABLE_SIZES = {"i40e": 7424}

    def _text(self, flag: str, dev: str) -> tuple[Optional[str], str]:
        raise NotImplementedError

    def _rewrite_rss(self, name: str, text: str) -> None:
        self.fs.write_file(f"{RECORD_DIR}/ethtool_-{name}", text.encode())

    def tidy(self, dev: str) -> None:
        """Remove what a run killed inside one of the setters' writes left next to `dev`'s
        recordings (a rollback that finds the value already right writes nothing, and only a
        write clears them): called by the RSS knobs' restore."""
        names = [f"x_{dev}", f"n_{dev}", *(f"n_{dev}_rx-flow-hash_{f}" for f in rss.FLOW_TYPES)]
        for name in names:
            kpath = f"{RECORD_DIR}/ethtool_-{name}"
            if self.fs.exists(kpath):
                self.fs.remove_stale_temps(kpath)

    def rx_flow_hash(self, dev: str, flow_type: str) -> Optional[str]:
        if flow_type not in rss.FLOW_TYPES:
            return None
        text, src = self._text("n", f"{dev}_rx-flow-hash_{flow_type}")
        return None if text is None else rss.parse_rx_flow_hash(text, flow_type, src)

    def set_rx_flow_hash(self, dev: str, flow_type: str, fields: str) -> None:
        if self.rx_flow_hash(dev, flow_type) is None:
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        try:
            letters = rss.canonical_letters(fields)
        except ValueError:
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument") from None
        if not rss.hash_fields_fit(flow_type, letters):
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        self._rewrite_rss(
            f"n_{dev}_rx-flow-hash_{flow_type}", rss.format_rx_flow_hash(flow_type, letters)
        )

    def _rxfh_text(self, dev: str) -> tuple[Optional[str], str]:
        kpath = f"{RECORD_DIR}/ethtool_-x_{dev}"
        text = self.fs.read(kpath)
        # sosreport records a failing `ethtool -x` as its error ("Cannot get RX ring count")
        if text is not None and (not text.strip() or text.startswith("Cannot ")):
            text = None
        return text, self.fs.path(kpath)

    def rxfh(self, dev: str) -> Optional[Rxfh]:
        text, src = self._rxfh_text(dev)
        return None if text is None else rss.parse_ethtool_x(text, src)

    def set_rxfh(
        self,
        dev: str,
        indir: Optional[Sequence[int]] = None,
        key: Optional[bytes] = None,
        default: bool = False,
    ) -> None:
        cur = self.rxfh(dev)
        if cur is None or (not cur.indir and (indir is not None or default)):
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        new_indir = cur.indir
        if default:
            new_indir = rss.equal_table(len(cur.indir), cur.rings or 1)
        elif indir is not None:
            rings = cur.rings or 0
            if len(indir) != len(cur.indir) or any(not 0 <= q < rings for q in indir):
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
            new_indir = tuple(indir)
        new_key = cur.key
        if key is not None:
            if cur.key is None:
                raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
            if len(key) != len(cur.key):
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
            new_key = bytes(key)
        new = Rxfh(new_indir, new_key, cur.hfunc, cur.rings, cur.hfuncs)
        self._rewrite_rss(f"x_{dev}", rss.format_ethtool_x(dev, new))

    def _rxfh_follow_channels(self, dev: str, rings: int, write: bool) -> None:
        """A channel change as the kernel sees the table: refused (EINVAL) when the table
        points at a queue the new count removes and was set by hand (not the default
        spread), re-spread when it was the default; the ring count follows."""
        cur = self.rxfh(dev)
        if cur is None or cur.rings == rings:
            return
        table = cur.indir
        if table and cur.rings and table == rss.equal_table(len(table), cur.rings):
            table = rss.equal_table(len(table), rings)
        elif table and max(table) >= rings:
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        if write:
            new = Rxfh(table, cur.key, cur.hfunc, rings, cur.hfuncs)
            self._rewrite_rss(f"x_{dev}", rss.format_ethtool_x(dev, new))
            old_rings, rules, _ = self._rules(dev)
            if rules is not None and old_rings is not None:  # "N RX rings available"
                self._rewrite_rss(f"n_{dev}", rss.format_ethtool_n(rings, rules))

    def _rules(self, dev: str) -> tuple[Optional[int], Optional[tuple[NtupleRule, ...]], str]:
        text, src = self._text("n", dev)
        if text is None:
            return None, None, src
        try:
            rings, rules = rss.parse_ethtool_n(text, src)
        except rss.UnmodelledRule:
            return None, None, src  # as the live source: rules lbtune leaves alone
        return rings, rules, src

    def ntuple_rules(self, dev: str) -> Optional[tuple[NtupleRule, ...]]:
        return self._rules(dev)[1]

    def _driver(self, dev: str) -> Optional[str]:
        text, _ = self._text("i", dev)
        if text is None:
            return None
        for line in text.splitlines():
            k, sep, v = line.partition(":")
            if sep and k.strip() == "driver":
                return v.strip()
        return None

    def _table_size(self, dev: str) -> int:
        return self.RULE_TABLE_SIZES.get(self._driver(dev) or "", self.RULE_TABLE_SIZE)

    def ntuple_table_size(self, dev: str) -> Optional[int]:
        return None if self.ntuple_rules(dev) is None else self._table_size(dev)

    def add_ntuple_rule(self, dev: str, rule: NtupleRule) -> int:
        rings, rules, _ = self._rules(dev)
        if rules is None:
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        r = self.rxfh(dev)  # its ring count follows channel changes
        if r is not None and r.rings:
            rings = r.rings
        if rule.action >= (rings or 0) or rule.flow_type not in rss.RULE_FLOW_TYPES:
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        size = self._table_size(dev)
        loc = rule.location
        if loc < 0:
            free = rss.free_location(size, [r.location for r in rules])
            if free is None:
                raise EthtoolIoctlError(errno.ENOSPC, f"{dev}: No space left on device")
            loc = free
        if loc >= size:
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        driver = self._driver(dev)
        if driver in rss.ONE_INPUT_SET_DRIVERS:
            # i40e: the input set is checked against the other rules (the one being replaced
            # at this location still counts), then a rule matching the same is refused
            if rss.rule_refusal(driver, rules, rule.flow_type, rule.match) is not None:
                if any(w == "l4proto" for w, _ in rule.match):
                    raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
                raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
            if any(x.location != loc and (x.flow_type, x.match) == (rule.flow_type, rule.match)
                   for x in rules):  # fmt: skip
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        # at a taken location the new rule replaces the old, as mlx5, ixgbe and i40e do
        new = [r for r in rules if r.location != loc]
        new.append(NtupleRule(loc, rule.flow_type, rule.match, rule.action))
        self._rewrite_rss(f"n_{dev}", rss.format_ethtool_n(rings, new))
        return loc

    def delete_ntuple_rule(self, dev: str, location: int) -> None:
        rings, rules, _ = self._rules(dev)
        if rules is None:
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        if location not in {r.location for r in rules}:
            raise EthtoolIoctlError(errno.ENOENT, f"{dev}: No such file or directory")
        rest = [r for r in rules if r.location != location]
        self._rewrite_rss(f"n_{dev}", rss.format_ethtool_n(rings, rest))


class RecordedEthtool(_RecordedNicParams, RecordedRss):
    """ethtool output recorded under `<root>/sos_commands/networking/ethtool_-X_DEV`."""

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs

    def _text(self, flag: str, dev: str) -> tuple[Optional[str], str]:
        kpath = f"{RECORD_DIR}/ethtool_-{flag}_{dev}"
        text = self.fs.read(kpath)
        # sosreport records failures as the command's error text; treat as unsupported.
        # `ethtool -S` on a device without statistics (lo, bond, vlan) prints
        # "no stats available" instead.
        if text is not None and (
            "Operation not supported" in text
            or text.strip() == "no stats available"
            or not text.strip()
        ):
            text = None
        return text, self.fs.path(kpath)

    def driver_info(self, dev: str) -> Optional[DriverInfo]:
        text, src = self._text("i", dev)
        return None if text is None else parse_ethtool_i(text, src)

    def rings(self, dev: str) -> Optional[RingSizes]:
        text, src = self._text("g", dev)
        return None if text is None else parse_ethtool_g(text, src)

    def channels(self, dev: str) -> Optional[Channels]:
        text, src = self._text("l", dev)
        return None if text is None else parse_ethtool_l(text, src)

    def stats(self, dev: str) -> Optional[dict[str, int]]:
        text, src = self._text("S", dev)
        return None if text is None else parse_ethtool_S(text, src)

    # Setters rewrite the recorded output so that a host tree behaves like a host: the next
    # `rings()`/`channels()` reports the new value. Limits are the recorded maximums, and
    # errors are raised as the kernel would (EOPNOTSUPP, EINVAL), as EthtoolIoctlError.

    def set_rings(self, dev: str, rx: Optional[int] = None, tx: Optional[int] = None) -> None:
        self._set("g", dev, {"RX": rx, "TX": tx})

    def set_channels(
        self,
        dev: str,
        rx: Optional[int] = None,
        tx: Optional[int] = None,
        combined: Optional[int] = None,
        other: Optional[int] = None,
    ) -> None:
        wanted = {"RX": rx, "TX": tx, "Combined": combined, "Other": other}
        rings = self._rx_rings_after(dev, combined, rx)
        if rings is not None:
            self._rxfh_follow_channels(dev, rings, write=False)  # refuse before any write
        self._set("l", dev, wanted)
        if rings is not None:
            self._rxfh_follow_channels(dev, rings, write=True)

    def _rx_rings_after(
        self, dev: str, combined: Optional[int], rx: Optional[int]
    ) -> Optional[int]:
        """The receive ring count (GRXRINGS: combined + rx queues) after a channel change."""
        cur = self.channels(dev)
        if cur is None:
            return None
        c = combined if combined is not None else cur.combined or 0
        r = rx if rx is not None else cur.rx or 0
        return c + r or None

    def _set(self, flag: str, dev: str, wanted: dict[str, Optional[int]]) -> None:
        text, src = self._text(flag, dev)
        if text is None:
            raise EthtoolIoctlError(errno.EOPNOTSUPP, f"{dev}: Operation not supported")
        current = _parse_two_sections(text, src)
        for label, value in wanted.items():
            if value is None:
                continue
            key = _SECTION_KEYS[label]
            top = current.get(key + "_max")
            if value < 0 or (top is None and value != 0) or (top is not None and value > top):
                raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument")
        kpath = f"{RECORD_DIR}/ethtool_-{flag}_{dev}"
        raw = (self.fs.read_bytes(kpath) or b"").decode(errors="surrogateescape")
        out: list[str] = []
        section: Optional[str] = None
        for line in raw.splitlines(keepends=True):
            stripped = line.strip().lower()
            if stripped.startswith("pre-set maximums"):
                section = "max"
            elif stripped.startswith("current hardware settings"):
                section = "cur"
            elif section == "cur":
                m = _VALUE_LINE.match(line)
                if m and wanted.get(m.group(2)) is not None:
                    line = f"{m.group(1)}{m.group(2)}{m.group(3)}{wanted[m.group(2)]}{m.group(5)}"
            out.append(line)
        self.fs.write_file(kpath, "".join(out).encode(errors="surrogateescape"))


# ---------------------------------------------------------------- live (SIOCETHTOOL ioctl)
#
# The ioctl interface is what every kernel and driver supports (ethtool netlink came in 5.6 and
# forwards to the same driver ops), needs no library, and costs microseconds; pyroute2's
# package import alone costs ~130 ms, most of `lbtune show`.

_SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x03
ETHTOOL_GRINGPARAM = 0x10
ETHTOOL_SRINGPARAM = 0x11
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GCHANNELS = 0x3C
ETHTOOL_SCHANNELS = 0x3D
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
# erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
_DRVINFO = struct.Struct("=I32s32s32s32s32s12s5I")
# struct ethtool_ringparam: cmd, rx/rx_mini/rx_jumbo/tx max, rx/rx_mini/rx_jumbo/tx pending
_RING = struct.Struct("=9I")
# struct ethtool_channels: cmd, max rx/tx/other/combined, rx/tx/other/combined count
_CHANNELS = struct.Struct("=9I")


class EthtoolIoctlError(OSError):
    """The driver refused an ethtool request (EOPNOTSUPP, EINVAL, ENODEV...)."""


_shared = threading.local()  # .sock: the socket of a `one_socket()` block of this thread


@contextlib.contextmanager
def one_socket() -> Iterator[None]:
    """The requests this thread sends in the block share one socket (a sampler's reads of
    every NIC: a socket per request was most of a small request's cost). A socket's requests
    go to the namespace it was made in, so nothing in the block may change the thread's."""
    if getattr(_shared, "sock", None) is not None:
        yield  # nested: the outer block's socket
        return
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        _shared.sock = s
        try:
            yield
        finally:
            _shared.sock = None


def ethtool_ioctl(dev: str, payload: bytes) -> bytes:
    """Send one SIOCETHTOOL request for `dev` in this process's net namespace; return the reply."""
    name = dev.encode()
    if not name or len(name) >= 16 or b"/" in name:
        raise EthtoolIoctlError(22, f"{dev!r}: not an interface name")
    buf = ctypes.create_string_buffer(payload, len(payload))
    ifreq = struct.pack("16sP", name, ctypes.addressof(buf))
    shared: Optional[socket.socket] = getattr(_shared, "sock", None)
    s = shared if shared is not None else socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifreq)
    except OSError as e:
        raise EthtoolIoctlError(e.errno, f"{dev}: {e.strerror}") from None
    finally:
        if s is not shared:
            s.close()
    return buf.raw


def _text(b: bytes) -> str:
    return b.split(b"\0", 1)[0].decode(errors="replace")


def _opt(value: int, maximum: int) -> Optional[int]:
    """Drivers report 0 for a ring/channel kind they do not have."""
    return value if maximum else None


class LiveRss:
    """RSS and ntuple rules through SIOCETHTOOL (lbtune.host.net.rss has the structures)."""

    def rx_flow_hash(self, dev: str, flow_type: str) -> Optional[str]:
        if flow_type not in rss.FLOW_TYPES:
            return None
        return _or_none(lambda: rss.live_rx_flow_hash(ethtool_ioctl, dev, flow_type))

    def set_rx_flow_hash(self, dev: str, flow_type: str, fields: str) -> None:
        try:
            bits = rss.canonical_letters(fields)
        except ValueError:
            raise EthtoolIoctlError(errno.EINVAL, f"{dev}: Invalid argument") from None
        rss.live_set_rx_flow_hash(ethtool_ioctl, dev, flow_type, bits)

    def rxfh(self, dev: str) -> Optional[Rxfh]:
        return _or_none(lambda: rss.live_rxfh(ethtool_ioctl, dev))

    def set_rxfh(
        self,
        dev: str,
        indir: Optional[Sequence[int]] = None,
        key: Optional[bytes] = None,
        default: bool = False,
    ) -> None:
        rss.live_set_rxfh(ethtool_ioctl, dev, indir, key, default)

    def ntuple_rules(self, dev: str) -> Optional[tuple[NtupleRule, ...]]:
        return _or_none(lambda: rss.live_ntuple_rules(ethtool_ioctl, dev))

    def ntuple_table_size(self, dev: str) -> Optional[int]:
        return _or_none(lambda: rss.live_rule_table(ethtool_ioctl, dev)[1])

    def add_ntuple_rule(self, dev: str, rule: NtupleRule) -> int:
        return rss.live_add_ntuple_rule(ethtool_ioctl, dev, rule)

    def delete_ntuple_rule(self, dev: str, location: int) -> None:
        rss.live_delete_ntuple_rule(ethtool_ioctl, dev, location)


class LiveEthtool(_LiveNicParams, LiveRss):
    """The running kernel's ethtool interface, in the current network namespace."""

    def __init__(self) -> None:
        # Statistics names per (device, driver, bus, count): the monitor reads statistics
        # every second, and a 48-channel mlx5 port has about 2,000 names that only change
        # with the driver or its channel count (which changes the count).
        self._stat_names: dict[tuple[str, str, str, int], list[str]] = {}

    def close(self) -> None:
        """Nothing to release: every request uses its own short-lived socket."""

    def _drvinfo(self, dev: str) -> Optional[tuple[object, ...]]:
        try:
            raw = ethtool_ioctl(dev, _DRVINFO.pack(ETHTOOL_GDRVINFO, *([b""] * 6), 0, 0, 0, 0, 0))
        except EthtoolIoctlError:
            return None
        return _DRVINFO.unpack(raw[: _DRVINFO.size])

    def driver_info(self, dev: str) -> Optional[DriverInfo]:
        f = self._drvinfo(dev)
        if f is None:
            return None
        return DriverInfo(
            driver=_text(f[1]),  # type: ignore[arg-type]
            version=_text(f[2]),  # type: ignore[arg-type]
            firmware=_text(f[3]),  # type: ignore[arg-type]
            bus_info=_text(f[4]),  # type: ignore[arg-type]
        )

    def rings(self, dev: str) -> Optional[RingSizes]:
        try:
            raw = ethtool_ioctl(dev, _RING.pack(ETHTOOL_GRINGPARAM, *([0] * 8)))
        except EthtoolIoctlError:
            return None
        _, rx_max, mini_max, jumbo_max, tx_max, rx, mini, jumbo, tx = _RING.unpack(raw)
        return RingSizes(
            rx=_opt(rx, rx_max),
            tx=_opt(tx, tx_max),
            rx_max=rx_max or None,
            tx_max=tx_max or None,
            rx_mini=_opt(mini, mini_max),
            rx_mini_max=mini_max or None,
            rx_jumbo=_opt(jumbo, jumbo_max),
            rx_jumbo_max=jumbo_max or None,
        )

    def channels(self, dev: str) -> Optional[Channels]:
        try:
            raw = ethtool_ioctl(dev, _CHANNELS.pack(ETHTOOL_GCHANNELS, *([0] * 8)))
        except EthtoolIoctlError:
            return None
        _, mrx, mtx, mother, mcomb, rx, tx, other, comb = _CHANNELS.unpack(raw)
        return Channels(
            rx=_opt(rx, mrx),
            tx=_opt(tx, mtx),
            other=_opt(other, mother),
            combined=_opt(comb, mcomb),
            rx_max=mrx or None,
            tx_max=mtx or None,
            other_max=mother or None,
            combined_max=mcomb or None,
        )

    def stats(self, dev: str) -> Optional[dict[str, int]]:
        info = self._drvinfo(dev)
        if info is None:
            return None
        n = int(info[8])  # type: ignore[call-overload]
        if n == 0:
            return {}
        key = (dev, str(info[1]), str(info[4]), n)  # device, driver, bus, count
        try:
            names = self._stat_names.get(key)
            if names is None:
                names = self._stat_names[key] = self._stat_strings(dev, n)
            values_raw = ethtool_ioctl(dev, struct.pack("=II", ETHTOOL_GSTATS, n) + bytes(8 * n))
        except EthtoolIoctlError:
            return None
        values = struct.unpack(f"={n}Q", values_raw[8 : 8 + 8 * n])
        return dict(zip(names, values))

    @staticmethod
    def _stat_strings(dev: str, n: int) -> list[str]:
        names_raw = ethtool_ioctl(
            dev,
            struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n) + bytes(n * ETH_GSTRING_LEN),
        )
        raw = [
            _text(names_raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN])
            for i in range(n)
        ]
        # every other driver's names stay exactly as the driver gives them
        return qualify_sections([(len(r) - len(r.lstrip()), r.strip()) for r in raw]) or raw

    # Setters read the driver's current struct, change only the given fields and write it back
    # (read-modify-write), as `ethtool -G/-L` does. Errors are EthtoolIoctlError (an OSError
    # carrying the driver's errno).

    def set_rings(self, dev: str, rx: Optional[int] = None, tx: Optional[int] = None) -> None:
        raw = ethtool_ioctl(dev, _RING.pack(ETHTOOL_GRINGPARAM, *([0] * 8)))
        f = list(_RING.unpack(raw))
        # cmd, rx_max, mini_max, jumbo_max, tx_max, rx, mini, jumbo, tx
        if rx is not None:
            f[5] = rx
        if tx is not None:
            f[8] = tx
        f[0] = ETHTOOL_SRINGPARAM
        ethtool_ioctl(dev, _RING.pack(*f))

    def set_channels(
        self,
        dev: str,
        rx: Optional[int] = None,
        tx: Optional[int] = None,
        combined: Optional[int] = None,
        other: Optional[int] = None,
    ) -> None:
        raw = ethtool_ioctl(dev, _CHANNELS.pack(ETHTOOL_GCHANNELS, *([0] * 8)))
        f = list(_CHANNELS.unpack(raw))
        # cmd, max rx/tx/other/combined, rx/tx/other/combined count
        for i, v in ((5, rx), (6, tx), (7, other), (8, combined)):
            if v is not None:
                f[i] = v
        f[0] = ETHTOOL_SCHANNELS
        ethtool_ioctl(dev, _CHANNELS.pack(*f))


# ---------------------------------------------------------------- formatting (recordings)
#
# The inverse of the parse_ethtool_* functions: text in ethtool 6.1's layout, so that an lbtune
# capture records what LiveEthtool read the way sosreport records `ethtool` runs. Only what the
# values hold is printed (no `supports-*` lines, no `RX Buf Len`): nothing is made up.


def _na(value: Optional[int]) -> str:
    return "n/a" if value is None else str(value)


def format_ethtool_i(info: DriverInfo) -> str:
    """`ethtool -i` text for `info` (driver, version, firmware-version, bus-info)."""
    return (
        f"driver: {info.driver}\nversion: {info.version}\n"
        f"firmware-version: {info.firmware}\nbus-info: {info.bus_info}\n"
    )


def _two_sections(
    title: str, rows: list[tuple[str, str]], maxima: list[str], cur: list[str]
) -> str:
    out = [title] if title else []
    for heading, values in (("Pre-set maximums:", maxima), ("Current hardware settings:", cur)):
        out.append(heading)
        # ethtool pads the label with tabs to two tab stops: "RX:\t\t", "RX Mini:\t".
        out += [f"{label}:{tabs}{v}" for (label, tabs), v in zip(rows, values)]
    return "\n".join(out) + "\n"


def format_ethtool_g(r: RingSizes, dev: Optional[str] = None) -> str:
    """`ethtool -g` text for `r` (None values print as `n/a`); `dev` names it in the title."""
    rows = [("RX", "\t\t"), ("RX Mini", "\t"), ("RX Jumbo", "\t"), ("TX", "\t\t")]
    maxima = [_na(r.rx_max), _na(r.rx_mini_max), _na(r.rx_jumbo_max), _na(r.tx_max)]
    cur = [_na(r.rx), _na(r.rx_mini), _na(r.rx_jumbo), _na(r.tx)]
    return _two_sections(f"Ring parameters for {dev}:" if dev else "", rows, maxima, cur)


def format_ethtool_l(c: Channels, dev: Optional[str] = None) -> str:
    """`ethtool -l` text for `c` (None values print as `n/a`); `dev` names it in the title."""
    rows = [("RX", "\t\t"), ("TX", "\t\t"), ("Other", "\t\t"), ("Combined", "\t")]
    maxima = [_na(c.rx_max), _na(c.tx_max), _na(c.other_max), _na(c.combined_max)]
    cur = [_na(c.rx), _na(c.tx), _na(c.other), _na(c.combined)]
    return _two_sections(f"Channel parameters for {dev}:" if dev else "", rows, maxima, cur)


def format_ethtool_S(stats: Mapping[str, int]) -> str:
    """`ethtool -S` text for `stats`, in the given order."""
    return "NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in stats.items())
