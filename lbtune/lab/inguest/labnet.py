"""The lab network: a client, N directors and N real servers as namespaces on one bridge.

```
             bridge lab-br0 (guest init namespace, no address)
   +-----------+-----------+-----------+-----------+
 lab-client  lab-dir1    lab-rs1     lab-rs2 ...      one namespace per node,
 10.77.0.10  10.77.0.2   10.77.0.11  10.77.0.12       eth0 = veth peer of lbp-<node>
                 VIP 10.77.0.100 (director eth0 in DR/proxy; lo /32 on real servers in DR)
```

One flat layer-2 segment is the classic one-arm DR setup: the client ARPs for the VIP on the
same wire the real servers sit on, which is exactly where a wrong `arp_ignore` lets a real
server steal the VIP. Several directors (for a VRRP pair later) and per-server egress limits
(`rate_mbit`, a tbf qdisc: unequal servers) are part of the plan from the start.

`plan_topology` only computes names and addresses (pure, unit-tested); `build_topology` and
`teardown_topology` make and remove it with `ip` argument lists. Namespaces are named (in
/run/netns), so `lbtune --netns lab-rs1 ...` works on them like on any host namespace.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

from lbtune.errors import BadInput
from lbtune.lab.inguest.shell import Shell

ROLE_CLIENT = "client"
ROLE_DIRECTOR = "director"
ROLE_SERVER = "realserver"

BRIDGE = "lab-br0"
SUBNET = "10.77.0.0/24"
MAX_SERVERS = 32
MAX_DIRECTORS = 4
# Host numbers in the subnet: directors from 2, client 10, real servers from 11, VIP 100.
_DIRECTOR_BASE, _CLIENT_HOST, _SERVER_BASE, _VIP_HOST = 2, 10, 11, 100
IFACE = "eth0"  # the node's interface inside its namespace


@dataclass(frozen=True)
class Node:
    """One lab machine: a network namespace with one interface on the lab bridge."""

    name: str  # "client", "dir1", "rs1": also the name nginx puts in its replies
    role: str  # ROLE_CLIENT, ROLE_DIRECTOR or ROLE_SERVER
    netns: str  # "lab-rs1"
    address: str  # "10.77.0.11"
    mac: str  # fixed, so neighbour tables say at a glance who answered ARP
    bridge_port: str  # the veth end on the bridge, in the guest's init namespace
    iface: str = IFACE
    rate_mbit: Optional[int] = None  # egress limit of a real server (tbf), None = line rate


@dataclass(frozen=True)
class Topology:
    """Names and addresses of the whole lab (no kernel state)."""

    bridge: str
    prefix: int
    vip: str
    client: Node
    directors: tuple[Node, ...]
    servers: tuple[Node, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.client, *self.directors, *self.servers)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise BadInput(f"lab topology has no node {name!r}")


def _mac(host_number: int) -> str:
    # locally administered unicast (02:...), "LB" in the middle, the host number at the end
    return f"02:4c:42:00:00:{host_number:02x}"


def plan_topology(
    servers: int = 3,
    directors: int = 1,
    rates: Optional[Sequence[Optional[int]]] = None,
    subnet: str = SUBNET,
    bridge: str = BRIDGE,
) -> Topology:
    """The lab's names and addresses for `servers` real servers and `directors` directors.

    rates: per real server egress limit in Mbit/s (None entries: unlimited). BadInput for
    counts outside 1..32 servers, 1..4 directors, or rates of the wrong length.
    """
    if not 1 <= servers <= MAX_SERVERS:
        raise BadInput(f"--servers {servers}: the lab runs 1 to {MAX_SERVERS} real servers")
    if not 1 <= directors <= MAX_DIRECTORS:
        raise BadInput(f"{directors} directors: the lab runs 1 to {MAX_DIRECTORS}")
    if rates is not None and len(rates) != servers:
        raise BadInput(f"{len(rates)} rate limits for {servers} real servers")
    for rate in rates or ():
        if rate is not None and rate <= 0:
            raise BadInput(f"rate limit {rate} Mbit/s: must be positive")
    net = ipaddress.ip_network(subnet)
    hosts = list(net.hosts())

    def node(name: str, role: str, number: int, rate: Optional[int] = None) -> Node:
        return Node(
            name=name,
            role=role,
            netns=f"lab-{name}",
            address=str(hosts[number - 1]),
            mac=_mac(number),
            bridge_port=f"lbp-{name}",
            rate_mbit=rate,
        )

    return Topology(
        bridge=bridge,
        prefix=net.prefixlen,
        vip=str(hosts[_VIP_HOST - 1]),
        client=node("client", ROLE_CLIENT, _CLIENT_HOST),
        directors=tuple(
            node(f"dir{i + 1}", ROLE_DIRECTOR, _DIRECTOR_BASE + i) for i in range(directors)
        ),
        servers=tuple(
            node(f"rs{i + 1}", ROLE_SERVER, _SERVER_BASE + i, (rates or [None] * servers)[i])
            for i in range(servers)
        ),
    )


def existing_netns(shell: Shell) -> set[str]:
    """Names of the namespaces in /run/netns (as `ip netns list` shows them)."""
    out = shell.run(["ip", "netns", "list"]).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def build_topology(topo: Topology, shell: Optional[Shell] = None) -> None:
    """Create the bridge and every node; any leftover of an earlier lab is removed first.

    `ip -batch` keeps it to one process per namespace: a process start costs ~0.1 s in the
    single-CPU UML guest, and one command per step made this take 6 s instead of ~1 s.
    """
    sh = shell or Shell()
    teardown_topology(topo, sh)
    root: list[list[str]] = [
        ["link", "add", topo.bridge, "type", "bridge", "forward_delay", "0"],
        ["link", "set", topo.bridge, "up"],
    ]
    for n in topo.nodes:
        root += [
            ["netns", "add", n.netns],
            ["link", "add", n.bridge_port, "type", "veth", "peer", "name", n.iface,
             "netns", n.netns],
            ["link", "set", n.bridge_port, "master", topo.bridge, "up"],
        ]  # fmt: skip
    sh.ip_batch(root)
    for n in topo.nodes:
        lines = [
            ["link", "set", "lo", "up"],
            # no IPv6 link-local address: no DAD, router or MLD chatter in the counters
            ["link", "set", n.iface, "addrgenmode", "none"],
            ["link", "set", n.iface, "address", n.mac],
            ["addr", "add", f"{n.address}/{topo.prefix}", "dev", n.iface],
            ["link", "set", n.iface, "up"],
        ]
        sh.ip_batch(lines, n.netns)
        if n.rate_mbit is not None:
            sh.check(
                ["tc", "qdisc", "replace", "dev", n.iface, "root", "tbf",
                 "rate", f"{n.rate_mbit}mbit", "burst", "64kb", "latency", "50ms"],
                n.netns,
            )  # fmt: skip


def teardown_topology(topo: Topology, shell: Optional[Shell] = None) -> None:
    """Remove every node's namespace (its veth pair goes with it) and the bridge; idempotent."""
    sh = shell or Shell()
    present = existing_netns(sh)
    lines = [["netns", "del", n.netns] for n in topo.nodes if n.netns in present]
    links = set(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else set()
    lines += [["link", "del", n.bridge_port] for n in topo.nodes if n.bridge_port in links]
    if topo.bridge in links:
        lines.append(["link", "del", topo.bridge])
    if lines:
        sh.ip_batch(lines, force=True)


def link_bytes(topo: Topology, node: Node) -> tuple[int, int]:
    """(bytes the node sent, bytes it received), read on its bridge port in the init namespace.

    The bridge port is the other end of the node's veth: what the port receives, the node
    sent. Used to show that DR replies bypass the director.
    """
    base = f"/sys/class/net/{node.bridge_port}/statistics"
    with open(f"{base}/rx_bytes", encoding="ascii") as rx, open(
        f"{base}/tx_bytes", encoding="ascii"
    ) as tx:
        return int(rx.read()), int(tx.read())
