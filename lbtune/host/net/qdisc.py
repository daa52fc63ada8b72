"""Queueing-discipline statistics from netlink (live) or `tc -s qdisc show` output (recorded).

Live, `dump_qdiscs` sends one RTM_GETQDISC dump over NETLINK_ROUTE with plain sockets (see
`lbtune.host.net.netlink`); recorded, `parse_tc_qdisc` reads `tc -s qdisc show` output as
sosreport stores it (`sos_commands/networking/tc_-s_qdisc_show`), and `format_tc_qdisc`
writes it. Layouts are from include/uapi/linux/rtnetlink.h (struct tcmsg, TCA_*),
include/uapi/linux/gen_stats.h (TCA_STATS_*, gnet_stats_*) and include/uapi/linux/pkt_sched.h
(struct tc_stats, TC_H_*).
"""

from __future__ import annotations

import re
import socket
import struct
from dataclasses import dataclass
from typing import Optional, Sequence

from lbtune.errors import MalformedHostFile
from lbtune.host.net import netlink

# Where sosreport (and `lbtune capture`) keeps `tc -s qdisc show` output, below the host root.
TC_QDISC_RECORD = "/sos_commands/networking/tc_-s_qdisc_show"


@dataclass(frozen=True)
class QdiscStats:
    """One qdisc's statistics."""

    dev: str
    kind: str  # "tbf", "fq_codel", "mq", "pfifo_fast", "noqueue"
    handle: str  # "8001:"
    parent: str  # "root" or "8001:1"
    packets: int
    bytes: int
    drops: int
    overlimits: int
    requeues: int
    backlog_bytes: int
    backlog_packets: int
    # Configured shaping rate in bits/s of a rate-limiting qdisc (tbf); None for other kinds
    # (htb's rates belong to its classes) and when unknown.
    rate_bps: Optional[int] = None


# ------------------------------------------------------------------------------ live

# include/uapi/linux/rtnetlink.h
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
TCA_KIND = 1
TCA_OPTIONS = 2
TCA_STATS = 3
TCA_STATS2 = 7
# include/uapi/linux/gen_stats.h
TCA_STATS_BASIC = 1
TCA_STATS_QUEUE = 3
TCA_STATS_PKT64 = 8
# include/uapi/linux/pkt_sched.h
TC_H_ROOT = 0xFFFFFFFF
TCA_TBF_PARMS = 1
TCA_TBF_RATE64 = 4
# Kinds whose qdisc (not class) options carry one shaping rate, read into rate_bps.
RATE_KINDS = frozenset(("tbf",))

# struct tcmsg { unsigned char tcm_family, tcm__pad1; unsigned short tcm__pad2;
#                int tcm_ifindex; __u32 tcm_handle, tcm_parent, tcm_info; }
_TCMSG = struct.Struct("=BxxxiIII")
# struct gnet_stats_basic { __u64 bytes; __u32 packets; }
_BASIC = struct.Struct("=QI")
# struct gnet_stats_queue { __u32 qlen, backlog, drops, requeues, overlimits; }
_QUEUE = struct.Struct("=IIIII")
# struct tc_stats { __u64 bytes; __u32 packets, drops, overlimits, bps, pps, qlen, backlog; }
_TC_STATS = struct.Struct("=QIIIIIII")
# struct tc_tbf_qopt { struct tc_ratespec rate, peakrate; __u32 limit, buffer, mtu; } with
# struct tc_ratespec { __u8 cell_log, linklayer; __u16 overhead; __s16 cell_align;
#                      __u16 mpu; __u32 rate; }  -- rate in bytes/s, at offset 8
_TBF_QOPT = struct.Struct("=BBHhHI12xIII")


def format_handle(handle: int) -> str:
    """A qdisc handle the way tc prints it: major only, `8001:` (`0:` for default qdiscs)."""
    return f"{handle >> 16:x}:"


def format_parent(parent: int) -> str:
    """A parent class id the way tc prints it: `root`, `8001:1`, `:1`, `ffff:fff1` (ingress).

    Parent 0 (tc prints no parent at all) is the empty string.
    """
    if parent == TC_H_ROOT:
        return "root"
    if parent == 0:
        return ""
    major, minor = parent >> 16, parent & 0xFFFF
    if major == 0:
        return f":{minor:x}"
    if minor == 0:
        return f"{major:x}:"
    return f"{major:x}:{minor:x}"


