"""Which interfaces carry the management path: the default route and the current SSH session.

Changing rings or channels resets the link on most drivers; on these interfaces that can cut
the operator off, so the CLI asks for `--yes` first.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Optional

from lbtune.host.host import Host


def default_route_interfaces(host: Host) -> set[str]:
    """Interfaces of IPv4/IPv6 default routes, from /proc/net/route and /proc/net/ipv6_route."""
    out: set[str] = set()
    for line in host.fs.read_lines("/proc/net/route")[1:]:
        f = line.split()
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000":
            out.add(f[0])
    for line in host.fs.read_lines("/proc/net/ipv6_route"):
        f = line.split()
        if len(f) >= 10 and f[0] == "0" * 32 and f[1] == "00" and f[9] != "lo":
            out.add(f[9])
    return out


def _ssh_server_ip(environ: Optional[dict[str, str]] = None) -> Optional[str]:
    env = os.environ if environ is None else environ
    parts = (env.get("SSH_CONNECTION") or "").split()
    return parts[2] if len(parts) == 4 else None


def _v4_addresses_by_interface(host: Host) -> dict[str, set[str]]:
    """IPv4 addresses per interface via SIOCGIFADDR-free netlink (live hosts only)."""
    out: dict[str, set[str]] = {}
    if not host.is_live:
        return out
    ipr = host.iproute()
    names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    for addr in ipr.get_addr():
        name = names.get(addr["index"])
        value = addr.get_attr("IFA_ADDRESS")
        if name and value:
            out.setdefault(name, set()).add(str(ipaddress.ip_address(value)))
    return out


def ssh_interfaces(host: Host, environ: Optional[dict[str, str]] = None) -> set[str]:
    ip = _ssh_server_ip(environ)
    if ip is None:
        return set()
    return {name for name, addrs in _v4_addresses_by_interface(host).items() if ip in addrs}


def management_interfaces(host: Host) -> set[str]:
    return default_route_interfaces(host) | ssh_interfaces(host)
