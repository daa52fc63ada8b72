"""`lbtune profile lint`: values in a profile that are harmful or pointless, and why.

The rules encode kernel behaviour, not taste: each finding says what the value does on a real
kernel (where a limit is capped by another, where a loop would starve user space, what was
removed). Without an inventory the checks use the profile alone; with one (and the data
interface) they also compare against the host: ring maximums, housekeeping CPUs left, and
whether the profile resolves at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.inventory import Inventory
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.tune.profile import (
    LB_ROLES,
    CpuLit,
    Profile,
    Setting,
    cpu_values,
    parse_cpu_expr,
    resolve,
)
from lbtune.vocab import Level

FAIL = Level.FAIL
WARN = Level.WARN

# Thresholds (see the reasons below for where they come from).
SOMAXCONN_MAX = 65535
SYN_BACKLOG_MAX = 65536
NETDEV_MAX_BACKLOG_MAX = 100_000
NETDEV_BUDGET_MAX = 2000
DEV_WEIGHT_MAX = 600
FIN_TIMEOUT_DEFAULT = 60

# (sysctl, largest sensible value, why a larger one is harmful or pointless)
UPPER_BOUNDS: tuple[tuple[str, int, str], ...] = (
    (
        "net.core.netdev_max_backlog",
        NETDEV_MAX_BACKLOG_MAX,
        "a per-CPU input queue this deep only adds latency (a million queued packets is "
        "seconds of delay at softirq speed) and memory; drops there (softnet_stat col 2) "
        "mean the CPU is too slow, fix placement/RPS instead (16k-64k is plenty)",
    ),
    (
        "net.core.netdev_budget",
        NETDEV_BUDGET_MAX,
        "net_rx_action stops after netdev_budget packets OR netdev_budget_usecs "
        "(2 jiffies by default); a budget this large removes the packet limit so every "
        "softirq round runs for the full time slice, starving user space on that CPU; "
        "300-1200 and netdev_budget_usecs are the knobs for time_squeeze",
    ),
    (
        "net.core.dev_weight",
        DEV_WEIGHT_MAX,
        "per-poll packet quota of the backlog (RPS/non-NAPI) device, default 64: one "
        "CPU's backlog can then monopolise a whole netdev_budget round and the other "
        "devices and user space wait; NAPI drivers ignore it (their weight is 64)",
    ),
    (
        "net.ipv4.tcp_fin_timeout",
        FIN_TIMEOUT_DEFAULT,
        f"above the default {FIN_TIMEOUT_DEFAULT}s: orphaned FIN-WAIT-2 sockets of "
        "vanished peers are kept longer, holding memory and ports; it does not affect "
        "TIME-WAIT (fixed 60s)",
    ),
)
SWAPPINESS_DEFAULT = 60
CONNTRACK_MAX_PER_BUCKET = 8
MIN_HOUSEKEEPING_CORES = 2


@dataclass(frozen=True)
class LintFinding:
    level: Level  # fail (the profile will not work or harms the host) | warn
    key: str  # profile key path, e.g. "sysctl.net.core.somaxconn"
    desired: str  # the profile's value
    reason: str


def _int(s: Optional[Setting]) -> Optional[int]:
    if s is None or not isinstance(s.value, str):
        return None
    fields = s.value.split()
    if len(fields) != 1:
        return None
    try:
        return int(fields[0])
    except ValueError:
        return None


def _text(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


class _Lint:
    def __init__(self, p: Profile, inv: Optional[Inventory], iface: Optional[str]) -> None:
        self.p = p
        self.inv = inv
        self.iface = iface
        self.out: list[LintFinding] = []

    def add(self, level: Level, key: str, value: object, reason: str) -> None:
        self.out.append(LintFinding(level, key, _text(value), reason))

    def sysctl_int(self, key: str) -> Optional[int]:
        return _int(self.p.sysctl.get(key))

    # ------------------------------------------------------------------ sysctl rules
    def sysctls(self) -> None:
        v = self.sysctl_int("net.core.somaxconn")
        if v is not None and v > SOMAXCONN_MAX:
            self.add(
                WARN,
                "sysctl.net.core.somaxconn",
                v,
                "far above any backlog an application asks for: the accept queue is "
                "min(listen() backlog, somaxconn), nginx asks 511 unless 'backlog=' is set and "
                f"HAProxy derives its backlog from maxconn; above {SOMAXCONN_MAX} it only lets a "
                "queue grow that clients have long given up on (watch ListenOverflows instead)",
            )
        v = self.sysctl_int("net.ipv4.tcp_max_syn_backlog")
        if v is not None and v > SYN_BACKLOG_MAX:
            cookies = self.sysctl_int("net.ipv4.tcp_syncookies")
            if cookies == 0:
                why = (
                    "with syncookies off a SYN flood fills a queue this large with half-open "
                    "requests (memory, retransmitted SYN-ACKs); keep tcp_syncookies=1"
                )
            else:
                why = (
                    "pointless: a listener's SYN queue is bounded by its accept backlog "
                    "(min(backlog, somaxconn)) and tcp_max_syn_backlog only matters while "
                    "syncookies are off; with tcp_syncookies=1 overflow is answered with cookies"
                )
            self.add(WARN, "sysctl.net.ipv4.tcp_max_syn_backlog", v, why)
        for key, limit, reason in UPPER_BOUNDS:
            v = self.sysctl_int(key)
            if v is not None and v > limit:
                self.add(WARN, f"sysctl.{key}", v, reason)
        v = self.sysctl_int("vm.swappiness")
        if v is not None and v > SWAPPINESS_DEFAULT:
            self.add(
                WARN,
                "sysctl.vm.swappiness",
                v,
                f"above the default {SWAPPINESS_DEFAULT}: the kernel prefers swapping anonymous "
                "memory over dropping page cache; on a load balancer that swaps out the "
                "balancer, keepalived and health checkers, so failover and every connection "
                "stall (LB hosts use 1-10)",
            )
        self._conntrack()
        for key, s in self.p.sysctl.items():
            parts = key.split(".")
            if parts[:2] == ["net", "ipv6"] and parts[-1] == "disable_ipv6" and _int(s) == 1:
                self.add(
                    WARN,
                    f"sysctl.{key}",
                    s.value,
                    "disabling IPv6 by sysctl removes ::1 from lo and breaks software that binds "
                    "[::] or ::1 (sshd, postfix, nginx 'listen [::]', rpcbind, some health "
                    "checks); leave it on and unconfigured, or boot with ipv6.disable=1",
                )
            if key == "net.ipv4.tcp_tw_recycle":
                self.add(
                    FAIL,
                    f"sysctl.{key}",
                    s.value,
                    "removed in Linux 4.12 (the key does not exist); it dropped SYNs from "
                    "clients behind NAT; use tcp_tw_reuse for outgoing connections",
                )
            forwarding = key == "net.ipv4.ip_forward" or key.endswith(".forwarding")
            if forwarding and self.p.role in LB_ROLES and _int(s) == 0:
                self.add(
                    FAIL,
                    f"sysctl.{key}",
                    s.value,
                    f"a {self.p.role} host must keep forwarding on; resolve refuses this profile",
                )

    def _conntrack(self) -> None:
        key = next(
            (
                k
                for k in ("net.netfilter.nf_conntrack_max", "net.nf_conntrack_max")
                if k in self.p.sysctl
            ),
            None,
        )
        if key is None:
            return
        cmax = self.sysctl_int(key)
        buckets = self.sysctl_int("net.netfilter.nf_conntrack_buckets")
        if cmax is None:
            return
        if buckets is None:
            self.add(
                WARN,
                f"sysctl.{key}",
                cmax,
                "without a matching hash size (net.netfilter.nf_conntrack_buckets or the "
                "nf_conntrack hashsize= module parameter) the table keeps its boot-time bucket "
                "count and a full table means long hash chains walked for every packet",
            )
        elif buckets and cmax > CONNTRACK_MAX_PER_BUCKET * buckets:
            self.add(
                WARN,
                f"sysctl.{key}",
                cmax,
                f"{cmax // buckets} entries per hash bucket when full "
                f"(nf_conntrack_buckets={buckets}); "
                f"keep max <= {CONNTRACK_MAX_PER_BUCKET}x buckets",
            )

    # ------------------------------------------------------------------ NIC rules
    def nics(self) -> None:
        defaults = self.p.nic.get("", {})
        irq_tuned = False
        for sel, section in self.p.nic.items():
            if sel == "" and len(self.p.nic) > 1:
                continue
            sec = {**defaults, **section}
            key = f"nic.{sel}" if sel else "nic"
            if "irq_affinity" in sec:
                irq_tuned = True
            rings = sec.get("rings")
            if rings is not None and isinstance(rings.value, int):
                self._rings(key, sel, rings.value)
            self._rss(key, sec)
            rps = sec.get("rps")
            flow = rps.value.get("flow_cnt") if rps is not None else None
            if flow and "net.core.rps_sock_flow_entries" not in self.p.sysctl:
                self.add(
                    WARN,
                    f"{key}.rps",
                    rps.value if rps else "",
                    "rps_flow_cnt has no effect without net.core.rps_sock_flow_entries (RFS "
                    "needs both the global and the per-queue table)",
                )
        irqb = self.p.irqbalance
        stopped = "state" in irqb and irqb["state"].value == "stopped"
        if irq_tuned and not stopped and "ban" not in irqb:
            self.add(
                WARN,
                "irqbalance",
                "",
                "irq_affinity is set but irqbalance is neither stopped nor banned from the tuned "
                "CPUs: it will move the queue IRQs again within seconds",
            )

    def _rss(self, key: str, sec: dict[str, Setting]) -> None:
        """`ethtool -N rx-flow-hash` / `-X` / `-N flow-type` (`-U`) lines taken apart."""
        h = sec.get("rss_hash")
        for flow, fields in (h.value.items() if h is not None else ()):
            if flow in ("tcp4", "udp4", "tcp6", "udp6", "sctp4", "sctp6") and not (
                "f" in fields and "n" in fields
            ):
                self.add(
                    WARN,
                    f"{key}.rss_hash.{flow}",
                    fields,
                    f"{flow} hashed without both ports ({fields}): every flow between two "
                    "addresses lands on one queue, so one client of a VIP (or a NAT pool, or "
                    "one DNS/QUIC resolver) loads one core while the others idle; use sdfn",
                )
        if h is not None and "tcp4" in h.value and "udp4" not in h.value:
            self.add(
                WARN,
                f"{key}.rss_hash",
                h.value,
                "sets (or checks) tcp4 only: udp4 stays at the driver's default, which is sd "
                "(addresses only) on ixgbe (its UDP RSS is off until set) and others, so a UDP "
                "VIP (DNS, QUIC, syslog) still lands on one queue; set udp4 (and tcp6/udp6) to "
                "sdfn as well",
            )
        indir = sec.get("rss_indir")
        if indir is not None and indir.value != "data-queues":
            first = str(indir.value).split()[0]
            ch = sec.get("channels")
            self.add(
                WARN,
                f"{key}.rss_indir",
                indir.value,
                f"a fixed table ({first} ...) names its queues: the kernel then refuses "
                "`ethtool -L` below the highest one, and queues a later channel change adds "
                "get no RSS traffic"
                + (" (this profile changes the channel count too)" if ch is not None else "")
                + '; "data-queues" follows the channel count',
            )
        rules = sec.get("flow_rules")
        if rules is not None:
            queue = rules.value["queue"]
            data_ports = [r for r in rules.value["rules"] if _data_port(r)]
            if data_ports:
                self.add(
                    WARN,
                    f"{key}.flow_rules",
                    "; ".join(data_ports),
                    "a rule on a service port (80, 443, 53, 8080...) sends every flow of that "
                    "service to one queue and one core: RSS no longer spreads them; steer "
                    "control traffic (BGP, VRRP, SSH) with rules, let RSS spread the data",
                )
            if queue != "control" and "irq_affinity" in sec:
                self.add(
                    WARN,
                    f"{key}.flow_rules.queue",
                    queue,
                    "a fixed queue under irq_affinity: its IRQ sits on a data core, so the "
                    'control traffic still competes with the data plane; queue = "control" '
                    "gets a queue whose IRQ is on a housekeeping CPU",
                )

    def _rings(self, key: str, sel: str, value: int) -> None:
        if value & (value - 1):
            self.add(
                WARN,
                f"{key}.rings",
                value,
                "a fixed ring size that is not a power of two: drivers round it (mlx5 to a "
                "power of two, ixgbe/i40e to a multiple of 8 or 32), so verify never matches; "
                'use "max" or a power of two',
            )
        if self.inv is None:
            return
        if sel == "data":
            names = [self.iface] if self.iface else [n.name for n in self.inv.nics if n.rings]
        elif sel:
            names = [sel]
        else:
            names = [n.name for n in self.inv.nics if n.rings]
        for name in names:
            try:
                nic = self.inv.nic(name or "")
            except KeyError:
                continue
            if nic.rings_fixed is not None:
                continue  # plan says "unsettable" for any value, "max" included
            limit = nic.rings.rx_max if nic.rings else None
            if limit is not None and value > limit:
                self.add(
                    FAIL,
                    f"{key}.rings",
                    value,
                    f"above the driver maximum of {name} ({limit}); ethtool -G fails",
                )

    # ------------------------------------------------------------------ CPU isolation
    def isolation(self) -> None:
        iso_keys = [k for k in ("isolcpus", "nohz_full") if k in self.p.cmdline]
        if not iso_keys:
            return
        key = f"cmdline.{iso_keys[0]}"
        if self.inv is None:
            literal: set[int] = set()
            for k in iso_keys:
                expr = parse_cpu_expr(self.p.cmdline[k].value["cpus"])
                if isinstance(expr, CpuLit):
                    literal |= expr.cpus
            if 0 in literal:
                self.add(
                    WARN,
                    key,
                    format_cpulist(literal),
                    "isolates CPU 0, which keeps timekeeping, unmovable IRQs and boot-time "
                    "kernel threads: the rest of the system crowds onto too few housekeeping "
                    "cores; isolate the high CPUs and keep 0 (and its sibling) for housekeeping",
                )
            return
        try:
            isolated: frozenset[int] = frozenset()
            for k in iso_keys:
                isolated |= cpu_values(
                    self.p, self.inv, self.p.cmdline[k].value["cpus"], self.iface
                )
        except BadInput:
            return  # reported by the resolve check
        online = self.inv.cpus.online
        left = online - isolated
        cores = {min(self.inv.cpus.cpu(c).siblings | {c}) for c in left}
        if not left:
            self.add(FAIL, key, format_cpulist(isolated), "isolates every online CPU")
        elif len(cores) < MIN_HOUSEKEEPING_CORES or 0 in isolated:
            self.add(
                WARN,
                key,
                format_cpulist(isolated),
                f"leaves {len(cores)} housekeeping core(s) ({format_cpulist(left)})"
                + (" and isolates CPU 0" if 0 in isolated else "")
                + ": timers, RCU callbacks, daemons and unmovable IRQs crowd onto them; keep "
                f"at least {MIN_HOUSEKEEPING_CORES} cores (CPU 0 among them)",
            )

    def resolves(self) -> None:
        if self.inv is None or (self.p.needs_iface and not self.iface):
            return
        try:
            resolve(self.p, self.inv, self.iface)
        except BadInput as e:
            self.add(FAIL, "profile", self.p.name, f"does not resolve on this host: {e}")

    def run(self) -> list[LintFinding]:
        self.sysctls()
        self.nics()
        self.isolation()
        self.resolves()
        return self.out


SERVICE_PORTS = frozenset({53, 80, 443, 8080, 8443, 3306, 5432, 6379, 11211})


def _data_port(rule: str) -> bool:
    """Whether a flow rule's text matches a destination port that carries service traffic."""
    words = rule.split()
    for i, w in enumerate(words[:-1]):
        if w == "dst-port":
            try:
                return int(words[i + 1], 0) in SERVICE_PORTS
            except ValueError:
                return False
    return False


def lint_profile(
    profile: Profile, inv: Optional[Inventory] = None, iface: Optional[str] = None
) -> list[LintFinding]:
    """Findings for harmful or pointless values in `profile` (fail first, then warn)."""
    findings = _Lint(profile, inv, iface).run()
    return sorted(findings, key=lambda f: f.level.rank)
