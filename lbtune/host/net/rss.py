"""Receive-side scaling and flow steering as ethtool sees them: the hash fields per flow
type (`ethtool -n DEV rx-flow-hash udp4`), the indirection table and hash key (`ethtool
-x`), and ntuple flow rules (`ethtool -n DEV` / `-N DEV flow-type ...`). In the 6.1 kernel
these are SIOCETHTOOL only (ETHTOOL_GRXFH/SRXFH, GRSSH/SRSSH, GRXCLSRLALL/SRXCLSRLINS/
SRXCLSRLDEL). The sources (`host/net/ethtool.py`) return these; None means the driver does
not support it.

Three parts: the values and their text in ethtool 6.1's words (parse_* and format_*, used
by recordings and `lbtune capture`), the ioctl structures (`live_*`, called by LiveEthtool),
and the table arithmetic shared by the knobs (`equal_table`, `weight_table`, `table_text`).
"""

from __future__ import annotations

import errno
import ipaddress
import re
import struct
from dataclasses import dataclass, field
from typing import Callable, Optional, Protocol, Sequence

from lbtune.errors import MalformedHostFile

# ethtool's flow-type names for rx-flow-hash (include/uapi/linux/ethtool.h TCP_V4_FLOW...).
FLOW_TYPES: tuple[str, ...] = (
    "tcp4", "udp4", "sctp4", "ah4", "esp4", "tcp6", "udp6", "sctp6", "ah6", "esp6",
)  # fmt: skip
# ethtool's letters for the hash fields (RXH_L2DA m, RXH_VLAN v, RXH_L3_PROTO t, RXH_IP_SRC s,
# RXH_IP_DST d, RXH_L4_B_0_1 f, RXH_L4_B_2_3 n, RXH_DISCARD r), in ethtool's order.
HASH_LETTERS = "mvtsdfnr"


@dataclass(frozen=True)
class Rxfh:
    """The RSS indirection table (entry i -> receive queue), the hash key (None: the driver
    does not report one) and the hash function's name ("toeplitz", "xor", "crc32", "").

    `indir` is empty when the driver has no indirection table (virtio-net without the RSS
    feature); `rings` is the receive ring count the table may point at (ETHTOOL_GRXRINGS,
    None: not reported) and `hfuncs` the hash functions the kernel names for the device."""

    indir: tuple[int, ...]
    key: Optional[bytes] = None
    hfunc: str = ""
    rings: Optional[int] = None
    hfuncs: tuple[str, ...] = ()


@dataclass(frozen=True)
class NtupleRule:
    """One flow-steering rule: where it sits, the flow type, the match in `ethtool -N`'s
    words ((word, value) pairs such as ("dst-port", "179")), and the action: a queue index,
    or -1 to drop."""

    location: int
    flow_type: str
    match: tuple[tuple[str, str], ...]
    action: int


@dataclass(frozen=True)
class RssView:
    """A NIC's RSS as `show` prints it and `compare` compares it: the hash fields per flow
    type (ethtool letters, "" for none), the indirection table's size and its queue ->
    entries shares (the table as its shortest text in `table`), the ring count, hash function
    and key, and the flow rules (None: the driver has no rule table)."""

    hash_fields: dict[str, str]
    table_size: int
    shares: dict[int, int]
    table: str
    rings: Optional[int]
    hfunc: str
    key: Optional[str]
    rules: Optional[tuple[NtupleRule, ...]]


def read_rss(eth: RssSource, dev: str) -> Optional[RssView]:
    """The RSS view of `dev`, None when it has neither hash fields nor a table nor rules."""
    hashes = {f: h for f in CAPTURED_FLOWS if (h := eth.rx_flow_hash(dev, f)) is not None}
    r = eth.rxfh(dev)
    rules = eth.ntuple_rules(dev)
    if r is None and not hashes and rules is None:
        return None
    indir = r.indir if r is not None else ()
    return RssView(
        hash_fields=hashes,
        table_size=len(indir),
        shares=queue_shares(indir),
        table=table_text(indir),
        rings=None if r is None else r.rings,
        hfunc="" if r is None else r.hfunc,
        key=None if r is None or not r.key else r.key.hex(":"),
        rules=rules,
    )


class RssSource(Protocol):
    def rx_flow_hash(self, dev: str, flow_type: str) -> Optional[str]: ...
    def rxfh(self, dev: str) -> Optional[Rxfh]: ...
    def ntuple_rules(self, dev: str) -> Optional[tuple[NtupleRule, ...]]: ...


def shares_text(view: RssView) -> str:
    """The table compactly: `16 queues, 32 of 512 entries each` when it spreads evenly over
    queues 0..N-1 (within one entry), else runs of queue:entries, a queue RSS never feeds
    (below the highest one fed, or up to the ring count) shown with 0: `0-23:10-11 24:0`."""
    if not view.table_size:
        return "no table"
    top = max(max(view.shares) + 1, view.rings or 0)
    counts = [view.shares.get(q, 0) for q in range(top)]
    lo, hi = min(counts), max(counts)
    if lo and hi - lo <= 1:
        each = str(lo) if lo == hi else f"{lo}-{hi}"
        return f"{top} queues, {each} of {view.table_size} entries each"
    runs: list[str] = []
    start = 0
    for q in range(1, top + 1):
        if (
            q == top
            or (counts[q] == 0) != (counts[start] == 0)
            or abs(counts[q] - counts[start]) > 1
        ):
            part = counts[start:q]
            c = str(part[0]) if min(part) == max(part) else f"{min(part)}-{max(part)}"
            runs.append(f"{start}:{c}" if q - start == 1 else f"{start}-{q - 1}:{c}")
            start = q
    return f"queue:entries {' '.join(runs)} of {view.table_size}"


