"""The real-server side of DR: accept packets for the VIP, never answer ARP for it.

A DR director forwards the client's packet unchanged (destination still the VIP) to the
real server's MAC, so the real server must own the VIP, but on `lo` (or a dummy interface)
as a /32 (/128), never on the interface that faces the clients: with it there, or with
the kernel's default ARP behaviour, the real server answers ARP for the VIP and takes the
VIP's traffic away from the director. Settings (net/ipv4/devinet.c; effective value of
each is max(all, interface)):

- `arp_ignore` 1: answer ARP only for addresses on the interface the request came in on;
- `arp_announce` 2: never use the VIP as the source of an ARP request (the replies to
  clients have the VIP as source; with 0 the real server's ARP requests would announce
  VIP -> its own MAC to the router);
- `rp_filter`: loose (2) where strict (1) would drop VIP traffic whose route back is not
  via the facing interface (multi-homed real servers).

IPv6 needs none of the ARP settings: a neighbour solicitation is answered only for
addresses on the interface it arrives on (net/ipv6/ndisc.c), so a VIP on `lo` is silent.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lbtune.errors import BadInput
from lbtune.host import addr as addrs
from lbtune.host.arp import ArpAnswer
from lbtune.host.host import Host
from lbtune.host.ipvs import canonical_addr
from lbtune.host.sysctl import conf_key, effective_conf
from lbtune.tune.knobs.ipvs import ABSENT, PRESENT, AddressKnob, address_obj
from lbtune.tune.knobs.sysctl import SysctlKnob
from lbtune.tune.plan import Mode, Target
from lbtune.vocab import Level


@dataclass(frozen=True)
class RealServerSpec:
    """What `lbtune ipvs realserver` configures: VIPs on `dev`, ARP settings for `iface`."""

    vips: tuple[str, ...]  # compressed addresses
    iface: str  # the interface facing the director and clients
    dev: str = "lo"  # where the VIPs live
    rp_filter: bool = True  # loosen a strict rp_filter on `iface`

    @property
    def v4(self) -> tuple[str, ...]:
        return tuple(v for v in self.vips if ipaddress.ip_address(v).version == 4)

    @property
    def name(self) -> str:
        return f"ipvs realserver {','.join(self.vips)}"


def make_spec(
    vips: Sequence[str], iface: str, dev: str = "lo", rp_filter: bool = True
) -> RealServerSpec:
    out: list[str] = []
    for v in vips:
        try:
            ip = ipaddress.ip_address(v)
        except ValueError:
            raise BadInput(f"--vip {v!r}: not an IP address") from None
        if ip.is_loopback or ip.is_multicast or ip.is_unspecified:
            raise BadInput(f"--vip {v}: not a usable VIP")
        text = canonical_addr(v, "--vip")[1]
        if text not in out:
            out.append(text)
    if not out:
        raise BadInput("--vip: give at least one VIP")
    if iface == dev:
        raise BadInput(f"--iface {iface} and --dev {dev}: the VIP must not be on the facing "
                       "interface (the host would answer ARP for it)")
    return RealServerSpec(tuple(out), iface, dev, rp_filter)


def _prefix(vip: str) -> int:
    return ipaddress.ip_address(vip).max_prefixlen


def check_interfaces(host: Host, spec: RealServerSpec) -> None:
    names = set(addrs.link_names(host))
    for what, name in (("--iface", spec.iface), ("--dev", spec.dev)):
        if name not in names:
            raise BadInput(f"{what} {name}: no such interface here "
                           f"(have: {', '.join(sorted(names))})")


def realserver_targets(host: Host, spec: RealServerSpec) -> list[Target]:
    """VIPs on `dev`, arp_ignore >= 1 and arp_announce 2 on all and `iface`, and rp_filter
    loose on `iface` when it is strict now."""
    out = [Target(AddressKnob(address_obj(spec.dev, v, _prefix(v))), PRESENT,
                  f"accept packets for the VIP without answering ARP for it ({spec.dev})",
                  key=f"vip {v}") for v in spec.vips]
    if spec.v4:
        for scope in ("all", spec.iface):
            k = conf_key(scope, "arp_ignore")
            out.append(Target(SysctlKnob(k), "1", "answer ARP only for addresses on the "
                              "receiving interface, never for the VIP", key=k, mode=Mode.RAISE))
            k = conf_key(scope, "arp_announce")
            out.append(Target(SysctlKnob(k), "2", "never announce the VIP as ARP source "
                              "address", key=k))
        if spec.rp_filter:
            eff = effective_conf(host.fs, spec.iface, "rp_filter")
            if eff is not None and eff[0] == 1:
                k = conf_key(spec.iface, "rp_filter")
                out.append(Target(SysctlKnob(k), "2", "strict reverse-path filtering drops VIP "
                                  "traffic whose route back is not via this interface", key=k))
    return out


def teardown_targets(spec: RealServerSpec) -> list[Target]:
    """Remove the VIPs. ARP settings stay: harmless without the VIP (`lbtune rollback`
    restores them from the apply's journal)."""
    return [Target(AddressKnob(address_obj(spec.dev, v, _prefix(v))), ABSENT, "teardown",
                   key=f"vip {v}") for v in spec.vips]


@dataclass(frozen=True)
class Check:
    """One verdict of `realserver verify`."""

    name: str
    level: Level
    reason: str
    fix: str = ""


def _vip_checks(host: Host, spec: RealServerSpec, vip: str) -> list[Check]:
    full = _prefix(vip)
    hits = [a for a in addrs.addresses(host) if a.addr == vip]
    add = f"lbtune ipvs realserver apply --vip {vip} --iface {spec.iface}"
    name = f"vip {vip}"
    out: list[Check] = []
    elsewhere = [a for a in hits if a.ifname != spec.dev]
    for a in elsewhere:
        out.append(Check(name, Level.FAIL, f"VIP {vip} is on {a.ifname}: the host answers "
                         "ARP for it there whatever arp_ignore says, and clients bypass the "
                         "director", f"ip addr del {a.cidr} dev {a.ifname}"))
    mine = [a for a in hits if a.ifname == spec.dev]
    if not mine:
        out.append(Check(name, Level.FAIL, f"VIP {vip} is not on {spec.dev}: the kernel drops "
                         "the packets the director forwards here", add))
    for a in mine:
        if a.prefixlen != full:
            out.append(Check(name, Level.FAIL, f"VIP on {spec.dev} as /{a.prefixlen}: every "
                             f"address of {a.cidr} becomes local here, so replies to clients "
                             f"in it never leave", f"ip addr del {a.cidr} dev {spec.dev}; {add}"))
        else:
            out.append(Check(name, Level.PASS, f"VIP {vip}/{full} on {spec.dev}"))
    return out


def _conf_check(host: Host, iface: str, name: str, good: Callable[[int], Optional[Level]],
                why: str, fix: str) -> Check:
    eff = effective_conf(host.fs, iface, name)
    if eff is None:
        return Check(name, Level.SKIP, f"no net.ipv4.conf.{{all,{iface}}}.{name} here")
    value, all_v, own = eff
    level = good(value) or Level.PASS
    shown = f"effective {name} on {iface} = {value} (max of all={all_v}, {iface}={own})"
    if level is Level.PASS:
        return Check(name, level, shown)
    return Check(name, level, f"{shown}: {why}", fix)


def verify_realserver(
    host: Host, spec: RealServerSpec, arp: Optional[Sequence[ArpAnswer]] = None,
    arp_where: str = "",
) -> list[Check]:
    """Is this host a correct DR real server for the VIPs? `arp` are the answers a request
    for the (first IPv4) VIP got on the segment (from `arp_where`); None: not probed."""
    out: list[Check] = []
    for vip in spec.vips:
        out += _vip_checks(host, spec, vip)
    if spec.v4:
        apply = f"lbtune ipvs realserver apply --vip {spec.v4[0]} --iface {spec.iface}"
        out.append(_conf_check(
            host, spec.iface, "arp_ignore",
            lambda v: Level.FAIL if v == 0 else (None if v in (1, 2) else Level.WARN),
            "0 answers ARP for the VIP on lo and steals it from the director; values above 2 "
            "change which of the host's own addresses are answered", apply))
        out.append(_conf_check(
            host, spec.iface, "arp_announce", lambda v: None if v == 2 else Level.FAIL,
            "ARP requests may carry the VIP as source address and teach the router VIP -> "
            "this host", apply))
        out.append(_conf_check(
            host, spec.iface, "rp_filter", lambda v: Level.WARN if v == 1 else None,
            "strict mode drops VIP traffic whose route back is not via this interface "
            "(multi-homed real servers)", apply))
        out.append(_arp_check(host, spec, arp, arp_where))
    return out


def _arp_check(host: Host, spec: RealServerSpec, arp: Optional[Sequence[ArpAnswer]],
               where: str) -> Check:
    vip = spec.v4[0]
    if arp is None:
        return Check("arp", Level.SKIP, f"ARP for {vip} not probed: it needs a host on the "
                     "segment (--arp-from NETNS, or `lbtune ipvs selftest` from a client)")
    own = {m for m in (addrs.link_mac(host, n) for n in addrs.link_names(host)) if m}
    mine = [a.mac for a in arp if a.mac in own]
    others = ", ".join(a.mac for a in arp) or "nobody"
    if mine:
        return Check("arp", Level.FAIL, f"this host answered an ARP request for {vip} "
                     f"{where} (MAC {mine[0]}): it takes the VIP's traffic from the director",
                     f"lbtune ipvs realserver apply --vip {vip} --iface {spec.iface}")
    return Check("arp", Level.PASS, f"this host does not answer ARP for {vip} {where} "
                 f"(answered by: {others})")
