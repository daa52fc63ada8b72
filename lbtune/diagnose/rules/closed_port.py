"""Rules for packets nothing takes: UDP datagrams with no socket, TCP SYNs reset, addresses
not this host's (a DR real server without the VIP on lo).

The kernel drops a datagram to a UDP port without a socket (`Udp.NoPorts`, `Udp6.NoPorts`,
drop reason NO_SOCKET; IPv4 answers with ICMP port unreachable) and answers a TCP segment
for which no socket exists with a reset (`Tcp.OutRsts`, reset reason NO_SOCKET). Typical
causes: the service is down (a dead DNS resolver, a crashed daemon), it listens on another
address (on a DR real server: it listens on the real IP, not on the VIP on `lo`), or the
clients use the wrong port.

A packet whose destination address is not the host's, on a host that does not forward, is
dropped in routing (`Ip.InAddrErrors`, drop reason IP_INADDRERRORS): on an IPVS DR real
server, the director's traffic to a VIP that is not on `lo` (`addr-not-local`).

Counters do not carry the port: the rules say "port unknown" and the probes name it
(`lbtune.diagnose.probe_evidence.explain`: `icmp:icmp_send` carries the UDP ports of the
port-unreachable it answers with, `tcp:tcp_send_reset` the ports of a NO_SOCKET reset).

Level: a few stray datagrams or resets a second are the normal noise of scanners, traceroute
and late packets of closed connections; NOISE_PER_S and more is a finding (warn), FAIL_PER_S
and more a fail. A single capture counts since boot, where that noise adds up to millions
and an average over the uptime hides any burst: there the rules report (info) only when
the closed-port packets are at least SINCE_BOOT_SHARE of the protocol's traffic (UDP: of
the datagrams received; TCP: of the connections accepted plus these resets). Tcp.OutRsts
also counts the resets of aborted connections: the TCP rule subtracts the
TcpExt.TCPAbortOn* resets the host sent itself.
"""

from __future__ import annotations

from typing import Iterator, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import APPLICATION, MANUAL, Finding, Fix
from lbtune.diagnose.rules.base import finding, moved, since, snmp_ev
from lbtune.diagnose.rules.registry import rule
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.vocab import Level

NOISE_PER_S = 10.0  # below: scanners, traceroute, stray late packets; no finding
FAIL_PER_S = 100.0
SINCE_BOOT_SHARE = 0.05  # a capture without a window: share of the traffic since boot
UNKNOWN_PORT = "port unknown"
NO_PORT_SAID = " The counters do not say which port: run with the probes for it."
# Resets that are not answers to segments for no socket: the host aborted a connection.
_ABORTS = (
    "TcpExt.TCPAbortOnData",
    "TcpExt.TCPAbortOnClose",
    "TcpExt.TCPAbortOnMemory",
    "TcpExt.TCPAbortOnLinger",
)


def level_of(ctx: Context, n: int, traffic: int) -> Optional[Level]:
    """warn/fail by rate; None below the noise floor (no finding). Since boot (no rate):
    info when `n` is at least SINCE_BOOT_SHARE of `traffic` (n included)."""
    if n <= 0:
        return None
    rate = ctx.rate(n)
    if rate is None or ctx.window.cumulative:
        return Level.INFO if n >= SINCE_BOOT_SHARE * max(traffic, 1) else None
    if rate < NOISE_PER_S:
        return None
    return Level.FAIL if rate >= FAIL_PER_S else Level.WARN


def port_fixes(proto: str, where: str) -> list[Fix]:
    """What makes the drops stop: something listening on the port (`where`: "port 53",
    "10.0.0.5:53", or UNKNOWN_PORT)."""
    listen = "a socket bound to" if proto == "udp" else "a listener on"
    what = "the port" if where == UNKNOWN_PORT else where
    check = "ss -ulpn" if proto == "udp" else "ss -tlpn"
    return [
        Fix(
            knob=f"nothing listens on the {proto} port" if where == UNKNOWN_PORT
            else f"nothing listens on {proto} {where}",
            current=None,
            desired=None,
            command=check,
            note=f"start the service that should answer on {what}, or bind it to the address "
            f"the clients use (the wildcard address takes all): the kernel needs {listen} "
            "that address and port. Clients sending to a wrong port: fix the clients.",
            scope=APPLICATION,
        ),
        Fix(
            knob="DR real server: VIP on lo and a listener on it",
            current=None,
            desired=None,
            command="ip -br addr show dev lo",
            note="on an IPVS DR real server the traffic arrives addressed to the VIP: the VIP "
            "must be on lo (ip addr add VIP/32 dev lo; lbtune ipvs realserver verify) and the "
            f"service must listen on the VIP or the wildcard address, not only the real IP "
            f"({check}).",
            scope=APPLICATION,
        ),
    ]


