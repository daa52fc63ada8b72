"""The host's limits a load command runs into, read from a host tree (`LoadFacts`)."""

from __future__ import annotations

from typing import Optional, Sequence

from lbtune.diagnose.loadlint.model import LoadFacts
from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net.sockdiag import ListenSocket

# ------------------------------------------------------------------ host facts


def _range(fs: HostFS) -> Optional[tuple[int, int]]:
    text = fs.read("/proc/sys/net/ipv4/ip_local_port_range")
    if text is None:
        return None
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise MalformedHostFile(
            fs.path("/proc/sys/net/ipv4/ip_local_port_range"), f"expected two ports, got {text!r}"
        )
    return int(parts[0]), int(parts[1])


def parse_port_list(text: str) -> frozenset[int]:
    """`8080,9000-9100` (ip_local_reserved_ports) as a set of ports; ValueError when bad."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        a = int(lo)
        b = int(hi) if dash else a
        if not 0 <= a <= b <= 65535:
            raise ValueError(f"bad port range {part!r}")
        out.update(range(a, b + 1))
    return frozenset(out)


def read_load_facts(
    fs: HostFS,
    listeners: Optional[Sequence[ListenSocket]] = None,
    nofile: Optional[tuple[int, int]] = None,
) -> LoadFacts:
    """The limits of the host below `fs`; `listeners` and `nofile` come from the live side.

    `nofile` is the (soft, hard) RLIMIT_NOFILE of the shell that will run the command.
    """
    port_range = _range(fs)
    reserved = 0
    text = fs.read("/proc/sys/net/ipv4/ip_local_reserved_ports")
    if text and port_range is not None:
        try:
            ports = parse_port_list(text)
        except ValueError as e:
            raise MalformedHostFile(
                fs.path("/proc/sys/net/ipv4/ip_local_reserved_ports"), str(e)
            ) from None
        lo, hi = port_range
        reserved = sum(1 for p in ports if lo <= p <= hi)
    backlogs: dict[int, int] = {}
    for s in listeners or ():
        # Several listeners on one port (v4 + v6, SO_REUSEPORT): the smallest queue limits.
        backlogs[s.port] = min(backlogs.get(s.port, s.backlog), s.backlog)
    return LoadFacts(
        port_range=port_range,
        reserved_ports=reserved,
        tw_reuse=fs.read_int("/proc/sys/net/ipv4/tcp_tw_reuse"),
        max_tw_buckets=fs.read_int("/proc/sys/net/ipv4/tcp_max_tw_buckets"),
        somaxconn=fs.read_int("/proc/sys/net/core/somaxconn"),
        backlogs=backlogs,
        nofile_soft=nofile[0] if nofile else None,
        nofile_hard=nofile[1] if nofile else None,
    )
