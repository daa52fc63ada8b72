"""What breaks stateless failover in a director cluster: the findings of `ipvs plan`.

In a `[cluster]` the router spreads flows over N active directors (ECMP). When one director
goes, the router rehashes its flows onto the survivors, which have never seen them. A flow
survives only if a survivor (a) accepts a mid-flow packet and (b) sends it to the real
server that holds the connection. Kernel facts behind each finding
(net/netfilter/ipvs/ip_vs_mh.c, ip_vs_ctl.c, ip_vs_proto_tcp.c):

- `mh` (Maglev, 4.18+) hashes the client address (and port with `mh-port`) with a fixed
  key into a lookup table built from the real servers and their weights: every director
  with the same real servers and weights picks the same one. `sh` hashes as well but a
  change of the real-server set remaps most clients (Maglev moves only those of the
  changed server). rr, wrr, lc, wlc, ... pick by per-director state (a counter, the
  director's own connection counts): a survivor picks another real server.
- The table is filled by walking the real servers in the kernel's list order (newest
  first), so directors that added the same servers in another order can differ in a few
  slots: `lbtune compare` of their captures flags an order that differs.
- A real server at weight 0 (drained) keeps its slots (the table is built from its last
  non-zero weight) and is only skipped at lookup: without `mh-fallback` new flows hashed to
  it find no real server and are dropped; with it they go to the next one, the same one on
  every director.
- Overload (`upper` connection threshold) is counted per director: directors disagree on
  which real server is overloaded, and so on the pick.
- Without `net.ipv4.vs.sloppy_tcp = 1` a director creates a TCP connection only from a SYN:
  the survivor does not schedule the moved flow's next packet (the VIP is local, so the
  director's own stack answers it with a reset). `sloppy_sctp` likewise for SCTP. UDP
  needs neither.
- Persistence templates live in the director that made them (and the sync daemon's peers):
  a survivor without them picks by its scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass

from lbtune.ipvs.config import DirectorConfig, VirtualService

BREAKS = "breaks"  # a flow moved to a survivor is reset or goes to another real server
WARN = "warn"  # survives, with a cost or a condition the operator should know
CONSISTENT = ("mh", "sh")
SLOPPY_TCP = "net.ipv4.vs.sloppy_tcp"
SLOPPY_SCTP = "net.ipv4.vs.sloppy_sctp"


@dataclass(frozen=True)
class Finding:
    level: str  # BREAKS or WARN
    check: str  # scheduler, mh-fallback, thresholds, persistence, sloppy_tcp, ...
    object: str  # the service (tcp:10.0.0.100:80), sysctl or VIP it is about
    message: str  # one line, says what happens and what to set

    def text(self) -> str:
        return f"stateless failover {self.level}: {self.object}: {self.message}"


def _scheduler(svc: VirtualService) -> list[Finding]:
    obj = svc.key.ident
    if svc.scheduler == "mh":
        return []
    if svc.scheduler == "sh":
        return [Finding(WARN, "scheduler", obj,
                        "sh picks the same real server on every director, but a change of "
                        "the real servers remaps most clients (mh moves only the changed "
                        "server's): scheduler = \"mh\"")]  # fmt: skip
    return [Finding(BREAKS, "scheduler", obj,
                    f"{svc.scheduler} picks by this director's own state: a flow rehashed "
                    "to a survivor goes to another real server: scheduler = \"mh\" with "
                    "flags = [\"mh-fallback\"]")]  # fmt: skip


def _service(svc: VirtualService, sync: bool) -> list[Finding]:
    obj = svc.key.ident
    out = _scheduler(svc)
    if svc.scheduler == "mh" and "mh-fallback" not in svc.flags:
        out.append(Finding(WARN, "mh-fallback", obj,
                           "without mh-fallback a drained (weight 0) or overloaded real "
                           "server keeps its Maglev slots and new flows hashed to it are "
                           "dropped: flags = [\"mh-fallback\"]"))  # fmt: skip
    limited = [rs.address for rs in svc.servers if rs.upper]
    if limited and svc.scheduler in CONSISTENT:
        out.append(Finding(BREAKS, "thresholds", obj,
                           f"real server {limited[0]} has an upper connection threshold: "
                           "overload is counted per director, so directors pick "
                           "differently once one sees it overloaded: leave upper/lower "
                           "out"))  # fmt: skip
    if svc.persistence:
        if sync:
            out.append(Finding(WARN, "persistence", obj,
                               f"persistence {svc.persistence} s: a survivor has the "
                               "templates the sync daemon sent it, not those made since "
                               "its last sync message"))  # fmt: skip
        else:
            out.append(Finding(BREAKS, "persistence", obj,
                               f"persistence {svc.persistence} s: the templates live on "
                               "the director that made them; a survivor picks anew (set "
                               "[cluster] sync = true and run the sync daemon, or drop "
                               "persistence: mh without mh-port already keeps a client "
                               "on one real server)"))  # fmt: skip
    agents = [rs.address for rs in svc.servers if rs.agent and rs.agent != "none"]
    if agents:
        out.append(Finding(WARN, "weights", obj,
                           f"real server {agents[0]} has an agent: `lbtune ipvs adapt` "
                           "sets weights on each director on its own: directors whose "
                           "weights differ pick differently, and the gate sees the "
                           "adapted weights as drift from the config"))  # fmt: skip
    return out


def _sloppy(cfg: DirectorConfig) -> list[Finding]:
    sysctls = dict(cfg.sysctls)
    out = []
    protocols = {s.key.protocol for s in cfg.services}
    if protocols & {"tcp", "fwmark"} and sysctls.get(SLOPPY_TCP) != "1":
        out.append(Finding(BREAKS, "sloppy_tcp", SLOPPY_TCP,
                           "not set to 1: a survivor creates a TCP connection only from a "
                           "SYN, so a moved flow's next packet is not scheduled (the "
                           "director's own stack resets it): [sysctl] sloppy_tcp = 1"))
    if "sctp" in protocols and sysctls.get(SLOPPY_SCTP) != "1":
        out.append(Finding(BREAKS, "sloppy_sctp", SLOPPY_SCTP,
                           "not set to 1: a survivor creates an SCTP association only from "
                           "an INIT: [sysctl] sloppy_sctp = 1"))  # fmt: skip
    return out


def _gates(cfg: DirectorConfig) -> list[Finding]:
    """VIPs whose announcement the gate cannot tie to a check of their real servers."""
    out = []
    served = {s.key.addr for s in cfg.services if s.key.protocol != "fwmark"}
    for vip in cfg.vips:
        if vip.address not in served:
            out.append(Finding(WARN, "gate", vip.address,
                               "a [[vip]] with no service: its health gate is the table's "
                               "sync alone, no real server is checked"))  # fmt: skip
    for svc in cfg.services:
        if svc.key.protocol == "fwmark":
            out.append(Finding(WARN, "gate", svc.key.ident,
                               "a fwmark service has no VIP of its own: the gate checks "
                               "only that it is in the table and announces no address for "
                               "it; list its addresses as [[vip]]"))  # fmt: skip
        elif svc.key.protocol != "tcp":
            out.append(Finding(WARN, "gate", svc.key.ident,
                               f"the gate cannot check {svc.key.protocol} real servers "
                               "(it connects over TCP): the VIP is gated on the table's "
                               "sync alone for this service"))  # fmt: skip
    if not cfg.vips and not served:
        out.append(Finding(BREAKS, "gate", "[cluster]",
                           "no VIP to announce: no address service and no [[vip]]"))
    return out


def failover_findings(cfg: DirectorConfig) -> list[Finding]:
    """Everything in `cfg` that stops a flow from surviving its director's loss (BREAKS) or
    that the operator should know about it (WARN); empty for a config without [cluster]."""
    if cfg.cluster is None:
        return []
    out: list[Finding] = []
    for svc in cfg.services:
        out += _service(svc, cfg.cluster.sync)
    out += _sloppy(cfg)
    out += _gates(cfg)
    return out