# ------------------------------------------------------------------ kernel numbers

RXH_BITS = {
    "m": 1 << 1,  # RXH_L2DA
    "v": 1 << 2,  # RXH_VLAN
    "t": 1 << 3,  # RXH_L3_PROTO
    "s": 1 << 4,  # RXH_IP_SRC
    "d": 1 << 5,  # RXH_IP_DST
    "f": 1 << 6,  # RXH_L4_B_0_1
    "n": 1 << 7,  # RXH_L4_B_2_3
    "r": 1 << 31,  # RXH_DISCARD
}
# flow types (include/uapi/linux/ethtool.h)
FLOW_IDS = {
    "tcp4": 0x01, "udp4": 0x02, "sctp4": 0x03, "ah4": 0x09, "esp4": 0x0A,
    "tcp6": 0x05, "udp6": 0x06, "sctp6": 0x07, "ah6": 0x0B, "esp6": 0x0C,
    "ip4": 0x0D, "ip6": 0x0E, "ether": 0x12,
}  # fmt: skip
_AH_ESP_V4_FLOW, _AH_ESP_V6_FLOW = 0x04, 0x08
FLOW_EXT, FLOW_MAC_EXT, FLOW_RSS = 0x80000000, 0x40000000, 0x20000000
RX_CLS_FLOW_DISC = 0xFFFFFFFFFFFFFFFF
RX_CLS_LOC_SPECIAL = 0x80000000
RULE_FLOW_TYPES = ("tcp4", "udp4", "sctp4", "ip4", "tcp6", "udp6", "sctp6", "ip6")


def letters_of(bits: int) -> str:
    """RXH_* bits -> ethtool letters in ethtool's order ("" for none)."""
    return "".join(c for c in HASH_LETTERS if bits & RXH_BITS[c])


def bits_of(letters: str) -> int:
    """ethtool letters -> RXH_* bits; ValueError for a letter ethtool does not know."""
    bits = 0
    for c in letters:
        if c not in RXH_BITS:
            raise ValueError(f"{c!r} is not a hash field letter ({HASH_LETTERS})")
        bits |= RXH_BITS[c]
    return bits


def canonical_letters(letters: str) -> str:
    """`nfds` -> `sdfn`: the letters in ethtool's order, each once."""
    return letters_of(bits_of(letters))


# the flow types `lbtune capture` records and `show` prints (the ones profiles set)
CAPTURED_FLOWS = ("tcp4", "udp4", "tcp6", "udp6")
PORT_FLOWS = ("tcp4", "udp4", "sctp4", "tcp6", "udp6", "sctp6")


def hash_fields_fit(flow_type: str, letters: str) -> bool:
    """Whether a flow type can take these hash fields at all: at least one field; the port
    bytes (f, n) only where the flow has ports; discard (r) alone. The driver may take
    less (ixgbe hashes TCP on all four or refuses); it says so when written."""
    if not letters or flow_type not in FLOW_TYPES:
        return False
    if "r" in letters:
        return letters == "r"
    return flow_type in PORT_FLOWS or not set(letters) & set("fn")


# ------------------------------------------------------------------ rx-flow-hash text
#
# ethtool 6.1 dump_rxfhash(): "<flows> use these fields for computing Hash flow key:" then
# one line per field (unparse_rxfhashopts), "None" for none; RXH_DISCARD prints
# "<flows> - All matching flows discarded on RX".

_FLOW_TITLES = {
    "tcp4": "TCP over IPV4 flows", "udp4": "UDP over IPV4 flows",
    "sctp4": "SCTP over IPV4 flows", "ah4": "IPSEC AH/ESP over IPV4 flows",
    "esp4": "IPSEC AH/ESP over IPV4 flows", "tcp6": "TCP over IPV6 flows",
    "udp6": "UDP over IPV6 flows", "sctp6": "SCTP over IPV6 flows",
    "ah6": "IPSEC AH/ESP over IPV6 flows", "esp6": "IPSEC AH/ESP over IPV6 flows",
}  # fmt: skip
_FIELD_LINES = {
    "m": "L2DA",
    "v": "VLAN tag",
    "t": "L3 proto",
    "s": "IP SA",
    "d": "IP DA",
    "f": "L4 bytes 0 & 1 [TCP/UDP src port]",
    "n": "L4 bytes 2 & 3 [TCP/UDP dst port]",
}
_LETTER_OF_LINE = {v: k for k, v in _FIELD_LINES.items()}
_HASH_HEAD = " use these fields for computing Hash flow key:"
_DISCARD = " - All matching flows discarded on RX"


def format_rx_flow_hash(flow_type: str, letters: str) -> str:
    """`ethtool -n DEV rx-flow-hash FLOW` text for the hash fields `letters`."""
    title = _FLOW_TITLES[flow_type]
    if "r" in letters:
        return f"{title}{_DISCARD}\n"
    fields = "".join(f"{_FIELD_LINES[c]}\n" for c in canonical_letters(letters))
    return f"{title}{_HASH_HEAD}\n{fields or 'None'}\n"


