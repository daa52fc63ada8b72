"""The exporter's series: what one collection of a host becomes in Prometheus (pure).

Inputs are what the rest of lbtune already computes: a `Window` of two samples from the
sampler (`observe/schedule`), the findings the diagnose rules made of it, what the probes
counted over it, and the checks of `verify`. Nothing here reads the host or keeps state:
`Totals` is the caller's memory of the counters between collections.

Rules (docs/fleet.md lists every series):

1. **Counters are accumulated window deltas.** A counter series is the sum of its deltas
   over every window the exporter saw, starting with the first sample read as "since
   boot" (so the first value equals the kernel's own total, as node_exporter shows it). A
   kernel counter that goes backwards counts from zero (`observe.window.counter_delta`), so
   every `_total` series is monotonic while the exporter runs; sums over many objects
   (all NICs, all CPUs of a cause) stay monotonic when one of them resets.
2. **Unreadable is not zero, absent is not down.** A source the sampler could not read
   (`Sample.missing`, no per-queue counters) produces no series at all, and
   `lbtune_source_up{source}` says 0 for it; a source the host does not have (`ipvs` on a
   host that is not a director, `conntrack` without nf_conntrack: `Collection.absent`)
   has no series, `lbtune_source_up` included. A series that disappears is dropped from
   `Totals` (when it comes back it starts again from the kernel's value: a counter reset
   to Prometheus, which `rate()` handles).
3. **Bounded labels.** Labels come from fixed tables (drop causes, finding levels,
   conntrack columns, probe names), from the host's own objects (CPUs, NICs and their
   driver drop counters), or are capped: the top `listeners` (default 10, at most 100)
   listeners by accept-queue fill then drops; at most `max_findings` findings (most severe
   first); kernel drop reasons are the kernel's enum, and `location` labels (opt-in) are
   capped at `max_locations`, the rest counted under `location="other"`. Per-queue NIC
   series only for the interfaces named in `queues_of` (opt-in); per CPU, three softnet
   counters (processed, dropped, times squeezed; RPS and flow limit with `softnet_all`);
   per NIC, the driver's own drop counters (or the kernel's `rx_dropped` without them),
   its pause frames per direction and its RSS indirection table's spread (two gauges).
4. **IPVS per virtual service, not per real server.** Each virtual service gets its
   connections, packets and bytes (the kernel's own totals since the service was created:
   an exception to rule 1, IPVS keeps them per object), active and inactive connections and
   its real servers serving and drained: 9 series per service. Per real server (3 series
   each) only with `ipvs_real_servers`: node_exporter's per-backend labels are what made
   18k series on one director (node_exporter issue 1708).
5. **Base units, Prometheus names.** Seconds, bytes, ratios 0..1; `_total` only on
   counters; every name starts with `lbtune_`; no two names one letter apart
   (`lbtune_finding` per finding, `lbtune_findings_by_level` per level).
6. **Host-wide series once per host.** In a namespace's view (`--netns`, or a namespace's
   capture) the series that are the host's whatever the namespace (softnet per CPU, and
   the `cpu_backlog` drop cause made of it) are left out unless `Options.host_series`:
   an exporter per namespace would repeat them under every namespace's instance.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional, Sequence

from lbtune.diagnose.finding import Finding, rank
from lbtune.diagnose.nicsettings import NicSettings
from lbtune.host.net.rss import Rxfh
from lbtune.ipvs.status import ServiceRow
from lbtune.observe.dropcauses import DROP_CAUSES
from lbtune.observe.nicmaps import pause_counters
from lbtune.observe.probes import ProbeSample
from lbtune.observe.window import Window
from lbtune.observe.window import counter_delta as cd
from lbtune.tune.engine import KnobCheck, KnobStatus
from lbtune.vocab import Level

MAX_LISTENERS = 100
DEFAULT_LISTENERS = 10
DEFAULT_MAX_FINDINGS = 50
DEFAULT_MAX_LOCATIONS = 50
# Sample sources, as `Sample.missing` names them; `lbtune_source_up` has one series each.
SOURCES = ("uptime", "snmp", "softnet", "softirqs", "interrupts", "nics", "listen", "udp",
           "qdisc", "sockstat", "conntrack", "ipvs")  # fmt: skip
CONNTRACK_DROPS = ("drop", "early_drop", "insert_failed")
SOFTNET = (  # (name part, SoftnetDelta field, help): per CPU by default
    ("processed", "processed", "packets processed by the CPU's NAPI/backlog"),
    ("dropped", "dropped", "packets dropped: per-CPU backlog full (netdev_max_backlog)"),
    ("times_squeezed", "time_squeeze", "NAPI rounds out of budget or time (netdev_budget)"),
)
SOFTNET_EXTRA = (  # with Options.softnet_all
    ("received_rps", "received_rps", "RPS/RFS inter-processor interrupts received"),
    ("flow_limit", "flow_limit", "packets dropped by the flow limit"),
)
# A NIC whose driver map names no drop counter of its own shows the kernel's rx_dropped.
NIC_SYSFS_DROP = "rx_dropped"
# Host-wide in any namespace (softnet_stat): left out of a namespace's view (rule 6).
HOST_WIDE_SOURCES = ("softnet",)
HOST_WIDE_CAUSES = ("cpu_backlog",)
# Where a finding's object says the counters could not name the port ("udp port unknown"),
# its label is the protocol alone ("udp").
UNKNOWN_PORT_SUFFIX = " port unknown"

Labels = tuple[str, ...]
Key = tuple[str, Labels]  # (family name, label values)


@dataclass(frozen=True)
class Options:
    """What the user chose to export beyond the defaults (all bounded)."""

    listeners: int = DEFAULT_LISTENERS
    queues_of: tuple[str, ...] = ()  # NICs whose per-queue series are exported
    drop_locations: bool = False  # kernel drop reasons by kernel location too
    softnet_all: bool = False  # received_rps and flow_limit per CPU too
    ipvs_real_servers: bool = False  # IPVS series per real server too
    max_findings: int = DEFAULT_MAX_FINDINGS
    max_locations: int = DEFAULT_MAX_LOCATIONS
    host_series: bool = False  # in a namespace's view, the host-wide series too (rule 6)


@dataclass(frozen=True)
class Family:
    """One metric family: its samples are (label values, value) in `labels` order."""

    name: str  # counters end in `_total`
    kind: str  # "counter" | "gauge"
    help: str
    labels: Labels
    samples: tuple[tuple[Labels, float], ...]


@dataclass(frozen=True)
class ProfileCheck:
    """`verify` of one profile: its checks, or why it could not be verified."""

    profile: str
    checks: Optional[tuple[KnobCheck, ...]]
    error: str = ""


@dataclass(frozen=True)
class Collection:
    """Everything one collection knows; `probes_wanted` says whether probes were asked for."""

    window: Window
    findings: Sequence[Finding]
    probes: Optional[ProbeSample] = None
    probes_wanted: bool = False
    probe_problem: str = ""  # why the probes are not counting ("" when they are)
    profiles: Sequence[ProfileCheck] = ()
    ipvs_services: Optional[Sequence[ServiceRow]] = None  # the IPVS table; None: not read
    ipvs_problem: str = ""  # why the table could not be read ("" when it was, or no IPVS)
    absent: frozenset[str] = frozenset()  # sources this host does not have (rule 2)
    in_netns: bool = False  # a namespace's view (rule 6)
    nic_settings: Mapping[str, NicSettings] = field(default_factory=dict)  # RSS spread

    def host_wide_out(self, opts: Options) -> bool:
        """Leave the host-wide series out (rule 6)?"""
        return self.in_netns and not opts.host_series


@dataclass
class Totals:
    """The counters so far, by (family, labels); the caller keeps one between collections."""

    values: dict[Key, float] = field(default_factory=dict)
    locations: set[tuple[str, str]] = field(default_factory=set)  # (reason, location) kept
    # probe -> (CPU seconds per second, seconds per event or None) of its last measurement
    probe_cost: dict[str, tuple[float, Optional[float]]] = field(default_factory=dict)

    def add(self, deltas: Mapping[Key, float], families: Iterable[str]) -> None:
        """Add this window's deltas; forget series of `families` absent from it (rule 2)."""
        names = set(families)
        for key in [k for k in self.values if k[0] in names and k not in deltas]:
            del self.values[key]
        for key, d in deltas.items():
            self.values[key] = self.values.get(key, 0.0) + d


