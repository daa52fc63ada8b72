"""A complete BIRD 2 config for one director of a `[cluster]` (`ipvs export --format bird`).

The director announces each VIP as a host route (/32, /128) over BGP to every router of
its address family, with BFD on the sessions, and only while lbtune's health gate says the
VIP is healthy. The gate's switch is BIRD's own: each VIP is a `protocol static` that
starts `disabled`, and `lbtune ipvs gate` enables it (`enable lbtune_vip_...` on BIRD's
control socket) once the checks pass `rise` times in a row and disables it after `fall`
failures. A disabled static protocol has no route, so BGP withdraws the VIP; a BIRD that
restarts starts with every VIP withdrawn until the gate's next check. The BGP export filter
accepts nothing but those static host routes, and nothing is imported: the director only
announces.

Protocol names come from the addresses (`lbtune_vip_10_0_0_100`, `lbtune_router_10_0_1_1`),
so they stay the same when the config is reordered, and `vip_protocols` gives the gate the
same names. Every value written is a validated address, prefix, number or one of those
names (`_word`); a value that is anything else is refused before a line is written.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from lbtune.errors import BadInput
from lbtune.ipvs.cluster import ClusterConfig, Director, Router
from lbtune.ipvs.config import DirectorConfig

_WORD = re.compile(r"[A-Za-z0-9_.:/-]+")


def _word(value: object, what: str) -> str:
    """`value` as one BIRD word: letters, digits and `_ . : / -`, nothing that could end a
    statement (`;`), open or close a block, quote, comment or start a new line."""
    text = str(value)
    if not _WORD.fullmatch(text):
        raise BadInput(f"{what} {text!r}: not a word a BIRD config can carry")
    return text


def _symbol(prefix: str, address: str) -> str:
    return _word(prefix + re.sub(r"[^0-9A-Za-z]", "_", address), "protocol name")


@dataclass(frozen=True)
class AnnouncedVip:
    """A VIP the director announces: its host route and the static protocol that holds it."""

    address: str
    protocol: str  # lbtune_vip_10_0_0_100

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.address).version

    @property
    def prefix(self) -> str:
        return f"{self.address}/{32 if self.family == 4 else 128}"


def announced_vips(cfg: DirectorConfig) -> tuple[AnnouncedVip, ...]:
    """The VIPs of `cfg` in config order: every address service's address, then the
    [[vip]] addresses no service has; each once."""
    seen: list[str] = []
    for svc in cfg.services:
        if svc.key.protocol != "fwmark" and svc.key.addr not in seen:
            seen.append(svc.key.addr)
    seen += [v.address for v in cfg.vips if v.address not in seen]
    return tuple(AnnouncedVip(a, _symbol("lbtune_vip_", a)) for a in seen)


def router_protocol(router: Router) -> str:
    return _symbol("lbtune_router_", router.address)


def _cluster(cfg: DirectorConfig) -> ClusterConfig:
    if cfg.cluster is None:
        raise BadInput(f"{cfg.source}: no [cluster] section: --format bird exports a "
                       "director of a cluster (docs/ipvs.md, \"A director cluster\")")
    return cfg.cluster


def _bfd(cluster: ClusterConfig, multihop: bool) -> list[str]:
    b = cluster.bfd
    timers = [f"        min rx interval {int(b.interval_ms)} ms;",
              f"        min tx interval {int(b.interval_ms)} ms;",
              f"        multiplier {int(b.multiplier)};"]
    out = ["protocol bfd lbtune_bfd {", "    interface \"*\" {", *timers, "    };"]
    if multihop:
        out += ["    multihop {", *timers, "    };"]
    return [*out, "}", ""]


def _bgp(cluster: ClusterConfig, me: Director, router: Router, channel: str) -> list[str]:
    out = [
        f"protocol bgp {router_protocol(router)} {{",
        f"    local {_word(me.address, 'director address')} as {int(cluster.asn)};",
        f"    neighbor {_word(router.address, 'router address')} as {int(router.asn)};",
    ]
    if router.multihop:
        out.append("    multihop;")
    if cluster.hold_time:
        out.append(f"    hold time {int(cluster.hold_time)};")
    out.append("    bfd on;" if cluster.bfd.enabled else "    bfd off;")
    out += [
        f"    {channel} {{",
        "        import none;",
        f"        export filter lbtune_vips{channel[-1]};",
        "        next hop self;",
        "    };",
        "}",
        "",
    ]
    return out


def bird_config(cfg: DirectorConfig, director: str) -> list[str]:
    """bird.conf lines for the director called `director` (see the module docstring)."""
    cluster = _cluster(cfg)
    me = cluster.director(director, cfg.source)
    routers = [r for r in cluster.routers if r.family == me.family]
    vips = [v for v in announced_vips(cfg) if v.family == me.family]
    other = [v for v in announced_vips(cfg) if v.family != me.family]
    if other:
        raise BadInput(f"{cfg.source}: VIP {other[0].address} is IPv{other[0].family} but "
                       f"director {me.name} peers over IPv{me.family}: one address family "
                       "per cluster")  # fmt: skip
    if not vips:
        raise BadInput(f"{cfg.source}: no VIP to announce (no address service, no [[vip]])")
    channel = "ipv4" if me.family == 4 else "ipv6"
    peers = ", ".join(f"{r.address} (AS {r.asn})" for r in routers)
    b = cluster.bfd
    bfd_text = (f"BFD {b.interval_ms} ms x {b.multiplier} (a lost peer is down after "
                f"{b.detection_ms} ms)" if b.enabled else "BFD off")
    lines = [
        f"# lbtune ipvs export --format bird --director {_word(me.name, 'director')}: "
        f"BIRD 2 config of director {_word(me.name, 'director')}",
        f"# AS {cluster.asn}; routers {peers}; {bfd_text}",
        "# The VIPs start withdrawn: `lbtune ipvs gate CONFIG --director "
        f"{_word(me.name, 'director')}` enables",
        "# each one's static protocol while its checks pass and disables it when they fail.",
        f"router id {_word(me.router_id, 'router id')};",
        "",
        "protocol device {",
        "}",
        "",
    ]
    if b.enabled:
        lines += _bfd(cluster, any(r.multihop for r in routers))
    for vip in vips:
        lines += [
            f"protocol static {vip.protocol} {{",
            "    disabled;",
            f"    {channel};",
            f"    route {_word(vip.prefix, 'VIP')} blackhole;",
            "}",
            "",
        ]
    prefixes = ", ".join(_word(v.prefix, "VIP") for v in vips)
    lines += [
        f"filter lbtune_vips{channel[-1]} {{",
        f"    if source = RTS_STATIC && net ~ [ {prefixes} ] then accept;",
        "    reject;",
        "}",
        "",
    ]
    for router in routers:
        lines += _bgp(cluster, me, router, channel)
    return lines[:-1]
