"""Fleet drift: which hosts differ from a template host or from a profile, knob by knob.

`lbtune compare CAPTURE... [--against PROFILE|CAPTURE]` reads the captures users already make
(`lbtune capture`, or any `--root` tree) and compares what an operator tunes:

- sysctls: every `net.*` sysctl a capture holds plus the tuning ones outside `net`
  (`KNOB_SYSCTLS`); per-boot secrets and counters (`VOLATILE`) are left out;
- per NIC (loopback left out): ring sizes, channel counts, txqueuelen, and the *shape* of
  its queue IRQ placement, RPS and XPS; its coalescing parameters, the features it can
  change (fixed ones are hardware, not tuning) and pause;
- the CPUs isolated from the scheduler and with nohz_full, and irqbalance (running, banned CPUs);
- the IPVS table (services with scheduler and flags, real servers with forwarding method
  and weight; from `/proc/net/ip_vs`, connection counts ignored), and for each service
  scheduled by hashing (`mh`, `sh`) what its lookup table is built from: the real servers
  with their weights in the kernel's list order (area `ipvs hashing`). Directors of a
  cluster must agree on it for a flow moved between them to reach the same real server; the
  table is filled in list order, so the same servers added in another order can differ.
  (`/proc/net/ip_vs` does not show the scheduler flags such as mh-fallback.)

A *shape* is what stays the same across hosts tuned alike even when their CPU numbers differ:
"16 IRQs, 1 CPU each, on 16 CPUs, NIC-local" says each queue has its own CPU on the NIC's
NUMA node, whichever CPUs those are on this host. Against a capture, every value is compared with
the template's; a value only one side has is shown as absent on the other. Against a
profile, the profile is resolved for each host (its own topology) and verified there, as
`lbtune verify` would: drifted and missing knobs are the differences.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.identity import sha256
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.host.ipvs.procfs import PROC_IP_VS, ProcService, parse_proc_ip_vs
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.net.nic import Nic

KNOB_SYSCTLS = ("fs/file-max", "fs/nr_open", "vm/swappiness", "kernel/pid_max",
                "kernel/threads-max", "kernel/timer_migration", "kernel/numa_balancing")
# Random per boot, secrets, counters and write-only triggers: never a tuning difference.
VOLATILE = re.compile(r"(?:^|\.)(?:netdev_rss_key|tcp_fastopen_key|nf_conntrack_count|"
                      r"stable_secret|flush|base_reachable_time.*|hash_secret)$")
# A hostile tree cannot make compare read without end.
MAX_SYSCTLS = 50_000


@dataclass(frozen=True)
class HostSettings:
    """What one host's tuning looks like: (area, object) -> value."""

    source: str  # the capture as the user named it
    hostname: Optional[str]
    kernel: Optional[str]
    values: Mapping[tuple[str, str], str]


@dataclass(frozen=True)
class Difference:
    """One knob that differs: the template's (or profile's) value and this host's."""

    area: str  # sysctl, rings, channels, txqueuelen, irq, rps, xps, cpus, irqbalance, ipvs, ...
    object: str
    template: Optional[str]  # None: the template has no such knob
    value: Optional[str]  # None: this host has no such knob


@dataclass(frozen=True)
class HostDrift:
    """One compared host: its differences from the template, and how many knobs were compared."""

    source: str
    hostname: Optional[str]
    kernel: Optional[str]
    compared: int
    differences: tuple[Difference, ...]

    @property
    def in_sync(self) -> bool:
        return not self.differences


# ------------------------------------------------------------------------------ reading


def _sysctls(host: Host) -> dict[tuple[str, str], str]:
    fs = host.fs
    out: dict[tuple[str, str], str] = {}
    stack = ["/proc/sys/net"]
    while stack:
        d = stack.pop()
        for name in sorted(fs.listdir(d)):
            kpath = f"{d}/{name}"
            if fs.islink(kpath):
                continue
            if fs.isdir(kpath):
                stack.append(kpath)
                continue
            key = kpath[len("/proc/sys/"):].replace("/", ".")
            if VOLATILE.search(key):
                continue
            text = fs.read(kpath)
            if text is not None:
                out[("sysctl", key)] = " ".join(text.split())
            if len(out) > MAX_SYSCTLS:
                raise BadInput(f"{fs.root}: more than {MAX_SYSCTLS} sysctls: not a host tree")
    for rel in KNOB_SYSCTLS:
        text = fs.read(f"/proc/sys/{rel}")
        if text is not None:
            out[("sysctl", rel.replace("/", "."))] = " ".join(text.split())
    return out


def _cpus(cpus: Optional[frozenset[int]]) -> str:
    return format_cpulist(sorted(cpus)) if cpus else "none"