def _stats(attrs: dict[int, bytes]) -> tuple[int, int, int, int, int, int, int]:
    """(packets, bytes, drops, overlimits, requeues, backlog bytes, backlog packets)."""
    nested = netlink.parse_attrs(attrs[TCA_STATS2]) if TCA_STATS2 in attrs else {}
    basic, queue = nested.get(TCA_STATS_BASIC), nested.get(TCA_STATS_QUEUE)
    if (
        basic is not None
        and len(basic) >= _BASIC.size
        and queue is not None
        and (len(queue) >= _QUEUE.size)
    ):
        nbytes, packets = _BASIC.unpack_from(basic)
        pkt64 = nested.get(TCA_STATS_PKT64)
        if pkt64 is not None and len(pkt64) >= 8:  # packets beyond 2^32 (since 5.14)
            (packets,) = struct.unpack_from("=Q", pkt64)
        qlen, backlog, drops, requeues, overlimits = _QUEUE.unpack_from(queue)
        return packets, nbytes, drops, overlimits, requeues, backlog, qlen
    legacy = attrs.get(TCA_STATS, b"")
    if len(legacy) >= _TC_STATS.size - 4:  # the trailing 4 bytes are padding
        nbytes, packets, drops, overlimits, _bps, _pps, qlen, backlog = _TC_STATS.unpack_from(
            legacy.ljust(_TC_STATS.size, b"\0")
        )
        return packets, nbytes, drops, overlimits, 0, backlog, qlen
    return 0, 0, 0, 0, 0, 0, 0


def _rate_bps(kind: str, attrs: dict[int, bytes]) -> Optional[int]:
    """The shaping rate (bits/s) in a rate-limiting qdisc's TCA_OPTIONS; None otherwise.

    tbf: the rate of TCA_TBF_PARMS (bytes/s, 32 bits), overridden by TCA_TBF_RATE64 which
    the kernel adds when the rate does not fit 32 bits (34.4 Gbit/s and above).
    """
    if kind not in RATE_KINDS or TCA_OPTIONS not in attrs:
        return None
    options = netlink.parse_attrs(attrs[TCA_OPTIONS])
    rate64 = options.get(TCA_TBF_RATE64, b"")
    if len(rate64) >= 8:
        (bytes_per_s,) = struct.unpack_from("=Q", rate64)
        return int(bytes_per_s) * 8
    parms = options.get(TCA_TBF_PARMS, b"")
    if len(parms) < _TBF_QOPT.size:
        return None
    bytes_per_s = _TBF_QOPT.unpack_from(parms)[5]
    return int(bytes_per_s) * 8


def dump_qdiscs() -> list[QdiscStats]:
    """Every qdisc of every device in this network namespace, as `tc -s qdisc show` lists them.

    `rate_bps` is read from the options of the kinds in RATE_KINDS. Raises OSError when the
    kernel refuses the dump.
    """
    names: dict[int, str] = {}
    out: list[QdiscStats] = []
    request = _TCMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    for mtype, body in netlink.dump(netlink.NETLINK_ROUTE, RTM_GETQDISC, request):
        if mtype != RTM_NEWQDISC or len(body) < _TCMSG.size:
            continue
        _family, ifindex, handle, parent, _info = _TCMSG.unpack_from(body)
        attrs = netlink.parse_attrs(body, _TCMSG.size)
        if ifindex not in names:
            try:
                names[ifindex] = socket.if_indextoname(ifindex)
            except OSError:  # the device went away since the dump
                names[ifindex] = f"if{ifindex}"
        kind = attrs.get(TCA_KIND, b"").split(b"\0", 1)[0].decode("ascii", "replace")
        packets, nbytes, drops, overlimits, requeues, backlog, qlen = _stats(attrs)
        out.append(
            QdiscStats(
                dev=names[ifindex],
                kind=kind,
                handle=format_handle(handle),
                parent=format_parent(parent),
                packets=packets,
                bytes=nbytes,
                drops=drops,
                overlimits=overlimits,
                requeues=requeues,
                backlog_bytes=backlog,
                backlog_packets=qlen,
                rate_bps=_rate_bps(kind, attrs),
            )
        )
    return out


# -------------------------------------------------------------------------- recorded

