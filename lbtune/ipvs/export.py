"""A DR table in other tools' formats: `ipvsadm -R` restore lines and keepalived blocks.

`ipvsadm` lines carry everything `ipvsadm -S` leaves out (connection thresholds, the
timeouts), so `ipvsadm -R` rebuilds the same table lbtune would. The keepalived export is a
`virtual_server` block per service with `lvs_method DR` and a TCP_CHECK per real server,
for users who hand health checks and failover to keepalived (keepalived then owns the
table: do not run `lbtune ipvs apply` against the same services).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable, Mapping, Optional, Sequence

from lbtune.host.ipvs import F_PERSISTENT, Service, ServiceKey, Timeouts, flag_names
from lbtune.ipvs.config import RealServer, VirtualService

_IPVSADM_FWD = {"dr": "-g", "tunnel": "-i", "masq": "-m"}
_KEEPALIVED_FWD = {"dr": "DR", "tunnel": "TUN", "masq": "NAT"}


def services_from_table(table: Mapping[ServiceKey, Service]) -> tuple[VirtualService, ...]:
    """The kernel's table as config values (to export what runs now)."""
    out = []
    for svc in table.values():
        s = svc.settings
        flags = tuple(f for f in flag_names(s.flags, s.scheduler) if f != "persistent")
        servers = tuple(
            RealServer(d.key.addr, d.key.port, d.settings.weight, d.settings.u_threshold,
                       d.settings.l_threshold, d.settings.fwd)
            for d in svc.destinations
        )
        persistence = s.timeout if s.flags & F_PERSISTENT else 0
        out.append(VirtualService(svc.key, s.scheduler, flags, persistence, s.netmask, servers))
    return tuple(out)


def _svc_args(key: ServiceKey) -> list[str]:
    if key.protocol == "fwmark":
        return ["-f", str(key.fwmark)] + (["-6"] if key.family == 6 else [])
    flag = {"tcp": "-t", "udp": "-u", "sctp": "--sctp-service"}[key.protocol]
    return [flag, _hostport(key.addr, key.port)]


def _hostport(addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def _netmask_text(family: int, prefix: int) -> str:
    if family == 6:
        return str(prefix)
    return str(ipaddress.IPv4Network(f"0.0.0.0/{prefix}").netmask)


def ipvsadm_lines(
    services: Sequence[VirtualService], timeouts: Optional[Timeouts] = None
) -> list[str]:
    """`ipvsadm -R` input for `services` (and `--set` for the timeouts, 0 = unchanged)."""
    lines = []
    if timeouts is not None:
        lines.append(f"--set {timeouts.tcp} {timeouts.tcpfin} {timeouts.udp}")
    for svc in services:
        args = ["-A", *_svc_args(svc.key), "-s", svc.scheduler]
        if svc.persistence:
            args += ["-p", str(svc.persistence)]
            if svc.netmask != (32 if svc.key.family == 4 else 128):
                args += ["-M", _netmask_text(svc.key.family, svc.netmask)]
        sched_flags = [f for f in svc.flags if f != "ops"]
        if sched_flags:
            args += ["-b", ",".join(sched_flags)]
        if "ops" in svc.flags:
            args.append("-o")
        lines.append(" ".join(args))
        for rs in svc.servers:
            dest = _hostport(rs.address, rs.port)
            line = ["-a", *_svc_args(svc.key), "-r", dest, _IPVSADM_FWD[rs.forward],
                    "-w", str(rs.weight)]
            if rs.upper:
                line += ["-x", str(rs.upper)]
            if rs.lower:
                line += ["-y", str(rs.lower)]
            lines.append(" ".join(line))
    return lines


def _real_block(rs: RealServer, svc: VirtualService, check_port: int) -> list[str]:
    out = [f"    real_server {rs.address} {rs.port} {{", f"        weight {rs.weight}"]
    if rs.upper:
        out.append(f"        uthreshold {rs.upper}")
    if rs.lower:
        out.append(f"        lthreshold {rs.lower}")
    if svc.key.protocol in ("tcp", "fwmark") and check_port:
        out += [
            "        TCP_CHECK {",
            f"            connect_port {check_port}",
            "            connect_timeout 3",
            "        }",
        ]
    out.append("    }")
    return out


def keepalived_blocks(services: Iterable[VirtualService], check_port: int = 0) -> list[str]:
    """keepalived.conf `virtual_server` blocks (lvs_method DR). Real servers get a TCP_CHECK
    on their port (`check_port` for fwmark services, whose real servers have none)."""
    out: list[str] = []
    for svc in services:
        k = svc.key
        head = f"fwmark {k.fwmark}" if k.protocol == "fwmark" else f"{k.addr} {k.port}"
        out.append(f"virtual_server {head} {{")
        if k.protocol == "fwmark" and k.family == 6:
            out.append("    ip_family inet6")
        out.append("    delay_loop 6")
        out.append(f"    lvs_sched {svc.scheduler}")
        methods = {rs.forward for rs in svc.servers} or {"dr"}
        out.append(f"    lvs_method {_KEEPALIVED_FWD[sorted(methods)[0]]}")
        if k.protocol != "fwmark":
            out.append(f"    protocol {k.protocol.upper()}")
        for flag in svc.flags:
            out.append(f"    {flag}")
        if svc.persistence:
            out.append(f"    persistence_timeout {svc.persistence}")
            if svc.netmask != (32 if k.family == 4 else 128):
                out.append(f"    persistence_granularity {_netmask_text(k.family, svc.netmask)}")
        for rs in svc.servers:
            out += _real_block(rs, svc, rs.port or check_port)
        out.append("}")
    return out