def irq_shape(nic: Nic, online: frozenset[int], node_cpus: Optional[frozenset[int]]) -> str:
    """The shape of a NIC's queue IRQ placement (effective affinity where the kernel says)."""
    sets = [q.effective or q.affinity for q in nic.irqs]
    placed = [s for s in sets if s]
    if not nic.irqs:
        return "no queue IRQs"
    if len(placed) < len(sets):
        return f"{len(sets)} IRQs, placement unknown for {len(sets) - len(placed)}"
    sizes = {len(s) for s in placed}
    if all(s >= online for s in placed):
        each = "all CPUs"
    elif sizes == {1}:
        each = "1 CPU each"
    else:
        each = f"{min(sizes)}-{max(sizes)} CPUs each" if len(sizes) > 1 else \
            f"{sizes.pop()} CPUs each"
    words = [f"{len(sets)} IRQs", each]
    if each == "1 CPU each":
        per_cpu: dict[int, int] = {}
        for cpu_set in placed:
            for cpu in cpu_set:
                per_cpu[cpu] = per_cpu.get(cpu, 0) + 1
        most = max(per_cpu.values())
        words.append(f"on {len(per_cpu)} CPUs" + (f", up to {most} per CPU" if most > 1 else ""))
    if node_cpus and each != "all CPUs":
        local = all(s <= node_cpus for s in placed)
        words.append("NIC-local" if local else "not NIC-local")
    return ", ".join(words)


def steering_shape(masks: Iterable[Optional[frozenset[int]]]) -> str:
    """RPS or XPS over a NIC's queues: off, or how many CPUs each queue spreads to."""
    sets = list(masks)
    on = [s for s in sets if s]
    if not sets:
        return "no queues"
    if not on:
        return "off"
    sizes = sorted({len(s) for s in on})
    each = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
    return f"{len(on)}/{len(sets)} queues, {each} CPU{'' if each == '1' else 's'} each"


def _nic_values(nic: Nic, inv: HostInventory) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    if nic.rings is not None and (nic.rings.rx is not None or nic.rings.tx is not None):
        out[("rings", nic.name)] = f"rx={nic.rings.rx} tx={nic.rings.tx}"
    ch = nic.channels
    if ch is not None:
        parts = [f"{k}={v}" for k, v in (("combined", ch.combined), ("rx", ch.rx),
                                         ("tx", ch.tx)) if v]
        if parts:
            out[("channels", nic.name)] = " ".join(parts)
    if nic.txqueuelen is not None:
        out[("txqueuelen", nic.name)] = str(nic.txqueuelen)
    if nic.rss is not None:
        from lbtune.host.net.rss import rule_text, shares_text

        for flow, fields in nic.rss.hash_fields.items():
            out[("rss hash", f"{nic.name} {flow}")] = fields or "none"
        if nic.rss.table_size:
            out[("rss table", nic.name)] = shares_text(nic.rss)
        if nic.rss.rules is not None:
            out[("flow rules", nic.name)] = "; ".join(
                rule_text(r.flow_type, r.match, r.action) for r in nic.rss.rules
            ) or "none"
    node_cpus = nic.local_cpus
    if not node_cpus and nic.numa_node is not None and nic.numa_node >= 0:
        for node in inv.cpus.nodes:
            if node.id == nic.numa_node:
                node_cpus = frozenset(node.cpus)
    if nic.irqs:
        out[("irq", f"{nic.name} placement")] = irq_shape(nic, inv.cpus.online, node_cpus)
    if nic.rx_queues:
        out[("rps", nic.name)] = steering_shape(q.rps_cpus for q in nic.rx_queues)
    if nic.tx_queues:
        out[("xps", nic.name)] = steering_shape(q.xps_cpus for q in nic.tx_queues)
    return out


def _nic_param_values(host: Host, dev: str) -> dict[tuple[str, str], str]:
    """`coalesce` DEV:PARAM, `feature` DEV:NAME (changeable ones only) and `pause` DEV:FIELD,
    by the knob kinds' own names so a difference reads like the knob that fixes it."""
    from lbtune.host.net.nicparams import COALESCE_FLAGS, on_off

    out: dict[tuple[str, str], str] = {}
    eth = host.ethtool
    c = eth.coalesce(dev)
    for name, v in c.values if c is not None else ():
        out[("coalesce", f"{dev}:{name}")] = on_off(bool(v)) if name in COALESCE_FLAGS else str(v)
    k = eth.features(dev)
    for f in k.entries if k is not None else ():
        if not f.fixed:
            out[("feature", f"{dev}:{f.name}")] = on_off(f.active)
    a = eth.pause(dev)
    if a is not None:
        for field in ("autoneg", "rx", "tx"):
            out[("pause", f"{dev}:{field}")] = on_off(getattr(a, field))
    return out