_SENT = re.compile(
    r"Sent (\d+) bytes (\d+) pkts? \(dropped (\d+), overlimits (\d+) requeues (\d+)\)"
)
_BACKLOG = re.compile(r"backlog (\d+(?:\.\d+)?)([KMG]?)b (\d+)p")
# tc prints backlog bytes rounded to Kb/Mb (iproute2 tc_util.c print_size): 12Kb = 12 * 1024.
_UNITS = {"": 1, "K": 1024, "M": 1024 * 1024, "G": 1024 * 1024 * 1024}
_RATE = re.compile(r"(\d+(?:\.\d+)?)([a-z]*)", re.IGNORECASE)
# Rate units in bits/s, matched without case as tc's get_rate does (iproute2 tc_util.c):
# "bit" units are bits, "Bps"/"bps" units BYTES per second; a plain number is bits. tc prints
# rates as "1Mbit", "1500Kbit", "8bit" ("1Mibit" with -iec).
_RATE_UNITS = {
    "": 1, "bit": 1, "kbit": 1000, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
    "bps": 8, "kbps": 8 * 1000, "mbps": 8 * 10**6, "gbps": 8 * 10**9, "tbps": 8 * 10**12,
    "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40,
}  # fmt: skip


def parse_rate(text: str) -> int:
    """A tc rate (`1Mbit`, `1500Kbit`, `125KBps`, `1mbit`, `64000`) in bits/s.

    Raises ValueError for anything else.
    """
    m = _RATE.fullmatch(text)
    scale = _RATE_UNITS.get(m[2].lower()) if m is not None else None
    if m is None or scale is None:
        raise ValueError(f"not a tc rate: {text!r}")
    return round(float(m[1]) * scale)


@dataclass
class _Pending:
    lineno: int
    dev: str
    kind: str
    handle: str
    parent: str
    sent: Optional[tuple[int, int, int, int, int]] = None
    backlog: Optional[tuple[int, int]] = None
    rate_bps: Optional[int] = None


def _header(tokens: list[str], lineno: int, source: str) -> _Pending:
    """`qdisc KIND HANDLE dev DEV (root | parent ID) ... [rate RATE ...]`"""
    dev, kind, handle, parent, rate_bps = _header_fields(tokens, lineno, source)
    return _Pending(lineno, dev, kind, handle, parent, rate_bps=rate_bps)


def _header_fields(
    tokens: list[str], lineno: int, source: str
) -> tuple[str, str, str, str, Optional[int]]:
    """(dev, kind, handle, parent, rate in bits/s) of a header line's words (`_header`)."""
    if len(tokens) < 5 or "dev" not in tokens[3:-1]:
        raise MalformedHostFile(source, f"line {lineno}: not a `qdisc KIND HANDLE dev DEV` line")
    at = tokens.index("dev", 3)
    dev = tokens[at + 1]
    after = tokens[at + 2 : at + 4]
    parent = ""
    if after[:1] == ["root"]:
        parent = "root"
    elif after[:1] == ["parent"] and len(after) == 2:
        parent = after[1]
    kind = tokens[1]
    rate_bps = None
    if kind in RATE_KINDS and "rate" in tokens[at + 2 : -1]:
        text = tokens[tokens.index("rate", at + 2) + 1]
        try:
            rate_bps = parse_rate(text)
        except ValueError as e:
            raise MalformedHostFile(source, f"line {lineno}: {e}") from None
    return dev, kind, tokens[2], parent, rate_bps


def _finish(p: _Pending, source: str) -> QdiscStats:
    if p.sent is None:
        raise MalformedHostFile(
            source, f"line {p.lineno}: qdisc {p.kind} on {p.dev} has no statistics (tc without -s?)"
        )
    nbytes, packets, drops, overlimits, requeues = p.sent
    backlog_bytes, backlog_packets = p.backlog if p.backlog is not None else (0, 0)
    return QdiscStats(
        dev=p.dev,
        kind=p.kind,
        handle=p.handle,
        parent=p.parent,
        packets=packets,
        bytes=nbytes,
        drops=drops,
        overlimits=overlimits,
        requeues=requeues,
        backlog_bytes=backlog_bytes,
        backlog_packets=backlog_packets,
        rate_bps=p.rate_bps,
    )


