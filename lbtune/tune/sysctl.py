"""Sysctl knobs: `/proc/sys/<dotted key>`, with key validation a hostile profile cannot escape."""

from __future__ import annotations

import re
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.tune.knob import Knob, KnobError

# A component is what the kernel uses in /proc/sys names: letters, digits, _ and -; an
# interface name inside net.*.conf.<if>.* may also contain '.', written as '/' per sysctl(8).
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
_IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-.]{0,14}")
MAX_VALUE_LEN = 4096


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
            if not _IFNAME.fullmatch(ifname) or ".." in ifname:
                raise BadInput(f"sysctl key {key!r}: bad interface name {ifname!r}")
            out.append(ifname)
        elif not _COMPONENT.fullmatch(part):
            raise BadInput(f"sysctl key {key!r}: not a dotted sysctl name")
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


class SysctlKnob(Knob):
    kind = "sysctl"

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.path = sysctl_path(key)

    @property
    def per_netns(self) -> bool:  # type: ignore[override]
        # net.* entries visible inside a namespace are that namespace's own; fs., vm.,
        # kernel. are global even when read from inside one.
        return self.obj.startswith("net.")

    def netns_scoped(self, host: Host) -> bool:
        # Global net.* entries (net.core.rmem_max, ...) show up read-only (0444) inside a
        # namespace: they are the host's, not the namespace's.
        mode = host.fs.file_mode(self.path)
        return self.per_netns and (mode is None or bool(mode & 0o222))

    @property
    def interface(self) -> Optional[str]:
        parts = self.obj.split(".")
        if len(parts) >= 5 and parts[0] == "net" and parts[2] in ("conf", "neigh"):
            name = parts[3].replace("/", ".")
            return None if name in ("all", "default") else name
        return None

    def read(self, host: Host) -> Optional[str]:
        return host.fs.read(self.path)

    def check(self, host: Host, value: str) -> None:
        if len(value) > MAX_VALUE_LEN or "\n" in value or "\0" in value:
            raise BadInput(f"sysctl {self.obj}: value must be one short line")
        real = host.fs.realpath(self.path)
        if not real.startswith("/proc/sys/"):
            raise BadInput(f"sysctl {self.obj}: resolves outside /proc/sys; refusing")
        # An absent key (older kernel, module not loaded) is planned as "missing", not fatal.

    def write(self, host: Host, value: str) -> None:
        try:
            host.fs.write_attr(self.path, value)
        except OSError as e:
            raise KnobError(f"sysctl {self.obj}={value}: {e.strerror or e}") from None
