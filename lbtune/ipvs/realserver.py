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
from lbtune.host.endpoints.arp import ArpAnswer
from lbtune.host.host import Host
from lbtune.host.ipvs.table import canonical_addr
from lbtune.host.kernel.sysctl import conf_key, effective_conf
from lbtune.host.net import addr as addrs
from lbtune.host.net import route
from lbtune.host.net.ifname import check_ifname
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
    check_ifname(iface, "--iface")
    check_ifname(dev, "--dev")
    if iface == dev:
        raise BadInput(f"--iface {iface} and --dev {dev}: the VIP must not be on the facing "
                       "interface (the host would answer ARP for it)")
    return RealServerSpec(tuple(out), iface, dev, rp_filter)


def check_client(text: str) -> str:
    """`--client ADDR`: an IPv4 unicast address (rp_filter is IPv4 only)."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise BadInput(f"--client {text!r}: not an IP address") from None
    if ip.version != 4:
        raise BadInput(f"--client {text}: rp_filter is IPv4 only: give an IPv4 client")
    if ip.is_loopback or ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        raise BadInput(f"--client {text}: not a client address")
    return str(ip)


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
    arp_where: str = "", client: Optional[str] = None,
) -> list[Check]:
    """Is this host a correct DR real server for the VIPs? `arp` are the answers a request
    for the (first IPv4) VIP got on the segment (from `arp_where`); None: not asked.
    `client`: an IPv4 client address whose packets reverse-path filtering must pass (None:
    a stand-in for clients beyond the default route)."""
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
        for vip in spec.v4:
            out.append(_rp_filter_check(host, spec, vip, client, apply))
        out.append(_arp_check(host, spec, arp, arp_where))
    return out


# Stand-ins for "a client on the internet": the first of these the routing table sends
# via a default route (RFC 5737 documentation networks, never a real client).
SAMPLE_CLIENTS = ("192.0.2.1", "198.51.100.1", "203.0.113.1")


def _sample_client(host: Host, src: Optional[str]) -> Optional[str]:
    for addr in SAMPLE_CLIENTS:
        r = route.route_to(host, addr, src)
        if r is not None and r.prefixlen == 0 and r.unicast:
            return addr
    return None


def _rp_filter_check(host: Host, spec: RealServerSpec, vip: str, client: Optional[str],
                     apply: str) -> Check:
    """Would reverse-path filtering drop the director's packets for `vip` (source: the
    client) arriving on the facing interface? The kernel's own input route lookup answers
    when the VIP is local; the route back to the client explains the answer."""
    iface = spec.iface
    eff = effective_conf(host.fs, iface, "rp_filter")
    if eff is None:
        return Check("rp_filter", Level.SKIP, f"no net.ipv4.conf.{{all,{iface}}}.rp_filter here")
    value, all_v, own = eff
    shown = f"effective rp_filter on {iface} = {value} (max of all={all_v}, {iface}={own})"
    if value == 0:
        return Check("rp_filter", Level.PASS, f"{shown}: off")
    local = vip in addrs.local_addresses(host)
    src = vip if local else None
    who = client or _sample_client(host, src)
    if who is None:
        if value == 1:
            return Check("rp_filter", Level.WARN, f"{shown}: strict mode drops VIP traffic "
                         f"whose route back is not via {iface}, and there is no default route "
                         "here to check against: give --client ADDR", apply)
        return Check("rp_filter", Level.PASS, f"{shown} (loose)")
    whom = who if client else f"clients via the default route (tested with {who})"
    back = route.route_to(host, who, src)
    via = "no route" if back is None else \
        f"{back.prefix} via {', '.join(back.devices) or '?'}" + \
        (f" gw {back.gateway}" if back.gateway else "")
    if local:
        refused = route.input_refused(host, vip, who, iface) is not None
    else:  # the kernel only judges packets for a local address: apply its rule ourselves
        refused = back is None or not back.unicast or (value == 1 and iface not in back.devices)
    if not refused:
        return Check("rp_filter", Level.PASS, f"{shown}: packets for {vip} from {whom} "
                     f"arriving on {iface} pass it (route back: {via})")
    counter = "(TcpExt.IPReversePathFilter counts them)"
    if back is None or not back.unicast:
        return Check("rp_filter", Level.FAIL, f"{shown}: packets for {vip} from {whom} are "
                     f"dropped: there is no route back to {who} {counter}",
                     f"a route to the clients via {iface} (ip route add ... dev {iface})")
    if value == 1 and iface not in back.devices:
        return Check("rp_filter", Level.FAIL, f"{shown}: strict mode drops packets for {vip} "
                     f"from {whom} arriving on {iface}: the route back is {via}, not {iface} "
                     f"{counter}", f"{apply} (loosens it to 2), or route the clients via "
                     f"{iface}")
    return Check("rp_filter", Level.FAIL, f"{shown}: the kernel refuses packets for {vip} from "
                 f"{who} arriving on {iface} (route back: {via}; a martian source?)")


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
