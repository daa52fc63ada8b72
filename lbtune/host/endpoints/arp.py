"""Who answers ARP for an address: a real ARP request on the wire, and every reply to it.

A DR real server that answers ARP for the VIP steals the VIP from the director (clients,
or their router, send to the real server directly); a configuration check cannot prove it
does not, a request on the segment can. The request is an RFC 5227 probe (sender address
0.0.0.0) so that no host on the segment learns anything from it, while Linux still answers
it under the same arp_ignore rules as any request (net/ipv4/arp.c, arp_process). It goes
out through an AF_PACKET socket on the interface the route to the target uses, from the
calling thread's network namespace (see `lbtune.host.net.netns.NetnsThread`).
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import BadInput

ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
ARPOP_REQUEST, ARPOP_REPLY = 1, 2
_ARP = struct.Struct("!HHBBH6s4s6s4s")
BROADCAST = b"\xff" * 6


@dataclass(frozen=True)
class ArpAnswer:
    """One host that answered: its MAC and the interface the request went out of."""

    mac: str
    ifname: str


def _mac(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def route_iface(target: str) -> Optional[str]:
    """The interface this namespace routes `target` through (None: no route)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        try:
            routes = ipr.route("get", dst=target)
        except Exception:  # pyroute2 raises NetlinkError(ENETUNREACH) for no route
            return None
        for r in routes:
            oif = r.get_attr("RTA_OIF")
            if oif is not None:
                for link in ipr.get_links(oif):
                    return str(link.get_attr("IFLA_IFNAME"))
    return None


def arp_who_has(
    target: str, ifname: Optional[str] = None, timeout: float = 1.0, count: int = 2
) -> list[ArpAnswer]:
    """Every MAC that answers an ARP request for IPv4 address `target` within `timeout`.

    Sends `count` requests (one may be lost while a bridge learns) on `ifname`, default the
    interface of the route to `target`. Needs CAP_NET_RAW. Returns distinct answers, in the
    order they came.
    """
    try:
        tip = ipaddress.IPv4Address(target)
    except ValueError:
        raise BadInput(f"ARP check: {target!r} is not an IPv4 address") from None
    dev = ifname or route_iface(str(tip))
    if dev is None:
        raise BadInput(f"ARP check: no route to {tip} from here")
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    try:
        try:
            sock.bind((dev, ETH_P_ARP))
        except OSError as e:
            raise BadInput(f"ARP check: interface {dev}: {e.strerror}") from None
        own = sock.getsockname()[4][:6]
        arp = _ARP.pack(1, ETH_P_IP, 6, 4, ARPOP_REQUEST, own, b"\0" * 4, b"\0" * 6, tip.packed)
        frame = BROADCAST + own + struct.pack("!H", ETH_P_ARP) + arp
        answers: list[ArpAnswer] = []
        deadline = time.monotonic() + timeout
        gap = timeout / max(count, 1)
        next_send = time.monotonic()
        sent = 0
        while True:
            now = time.monotonic()
            if sent < count and now >= next_send:
                sock.send(frame)
                sent += 1
                next_send = now + gap
            if now >= deadline:
                break
            wait = min(deadline, next_send if sent < count else deadline) - now
            ready, _, _ = select.select([sock], [], [], max(wait, 0.0))
            if not ready:
                continue
            data = sock.recv(2048)
            if len(data) < 14 + _ARP.size:
                continue
            _h, _p, _hl, _pl, op, sha, spa, _tha, _tpa = _ARP.unpack_from(data, 14)
            if op == ARPOP_REPLY and spa == tip.packed:
                mac = _mac(sha)
                if all(a.mac != mac for a in answers):
                    answers.append(ArpAnswer(mac, dev))
        return answers
    finally:
        sock.close()