def read_settings(host: Host, source: str) -> HostSettings:
    """Everything compare looks at on one host tree."""
    inv = discover_host(host)
    values = _sysctls(host)
    topo = inv.cpus
    values[("cpus", "isolated")] = _cpus(topo.isolated)
    values[("cpus", "nohz_full")] = _cpus(topo.nohz_full)
    ib = inv.irqbalance
    values[("irqbalance", "state")] = (
        "running" if ib.running else "not running") + (
        f", banned CPUs {_cpus(ib.banned_cpus)}" if ib.banned_cpus else "")
    for nic in inv.nics:
        if nic.kind == "loopback":
            continue
        values.update(_nic_values(nic, inv))
        values.update(_nic_param_values(host, nic.name))
    try:
        table = parse_proc_ip_vs(host.fs.read(PROC_IP_VS))
    except ValueError as e:
        raise BadInput(f"{source}: {PROC_IP_VS}: {e}") from None
    if table is not None:
        for svc in table:
            values[("ipvs", svc.key)] = " ".join(w for w in (svc.scheduler, svc.flags) if w)
            for rs in svc.real_servers:
                values[("ipvs", f"{svc.key} -> {rs.address}")] = \
                    f"{rs.forward} weight {rs.weight}"
            if svc.scheduler in HASHING:
                values[("ipvs hashing", svc.key)] = hashing_input(svc)
    return HostSettings(source, inv.hostname, inv.kernel, values)


HASHING = ("mh", "sh")  # schedulers whose pick is a function of the table, not of state
_LISTED = 8  # more real servers than this: a digest of the list instead of the list


def hashing_input(svc: ProcService) -> str:
    """What a hashing scheduler builds its table from: real servers and weights in order."""
    items = [f"{rs.address} w{rs.weight}" for rs in svc.real_servers]
    if len(items) <= _LISTED:
        return f"{svc.scheduler} over " + (", ".join(items) or "no real servers")
    digest = sha256("\n".join(items).encode()).hexdigest()[:12]
    return f"{svc.scheduler} over {len(items)} real servers, in order: sha256 {digest}"


# ------------------------------------------------------------------------------ comparing


def compare_settings(template: HostSettings, other: HostSettings) -> HostDrift:
    """Every (area, object) either side has, where the values differ."""
    keys = sorted(set(template.values) | set(other.values))
    diffs = tuple(
        Difference(area, obj, template.values.get((area, obj)), other.values.get((area, obj)))
        for area, obj in keys
        if template.values.get((area, obj)) != other.values.get((area, obj))
    )
    return HostDrift(other.source, other.hostname, other.kernel, len(keys), diffs)


@dataclass(frozen=True)
class Comparison:
    """`lbtune compare`: the template (a capture or a profile) and each host's drift."""

    against: str  # "capture" or "profile"
    template: str  # the template capture as named, or the profile's name
    template_host: Optional[str]  # the template capture's hostname
    hosts: tuple[HostDrift, ...]

    @property
    def in_sync(self) -> bool:
        return all(h.in_sync for h in self.hosts)


def is_profile_ref(ref: str) -> bool:
    """`--against` names a profile (a name or a .toml file), or else a capture/host tree."""
    import os

    return ref.endswith(".toml") or not os.path.exists(ref)


def _profile_drift(host: Host, source: str, profile: str, iface: Optional[str]) -> tuple[
        str, HostDrift]:
    from lbtune.host.inventory import LazyInventory
    from lbtune.tune.engine import KnobStatus, verify_targets
    from lbtune.tune.profile import load_profile, resolve

    prof = load_profile(profile, root=host.fs.root)
    tgts = resolve(prof, LazyInventory(host), iface, in_netns=host.view_netns is not None)
    # A namespace's capture: host-global knobs are the host's (skipped, as `verify` says
    # of the same capture and `verify --netns` of the namespace), neither compared nor drift.
    checks = [c for c in verify_targets(host, tgts) if c.status is not KnobStatus.SKIPPED]
    bad = (KnobStatus.DRIFT, KnobStatus.MISSING)
    diffs = tuple(Difference(c.kind, c.object, c.desired,
                             None if c.current is None else " ".join(c.current.split()))
                  for c in checks if c.status in bad)
    drift = HostDrift(source, host.fs.read("/proc/sys/kernel/hostname"),
                      host.fs.read("/proc/sys/kernel/osrelease"), len(checks), diffs)
    return prof.name, drift


def compare_hosts(sources: list[str], against: Optional[str] = None,
                  iface: Optional[str] = None) -> Comparison:
    """Compare each capture (tarball or tree) with `against` (a capture or a profile); with
    no `against`, the first capture is the template."""
    import os

    from lbtune.host.runtime import Runtime

    if not sources:
        raise BadInput("name at least one capture to compare")
    for src in sources + ([against] if against and not is_profile_ref(against) else []):
        if not os.path.exists(src):
            raise BadInput(f"{src}: no such capture or host tree")
    if against is None:
        if len(sources) < 2:
            raise BadInput("compare needs two captures, or one with --against PROFILE|CAPTURE")
        against, sources = sources[0], sources[1:]
    if is_profile_ref(against):
        name, drifts = against, []
        for src in sources:
            rt = Runtime(root=src)
            try:
                name, drift = _profile_drift(rt.host(), src, against, iface)
            finally:
                rt.close()
            drifts.append(drift)
        return Comparison("profile", name, None, tuple(drifts))
    rt = Runtime(root=against)
    try:
        template = read_settings(rt.host(), against)
    finally:
        rt.close()
    drifts = []
    for src in sources:
        rt = Runtime(root=src)
        try:
            drifts.append(compare_settings(template, read_settings(rt.host(), src)))
        finally:
            rt.close()
    return Comparison("capture", against, template.hostname, tuple(drifts))