# A qdisc as tc prints it: its header, its Sent and backlog lines, and lines of more
# statistics indented by two spaces (fq_codel's), which hold neither "Sent " nor "backlog ".
_BLOCK = re.compile(
    r"qdisc ([^\n]*)\n"
    r" Sent (\d+) bytes (\d+) pkts? \(dropped (\d+), overlimits (\d+) requeues (\d+)\) ?\n"
    r" backlog (\d+(?:\.\d+)?)([KMG]?)b (\d+)p requeues \d+\n"
    r"((?:  [^\n]*\n)*)"
)
# line breaks str.splitlines() knows besides "\n": a text with one takes the line-by-line way
_OTHER_BREAKS = ("\r", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _parse_blocks(text: str, source: str) -> Optional[list[QdiscStats]]:
    """parse_tc_qdisc of a text that is nothing but qdiscs as tc prints them (`_BLOCK`
    after `_BLOCK`), one expression match a qdisc instead of a look at each line (a third
    of the time of a 92-qdisc host's); None for any other text, which the lines decide. On
    such a text the line-by-line reading takes the same header, Sent and backlog lines and
    skips the rest: the same qdiscs, and the same error for a bad header."""
    if not text.startswith("qdisc ") or any(c in text for c in _OTHER_BREAKS):
        return None
    if not text.endswith("\n"):
        text += "\n"
    out: list[QdiscStats] = []
    at, lineno, end = 0, 1, len(text)
    match = _BLOCK.match
    while at < end:
        m = match(text, at)
        if m is None:
            return None
        more = m[10]
        if "Sent " in more or "backlog " in more:
            return None
        dev, kind, handle, parent, rate = _header_fields(["qdisc", *m[1].split()], lineno, source)
        out.append(QdiscStats(dev, kind, handle, parent, int(m[3]), int(m[2]), int(m[4]),
                              int(m[5]), int(m[6]), round(float(m[7]) * _UNITS[m[8]]),
                              int(m[9]), rate))  # fmt: skip
        lineno += 3 + more.count("\n")
        at = m.end()
    return out


def parse_tc_qdisc(text: str, source: str) -> list[QdiscStats]:
    """Qdiscs with statistics from `tc -s qdisc show` output.

    Every qdisc needs its ` Sent ... bytes ... pkt (dropped ...)` line (MalformedHostFile
    otherwise); backlog in Kb/Mb is the rounded value tc printed. `rate_bps` comes from the
    `rate` of the header line for the kinds in RATE_KINDS (tc rounds it as it prints it:
    `1234Mbit`), not from the rate estimator's ` rate 8bit 0pps` statistics line. Indented
    lines belong to the qdisc above; other unindented lines (error messages a capture kept)
    are ignored.
    """
    fast = _parse_blocks(text, source)
    return fast if fast is not None else _parse_lines(text, source)


def _parse_lines(text: str, source: str) -> list[QdiscStats]:
    """parse_tc_qdisc, line by line (any text)."""
    out: list[QdiscStats] = []
    current: Optional[_Pending] = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("qdisc "):
            if current is not None:
                out.append(_finish(current, source))
            current = _header(line.split(), lineno, source)
            continue
        if current is None or not line[:1].isspace():
            continue
        # (substring tests first: most indented lines are neither, and a search is dearer)
        sent = _SENT.search(line) if "Sent " in line else None
        if sent is not None:
            current.sent = (
                int(sent[1]), int(sent[2]), int(sent[3]), int(sent[4]), int(sent[5])
            )  # fmt: skip
        backlog = _BACKLOG.search(line) if "backlog " in line else None
        if backlog is not None and current.backlog is None:
            size = round(float(backlog[1]) * _UNITS[backlog[2]])
            current.backlog = (size, int(backlog[3]))
    if current is not None:
        out.append(_finish(current, source))
    return out


def format_tc_qdisc(stats: Sequence[QdiscStats]) -> str:
    """`tc -s qdisc show`-style text for these qdiscs (exact backlog bytes, exact rate as
    `rate NNNbit`), read by parse_tc_qdisc."""
    lines: list[str] = []
    for q in stats:
        where = "root" if q.parent == "root" else (f"parent {q.parent}" if q.parent else "")
        rate = f"rate {q.rate_bps}bit" if q.rate_bps is not None else ""
        parts = ("qdisc", q.kind, q.handle, "dev", q.dev, where, rate)
        head = " ".join(part for part in parts if part)
        lines.append(head + " ")
        lines.append(
            f" Sent {q.bytes} bytes {q.packets} pkt (dropped {q.drops}, overlimits {q.overlimits}"
            f" requeues {q.requeues}) "
        )
        lines.append(f" backlog {q.backlog_bytes}b {q.backlog_packets}p requeues {q.requeues}")
    return "\n".join(lines) + ("\n" if lines else "")
