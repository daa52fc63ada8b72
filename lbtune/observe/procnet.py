"""Protocol counters of /proc/net: netstat and snmp (TcpExt, IpExt, Tcp, Udp...), snmp6, sockstat.

These are what `nstat -az` and `ss -s` print. The kernel writes /proc/net/netstat and
/proc/net/snmp as pairs of lines, a header naming the counters and a line of values, each
starting with the group (`TcpExt: SyncookiesSent ...` / `TcpExt: 0 ...`; net/ipv4/proc.c);
/proc/net/snmp6 has one `Ip6InReceives   12` line per counter (net/ipv6/proc.c). Keys are
`Group.Name` either way (`TcpExt.ListenOverflows`, `Ip6.InReceives`).
"""

from __future__ import annotations

from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.model import SnmpCounters, SockStat

NETSTAT = "/proc/net/netstat"
SNMP = "/proc/net/snmp"
SNMP6 = "/proc/net/snmp6"
SOCKSTAT = "/proc/net/sockstat"
SOCKSTAT6 = "/proc/net/sockstat6"


def parse_snmp(text: str, source: str) -> dict[str, int]:
    """Parse the paired header/value lines of /proc/net/netstat or /proc/net/snmp.

    Gauges are kept as printed, negative ones included (`Tcp.MaxConn` is -1). A group whose
    header and value lines disagree (name, number of fields) or a value that is not an integer
    raises MalformedHostFile.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) % 2:
        raise MalformedHostFile(source, f"header line without values: {lines[-1][:60]!r}")
    out: dict[str, int] = {}
    for i in range(0, len(lines), 2):
        group, sep, names_text = lines[i].partition(":")
        vgroup, vsep, values_text = lines[i + 1].partition(":")
        if not sep or not vsep or group != vgroup or not group or " " in group:
            raise MalformedHostFile(source, f"line {i + 1}: not a '{group or 'Group'}:' pair")
        keys = _keys.get((group, names_text))
        if keys is None:
            if len(_keys) >= _KEYS_LIMIT:
                _keys.clear()
            prefix = group + "."
            keys = _keys[(group, names_text)] = [prefix + n for n in names_text.split()]
        values = values_text.split()
        if len(keys) != len(values):
            raise MalformedHostFile(source, f"{group}: {len(keys)} names but {len(values)} values")
        try:
            out.update(zip(keys, map(int, values)))
        except ValueError:
            raise MalformedHostFile(source, f"{group}: non-integer value") from None
    return out


# A group's header line is the same every second: its `Group.Name` keys are made once.
_keys: dict[tuple[str, str], list[str]] = {}
_KEYS_LIMIT = 256
_keys6: dict[str, str] = {}  # Ip6InReceives -> Ip6.InReceives
_KEYS6_LIMIT = 4096


def parse_snmp6(text: str, source: str) -> dict[str, int]:
    """Parse /proc/net/snmp6: `Ip6InReceives 12` -> `{"Ip6.InReceives": 12}`.

    The group is the name up to its first `6` (`Ip6`, `Icmp6`, `Udp6`, `UdpLite6`).
    """
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise MalformedHostFile(source, f"line {n}: expected 'Name value', got {line!r}")
        name, value = parts
        key = _keys6.get(name)
        if key is None:
            cut = name.find("6") + 1
            if cut == 0 or cut == len(name):
                raise MalformedHostFile(source, f"line {n}: no Ip6/Icmp6/Udp6 group in {name!r}")
            if len(_keys6) >= _KEYS6_LIMIT:
                _keys6.clear()
            key = _keys6[name] = f"{name[:cut]}.{name[cut:]}"
        try:
            out[key] = int(value)
        except ValueError:
            raise MalformedHostFile(source, f"line {n}: non-integer value {value!r}") from None
    return out


def read_snmp(fs: HostFS) -> SnmpCounters:
    """/proc/net/netstat + /proc/net/snmp + /proc/net/snmp6; absent files are skipped."""
    values: dict[str, int] = {}
    for kpath in (NETSTAT, SNMP):
        text = fs.read(kpath)
        if text is not None:
            values.update(parse_snmp(text, fs.path(kpath)))
    text = fs.read(SNMP6)
    if text is not None:
        values.update(parse_snmp6(text, fs.path(SNMP6)))
    return SnmpCounters(values)


def _sockstat_fields(text: str, source: str, out: dict[str, int]) -> None:
    """`TCP: inuse 1 orphan 0 tw 0 alloc 1 mem 328` -> out["TCP.inuse"] = 1, ..."""
    for line in text.splitlines():
        group, sep, rest = line.partition(":")
        if not line.strip():
            continue
        parts = rest.split()
        if not sep or len(parts) % 2:
            raise MalformedHostFile(source, f"expected 'GROUP: name value ...', got {line!r}")
        for i in range(0, len(parts), 2):
            try:
                out[f"{group}.{parts[i]}"] = int(parts[i + 1])
            except ValueError:
                raise MalformedHostFile(source, f"{group} {parts[i]}: not an integer") from None


_SOCKSTAT_REQUIRED = (
    "sockets.used",
    "TCP.inuse",
    "TCP.orphan",
    "TCP.tw",
    "TCP.alloc",
    "TCP.mem",
    "UDP.inuse",
    "UDP.mem",
)


def parse_sockstat(text: str, text6: Optional[str], source: str) -> SockStat:
    """Parse /proc/net/sockstat (and /proc/net/sockstat6 when given).

    `TCP.mem` and `UDP.mem` are in pages, as the kernel prints them (compare with
    net.ipv4.tcp_mem / udp_mem, also in pages). Errors in the IPv6 file name `source + "6"`.
    """
    v: dict[str, int] = {}
    _sockstat_fields(text, source, v)
    missing = [k for k in _SOCKSTAT_REQUIRED if k not in v]
    if missing:
        raise MalformedHostFile(source, f"missing {', '.join(missing)}")
    v6: dict[str, int] = {}
    if text6 is not None:
        _sockstat_fields(text6, source + "6", v6)
    return SockStat(
        sockets_used=v["sockets.used"],
        tcp_inuse=v["TCP.inuse"],
        tcp_orphan=v["TCP.orphan"],
        tcp_tw=v["TCP.tw"],
        tcp_alloc=v["TCP.alloc"],
        tcp_mem_pages=v["TCP.mem"],
        udp_inuse=v["UDP.inuse"],
        udp_mem_pages=v["UDP.mem"],
        tcp6_inuse=v6.get("TCP6.inuse", 0),
        udp6_inuse=v6.get("UDP6.inuse", 0),
    )


def read_sockstat(fs: HostFS) -> Optional[SockStat]:
    """Socket counts of this network namespace; None when /proc/net/sockstat is absent."""
    text = fs.read(SOCKSTAT)
    if text is None:
        return None
    return parse_sockstat(text, fs.read(SOCKSTAT6), fs.path(SOCKSTAT))