@rule("udp-no-port", "UDP datagrams to a port with no socket (NO_SOCKET)", profile_fix=False)
def udp_no_port(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    n4, n6 = w.snmp("Udp.NoPorts"), w.snmp("Udp6.NoPorts")
    total = n4 + n6
    received = w.snmp("Udp.InDatagrams") + w.snmp("Udp6.InDatagrams")
    level = level_of(ctx, total, received + total)
    if level is None:
        return
    ev = []
    if n4:
        ev.append(snmp_ev(ctx, "Udp.NoPorts"))
    if n6:
        ev.append(
            moved(ctx, "Udp6.NoPorts", n6, "/proc/net/snmp6", CounterRef(C.SNMP, ("Udp6.NoPorts",)))
        )
    yield finding(
        ctx,
        "udp-no-port",
        "UDP datagrams to a port nothing listens on",
        level,
        f"udp {UNKNOWN_PORT}",
        f"{total} datagrams dropped {since(ctx)} because no socket was bound to their "
        "destination port (kernel drop reason NO_SOCKET; IPv4 answers with ICMP port "
        f"unreachable).{NO_PORT_SAID}",
        total,
        "datagrams",
        ev,
        port_fixes("udp", UNKNOWN_PORT),
    )


@rule(
    "tcp-no-listener",
    "TCP segments answered with a reset: no socket for them (NO_SOCKET)",
    profile_fix=False,
)
def tcp_no_listener(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    resets = w.snmp("Tcp.OutRsts")
    aborts = sum(w.snmp(k) for k in _ABORTS)
    n = resets - aborts
    level = level_of(ctx, n, w.snmp("Tcp.PassiveOpens") + n)
    if level is None:
        return
    yield finding(
        ctx,
        "tcp-no-listener",
        "TCP resets for segments no socket takes",
        level,
        f"tcp {UNKNOWN_PORT}",
        f"{n} resets sent {since(ctx)} that no connection abort explains (Tcp.OutRsts "
        f"{resets} minus {aborts} TcpExt.TCPAbortOn*): segments, typically SYNs, for which no "
        f"socket exists were answered with a reset (reset reason NO_SOCKET).{NO_PORT_SAID}",
        n,
        "resets",
        [snmp_ev(ctx, "Tcp.OutRsts"), *(snmp_ev(ctx, k) for k in _ABORTS if w.snmp(k))],
        port_fixes("tcp", UNKNOWN_PORT),
    )


@rule(
    "addr-not-local",
    "packets to an address this host does not have, dropped (not forwarding): a DR real "
    "server without the VIP on lo",
    profile_fix=False,
)
def addr_not_local(ctx: Context) -> Iterator[Finding]:
    w = ctx.window
    n4, n6 = w.snmp("Ip.InAddrErrors"), w.snmp("Ip6.InAddrErrors")
    total = n4 + n6
    level = level_of(ctx, total, w.snmp("Ip.InReceives") + w.snmp("Ip6.InReceives"))
    if level is None:
        return
    ev = []
    if n4:
        ev.append(snmp_ev(ctx, "Ip.InAddrErrors"))
    if n6:
        ref = CounterRef(C.SNMP, ("Ip6.InAddrErrors",))
        ev.append(moved(ctx, "Ip6.InAddrErrors", n6, "/proc/net/snmp6", ref))
    yield finding(
        ctx,
        "addr-not-local",
        "Packets to an address that is not this host's",
        level,
        "ip",
        f"{total} packets dropped {since(ctx)} because their destination address is not "
        "this host's and it does not forward (kernel drop reason IP_INADDRERRORS). On an IPVS "
        "DR real server this is the director's traffic to a VIP that is not on lo: the "
        "director rewrites only the MAC, so the destination is still the VIP.",
        total,
        "packets",
        ev,
        [
            Fix(
                knob="VIP on lo (DR real server)",
                current=None,
                desired=None,
                command="ip addr add VIP/32 dev lo",
                note="with arp_ignore=1 and arp_announce=2 so that the real server does not "
                "answer ARP for it (lbtune ipvs realserver verify --vip VIP checks all three); "
                "elsewhere: a sender routes to the wrong host, or an address was removed",
                scope=MANUAL,
            )
        ],
    )
