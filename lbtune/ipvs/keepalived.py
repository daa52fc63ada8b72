"""A complete keepalived.conf for one director of a VRRP pair (`ipvs export --peer`).

`pair_config(services, pair)` is the `virtual_server` blocks of lbtune.ipvs.export plus what
makes two directors a pair: a `vrrp_instance` holding the VIPs (unicast to the peer, VRRPv3
when the advert interval is below a second) and keepalived's `lvs_sync_daemon`, which runs
the kernel's IPVS connection-sync daemon as master on the VRRP master and as backup on the
other, so established connections keep their real server when the VIPs move.

Both directors start in `state BACKUP`; the higher priority (`--role master`) wins the
election. A director that comes back after a failure therefore first listens as backup,
which is when its sync backup daemon receives the connection table, and takes the VIPs
back (preemption) only after the master-down interval (3 x advert_int + skew) plus
`preempt_delay`. What stays the user's to write: authentication (VRRPv3 has none; unicast
with `check_unicast_src` is the usual fence), notify scripts, track_script/track_interface,
and email.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Sequence

from lbtune.errors import BadInput
from lbtune.host.ipvs.table import Timeouts, canonical_addr
from lbtune.host.net.ifname import check_ifname
from lbtune.ipvs.config import VirtualService
from lbtune.ipvs.export import conf_word, keepalived_blocks, lvs_timeouts

ROLES = ("master", "backup")
DEFAULT_PRIORITY = {"master": 150, "backup": 100}
DEFAULT_VRID = 51
MIN_ADVERT_V3, MAX_ADVERT_V3 = 0.01, 40.95  # VRRPv3: centiseconds, 12 bits
MAX_ADVERT_V2 = 255


@dataclass(frozen=True)
class PairSettings:
    """One director's side of the pair: who it is, who its peer is, how they elect."""

    peer: str  # the other director's address (unicast_peer)
    interface: str  # where VRRP, the VIPs and the sync daemon live
    role: str = "master"
    priority: Optional[int] = None  # None: 150 for master, 100 for backup
    advert_int: float = 1.0  # seconds; below 1 (or fractional) needs VRRPv3
    vrid: int = DEFAULT_VRID  # virtual_router_id, also the sync daemon's id
    src: Optional[str] = None  # own address (unicast_src_ip); None: interface primary
    vips: tuple[str, ...] = ()  # ADDR[/PREFIX] beyond the services' own addresses
    sync: bool = True  # lvs_sync_daemon on the interface
    preempt_delay: float = 0.0  # seconds a returning higher-priority node waits
    router_id: Optional[str] = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise BadInput(f"--role {self.role!r}: one of {', '.join(ROLES)}")
        _address(self.peer, "--peer")
        if self.src is not None:
            _address(self.src, "--src")
            if _address(self.src, "--src").version != _address(self.peer, "--peer").version:
                raise BadInput("--src and --peer must be of the same address family")
        if not 1 <= self.effective_priority <= 254:
            raise BadInput(f"--priority {self.priority}: 1 to 254 (255 is the address owner)")
        if not 1 <= self.vrid <= 255:
            raise BadInput(f"--vrid {self.vrid}: 1 to 255")
        if not MIN_ADVERT_V3 <= self.advert_int <= MAX_ADVERT_V2:
            raise BadInput(f"--advert-int {self.advert_int:g}: 0.01 to 255 seconds")
        if self.version == 3 and self.advert_int > MAX_ADVERT_V3:
            raise BadInput(f"--advert-int {self.advert_int:g}: VRRPv3 allows at most 40.95 s")
        if round(self.advert_int, 2) != self.advert_int:
            raise BadInput(f"--advert-int {self.advert_int:g}: whole centiseconds only")
        if not 0 <= self.preempt_delay <= 1000:
            raise BadInput(f"--preempt-delay {self.preempt_delay:g}: 0 to 1000 seconds")
        check_ifname(self.interface, "--interface")
        if self.router_id is not None:
            conf_word(self.router_id, "router_id")
        for vip in self.vips:
            _vip(vip)

    @property
    def effective_priority(self) -> int:
        return self.priority if self.priority is not None else DEFAULT_PRIORITY[self.role]

    @property
    def version(self) -> int:
        """VRRP version: 3 for sub-second or fractional adverts and for IPv6, else 2."""
        v6 = _address(self.peer, "--peer").version == 6
        return 3 if v6 or self.advert_int < 1 or self.advert_int != int(self.advert_int) else 2

    @property
    def instance(self) -> str:
        return f"lbtune_{self.vrid}"

    def master_down_interval(self) -> float:
        """How long the backup waits without adverts before it takes over (RFC 5798: 3 x
        advert_int + skew, skew = (256 - priority) / 256 x advert_int), seconds."""
        skew = (256 - self.effective_priority) / 256 * self.advert_int
        return 3 * self.advert_int + skew


