"""Sysctl names as paths: `/proc/sys/<dotted key>`, validated so a hostile key cannot escape.

Shared by the sysctl knob (tune/knobs/sysctl.py), the checklist and the diagnose rules.
"""

from __future__ import annotations

import re
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.net.ifname import is_ifname

# A component is what the kernel uses in /proc/sys names: letters, digits, _ and -; an
# interface name inside net.*.conf.<if>.* may also contain '.', written as '/' per sysctl(8).
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


def sysctl_path(key: str) -> str:
    """`/proc/sys` path of a dotted sysctl key; BadInput for anything but a plain dotted name.

    `net.ipv4.conf.bond0/100.rp_filter` (sysctl(8) spelling for an interface with a dot) is
    accepted; `..`, absolute paths, empty components, other slashes and odd characters are not.
    """
    if not isinstance(key, str) or not key or len(key) > 256:
        raise BadInput(f"sysctl key {key!r}: not a dotted sysctl name")
    parts = key.split(".")
    out = []
    for i, part in enumerate(parts):
        if "/" in part:
            # only an interface position (net.<family>.conf|neigh.<if>.key) may carry a '/'
            iface_slot = i == 3 and len(parts) >= 5 and parts[0] == "net"
            if not (iface_slot and parts[2] in ("conf", "neigh")):
                raise BadInput(f"sysctl key {key!r}: '/' only allowed in an interface name")
            ifname = part.replace("/", ".")
            if not is_ifname(ifname) or ".." in ifname:
                raise BadInput(f"sysctl key {key!r}: bad interface name {ifname!r}")
            out.append(ifname)
        elif not _COMPONENT.fullmatch(part):
            # an interface slot may hold any interface name lbtune accepts (vlan@bond0)
            iface_slot = i == 3 and len(parts) >= 5 and parts[0] == "net"
            if not (iface_slot and parts[2] in ("conf", "neigh") and is_ifname(part)):
                raise BadInput(f"sysctl key {key!r}: not a dotted sysctl name")
            out.append(part)
        else:
            out.append(part)
    if len(out) < 2:
        raise BadInput(f"sysctl key {key!r}: not a dotted sysctl name")
    return "/proc/sys/" + "/".join(out)


def conf_key(iface: str, name: str, family: str = "ipv4") -> str:
    """`net.ipv4.conf.IF.NAME` in sysctl(8) spelling (a dot in IF becomes '/')."""
    return f"net.{family}.conf.{iface.replace('.', '/')}.{name}"


def effective_conf(fs: HostFS, iface: str, name: str) -> Optional[tuple[int, int, int]]:
    """(effective, all, interface) of an IPv4 interface setting whose effective value is
    max(all, interface): rp_filter, arp_ignore, arp_announce (net/ipv4/devinet.c
    IN_DEV_MAXCONF). None when either value cannot be read."""
    all_v = fs.read_int(sysctl_path(conf_key("all", name)))
    own = fs.read_int(sysctl_path(conf_key(iface, name)))
    if all_v is None or own is None:
        return None
    return max(all_v, own), all_v, own