def parse_rx_flow_hash(text: str, flow_type: str, source: str = "ethtool -n") -> str:
    """The hash fields (ethtool letters, ethtool's order) of `ethtool -n DEV rx-flow-hash
    FLOW` output; MalformedHostFile for anything else, or for another flow type's title."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise MalformedHostFile(source, "empty")
    head = lines[0]
    title = _FLOW_TITLES.get(flow_type)
    if title is None:
        raise MalformedHostFile(source, f"{flow_type!r} is not a flow type")
    if head == title + _DISCARD and len(lines) == 1:
        return "r"
    if head != title + _HASH_HEAD:
        raise MalformedHostFile(source, f"expected {title + _HASH_HEAD!r}, got {head[:80]!r}")
    body = [ln.strip() for ln in lines[1:]]
    if body == ["None"]:
        return ""
    bits = 0
    for ln in body:
        letter = _LETTER_OF_LINE.get(ln)
        if letter is None:
            raise MalformedHostFile(source, f"unknown hash field {ln[:80]!r}")
        bits |= RXH_BITS[letter]
    if not bits:
        raise MalformedHostFile(source, "no hash field lines")
    return letters_of(bits)


# ------------------------------------------------------------------ ethtool -x text
#
# ethtool 6.1 do_grxfh(): "RX flow hash indirection table for DEV with N RX ring(s):", the
# table 8 entries a row ("%5u: " then " %5u" each), or "Operation not supported"; "RSS hash
# key:" then the key as colon-separated hex or "Operation not supported"; "RSS hash
# function:" then "    NAME: on|off" per function the kernel names (ETH_SS_RSS_HASH_FUNCS),
# or "    Operation not supported".

_X_HEAD = re.compile(r"RX flow hash indirection table for (\S+) with (\d+) RX ring\(s\):")
_X_ROW = re.compile(r"\s*(\d+):((?:\s+\d+)+)")
_HFUNC = re.compile(r"\s+([a-z0-9_-]+):\s+(on|off)")
_NOT_SUPPORTED = "Operation not supported"
MAX_TABLE = 1 << 16  # sanity bound on a recorded table (real ones: 64 .. 2048 entries)


def parse_ethtool_x(text: str, source: str = "ethtool -x") -> Rxfh:
    """`ethtool -x DEV` output -> Rxfh (an empty `indir` when the table is not supported)."""
    lines = text.splitlines()
    if not lines:
        raise MalformedHostFile(source, "empty")
    m = _X_HEAD.fullmatch(lines[0].strip())
    if m is None:
        raise MalformedHostFile(source, f"unexpected first line {lines[0][:80]!r}")
    rings = int(m.group(2))
    indir: list[int] = []
    key: Optional[bytes] = None
    hfunc, hfuncs = "", []
    section = "indir"
    for line in lines[1:]:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped == "RSS hash key:":
            section = "key"
            continue
        if stripped == "RSS hash function:":
            section = "hfunc"
            continue
        if stripped == _NOT_SUPPORTED:
            if section == "indir" and indir:
                raise MalformedHostFile(source, "table rows and 'Operation not supported'")
            continue
        if section == "indir":
            r = _X_ROW.fullmatch(line)
            if r is None:
                raise MalformedHostFile(source, f"unexpected table row {line[:80]!r}")
            if int(r.group(1)) != len(indir):
                raise MalformedHostFile(source, f"row {r.group(1)} after {len(indir)} entries")
            indir += [int(v) for v in r.group(2).split()]
            if len(indir) > MAX_TABLE:
                raise MalformedHostFile(source, f"more than {MAX_TABLE} table entries")
        elif section == "key":
            if key is not None:
                raise MalformedHostFile(source, "two hash keys")
            try:
                key = bytes(int(b, 16) for b in stripped.split(":"))
            except ValueError:
                raise MalformedHostFile(source, f"hash key {stripped[:80]!r}") from None
            if not all(len(b) == 2 for b in stripped.split(":")):
                raise MalformedHostFile(source, f"hash key {stripped[:80]!r}")
        else:
            h = _HFUNC.fullmatch(line)
            if h is None:
                raise MalformedHostFile(source, f"unexpected hash function line {line[:80]!r}")
            hfuncs.append(h.group(1))
            if h.group(2) == "on":
                hfunc = h.group(1)
    return Rxfh(tuple(indir), key, hfunc, rings, tuple(hfuncs))


def format_ethtool_x(dev: str, r: Rxfh) -> str:
    """`ethtool -x DEV` text for `r`, in ethtool 6.1's layout."""
    out = [f"RX flow hash indirection table for {dev} with {r.rings or 0} RX ring(s):\n"]
    if not r.indir:
        out.append(f"{_NOT_SUPPORTED}\n")
    for i in range(0, len(r.indir), 8):
        out.append(f"{i:5d}: " + "".join(f" {q:5d}" for q in r.indir[i : i + 8]) + "\n")
    out.append("RSS hash key:\n")
    out.append(f"{_NOT_SUPPORTED}\n" if not r.key else ":".join(f"{b:02x}" for b in r.key) + "\n")
    out.append("RSS hash function:\n")
    if not r.hfuncs:
        out.append(f"    {_NOT_SUPPORTED}\n")
    out += [f"    {h}: {'on' if h == r.hfunc else 'off'}\n" for h in r.hfuncs]
    return "".join(out)


# ------------------------------------------------------------------ ethtool -n (rules) text
#
# ethtool 6.1 do_grxclass(): "N RX rings available", then rxclass_print_all_rules(): "Total
# N rules", a blank line, and per rule rxclass_print_nfc_rule(): "Filter: LOC", tab-indented
# fields with masks printed inverted (a mask of 0 = the field is matched exactly), "Action:
# Direct to queue Q" or "Action: Drop", a blank line. A driver without rules prints
# "rxclass: Cannot get RX class rule count: Operation not supported".

