"""The IPVS table as `/proc/net/ip_vs` shows it (a capture keeps this file, not netlink).

Rows are hex, as the kernel prints them:

    IP Virtual Server version 1.2.1 (size=4096)
    Prot LocalAddress:Port Scheduler Flags
      -> RemoteAddress:Port Forward Weight ActiveConn InActConn
    TCP  0A000064:0050 rr persistent 300
      -> 0A00000B:0050      Route   1      0          0
    TCP  [2001:0db8:0000:0000:0000:0000:0000:0001]:01BB wlc
    FWM  00000001 sh

Only configuration is kept (service, scheduler and flags; real server, forwarding method and
weight), not the connection counts, so two hosts' tables compare.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

PROC_IP_VS = "/proc/net/ip_vs"


@dataclass(frozen=True)
class ProcRealServer:
    address: str  # "10.0.0.11:80" or "[2001:db8::11]:80"
    forward: str  # Route (DR), Masq, Tunnel, Local
    weight: int


@dataclass(frozen=True)
class ProcService:
    key: str  # "TCP 10.0.0.100:80", "FWM 1"
    scheduler: str
    flags: str  # the rest of the line: "persistent 300", "" ...
    real_servers: tuple[ProcRealServer, ...]


def _addr(text: str) -> str:
    """`0A000064:0050` or `[2001:0db8:...]:01BB` -> `10.0.0.100:80` / `[2001:db8::1]:443`."""
    host, _, port = text.rpartition(":")
    if host.startswith("["):
        addr = str(ipaddress.IPv6Address(host[1:-1]))
        return f"[{addr}]:{int(port, 16)}"
    return f"{ipaddress.IPv4Address(int(host, 16))}:{int(port, 16)}"


def parse_proc_ip_vs(text: Optional[str]) -> Optional[tuple[ProcService, ...]]:
    """The services of a `/proc/net/ip_vs` text; None when there is no such file (no IPVS).

    Raises ValueError on a row that is not in the kernel's format."""
    if text is None:
        return None
    services: list[ProcService] = []
    current: Optional[tuple[str, str, str]] = None
    reals: list[ProcRealServer] = []

    def flush() -> None:
        if current is not None:
            services.append(ProcService(current[0], current[1], current[2], tuple(reals)))

    for line in text.splitlines():
        words = line.split()
        if not words or line.startswith(("IP Virtual Server", "Prot ")) or words[:2] == [
                "->", "RemoteAddress:Port"]:
            continue
        if words[0] == "->":
            if current is None or len(words) < 4:
                raise ValueError(f"real server row outside a service: {line.strip()!r}")
            reals.append(ProcRealServer(_addr(words[1]), words[2], int(words[3])))
            continue
        if words[0] not in ("TCP", "UDP", "SCTP", "FWM") or len(words) < 3:
            raise ValueError(f"not an IPVS service row: {line.strip()!r}")
        flush()
        reals = []
        where = str(int(words[1], 16)) if words[0] == "FWM" else _addr(words[1])
        current = (f"{words[0]} {where}", words[2], " ".join(words[3:]))
    flush()
    return tuple(services)
