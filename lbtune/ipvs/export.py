"""A DR table in other tools' formats: `ipvsadm -R` restore lines and keepalived blocks.

`ipvsadm` lines carry everything `ipvsadm -S` leaves out (connection thresholds, the
timeouts), so `ipvsadm -R` rebuilds the same table lbtune would. The keepalived export is
`global_defs { lvs_timeouts ... }` for the timeouts and a `virtual_server` block per service
with `lvs_method DR` and a health check per real server, for users who hand health checks
and failover to keepalived (keepalived then owns the table: do not run `lbtune ipvs apply`
against the same services). keepalived treats a real server without a checker as always
up, so every real server gets one where lbtune can tell what to check: TCP_CHECK on a TCP
service's port (and on `check_port` for fwmark services), UDP_CHECK on a UDP service's port
(it fails on ICMP port/host unreachable: nothing listens, or the host is gone). fwmark
services without `check_port` and SCTP services get none: `unchecked` says so, and the
block carries the same words as a comment.

Every value written into keepalived.conf passes `conf_word` (one word of letters, digits
and `_ . : / @ -`), so no input can end a line, open or close a block, start a comment or
quote: config injection is refused, not escaped.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, Mapping, Optional, Sequence

from lbtune.errors import BadInput
from lbtune.host.ipvs.table import F_PERSISTENT, Service, ServiceKey, Timeouts, flag_names
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


_WORD = re.compile(r"[A-Za-z0-9_.:/@-]+")


def conf_word(value: object, what: str) -> str:
    """`value` as one keepalived.conf word; BadInput for anything that could end the word
    or the line, open or close a block, quote or comment (white space, braces, quotes, `#`,
    `!`, `;`, `$`, control characters ...)."""
    text = str(value)
    if not _WORD.fullmatch(text):
        raise BadInput(f"{what} {text!r}: not a word keepalived.conf can carry (letters, "
                       "digits and _ . : / @ - only)")
    return text


def lvs_timeouts(timeouts: Optional[Timeouts]) -> Optional[str]:
    """keepalived's `lvs_timeouts` (global_defs) for `timeouts`; 0 = unchanged is left out
    (keepalived.conf(5): at least one value; an unset one keeps the kernel's)."""
    if timeouts is None:
        return None
    parts = [f"{name} {int(v)}" for name, v in
             (("tcp", timeouts.tcp), ("tcpfin", timeouts.tcpfin), ("udp", timeouts.udp)) if v]
    return "lvs_timeouts " + " ".join(parts) if parts else None


def _check_kind(svc: VirtualService, check_port: int) -> str:
    """The checker a real server of `svc` gets: tcp, udp, or "" (none)."""
    if svc.key.protocol == "tcp" or (svc.key.protocol == "fwmark" and check_port):
        return "tcp"
    return "udp" if svc.key.protocol == "udp" else ""


def _unchecked_reason(svc: VirtualService) -> str:
    if svc.key.protocol == "fwmark":
        return (f"fwmark {svc.key.fwmark}: no health check for its real servers (a firewall "
                "mark has no port to check; keepalived treats them as always up): give "
                "--check-port PORT")
    return (f"{svc.key.ident}: keepalived has no SCTP health check: its real servers are "
            "always up for keepalived (add a MISC_CHECK of your own)")


def unchecked(services: Iterable[VirtualService], check_port: int = 0) -> list[str]:
    """Why some real servers of the keepalived export have no health check (one line per
    service); empty when every real server has one."""
    return [_unchecked_reason(svc) for svc in services
            if svc.servers and not _check_kind(svc, check_port)]


def _real_block(rs: RealServer, svc: VirtualService, check_port: int) -> list[str]:
    addr = conf_word(rs.address, "real server")
    out = [f"    real_server {addr} {int(rs.port)} {{", f"        weight {int(rs.weight)}"]
    if rs.upper:
        out.append(f"        uthreshold {int(rs.upper)}")
    if rs.lower:
        out.append(f"        lthreshold {int(rs.lower)}")
    kind = _check_kind(svc, check_port)
    port = int(rs.port or check_port)
    if kind == "tcp":
        out += [
            "        TCP_CHECK {",
            f"            connect_port {port}",
            "            connect_timeout 3",
            "        }",
        ]
    elif kind == "udp":
        # fails on ICMP port/host unreachable; host unreachable needs the ARP timeout, so
        # keepalived.conf(5) asks for a connect_timeout of at least 4 s
        out += [
            "        UDP_CHECK {",
            f"            connect_port {port}",
            "            connect_timeout 5",
            "        }",
        ]
    out.append("    }")
    return out


def keepalived_blocks(
    services: Iterable[VirtualService], check_port: int = 0,
    timeouts: Optional[Timeouts] = None,
) -> list[str]:  # fmt: skip
    """keepalived.conf `global_defs` with `lvs_timeouts` (when `timeouts` sets any) and
    `virtual_server` blocks (lvs_method DR) with a health check per real server where one
    can be told (see the module docstring and `unchecked`)."""
    out: list[str] = []
    line = lvs_timeouts(timeouts)
    if line:
        out += ["global_defs {", f"    {line}", "}", ""]
    for svc in services:
        k = svc.key
        if k.protocol == "fwmark":
            head = f"fwmark {int(k.fwmark)}"
        else:
            head = f"{conf_word(k.addr, 'virtual server')} {int(k.port)}"
        out.append(f"virtual_server {head} {{")
        if k.protocol == "fwmark" and k.family == 6:
            out.append("    ip_family inet6")
        out.append("    delay_loop 6")
        out.append(f"    lvs_sched {conf_word(svc.scheduler, 'scheduler')}")
        methods = {rs.forward for rs in svc.servers} or {"dr"}
        out.append(f"    lvs_method {_KEEPALIVED_FWD[sorted(methods)[0]]}")
        if k.protocol != "fwmark":
            out.append(f"    protocol {conf_word(k.protocol.upper(), 'protocol')}")
        for flag in svc.flags:
            out.append(f"    {conf_word(flag, 'flag')}")
        if svc.persistence:
            out.append(f"    persistence_timeout {int(svc.persistence)}")
            if svc.netmask != (32 if k.family == 4 else 128):
                out.append(f"    persistence_granularity {_netmask_text(k.family, svc.netmask)}")
        if svc.servers and not _check_kind(svc, check_port):
            out.append(f"    # {_unchecked_reason(svc)}")
        for rs in svc.servers:
            out += _real_block(rs, svc, rs.port or check_port)
        out.append("}")
    return out