_RULE_TITLES = {
    "tcp4": "TCP over IPv4", "udp4": "UDP over IPv4", "sctp4": "SCTP over IPv4",
    "ip4": "Raw IPv4", "tcp6": "TCP over IPv6", "udp6": "UDP over IPv6",
    "sctp6": "SCTP over IPv6", "ip6": "Raw IPv6",
}  # fmt: skip
_FLOW_OF_TITLE = {v: k for k, v in _RULE_TITLES.items()}
# match words in the order ethtool prints them, with the label and the width of the field
_V4_FIELDS = (("src-ip", "Src IP addr", 32), ("dst-ip", "Dest IP addr", 32), ("tos", "TOS", 8))
_V6_FIELDS = (
    ("src-ip", "Src IP addr", 128),
    ("dst-ip", "Dest IP addr", 128),
    ("tclass", "Traffic Class", 8),
)
_PORT_FIELDS = (("src-port", "Src port", 16), ("dst-port", "Dest port", 16))
_USER_FIELDS = (("l4proto", "Protocol", 8), ("l4data", "L4 bytes", 32))
MATCH_WORDS = ("src-ip", "dst-ip", "tos", "tclass", "l4proto", "src-port", "dst-port", "l4data")


def rule_fields(flow_type: str) -> tuple[tuple[str, str, int], ...]:
    """The (word, label, bits) a rule of `flow_type` matches on, in ethtool's print order."""
    v6 = flow_type.endswith("6")
    base = _V6_FIELDS if v6 else _V4_FIELDS
    if flow_type in ("ip4", "ip6"):
        return base + _USER_FIELDS
    return base + _PORT_FIELDS


def _field_text(word: str, bits: int, value: int) -> str:
    if word in ("src-ip", "dst-ip"):
        return str(ipaddress.ip_address(value) if bits == 32 else ipaddress.IPv6Address(value))
    if word in ("tos", "tclass", "l4data"):
        return f"0x{value:x}"
    return str(value)


def _field_value(word: str, bits: int, text: str) -> int:
    """A match value in ethtool's words -> integer; ValueError when it is not one."""
    if word in ("src-ip", "dst-ip"):
        addr = ipaddress.ip_address(text)
        if addr.max_prefixlen != bits:
            raise ValueError(f"{text} is not an IPv{4 if bits == 32 else 6} address")
        return int(addr)
    n = int(text, 0)
    if not 0 <= n < (1 << bits):
        raise ValueError(f"{text} is out of range")
    return n


def match_value(word: str, bits: int, text: str) -> tuple[int, int]:
    """`179` or `10.0.0.0 m 0.0.0.255` (ethtool's mask: set bits ignored) -> (value, care
    mask as the kernel keeps it: set bits compared)."""
    value, sep, mask = text.partition(" m ")
    full = (1 << bits) - 1
    v = _field_value(word, bits, value.strip())
    care = full if not sep else full & ~_field_value(word, bits, mask.strip())
    return v & care, care


def match_text(word: str, bits: int, value: int, care: int) -> str:
    full = (1 << bits) - 1
    text = _field_text(word, bits, value)
    return text if care == full else f"{text} m {_field_text(word, bits, full & ~care)}"


_RULES_HEAD = re.compile(r"(\d+) RX rings available")
_TOTAL = re.compile(r"Total (\d+) rules")
_FILTER = re.compile(r"Filter: (\d+)")
_FIELD_LINE = re.compile(r"(.+?): (\S+) mask: (\S+)")
_ACTION_Q = re.compile(r"Action: Direct to queue (\d+)")


class UnmodelledRule(MalformedHostFile):
    """A well-formed rule of a kind lbtune does not model (Ethernet, VLAN or user-def
    extensions, RSS contexts, VF actions): the sources then report no rule table (None), so
    lbtune plans no rule on that NIC and never touches its rules."""


@dataclass
class _PartialRule:
    loc: int
    flow: Optional[str] = None
    action: Optional[int] = None
    match: list[tuple[str, str]] = field(default_factory=list)


def parse_ethtool_n(
    text: str, source: str = "ethtool -n"
) -> tuple[Optional[int], tuple[NtupleRule, ...]]:
    """`ethtool -n DEV` output -> (RX ring count or None, the rules). Rules of a kind lbtune
    does not model (Ethernet, VF actions, RSS contexts, user-def) are MalformedHostFile:
    lbtune must never guess at a rule it would have to leave alone."""
    rings: Optional[int] = None
    total: Optional[int] = None
    rules: list[NtupleRule] = []
    cur: Optional[_PartialRule] = None

    def finish() -> None:
        nonlocal cur
        if cur is None:
            return
        if cur.flow is None or cur.action is None:
            raise MalformedHostFile(source, f"rule {cur.loc}: no rule type or action")
        rules.append(NtupleRule(cur.loc, cur.flow, tuple(cur.match), cur.action))
        cur = None

    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        if (m := _RULES_HEAD.fullmatch(s)) is not None:
            rings = int(m.group(1))
        elif (m := _TOTAL.fullmatch(s)) is not None:
            total = int(m.group(1))
        elif (m := _FILTER.fullmatch(s)) is not None:
            finish()
            cur = _PartialRule(int(m.group(1)))
        elif cur is None:
            raise MalformedHostFile(source, f"unexpected line {s[:80]!r}")
        elif s.startswith("Rule Type: "):
            cur.flow = _FLOW_OF_TITLE.get(s[len("Rule Type: ") :])
            if cur.flow is None:
                raise UnmodelledRule(source, f"rule {cur.loc}: unsupported {s[:60]!r}")
        elif s == "Action: Drop":
            cur.action = -1
        elif (m := _ACTION_Q.fullmatch(s)) is not None:
            cur.action = int(m.group(1))
        elif (m := _FIELD_LINE.fullmatch(s)) is not None and cur.flow is not None:
            spec = {label: (word, bits) for word, label, bits in rule_fields(cur.flow)}
            if m.group(1) not in spec:
                raise UnmodelledRule(source, f"rule {cur.loc}: unexpected {s[:60]!r}")
            word, bits = spec[m.group(1)]
            try:
                value = _field_value(word, bits, m.group(2))
                ignore = _field_value(word, bits, m.group(3))
            except ValueError as e:
                raise MalformedHostFile(source, f"rule {cur.loc}: {s[:60]!r}: {e}") from None
            care = ((1 << bits) - 1) & ~ignore
            if care:
                cur.match.append((word, match_text(word, bits, value & care, care)))
        else:
            raise UnmodelledRule(source, f"rule {cur.loc}: unexpected {s[:60]!r}")
    finish()
    if total is None:
        raise MalformedHostFile(source, "no 'Total N rules' line")
    if total != len(rules):
        raise MalformedHostFile(source, f"'Total {total} rules' but {len(rules)} listed")
    if len({r.location for r in rules}) != len(rules):
        raise MalformedHostFile(source, "two rules at one location")
    return rings, tuple(rules)