# ------------------------------------------------------------------------------ counters

_COUNTER_HELP: dict[str, tuple[str, Labels]] = {
    "lbtune_drops_total": ("Packets dropped, by cause (docs/fleet.md: the counters each "
                           "cause sums)", ("cause",)),
    "lbtune_kernel_drops_total": ("Packets freed as drops by the kernel (skb:kfree_skb), by "
                                  "drop reason (drops probe)", ("reason",)),
    "lbtune_kernel_drops_by_location_total": ("Kernel drops by reason and kernel location "
                                              "(drops probe; opt-in)", ("reason", "location")),
    "lbtune_listen_drops_total": ("Packets the listener dropped (sk_drops: accept queue "
                                  "overflows and other listen drops)", ("listener",)),
    "lbtune_nic_drops_total": ("NIC drops by the driver's or the kernel's counter name",
                               ("device", "counter")),
    "lbtune_nic_pause_frames_total": ("Pause frames the NIC sent (tx: it asked the switch to "
                                      "hold traffic) or received (rx), summed over the "
                                      "driver's counters", ("device", "direction")),
    "lbtune_nic_queue_packets_total": ("Packets per NIC queue (opt-in per interface)",
                                       ("device", "direction", "queue")),
    "lbtune_nic_queue_drops_total": ("Drops per NIC queue (opt-in per interface)",
                                     ("device", "direction", "queue")),
    "lbtune_conntrack_drops_total": ("nf_conntrack drops by kind (/proc/net/stat/"
                                     "nf_conntrack, summed over CPUs)", ("kind",)),
    "lbtune_ipvs_connections_total": ("IPVS connections scheduled (/proc/net/ip_vs_stats)",
                                      ()),
    "lbtune_ipvs_packets_total": ("IPVS packets by direction", ("direction",)),
    "lbtune_ipvs_bytes_total": ("IPVS bytes by direction", ("direction",)),
}  # fmt: skip
for _part, _field, _help in SOFTNET + SOFTNET_EXTRA:
    _COUNTER_HELP[f"lbtune_softnet_{_part}_total"] = (f"Per CPU: {_help}", ("cpu",))