def _address(text: str, what: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # inet_pton's strictness: no IPv6 scope (`fe80::1%eth0;...` is an ipaddress address)
    return ipaddress.ip_address(canonical_addr(text, what)[1])


def _vip(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    addr, _slash, prefix = text.partition("/")
    try:
        canonical_addr(addr, "--vip")
        if prefix and not (prefix.isascii() and prefix.isdigit()):
            raise ValueError(prefix)
        iface = ipaddress.ip_interface(text)
    except (BadInput, ValueError):
        raise BadInput(f"--vip {text!r}: not ADDR or ADDR/PREFIX") from None
    if "/" not in text:  # a bare address is a host route: /32 or /128
        return ipaddress.ip_interface(f"{text}/{iface.max_prefixlen}")
    return iface


def pair_vips(
    services: Sequence[VirtualService], extra: Sequence[str] = ()
) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    """The VIPs the pair moves: every service address (fwmark services have none) and the
    --vip ones, each once, in order."""
    out: list[ipaddress.IPv4Interface | ipaddress.IPv6Interface] = []
    for svc in services:
        if svc.key.protocol != "fwmark" and svc.key.addr:
            vip = _vip(svc.key.addr)
            if vip.ip not in {v.ip for v in out}:
                out.append(vip)
    for text in extra:
        vip = _vip(text)
        out = [v for v in out if v.ip != vip.ip] + [vip]
    return out


def _seconds(value: float) -> str:
    return f"{value:g}"


def pair_config(
    services: Sequence[VirtualService], pair: PairSettings, check_port: int = 0,
    timeouts: Optional[Timeouts] = None,
) -> list[str]:
    """keepalived.conf lines for one director of the pair (see the module docstring)."""
    vips = pair_vips(services, pair.vips)
    if not vips:
        raise BadInput("no VIP to move: the services are fwmark only; give --vip ADDR[/PREFIX]")
    family = _address(pair.peer, "--peer").version
    same = [v for v in vips if v.version == family]
    other = [v for v in vips if v.version != family]
    if not same:
        raise BadInput(f"no IPv{family} VIP for a pair whose peer {pair.peer} is IPv{family}")
    router_id = conf_word(pair.router_id or f"lbtune-{pair.role}", "router_id")
    peer, src = str(_address(pair.peer, "--peer")), pair.src and str(_address(pair.src, "--src"))
    dev = check_ifname(pair.interface, "--interface")
    lines = [
        f"# lbtune ipvs export --format keepalived: director {pair.role} of a VRRP pair",
        f"# peer {peer}; as backup it takes over after "
        f"{pair.master_down_interval():.2f} s without adverts",
        "# still yours to add: notify scripts, track_script/track_interface, email,",
        "# and a fence against foreign VRRP speakers (VRRPv3 has no authentication)",
        "global_defs {",
        f"    router_id {router_id}",
    ]
    if pair.sync:
        lines.append(f"    lvs_sync_daemon {dev} {pair.instance} id {int(pair.vrid)}")
    timeouts_line = lvs_timeouts(timeouts)
    if timeouts_line:
        lines.append(f"    {timeouts_line}")
    lines += [
        "}",
        "",
        f"vrrp_instance {pair.instance} {{",
        "    state BACKUP",
        f"    interface {dev}",
        f"    virtual_router_id {int(pair.vrid)}",
        f"    priority {int(pair.effective_priority)}",
        f"    advert_int {_seconds(pair.advert_int)}",
    ]
    if pair.version == 3:
        lines.append("    version 3")
    if pair.preempt_delay:
        lines.append(f"    preempt_delay {_seconds(pair.preempt_delay)}")
    if src:
        lines.append(f"    unicast_src_ip {src}")
    lines += ["    check_unicast_src", "    unicast_peer {", f"        {peer}", "    }"]
    lines.append("    virtual_ipaddress {")
    lines += [f"        {v.with_prefixlen} dev {dev}" for v in same]
    lines.append("    }")
    if other:
        lines.append("    virtual_ipaddress_excluded {")
        lines += [f"        {v.with_prefixlen} dev {dev}" for v in other]
        lines.append("    }")
    lines += ["}", ""]
    lines += keepalived_blocks(services, check_port)
    return lines


def both_directors(
    services: Sequence[VirtualService], pair: PairSettings, check_port: int = 0,
    timeouts: Optional[Timeouts] = None,
) -> dict[str, list[str]]:
    """`--pair`: the master's and the backup's config (pair.src and pair.peer swap)."""
    if pair.src is None:
        raise BadInput("--pair needs --src (this director's address) and --peer")
    from dataclasses import replace

    master = replace(pair, role="master", priority=None, router_id=None)
    backup = replace(pair, role="backup", priority=None, router_id=None, src=pair.peer,
                     peer=pair.src)  # fmt: skip
    return {
        "master": pair_config(services, master, check_port, timeouts),
        "backup": pair_config(services, backup, check_port, timeouts),
    }