def format_ethtool_n(rings: Optional[int], rules: Optional[Sequence[NtupleRule]]) -> str:
    """`ethtool -n DEV` text; `rules` None: the driver has no rule table."""
    out = [] if rings is None else [f"{rings} RX rings available\n"]
    if rules is None:
        out.append("rxclass: Cannot get RX class rule count: Operation not supported\n")
        out.append("RX classification rule retrieval failed\n")
        return "".join(out)
    out.append(f"Total {len(rules)} rules\n\n")
    for r in sorted(rules, key=lambda r: r.location):
        out.append(f"Filter: {r.location}\n\tRule Type: {_RULE_TITLES[r.flow_type]}\n")
        given = dict(r.match)
        for word, label, bits in rule_fields(r.flow_type):
            value, care = match_value(word, bits, given[word]) if word in given else (0, 0)
            ignore = ((1 << bits) - 1) & ~care
            if word in ("src-ip", "dst-ip"):
                out.append(f"\t{label}: {_field_text(word, bits, value)} mask: "
                           f"{_field_text(word, bits, ignore)}\n")  # fmt: skip
            elif word in ("src-port", "dst-port", "l4proto"):
                out.append(f"\t{label}: {value} mask: 0x{ignore:x}\n")
            else:
                out.append(f"\t{label}: 0x{value:x} mask: 0x{ignore:x}\n")
        action = "Drop" if r.action < 0 else f"Direct to queue {r.action}"
        out.append(f"\tAction: {action}\n\n")
    return "".join(out)


# ------------------------------------------------------------------ rule text (`ethtool -N` words)


def rule_text(flow_type: str, match: Sequence[tuple[str, str]], action: int) -> str:
    """`flow-type tcp4 dst-port 179 action 1`: the words of `ethtool -N DEV`, fields in
    ethtool's order; action -1 is drop."""
    given = dict(match)
    words = [f"flow-type {flow_type}"]
    words += [f"{w} {given[w]}" for w, _, _ in rule_fields(flow_type) if w in given]
    words.append(f"action {action}")
    return " ".join(words)


def parse_rule_text(text: str) -> tuple[str, tuple[tuple[str, str], ...], int]:
    """The inverse of rule_text, canonical (ethtool's field order, normalized values);
    ValueError naming what is wrong."""
    toks = text.split()
    if len(toks) < 4 or toks[0] != "flow-type":
        raise ValueError(f"{text!r}: expected 'flow-type TYPE [FIELD VALUE]... action Q'")
    flow = toks[1]
    if flow not in RULE_FLOW_TYPES:
        raise ValueError(f"flow-type {flow!r}: one of {', '.join(RULE_FLOW_TYPES)}")
    spec = {w: bits for w, _, bits in rule_fields(flow)}
    i, given, action = 2, {}, None
    while i < len(toks):
        word = toks[i]
        if i + 1 >= len(toks):
            raise ValueError(f"{word!r} without a value")
        value = toks[i + 1]
        i += 2
        if word == "action":
            try:
                action = int(value)
            except ValueError:
                raise ValueError(f"action {value!r}: a queue index or -1 (drop)") from None
            if action < -1 or action > 0xFFFFFFFF:
                raise ValueError(f"action {value!r}: a queue index or -1 (drop)")
            continue
        if word not in spec:
            raise ValueError(f"{word!r}: not a field of {flow} ({', '.join(spec)})")
        if word in given:
            raise ValueError(f"{word!r} given twice")
        if i + 1 < len(toks) and toks[i] == "m":
            value = f"{value} m {toks[i + 1]}"
            i += 2
        v, care = match_value(word, spec[word], value)
        if not care:
            continue  # a fully ignored field matches everything: not a match
        given[word] = match_text(word, spec[word], v, care)
    if action is None:
        raise ValueError(f"{text!r}: no action")
    if not given:
        raise ValueError(f"{text!r}: matches every {flow} packet; name at least one field")
    match = tuple((w, given[w]) for w, _, _ in rule_fields(flow) if w in given)
    return flow, match, action


# ------------------------------------------------------------------ table arithmetic


def equal_table(size: int, n: int) -> tuple[int, ...]:
    """`ethtool -X DEV equal N` (and the kernel's default, ethtool_rxfh_indir_default)."""
    return tuple(i % n for i in range(size))


def weight_table(size: int, weights: Sequence[int]) -> tuple[int, ...]:
    """`ethtool -X DEV weight W0 W1 ...`, computed as ethtool 6.1 fill_indir_table()."""
    total = sum(weights)
    if total <= 0:
        raise ValueError("weights sum to 0")
    out, j, partial = [], -1, 0
    for i in range(size):
        while i >= size * partial // total:
            j += 1
            partial += weights[j]
        out.append(j)
    return tuple(out)


def table_text(indir: Sequence[int]) -> str:
    """The shortest of `equal N`, `weight W0 W1 ...` and `table Q0 Q1 ...` that gives
    exactly `indir` for its size: the knob's value text."""
    size = len(indir)
    if not size:
        return "none"
    top = max(indir) + 1
    if tuple(indir) == equal_table(size, top):
        return f"equal {top}"
    counts = [indir.count(q) for q in range(top)]
    if sorted(indir) == list(indir):
        least = min(c for c in counts if c)
        for w in ([round(c / least) for c in counts], _reduce(counts)):
            if weight_table(size, w) == tuple(indir):
                return "weight " + " ".join(map(str, w))
    return "table " + " ".join(map(str, indir))