COUNTER_FAMILIES = tuple(_COUNTER_HELP)


def _endpoint(family: int, addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if family == 6 else f"{addr}:{port}"


def listener_rows(w: Window) -> list[tuple[str, float, int, Optional[int]]]:
    """(endpoint, fill, queue, drops in the window) per listening endpoint, most filled
    first; sockets of one endpoint (SO_REUSEPORT) count together, fill is the fullest's."""
    rows: dict[str, list[float]] = {}
    drops: dict[str, Optional[int]] = {}
    for d in w.listeners():
        s = d.sock
        ep = _endpoint(s.family, s.addr, s.port)
        fill = s.queue / s.backlog if s.backlog else 0.0
        r = rows.setdefault(ep, [0.0, 0.0])
        r[0] = max(r[0], fill)
        r[1] += s.queue
        if d.drops is not None:
            drops[ep] = (drops.get(ep) or 0) + d.drops
        else:
            drops.setdefault(ep, None)
    out = [(ep, r[0], int(r[1]), drops.get(ep)) for ep, r in rows.items()]
    out.sort(key=lambda x: (-x[1], -(x[3] or 0), x[0]))
    return out


def counter_deltas(c: Collection, opts: Options, totals: Totals) -> dict[Key, float]:
    """Every counter series this window moved (or holds at 0), readable sources only."""
    w = c.window
    out: dict[Key, float] = {}
    host_wide_out = c.host_wide_out(opts)
    for cause in DROP_CAUSES:
        if host_wide_out and cause.slug in HOST_WIDE_CAUSES:
            continue
        n = cause.count(w)
        if n is not None:
            out[("lbtune_drops_total", (cause.slug,))] = n
    for ep, _fill, _q, dropped in listener_rows(w):
        if dropped is not None:
            out[("lbtune_listen_drops_total", (ep,))] = dropped
    for d in w.nics():
        if d.dev == "lo":
            continue
        for name, n in d.nic_drops.items():
            out[("lbtune_nic_drops_total", (d.dev, name))] = n
        if not d.nic_drops and NIC_SYSFS_DROP in d.stats:
            out[("lbtune_nic_drops_total", (d.dev, NIC_SYSFS_DROP))] = d.stats[NIC_SYSFS_DROP]
        for direction, n in pause_frames(w, d.dev, d.driver).items():
            out[("lbtune_nic_pause_frames_total", (d.dev, direction))] = n
        if d.dev in opts.queues_of:
            for q in d.queues:
                labels = (d.dev, q.direction, str(q.queue))
                if q.packets is not None:
                    out[("lbtune_nic_queue_packets_total", labels)] = q.packets
                if q.drops is not None:
                    out[("lbtune_nic_queue_drops_total", labels)] = q.drops
    softnet = SOFTNET + SOFTNET_EXTRA if opts.softnet_all else SOFTNET
    for s in [] if host_wide_out else w.softnet():
        for part, attr, _ in softnet:
            out[(f"lbtune_softnet_{part}_total", (str(s.cpu),))] = getattr(s, attr)
    ct = w.after.conntrack
    if ct is not None:
        for kind in CONNTRACK_DROPS:
            if kind in ct.totals:
                out[("lbtune_conntrack_drops_total", (kind,))] = w.conntrack(kind)
    ipvs = w.after.ipvs
    if ipvs is not None:
        b = w.before.ipvs if w.before is not None else None
        out[("lbtune_ipvs_connections_total", ())] = cd(b.conns if b else None, ipvs.conns)
        out[("lbtune_ipvs_packets_total", ("in",))] = cd(b.in_packets if b else None,
                                                         ipvs.in_packets)  # fmt: skip
        out[("lbtune_ipvs_packets_total", ("out",))] = cd(b.out_packets if b else None,
                                                          ipvs.out_packets)  # fmt: skip
        out[("lbtune_ipvs_bytes_total", ("in",))] = cd(b.in_bytes if b else None,
                                                       ipvs.in_bytes)  # fmt: skip
        out[("lbtune_ipvs_bytes_total", ("out",))] = cd(b.out_bytes if b else None,
                                                        ipvs.out_bytes)  # fmt: skip
    if c.probes is not None:
        _probe_deltas(c.probes, opts, totals, out)
    return out


def pause_frames(w: Window, dev: str, driver: Optional[str]) -> dict[str, int]:
    """Pause frames per direction ("rx", "tx") over the window: the sum of the driver's
    pause counters that its statistics have (none for a driver without them)."""
    out: dict[str, int] = {}
    for pc in pause_counters(driver):
        n = w.ethtool(dev, pc.name)
        if n is not None:
            out[pc.direction] = out.get(pc.direction, 0) + n
    return out


def rss_spread(rxfh: Optional[Rxfh]) -> Optional[tuple[int, float]]:
    """(queues the RSS indirection table feeds, share of its entries on the most-fed queue),
    None without a table."""
    if rxfh is None or not rxfh.indir:
        return None
    counts = Counter(rxfh.indir)  # (counted in C: a table has hundreds of entries)
    return len(counts), max(counts.values()) / len(rxfh.indir)


PROBE_FAMILIES = ("lbtune_kernel_drops_total", "lbtune_kernel_drops_by_location_total")


def _probe_deltas(p: ProbeSample, opts: Options, totals: Totals, out: dict[Key, float]) -> None:
    if "drops" in p.probes:
        for d in p.drops:
            reason = d.reason or "unknown"
            key: Key = ("lbtune_kernel_drops_total", (reason,))
            out[key] = out.get(key, 0) + d.count
            if opts.drop_locations:
                loc = d.function or d.location or "unknown"
                if (reason, loc) not in totals.locations:
                    if len(totals.locations) < opts.max_locations:
                        totals.locations.add((reason, loc))
                    else:
                        loc = "other"
                key = ("lbtune_kernel_drops_by_location_total", (reason, loc))
                out[key] = out.get(key, 0) + d.count
    # The kernel's BPF statistics are on only part of the time (observe/probes.py samples
    # them): the cost is a ratio over the seconds they were on, kept until the next one.
    for cost in p.costs:
        if cost.measured_seconds > 0:
            per_event = cost.run_time_ns / 1e9 / cost.events if cost.events else None
            totals.probe_cost[cost.probe] = (
                cost.run_time_ns / 1e9 / cost.measured_seconds, per_event)
    # A reason seen before and quiet in this window keeps its series.
    for key in totals.values:
        if key[0] in PROBE_FAMILIES and key not in out:
            out[key] = 0


# ------------------------------------------------------------------------------ families


def families(c: Collection, opts: Options, totals: Totals) -> list[Family]:
    """The series of one collection: counters from `totals` (already updated with this
    window, see `Totals.add`), gauges from the window's end and the findings."""
    out: list[Family] = []
    by_family: dict[str, list[tuple[Labels, float]]] = {}
    shown_listeners = {ep for ep, *_ in listener_rows(c.window)[: opts.listeners]}
    for (name, labels), value in sorted(totals.values.items()):
        if name == "lbtune_listen_drops_total" and labels[0] not in shown_listeners:
            continue
        by_family.setdefault(name, []).append((labels, value))
    for name in COUNTER_FAMILIES:
        if name in by_family:
            help_, labels = _COUNTER_HELP[name]
            out.append(Family(name, "counter", help_, labels, tuple(by_family[name])))
    out.extend(_gauges(c, opts))
    if c.probes is not None and totals.probe_cost:
        cost = sorted(totals.probe_cost.items())
        out.append(_gauge("lbtune_probe_cpu_ratio", "Share of one CPU the probe's BPF programs "
                          "ran (probe self-cost; kernel BPF statistics, last measured "
                          "interval)", ("probe",), [((p,), round(r, 9)) for p, (r, _) in cost]))
        out.append(_gauge("lbtune_probe_event_cost_seconds", "Mean run time of the probe per "
                          "event (kernel BPF statistics, last measured interval)", ("probe",),
                          [((p,), e) for p, (_, e) in cost if e is not None]))  # fmt: skip
    return out


def _gauge(name: str, help_: str, labels: Labels, samples: Iterable[tuple[Labels, float]]
           ) -> Family:  # fmt: skip
    return Family(name, "gauge", help_, labels, tuple(samples))


def _gauges(c: Collection, opts: Options) -> list[Family]:
    w = c.window
    after = w.after
    missing = w.missing()
    out = []
    up = []
    skip = set(c.absent) | (set(HOST_WIDE_SOURCES) if c.host_wide_out(opts) else set())
    for src in SOURCES:
        if src in skip:
            continue  # absent here, or the host's: neither up nor down
        readable = src not in missing
        if src == "conntrack":
            readable = after.conntrack is not None
        elif src == "ipvs":
            readable = after.ipvs is not None
        up.append(((src,), 1.0 if readable else 0.0))
    if c.probes_wanted:
        up.append((("probes",), 0.0 if c.probe_problem else 1.0))
    for p in c.profiles:
        up.append(((f"verify:{p.profile}",), 0.0 if p.checks is None else 1.0))
    if c.ipvs_services is not None or c.ipvs_problem:
        up.append((("ipvs_table",), 0.0 if c.ipvs_problem else 1.0))
    out.append(_gauge("lbtune_source_up", "1 when the source was read in this collection, 0 "
                      "when it could not be (its series are then absent, never zero); no "
                      "series for a source this host does not have (ipvs off a director)",
                      ("source",), up))  # fmt: skip
    if w.seconds is not None:
        out.append(_gauge("lbtune_window_seconds", "Length of the window the findings and "
                          "rates of this collection judge", (), [((), w.seconds)]))  # fmt: skip
    rows = listener_rows(w)[: opts.listeners]
    if rows:
        out.append(_gauge("lbtune_listen_queue_fill_ratio", "Accept queue length / effective "
                          "backlog of the top listeners (fullest first)", ("listener",),
                          [((ep,), round(fill, 6)) for ep, fill, _q, _d in rows]))  # fmt: skip
    ct = after.conntrack
    if ct is not None:
        out.append(_gauge("lbtune_conntrack_entries", "Connections tracked now", (),
                          [((), float(ct.count))]))  # fmt: skip
        if ct.max:
            out.append(_gauge("lbtune_conntrack_entries_limit", "nf_conntrack_max", (),
                              [((), float(ct.max))]))  # fmt: skip
    spread = [(dev, sp) for dev, s in sorted(c.nic_settings.items())
              for sp in [rss_spread(s.rxfh)] if sp is not None]  # fmt: skip
    if spread:
        out.append(_gauge("lbtune_nic_rss_queues", "Receive queues the NIC's RSS indirection "
                          "table feeds (ethtool -x)", ("device",),
                          [((dev,), float(n)) for dev, (n, _) in spread]))  # fmt: skip
        ratios = [((dev,), round(r, 6)) for dev, (_, r) in spread]
        out.append(_gauge("lbtune_nic_rss_busiest_queue_ratio", "Share of the RSS indirection "
                          "table's entries on its most-fed queue (1/queues when even)",
                          ("device",), ratios))  # fmt: skip
    findings = rank(list(c.findings))
    levels = {lv: 0 for lv in (Level.FAIL, Level.WARN, Level.INFO)}
    for f in findings:
        levels[f.level] = levels.get(f.level, 0) + 1
    out.append(_gauge("lbtune_findings_by_level", "Findings of the diagnose rules in this "
                      "collection's window, by level", ("level",),
                      [((lv.value,), float(n)) for lv, n in levels.items()]))  # fmt: skip
    shown: dict[Labels, float] = {}
    for f in findings[: opts.max_findings]:
        shown[(f.rule, f.level.value, object_label(f.object))] = 1.0
    out.append(_gauge("lbtune_finding", "1 for each current finding (rule, level, object; at "
                      f"most {opts.max_findings}, most severe first)",
                      ("rule", "level", "object"), sorted(shown.items())))  # fmt: skip
    if c.ipvs_services is not None:
        out.extend(_ipvs(c.ipvs_services, opts))
    if c.profiles:
        in_sync, drifted = [], []
        for p in c.profiles:
            if p.checks is None:
                continue
            bad = sum(1 for k in p.checks if k.status in (KnobStatus.DRIFT, KnobStatus.MISSING))
            in_sync.append(((p.profile,), 0.0 if bad else 1.0))
            drifted.append(((p.profile,), float(bad)))
        if in_sync:
            out.append(_gauge("lbtune_profile_in_sync", "1 when every knob of the profile has "
                              "its value (lbtune verify)", ("profile",), in_sync))  # fmt: skip
            out.append(_gauge("lbtune_profile_drifted_knobs", "Knobs of the profile that "
                              "drifted or are missing (lbtune verify)", ("profile",),
                              drifted))  # fmt: skip
    return out


def object_label(obj: str) -> str:
    """A finding's object as a label value: "udp port unknown" (counters cannot name the
    port) is the protocol alone, "udp"; anything else as the finding says it."""
    if obj.endswith(UNKNOWN_PORT_SUFFIX):
        return obj[: -len(UNKNOWN_PORT_SUFFIX)]
    return obj


def _ipvs(services: Sequence[ServiceRow], opts: Options) -> list[Family]:
    """Per virtual service (and per real server when asked). The counters are the kernel's
    own totals since the service (real server) was created, not window deltas: IPVS keeps
    them per object, and a re-created object is a counter reset to Prometheus."""
    conns, pkts, byts, active, inactive, servers = [], [], [], [], [], []
    rs_conns, rs_active, rs_weight = [], [], []
    for svc in sorted(services, key=lambda x: x.service):
        k = (svc.service,)
        conns.append((k, float(svc.counters.conns)))
        pkts += [((svc.service, "in"), float(svc.counters.inpkts)),
                 ((svc.service, "out"), float(svc.counters.outpkts))]  # fmt: skip
        byts += [((svc.service, "in"), float(svc.counters.inbytes)),
                 ((svc.service, "out"), float(svc.counters.outbytes))]  # fmt: skip
        active.append((k, float(svc.active)))
        inactive.append((k, float(svc.inactive)))
        serving = sum(1 for r in svc.real_servers if r.weight > 0)
        servers += [((svc.service, "serving"), float(serving)),
                    ((svc.service, "drained"), float(len(svc.real_servers) - serving))]  # fmt: skip
        if opts.ipvs_real_servers:
            for r in svc.real_servers:
                rk = (svc.service, r.address)
                rs_conns.append((rk, float(r.counters.conns)))
                rs_active.append((rk, float(r.active)))
                rs_weight.append((rk, float(r.weight)))
    out = [
        Family("lbtune_ipvs_service_connections_total", "counter", "Connections the virtual "
               "service scheduled (kernel total since it was created)", ("service",),
               tuple(conns)),
        Family("lbtune_ipvs_service_packets_total", "counter", "Packets of the virtual service "
               "by direction (out is 0 with direct routing)", ("service", "direction"),
               tuple(pkts)),
        Family("lbtune_ipvs_service_bytes_total", "counter", "Bytes of the virtual service by "
               "direction", ("service", "direction"), tuple(byts)),
        _gauge("lbtune_ipvs_service_active_connections", "Active connections of the virtual "
               "service (sum over its real servers)", ("service",), active),
        _gauge("lbtune_ipvs_service_inactive_connections", "Inactive connections of the "
               "virtual service", ("service",), inactive),
        _gauge("lbtune_ipvs_service_real_servers", "Real servers of the virtual service: "
               "serving (weight > 0) or drained (weight 0)", ("service", "state"), servers),
    ]  # fmt: skip
    if opts.ipvs_real_servers:
        labels = ("service", "real_server")
        out += [
            Family("lbtune_ipvs_real_server_connections_total", "counter", "Connections "
                   "scheduled to the real server (opt-in)", labels, tuple(rs_conns)),
            _gauge("lbtune_ipvs_real_server_active_connections", "Active connections of the "
                   "real server (opt-in)", labels, rs_active),
            _gauge("lbtune_ipvs_real_server_weight", "IPVS weight of the real server "
                   "(opt-in)", labels, rs_weight),
        ]  # fmt: skip
    return out


def series_count(fams: Sequence[Family]) -> int:
    return sum(len(f.samples) for f in fams)
