"""The lab's one door to IPVS DR: a declarative service, the director and the real servers.

`LabService` is the same shape as an `lbtune ipvs` configuration (VIP, port, protocol,
scheduler, real servers with weights), and converts to and from that mapping
(`to_config`/`service_from_config`), so switching the two functions below to
`lbtune ipvs apply CONFIG` and `lbtune ipvs realserver apply --vip VIP --iface IF` is a
change of this module only. Until then they use `ipvsadm`, `ip` and `sysctl` argument lists:

* `configure_director(netns, service)`: the VIP on the director's interface, a fresh IPVS
  table in its namespace (the lab owns the whole table, so it is cleared first), one
  service, and every real server with `-g` (direct routing) and its weight;
* `configure_realserver(netns, vip, iface)`: the VIP as /32 on `lo`, `arp_ignore=1` and
  `arp_announce=2` on `all` and on the facing interface (the kernel uses the max of both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from lbtune.errors import BadInput
from lbtune.lab.shell import Shell

# IPVS schedulers of the lab kernel (ip_vs_<name>.ko, all built as modules in Debian's UML).
SCHEDULERS = ("rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf",
              "mh", "twos")  # fmt: skip
MAX_WEIGHT = 65535


@dataclass(frozen=True)
class RealServer:
    address: str
    weight: int = 1


@dataclass(frozen=True)
class LabService:
    """One virtual service forwarded by direct routing to its real servers."""

    vip: str
    port: int
    scheduler: str
    servers: tuple[RealServer, ...]
    protocol: str = "tcp"

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise BadInput(
                f"--scheduler {self.scheduler!r}: not an IPVS scheduler "
                f"(one of {', '.join(SCHEDULERS)})"
            )
        if self.protocol not in ("tcp", "udp"):
            raise BadInput(f"protocol {self.protocol!r}: the lab serves tcp or udp")
        if not 1 <= self.port <= 65535:
            raise BadInput(f"port {self.port}: out of range")
        for s in self.servers:
            if not 0 <= s.weight <= MAX_WEIGHT:
                raise BadInput(f"weight {s.weight} of {s.address}: 0 to {MAX_WEIGHT}")
        if not any(s.weight for s in self.servers):
            raise BadInput("every real server has weight 0: nothing would be served")

    def to_config(self) -> dict[str, Any]:
        """The `lbtune ipvs` configuration mapping (TOML `[[service]]` table) of this service."""
        return {
            "service": [
                {
                    "vip": self.vip,
                    "port": self.port,
                    "protocol": self.protocol,
                    "scheduler": self.scheduler,
                    "forward": "dr",
                    "server": [{"address": s.address, "weight": s.weight} for s in self.servers],
                }
            ]
        }


def service_from_config(config: Mapping[str, Any]) -> LabService:
    """The inverse of `LabService.to_config` (one `[[service]]` with `forward = "dr"`)."""
    services = config.get("service")
    if not isinstance(services, list) or len(services) != 1:
        raise BadInput("lab configuration: exactly one [[service]] expected")
    svc = services[0]
    if svc.get("forward", "dr") != "dr":
        raise BadInput(f"lab configuration: forward {svc.get('forward')!r}, the lab runs dr")
    try:
        return LabService(
            vip=str(svc["vip"]),
            port=int(svc["port"]),
            protocol=str(svc.get("protocol", "tcp")),
            scheduler=str(svc["scheduler"]),
            servers=tuple(
                RealServer(str(s["address"]), int(s.get("weight", 1))) for s in svc["server"]
            ),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise BadInput(f"lab configuration: {e}") from None


def load_ipvs_modules(scheduler: str, shell: Optional[Shell] = None) -> None:
    """ip_vs and the scheduler's module, loaded in the guest (modules are kernel-global)."""
    sh = shell or Shell()
    sh.check(["modprobe", "ip_vs"])
    sh.check(["modprobe", f"ip_vs_{scheduler}"])


def configure_director(
    netns: str, service: LabService, iface: str = "eth0", shell: Optional[Shell] = None
) -> None:
    """Make netns the DR director of service: VIP on iface, IPVS service and real servers."""
    sh = shell or Shell()
    load_ipvs_modules(service.scheduler, sh)
    sh.check(["ip", "addr", "replace", f"{service.vip}/32", "dev", iface], netns)
    flag = "-t" if service.protocol == "tcp" else "-u"
    vs = f"{service.vip}:{service.port}"
    sh.check(["ipvsadm", "-C"], netns)
    sh.check(["ipvsadm", "-A", flag, vs, "-s", service.scheduler], netns)
    for s in service.servers:
        rs = f"{s.address}:{service.port}"  # DR cannot remap ports
        sh.check(["ipvsadm", "-a", flag, vs, "-r", rs, "-g", "-w", str(s.weight)], netns)


def configure_realserver(
    netns: str, vip: str, iface: str = "eth0", shell: Optional[Shell] = None
) -> None:
    """Make netns accept DR traffic for vip without answering ARP for it."""
    sh = shell or Shell()
    sh.check(["ip", "addr", "replace", f"{vip}/32", "dev", "lo"], netns)
    for dev in ("all", iface):
        sh.sysctl(netns, f"net.ipv4.conf.{dev}.arp_ignore", 1)
        sh.sysctl(netns, f"net.ipv4.conf.{dev}.arp_announce", 2)


def break_realserver_arp(netns: str, iface: str = "eth0", shell: Optional[Shell] = None) -> None:
    """The classic DR mistake, on purpose (`lab run --fault wrong-arp`): ARP defaults back."""
    sh = shell or Shell()
    for dev in ("all", iface):
        sh.sysctl(netns, f"net.ipv4.conf.{dev}.arp_ignore", 0)
        sh.sysctl(netns, f"net.ipv4.conf.{dev}.arp_announce", 0)


def ipvs_connections(netns: str, service: LabService, shell: Optional[Shell] = None) -> dict[
    str, int
]:
    """Connections IPVS scheduled to each real server address (`ipvsadm -L -n --stats`)."""
    sh = shell or Shell()
    flag = "-t" if service.protocol == "tcp" else "-u"
    out = sh.check(
        ["ipvsadm", "-L", "-n", "--stats", "--exact", flag, f"{service.vip}:{service.port}"], netns
    )
    conns: dict[str, int] = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0] == "->" and ":" in words[1]:
            addr = words[1].rsplit(":", 1)[0]
            conns[addr] = int(words[2]) if words[2].isdigit() else 0
    return conns
