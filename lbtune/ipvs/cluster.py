"""The `[cluster]` section of the IPVS config: N active directors behind a router's ECMP.

Every director runs the same config (the same services, real servers and weights) and
announces the VIPs to the router(s) over BGP while its health gate passes; the router
spreads flows over the directors that announce (ECMP, `fib_multipath_hash_policy = 1`).
What makes a flow survive the loss of its director is the policy the config sets on every
director (lbtune.ipvs.failover checks it): `mh` on every service, `sloppy_tcp`, optionally
the sync daemon. This module reads the section:

    [cluster]
    asn = 65001                 # the directors' AS number
    hold_time = 9               # BGP hold time, s (optional; BIRD's default 240)
    sync = false                # the IPVS connection sync daemon runs between the directors

    [[cluster.director]]        # each director: a name (`--director NAME`) and its address
    name = "dir1"               # toward the routers (BGP source; its router id when IPv4)
    address = "10.0.1.11"
    # router_id = "10.0.1.11"   # needed when the address is IPv6

    [[cluster.router]]          # each router peer: its address and AS number
    address = "10.0.1.1"
    asn = 65000
    # multihop = false          # true: not on a shared segment with the directors

    [cluster.bfd]               # BFD on every BGP session (on by default)
    enabled = true
    interval = 100              # ms, transmit and receive
    multiplier = 3              # missed packets before the session is down

    [cluster.gate]              # lbtune's health gate (`lbtune ipvs gate`)
    interval = 1                # s between checks
    rise = 3                    # passing checks in a row before a VIP is announced
    fall = 2                    # failing checks in a row before it is withdrawn
    timeout = 1                 # s per real-server connect
    min_real_servers = 1        # reachable real servers every TCP service needs

Every value ends up in a BIRD config (lbtune.ipvs.bird): names are one plain word,
addresses canonical IP addresses, numbers numbers; anything else is refused here, one
line naming the file and the entry.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from lbtune.errors import BadInput
from lbtune.ipvs.tomldoc import Doc

CLUSTER_KEYS = ("asn", "hold_time", "sync", "director", "router", "bfd", "gate")
DIRECTOR_KEYS = ("name", "address", "router_id")
ROUTER_KEYS = ("address", "asn", "multihop")
BFD_KEYS = ("enabled", "interval", "multiplier")
GATE_KEYS = ("interval", "rise", "fall", "timeout", "min_real_servers")
MAX_ASN = 4294967294  # 4-byte AS numbers; 4294967295 is reserved (RFC 7300)
MAX_PEERS = 64
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


@dataclass(frozen=True)
class Director:
    name: str  # one word: letters, digits, `_ . -`
    address: str  # canonical; the BGP source address
    router_id: str  # IPv4 dotted quad (BIRD's router id)

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.address).version


@dataclass(frozen=True)
class Router:
    address: str
    asn: int
    multihop: bool = False

    @property
    def family(self) -> int:
        return ipaddress.ip_address(self.address).version


@dataclass(frozen=True)
class Bfd:
    enabled: bool = True
    interval_ms: int = 100
    multiplier: int = 3

    @property
    def detection_ms(self) -> int:
        """How long a lost peer takes to be noticed: interval x multiplier."""
        return self.interval_ms * self.multiplier


@dataclass(frozen=True)
class Gate:
    interval: float = 1.0
    rise: int = 3
    fall: int = 2
    timeout: float = 1.0
    min_real_servers: int = 1


@dataclass(frozen=True)
class ClusterConfig:
    asn: int
    directors: tuple[Director, ...]
    routers: tuple[Router, ...]
    bfd: Bfd = Bfd()
    gate: Gate = Gate()
    hold_time: int = 0  # 0: BIRD's default
    sync: bool = False

    def director(self, name: str, source: str = "config") -> Director:
        """The director called `name`; BadInput naming the ones there are."""
        for d in self.directors:
            if d.name == name:
                return d
        names = ", ".join(d.name for d in self.directors)
        raise BadInput(f"{source}: no director {name!r} in [cluster] (directors: {names})")


def _address(doc: Doc, key: str) -> str:
    return doc.addr(key)[1]


def parse_cluster(raw: Any, source: str) -> ClusterConfig:
    """Validate the `[cluster]` table; BadInput names the first problem."""
    c = Doc(raw, source, "[cluster]", CLUSTER_KEYS)
    asn = c.integer("asn", None, 1, MAX_ASN)
    hold = c.integer("hold_time", 0, 0, 65535)
    if 0 < hold < 3:
        raise c.fail(f"hold_time = {hold}: 0 (BIRD's default) or 3 to 65535 s (RFC 4271)")
    sync = c.boolean("sync", False)

    directors: list[Director] = []
    for i, draw in enumerate(c.tables("director")):
        d = Doc(draw, source, f"[[cluster.director]] #{i + 1}", DIRECTOR_KEYS)
        name = d.text("name", None)
        if not NAME.fullmatch(name):
            raise d.fail(f"name = {name!r}: one word of letters, digits and _ . - "
                         "(at most 63)")  # fmt: skip
        d.where = f"[[cluster.director]] {name}"
        address = _address(d, "address")
        if "router_id" in d.data:
            rid = d.text("router_id", None)
            try:
                router_id = str(ipaddress.IPv4Address(rid))
            except ValueError:
                raise d.fail(f"router_id = {rid!r}: an IPv4 address (BIRD's router id)") from None
        elif ipaddress.ip_address(address).version == 4:
            router_id = address
        else:
            raise d.fail("router_id is required for an IPv6 director (an IPv4 address)")
        if any(x.name == name for x in directors):
            raise d.fail(f"director {name} is listed twice")
        if any(x.address == address for x in directors):
            raise d.fail(f"address {address} is another director's")
        if any(x.router_id == router_id for x in directors):
            raise d.fail(f"router_id {router_id} is another director's")
        directors.append(Director(name, address, router_id))
    if not directors:
        raise c.fail("no [[cluster.director]]: list every director (name, address)")

    routers: list[Router] = []
    for i, rraw in enumerate(c.tables("router")):
        r = Doc(rraw, source, f"[[cluster.router]] #{i + 1}", ROUTER_KEYS)
        address = _address(r, "address")
        r.where = f"[[cluster.router]] {address}"
        if any(x.address == address for x in routers):
            raise r.fail(f"router {address} is listed twice")
        if any(x.address == address for x in directors):
            raise r.fail(f"router {address} is also a director's address")
        routers.append(Router(address, r.integer("asn", None, 1, MAX_ASN),
                              r.boolean("multihop", False)))
    if not routers:
        raise c.fail("no [[cluster.router]]: list the router(s) the directors peer with "
                     "(address, asn)")  # fmt: skip
    if len(directors) > MAX_PEERS or len(routers) > MAX_PEERS:
        raise c.fail(f"at most {MAX_PEERS} directors and {MAX_PEERS} routers")
    for d_ in directors:
        if not any(r_.family == d_.family for r_ in routers):
            raise c.fail(f"director {d_.name} ({d_.address}) has no router of its address "
                         "family to peer with")  # fmt: skip

    b = Doc(c.data.get("bfd", {}), source, "[cluster.bfd]", BFD_KEYS)
    bfd = Bfd(b.boolean("enabled", True), b.integer("interval", 100, 1, 60000),
              b.integer("multiplier", 3, 1, 255))
    g = Doc(c.data.get("gate", {}), source, "[cluster.gate]", GATE_KEYS)
    gate = Gate(g.number("interval", 1, 0.1, 3600), g.integer("rise", 3, 1, 100),
                g.integer("fall", 2, 1, 100), g.number("timeout", 1, 0.05, 60),
                g.integer("min_real_servers", 1, 0, 65535))
    if gate.timeout > gate.interval:
        raise g.fail(f"timeout = {gate.timeout:g} is longer than interval = "
                     f"{gate.interval:g}: a check must end before the next one")  # fmt: skip
    return ClusterConfig(asn, tuple(directors), tuple(routers), bfd, gate, hold, sync)