def _reduce(weights: Sequence[int]) -> list[int]:
    from math import gcd

    g = 0
    for w in weights:
        g = gcd(g, w)
    return [w // g for w in weights] if g > 1 else list(weights)


def table_of(text: str, size: int) -> tuple[int, ...]:
    """`equal N` / `weight W...` / `table Q...` -> the table of `size` entries; ValueError."""
    toks = text.split()
    if not toks:
        raise ValueError("empty")
    head, nums = toks[0], toks[1:]
    try:
        values = [int(t) for t in nums]
    except ValueError:
        raise ValueError(f"{text!r}: numbers expected after {head!r}") from None
    if any(v < 0 for v in values):
        raise ValueError(f"{text!r}: negative")
    if head == "equal" and len(values) == 1 and values[0] >= 1:
        return equal_table(size, values[0])
    if head == "weight" and values and sum(values) > 0:
        return weight_table(size, values)
    if head == "table" and len(values) == size:
        return tuple(values)
    if head == "table":
        raise ValueError(f"{text!r}: {len(values)} entries for a table of {size}")
    raise ValueError(f"{text!r}: expected 'equal N', 'weight W0 W1 ...' or 'table Q0 Q1 ...'")


def queue_shares(indir: Sequence[int]) -> dict[int, int]:
    """Queue -> how many table entries point at it (the compact form `show` prints)."""
    out: dict[int, int] = {}
    for q in indir:
        out[q] = out.get(q, 0) + 1
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ SIOCETHTOOL structures

ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GRXFH = 0x29
ETHTOOL_SRXFH = 0x2A
ETHTOOL_GRXRINGS = 0x2D
ETHTOOL_GRXCLSRLCNT = 0x2E
ETHTOOL_GRXCLSRULE = 0x2F
ETHTOOL_GRXCLSRLALL = 0x30
ETHTOOL_SRXCLSRLDEL = 0x31
ETHTOOL_SRXCLSRLINS = 0x32
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GRSSH = 0x46
ETHTOOL_SRSSH = 0x47
ETH_SS_RSS_HASH_FUNCS = 5
ETH_RXFH_INDIR_NO_CHANGE = 0xFFFFFFFF

# struct ethtool_rx_flow_spec: flow_type, h_u (union, 52 bytes), h_ext (20), m_u (52), m_ext
# (20), 4 bytes padding, ring_cookie (u64), location, 4 bytes padding: 168 bytes.
_FLOW_SPEC = struct.Struct("=I52s20s52s20s4xQI4x")
# struct ethtool_rxnfc: cmd, flow_type, data (u64), fs, rule_cnt (then rule_locs[]): 188
# bytes up to rule_locs (offsetof), 192 with the tail padding.
_RXNFC_HEAD = struct.Struct("=IIQ")
RXNFC_SIZE = _RXNFC_HEAD.size + _FLOW_SPEC.size + 4  # 188 = offsetof(rule_locs)
# struct ethtool_rxfh: cmd, rss_context, indir_size, key_size, hfunc (u8), rsvd8[3], rsvd32,
# then rss_config[]: indir_size u32 entries and key_size bytes.
_RXFH = struct.Struct("=IIIIB3xI")

Ioctl = Callable[[str, bytes], bytes]


def _rxnfc(
    cmd: int, flow_type: int = 0, data: int = 0, spec: bytes = b"", rule_cnt: int = 0
) -> bytes:
    spec = spec or bytes(_FLOW_SPEC.size)
    return _RXNFC_HEAD.pack(cmd, flow_type, data) + spec + struct.pack("=I", rule_cnt) + bytes(4)


def _rxnfc_reply(raw: bytes) -> tuple[int, int, bytes, int]:
    _, flow, data = _RXNFC_HEAD.unpack_from(raw, 0)
    spec = raw[_RXNFC_HEAD.size : _RXNFC_HEAD.size + _FLOW_SPEC.size]
    (cnt,) = struct.unpack_from("=I", raw, _RXNFC_HEAD.size + _FLOW_SPEC.size)
    return flow, data, spec, cnt


def live_rx_flow_hash(ioctl: Ioctl, dev: str, flow_type: str) -> str:
    raw = ioctl(dev, _rxnfc(ETHTOOL_GRXFH, FLOW_IDS[flow_type]))
    return letters_of(_rxnfc_reply(raw)[1])


def live_set_rx_flow_hash(ioctl: Ioctl, dev: str, flow_type: str, letters: str) -> None:
    ioctl(dev, _rxnfc(ETHTOOL_SRXFH, FLOW_IDS[flow_type], bits_of(letters)))


def live_rx_rings(ioctl: Ioctl, dev: str) -> int:
    return int(_rxnfc_reply(ioctl(dev, _rxnfc(ETHTOOL_GRXRINGS)))[1])


def live_hfunc_names(ioctl: Ioctl, dev: str) -> list[str]:
    """ETH_SS_RSS_HASH_FUNCS: bit i of ethtool_rxfh.hfunc is the i-th name."""
    # struct ethtool_sset_info: cmd, reserved, sset_mask (u64), then one u32 per set bit
    raw = ioctl(dev, struct.pack("=IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_RSS_HASH_FUNCS, 0))
    _, _, mask, n = struct.unpack("=IIQI", raw[:20])
    if not mask & (1 << ETH_SS_RSS_HASH_FUNCS) or not 0 < n <= 64:
        return []
    names = ioctl(
        dev, struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_RSS_HASH_FUNCS, n) + bytes(32 * n)
    )
    return [
        names[12 + 32 * i : 12 + 32 * (i + 1)].split(b"\0", 1)[0].decode(errors="replace")
        for i in range(n)
    ]


def live_rxfh(ioctl: Ioctl, dev: str) -> Rxfh:
    """ETHTOOL_GRSSH twice (sizes, then the table and key) and GRXRINGS; OSError from the
    driver (EOPNOTSUPP: no RSS configuration at all)."""
    raw = ioctl(dev, _RXFH.pack(ETHTOOL_GRSSH, 0, 0, 0, 0, 0))
    _, _, isize, ksize, _, _ = _RXFH.unpack_from(raw, 0)
    if isize > MAX_TABLE or ksize > 1024:
        raise OSError(errno.EINVAL, f"{dev}: implausible RSS sizes {isize}/{ksize}")
    raw = ioctl(dev, _RXFH.pack(ETHTOOL_GRSSH, 0, isize, ksize, 0, 0) + bytes(4 * isize + ksize))
    _, _, isize2, ksize2, hbits, _ = _RXFH.unpack_from(raw, 0)
    if (isize2, ksize2) != (isize, ksize):
        raise OSError(errno.EAGAIN, f"{dev}: RSS sizes changed while reading")
    off = _RXFH.size
    indir = struct.unpack_from(f"={isize}I", raw, off) if isize else ()
    key = raw[off + 4 * isize : off + 4 * isize + ksize] if ksize else None
    try:
        names = live_hfunc_names(ioctl, dev)
    except OSError:
        names = []
    hfunc = next((n for i, n in enumerate(names) if hbits & (1 << i)), "")
    try:
        rings: Optional[int] = live_rx_rings(ioctl, dev)
    except OSError:
        rings = None
    return Rxfh(tuple(indir), key, hfunc, rings, tuple(names))


def live_set_rxfh(
    ioctl: Ioctl,
    dev: str,
    indir: Optional[Sequence[int]],
    key: Optional[bytes],
    default: bool = False,
) -> None:
    """ETHTOOL_SRSSH: a new table (`indir`), key, or both; `default` resets the table to the
    driver's default (indir_size 0), which also lets `ethtool -L` change the queue count
    freely again (the kernel's IFF_RXFH_CONFIGURED is cleared)."""
    if default:
        isize, table = 0, b""
    elif indir is None:
        isize, table = ETH_RXFH_INDIR_NO_CHANGE, b""
    else:
        isize, table = len(indir), struct.pack(f"={len(indir)}I", *indir)
    kbytes = key or b""
    ioctl(dev, _RXFH.pack(ETHTOOL_SRSSH, 0, isize, len(kbytes), 0, 0) + table + kbytes)


def _layout(flow_type: str) -> dict[str, tuple[int, int]]:
    """Offset and size of each match field in the 52-byte flow union: v4 ip4src 0, ip4dst 4,
    then psrc 8/pdst 10/tos 12 (ethtool_tcpip4_spec) or l4_4_bytes 8, tos 12, ip_ver 13,
    proto 14 (ethtool_usrip4_spec); v6 ip6src 0, ip6dst 16, then psrc 32/pdst 34/tclass 36
    (ethtool_tcpip6_spec) or l4_4_bytes 32, tclass 36, l4_proto 37 (ethtool_usrip6_spec)."""
    user = flow_type in ("ip4", "ip6")
    if flow_type.endswith("6"):
        out = {"src-ip": (0, 16), "dst-ip": (16, 16), "tclass": (36, 1)}
        out.update(
            {"l4data": (32, 4), "l4proto": (37, 1)}
            if user
            else {"src-port": (32, 2), "dst-port": (34, 2)}
        )
    else:
        out = {"src-ip": (0, 4), "dst-ip": (4, 4), "tos": (12, 1)}
        out.update(
            {"l4data": (8, 4), "l4proto": (14, 1)}
            if user
            else {"src-port": (8, 2), "dst-port": (10, 2)}
        )
    return out


def _spec_bytes(flow_type: str, match: Sequence[tuple[str, str]]) -> tuple[bytes, bytes]:
    """The h_u and m_u unions (52 bytes each) for a rule."""
    given = dict(match)
    h, m = bytearray(52), bytearray(52)
    layout = _layout(flow_type)
    for word, _, bits in rule_fields(flow_type):
        if word not in given:
            continue
        value, care = match_value(word, bits, given[word])
        off, n = layout[word]
        h[off : off + n] = value.to_bytes(n, "big")
        m[off : off + n] = care.to_bytes(n, "big")
    if flow_type == "ip4":
        h[13] = 1  # ETH_RX_NFC_IP4: ethtool sets ip_ver (mlx5 refuses a rule without it)
    return bytes(h), bytes(m)


def _rule_of_spec(spec: bytes) -> NtupleRule:
    flow_id, h, _hext, m, _mext, cookie, loc = _FLOW_SPEC.unpack(spec)
    base = flow_id & ~(FLOW_EXT | FLOW_MAC_EXT | FLOW_RSS)
    names = {v: k for k, v in FLOW_IDS.items()}
    flow = names.get(base)
    if flow not in RULE_FLOW_TYPES or flow_id & (FLOW_MAC_EXT | FLOW_RSS):
        raise ValueError(f"rule {loc}: flow type 0x{flow_id:x} is not one lbtune models")
    assert flow is not None
    if flow_id & FLOW_EXT:
        raise ValueError(f"rule {loc}: VLAN/user-def extension is not one lbtune models")
    if cookie != RX_CLS_FLOW_DISC and cookie >> 32:
        raise ValueError(f"rule {loc}: steers to a VF")
    layout = _layout(flow)
    match = []
    for word, _, bits in rule_fields(flow):
        off, n = layout[word]
        care = int.from_bytes(m[off : off + n], "big")
        if care:
            value = int.from_bytes(h[off : off + n], "big") & care
            match.append((word, match_text(word, bits, value, care)))
    action = -1 if cookie == RX_CLS_FLOW_DISC else int(cookie & 0xFFFFFFFF)
    return NtupleRule(int(loc), flow, tuple(match), action)


def live_rule_table(ioctl: Ioctl, dev: str) -> tuple[int, int, bool]:
    """ETHTOOL_GRXCLSRLCNT: (rule count, table size, driver picks locations itself)."""
    _, data, _, cnt = _rxnfc_reply(ioctl(dev, _rxnfc(ETHTOOL_GRXCLSRLCNT)))
    return cnt, data & ~RX_CLS_LOC_SPECIAL, bool(data & RX_CLS_LOC_SPECIAL)


def live_ntuple_rules(ioctl: Ioctl, dev: str) -> tuple[NtupleRule, ...]:
    cnt, _, _ = live_rule_table(ioctl, dev)
    if cnt > MAX_TABLE:
        raise OSError(errno.EINVAL, f"{dev}: implausible rule count {cnt}")
    raw = ioctl(dev, _rxnfc(ETHTOOL_GRXCLSRLALL, rule_cnt=cnt) + bytes(4 * cnt))
    got = _rxnfc_reply(raw)[3]
    locs = struct.unpack_from(f"={min(got, cnt)}I", raw, RXNFC_SIZE)
    rules = []
    for loc in locs:
        spec = _FLOW_SPEC.pack(0, bytes(52), bytes(20), bytes(52), bytes(20), 0, loc)
        reply = ioctl(dev, _rxnfc(ETHTOOL_GRXCLSRULE, spec=spec))
        try:
            rules.append(_rule_of_spec(_rxnfc_reply(reply)[2]))
        except ValueError as e:
            raise OSError(errno.EOPNOTSUPP, f"{dev}: {e}") from None
    return tuple(rules)


# Drivers that keep one input set (the fields a rule compares) per flow type in hardware:
# every rule of a flow type must compare the same fields, and each field whole or not at all
# (i40e_check_fdir_input_set(): EOPNOTSUPP for a partial mask, a TOS/traffic class or L4
# bytes match, or "Cannot change input set for TCPv4 flows until N preexisting filters are
# removed"; EINVAL for an L4 protocol match on ip4/ip6). The kernel's i40e.rst says the same.
ONE_INPUT_SET_DRIVERS = frozenset({"i40e"})
_WHOLE_FIELDS = frozenset({"src-ip", "dst-ip", "src-port", "dst-port"})


def rule_refusal(
    driver: Optional[str], rules: Sequence[NtupleRule], flow_type: str,
    match: Sequence[tuple[str, str]],
) -> Optional[str]:  # fmt: skip
    """Why `driver` refuses a rule of `flow_type` matching `match` next to `rules` (the
    rules of the same port, the new one's own earlier siblings included), None when it
    takes it as far as lbtune can tell beforehand."""
    if driver not in ONE_INPUT_SET_DRIVERS:
        return None
    words = {w for w, _ in match}
    odd = sorted(words - _WHOLE_FIELDS)
    if odd:
        return f"{driver} cannot match {', '.join(odd)} in a flow rule"
    partial = [w for w, v in match if " m " in v]
    if partial:
        return f"{driver} matches whole fields only (a mask on {', '.join(partial)})"
    for r in rules:
        if r.flow_type == flow_type and {w for w, _ in r.match} != words:
            have = ", ".join(w for w, _ in r.match) or "nothing"
            mine = ", ".join(w for w, _ in match) or "nothing"
            return (
                f"{driver} needs every {flow_type} rule to compare the same fields: rule "
                f"{r.location} compares {have}, this one {mine}"
            )
    return None


def free_location(size: int, used: Sequence[int]) -> Optional[int]:
    """ethtool's choice of a location (rxclass.c rmgr_find_empty_slot): the last free one."""
    taken = set(used)
    for loc in range(size - 1, -1, -1):
        if loc not in taken:
            return loc
    return None


def live_add_ntuple_rule(ioctl: Ioctl, dev: str, rule: NtupleRule) -> int:
    """ETHTOOL_SRXCLSRLINS at `rule.location` (-1: the driver's choice if it makes one,
    else the last free slot as ethtool picks it); returns the location it got."""
    loc = rule.location
    if loc < 0:
        _, size, special = live_rule_table(ioctl, dev)
        if special:
            loc = 0xFFFFFFFF  # RX_CLS_LOC_ANY
        else:
            used = [r.location for r in live_ntuple_rules(ioctl, dev)]
            free = free_location(size, used)
            if free is None:
                raise OSError(errno.ENOSPC, f"{dev}: the rule table is full ({size} rules)")
            loc = free
    h, m = _spec_bytes(rule.flow_type, rule.match)
    cookie = RX_CLS_FLOW_DISC if rule.action < 0 else rule.action
    spec = _FLOW_SPEC.pack(FLOW_IDS[rule.flow_type], h, bytes(20), m, bytes(20), cookie, loc)
    reply = ioctl(dev, _rxnfc(ETHTOOL_SRXCLSRLINS, spec=spec))
    return int(_FLOW_SPEC.unpack(_rxnfc_reply(reply)[2])[6])


def live_delete_ntuple_rule(ioctl: Ioctl, dev: str, location: int) -> None:
    spec = _FLOW_SPEC.pack(0, bytes(52), bytes(20), bytes(52), bytes(20), 0, location)
    ioctl(dev, _rxnfc(ETHTOOL_SRXCLSRLDEL, spec=spec))
