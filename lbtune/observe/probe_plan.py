"""Planning a probe run: check the kernel, pick the interfaces, name the reasons, build the C.

`plan_probes` does everything that comes before loading: it mounts tracefs when needed (in a
private mount namespace), reads each tracepoint's format and checks the fields the probes
read, resolves drop-reason names from the running kernel, chooses the interfaces (and,
per interface and direction, whether its own per-queue counters win over the queues probe),
computes the interface filter's perfect hash and the map bounds, and builds the final C.
Nothing is loaded; `--print-c` stops here. `lbtune.observe.probes.ProbeSession` loads a plan.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from lbtune.errors import BadInput, NeedsPrivilege
from lbtune.host.host import Host
from lbtune.host.net.nic import nic_names
from lbtune.host.trace.btf import BTF_DIR, KIND_TYPEDEF, BtfError, BtfTypes, kernel_enums
from lbtune.host.trace.tracefs import TracepointFormat, ensure_tracefs, read_format
from lbtune.observe.dropreasons import CONSUMED, NOT_DROPPED_YET, DropReasons, resolve_drop_reasons
from lbtune.observe.probe_source import (
    NEEDS,
    PROBES,
    NameHash,
    ProbeSource,
    build_source,
    check_needs,
    perfect_hash,
    probes_dir,
    usable,
)

# Bounds of every map (the kernel allocates them up front; nothing grows while running).
MAX_IFACES = 256
MAX_SLOTS = 65536
DROP_CACHE_BITS = 12  # direct-mapped per-CPU drop table: 4096 (reason, location) entries
MAX_DROP_KEYS = 4096  # the per-CPU hash behind it, for keys whose entry is taken
MAX_PORT_KEYS = 1024  # closed ports: (protocol, local address, port) keys per CPU
PORT_CACHE_BITS = 8  # direct-mapped per-CPU closed-port table in front of it: 256 entries
NAPI_CACHE_BITS = 10  # direct-mapped per-CPU NAPI table: 1024 instances
MAX_NAPI = 4096  # the per-CPU hash behind it
NAPI_ID_CACHE = 1024  # rx: NAPI id -> interface, remembered (see probes/queues.bpf.c)
# skb length buckets of the queues probe: < 128, < 512, < 1024, < 1600 (one MTU-sized
# frame), < 16384, and larger (GSO/GRO aggregates).
SIZE_BOUNDS = (128, 512, 1024, 1600, 16384)
SIZE_LABELS = ("<128", "<512", "<1024", "<1600", "<16K", ">=16K")
BACKLOG = "(no_device)"  # napi_poll's dev_name for the per-CPU backlog (RPS, netif_rx)
# Drivers that hand packets up with queue_mapping = the rx queue itself. Every other driver
# records rx queue N as N + 1 (skb_record_rx_queue) and 0 means "not recorded".
RX_QUEUE_AS_IS = frozenset({"veth"})
# Drivers whose ethtool per-queue packet counters count only part of the traffic: veth's
# rx_queue_N_xdp_packets count only while its NAPI path is active.
PARTIAL_QUEUE_COUNTERS = frozenset({"veth"})
Status = Callable[[str], None]


@dataclass(frozen=True)
class InterfacePlan:
    """One interface in the probes' filter, and where its per-queue numbers come from."""

    name: str
    id: int
    ifindex: Optional[int]
    driver: Optional[str]
    base: int  # first slot in the per-queue arrays
    nrx: int  # rx queues counted by the probe (0: counters win, or not a queues target)
    ntx: int
    rx_off: int
    rx_queues: int  # rx queues the interface has (sysfs)
    rx_source: str  # "probe", "ethtool", "netlink qstats", "" when not a queues target
    tx_source: str


@dataclass(frozen=True)
class ProbePlan:
    """Everything decided before loading: the C, the filter, the names, the notes."""

    probes: tuple[str, ...]
    kernel: str
    netns: Optional[str]
    source: ProbeSource
    ifaces: tuple[InterfacePlan, ...]
    slots: int
    names: NameHash  # the filter's perfect hash of the interfaces' names
    reasons: Optional[DropReasons]
    has_reason: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def text(self) -> str:
        return self.source.text


def _read_formats(host: Host, probes: Sequence[str]) -> dict[str, Optional[TracepointFormat]]:
    out: dict[str, Optional[TracepointFormat]] = {}
    for probe in probes:
        for need in NEEDS[probe]:
            if need.name not in out:
                out[need.name] = read_format(host.fs, need.system, need.event)
    return out


def _queue_count(host: Host, dev: str, kind: str) -> int:
    return sum(1 for q in host.fs.listdir(f"/sys/class/net/{dev}/queues") if q.startswith(kind))


def _counter_sources(host: Host, devs: Sequence[str]) -> dict[tuple[str, str], str]:
    """(dev, direction) -> "netlink qstats" or "ethtool" where per-queue counters exist."""
    # Imported here (and in _plan_ifaces): netlink and the driver's counters load only when
    # probes are planned, not for the modules that import this one for `Status` alone.
    from lbtune.host.net.qstats import queue_stats
    from lbtune.observe.nicstats import read_nic_counters

    out: dict[tuple[str, str], str] = {}
    by_index = {host.fs.read_int(f"/sys/class/net/{d}/ifindex"): d for d in devs}
    for q in queue_stats() or []:
        dev = by_index.get(q.ifindex)
        if dev is not None and q.packets is not None:
            out[(dev, q.direction)] = "netlink qstats"
    for dev in devs:
        counters = read_nic_counters(host.fs, host.ethtool, dev)
        if counters.driver in PARTIAL_QUEUE_COUNTERS:
            continue
        for qc in counters.queues:
            if qc.packets is not None:
                out.setdefault((dev, qc.direction), "ethtool")
    return out


def _plan_ifaces(
    host: Host, probes: Sequence[str], only: Optional[Sequence[str]]
) -> tuple[tuple[InterfacePlan, ...], int]:
    from lbtune.observe.nicstats import read_nic_counters  # see _counter_sources

    known = nic_names(host.fs)
    if only:
        for name in only:
            if name not in known:
                raise BadInput(f"--iface {name}: no such interface")
        names = list(dict.fromkeys(only))
    else:
        names = [n for n in known if n != "lo"]
    if len(names) + 1 > MAX_IFACES:
        raise BadInput(f"{len(names)} interfaces: probes filter at most {MAX_IFACES - 1}")
    sources = _counter_sources(host, names) if "queues" in probes else {}
    plans: list[InterfacePlan] = []
    base = 0
    for i, name in enumerate(names):
        driver = read_nic_counters(host.fs, host.ethtool, name).driver
        nrx = ntx = 0
        rx_src = tx_src = ""
        if "queues" in probes:
            rx_src = sources.get((name, "rx"), "probe")
            tx_src = sources.get((name, "tx"), "probe")
            nrx = max(_queue_count(host, name, "rx-"), 1) if rx_src == "probe" else 0
            ntx = max(_queue_count(host, name, "tx-"), 1) if tx_src == "probe" else 0
        plans.append(
            InterfacePlan(
                name=name,
                id=i + 1,
                ifindex=host.fs.read_int(f"/sys/class/net/{name}/ifindex"),
                driver=driver,
                base=base,
                nrx=nrx,
                ntx=ntx,
                rx_off=0 if driver in RX_QUEUE_AS_IS else 1,
                rx_queues=max(_queue_count(host, name, "rx-"), 1),
                rx_source=rx_src,
                tx_source=tx_src,
            )
        )
        if nrx or ntx:
            base += max(nrx, ntx) + 1
    if base > MAX_SLOTS:
        raise BadInput(f"{base} queues to count: at most {MAX_SLOTS}; choose with --iface")
    if "napi" in probes and not only:
        plans.append(InterfacePlan(BACKLOG, len(plans) + 1, None, None, 0, 0, 0, 0, 0, "", ""))
    return tuple(plans), max(base, 1)


def _host_namespace_names(host: Host) -> set[str]:
    """Interface names of the host's namespace (PID 1's), read through procfs."""
    out = set()
    for line in (host.fs.read("/proc/1/net/dev") or "").splitlines()[2:]:
        name, _, _ = line.partition(":")
        if name.strip():
            out.add(name.strip())
    return out


def _wanted(host: Host, probes: Sequence[str]) -> tuple[str, ...]:
    """The probes asked for, in PROBES order, once they can run here (BadInput,
    NeedsPrivilege otherwise)."""
    wanted = tuple(p for p in PROBES if p in probes)
    unknown = [p for p in probes if p not in PROBES]
    if unknown or not wanted:
        raise BadInput(f"unknown probe {unknown[0] if unknown else ''!r}: choose from "
                       + ", ".join(PROBES))  # fmt: skip
    if not host.is_live:
        raise BadInput("probes run on the running kernel; --root reads recorded files")
    if os.geteuid() != 0:
        raise NeedsPrivilege("probes need root (BPF and tracefs): run lbtune as root")
    return wanted


def _plan_drops(
    host: Host,
    formats: dict[str, Optional[TracepointFormat]],
    defines: dict[str, Any],
    notes: list[str],
) -> tuple[Optional[DropReasons], bool]:
    """The drops probe's defines and notes; returns this kernel's drop reasons (None
    without them) and whether kfree_skb has a reason at all."""
    kfree = formats["skb:kfree_skb"]
    assert kfree is not None
    reasons: Optional[DropReasons] = None
    has_reason = kfree.field("reason") is not None
    defines["LBT_D_MAX"] = MAX_DROP_KEYS
    if has_reason:
        reasons = resolve_drop_reasons(kfree.symbols("reason"), kernel_enums(host.fs))
        defines["LBT_D_REASON"] = None
        # Frees that are not drops, by this kernel's numbers (5.17 has neither: its 0 is
        # NOT_SPECIFIED, a real drop).
        for name, define in ((NOT_DROPPED_YET, "LBT_D_NOT_DROPPED_YET"),
                             (CONSUMED, "LBT_D_CONSUMED")):  # fmt: skip
            value = reasons.value(name)
            if value is not None:
                defines[define] = value
        notes.append(f"drop reason names from {reasons.source}")
    else:
        notes.append("this kernel's kfree_skb has no drop reason (< 5.17): by location only")
    _plan_ports(formats, defines, notes)
    if host.netns:
        notes.append(
            "drops are host-wide: kfree_skb carries no device or namespace, so drops of "
            "every namespace are counted"
        )
    return reasons, has_reason


def _table_defines(
    host: Host, plans: Sequence[InterfacePlan], names: NameHash, slots: int
) -> dict[str, Any]:
    """The sizes of the probes' maps and the interface-name hash, as C defines."""
    return {
        "LBT_IF_SLOTS": names.size,
        "LBT_IF_H1": f"0x{names.h1:016x}ULL",
        "LBT_IF_H2": f"0x{names.h2:016x}ULL",
        "LBT_IF_SHIFT": 64 - names.bits,
        "LBT_IF_LENS": hex(sum({1 << (len(p.name.encode()) + 1) for p in plans})),
        "LBT_D_CACHE": 1 << DROP_CACHE_BITS,
        "LBT_D_SHIFT": 64 - DROP_CACHE_BITS,
        "LBT_Q_NAPI_IDS": NAPI_ID_CACHE,
        "LBT_MIN_NAPI_ID": _min_napi_id(host),
        "LBT_Q_SLOTS": slots,
        "LBT_Q_NSIZES": len(SIZE_LABELS),
        **{f"LBT_Q_SIZE_{i}": b for i, b in enumerate(SIZE_BOUNDS)},
        "LBT_N_MAX": MAX_NAPI,
        "LBT_N_CACHE": 1 << NAPI_CACHE_BITS,
        "LBT_N_SHIFT": 64 - NAPI_CACHE_BITS,
    }


def plan_probes(
    host: Host,
    probes: Sequence[str],
    ifaces: Optional[Sequence[str]] = None,
    status: Optional[Status] = None,
    typed: bool = True,
) -> ProbePlan:
    """Check the kernel and build the C for `probes`; nothing is loaded yet.

    BadInput for an unknown probe or interface, or a host tree that is not the running
    machine; NeedsPrivilege when not root, or when the kernel lacks a tracepoint or field
    (the message names each missing piece). `typed` False keeps the queues probe's
    programs on the tracepoint records even where BTF allows tp_btf (`_typed_queues`).
    """
    wanted = _wanted(host, probes)
    if status:
        status("reading tracepoint formats")
    ensure_tracefs(host.fs)
    formats = _read_formats(host, wanted)
    problems = check_needs(wanted, formats)
    if problems:
        raise NeedsPrivilege("; ".join(problems))
    notes: list[str] = []
    defines: dict[str, Any] = {}
    reasons: Optional[DropReasons] = None
    has_reason = False
    if "drops" in wanted:
        reasons, has_reason = _plan_drops(host, formats, defines, notes)
    plans: tuple[InterfacePlan, ...] = ()
    slots = 1
    if "queues" in wanted or "napi" in wanted:
        plans, slots = _plan_ifaces(host, wanted, ifaces)
        if host.netns:
            clash = sorted({p.name for p in plans} & _host_namespace_names(host) - {BACKLOG})
            notes.append(
                "interfaces are matched by name (the only device identity these tracepoints "
                "carry)" + (f"; also in the host namespace: {', '.join(clash)}" if clash else "")
            )
    names = perfect_hash([p.name for p in plans] or ["lo"])
    defines.update(_table_defines(host, plans, names, slots))
    c_dir = probes_dir()
    if c_dir is None:
        raise NeedsPrivilege("the probes' C files are missing from this lbtune installation")
    kernel = host.fs.read("/proc/sys/kernel/osrelease") or os.uname().release
    where = f", netns {host.netns}" if host.netns else ""
    header = f"lbtune probes {', '.join(wanted)} for Linux {kernel}{where}"
    queues_typed = _typed_queues(host, formats, defines) if typed and "queues" in wanted else {}
    source = build_source(wanted, formats, defines, c_dir, header, queues_typed)
    return ProbePlan(wanted, kernel, host.netns, source, plans, slots, names, reasons,
                     has_reason, tuple(notes))  # fmt: skip


def _plan_ports(
    formats: dict[str, Optional[TracepointFormat]], defines: dict[str, Any], notes: list[str]
) -> None:
    """The closed-port part of the drops probe: which of its two tracepoints this kernel has
    with the fields it reads (tcp_send_reset with a reset reason: 6.10+; icmp_send: 6.9+)."""
    missing = []
    rst = formats.get("tcp:tcp_send_reset")
    saddr = rst.field("saddr") if rst is not None else None
    no_socket = None
    if rst is not None and rst.field("reason") is not None:
        no_socket = {v: k for k, v in rst.symbols("reason").items()}.get("NO_SOCKET")
    if saddr is not None and saddr.size >= 24 and no_socket is not None:
        defines["LBT_P_RST"] = None
        defines["LBT_P_RST_NO_SOCKET"] = no_socket
    else:
        formats["tcp:tcp_send_reset"] = None  # not attached
        missing.append("tcp:tcp_send_reset with a NO_SOCKET reason (TCP)")
    icmp = formats.get("icmp:icmp_send")
    if icmp is not None and all(icmp.field(f) is not None for f in ("type", "dport", "daddr")):
        defines["LBT_P_ICMP"] = None
    else:
        formats["icmp:icmp_send"] = None
        missing.append("icmp:icmp_send (UDP over IPv4)")
    if "LBT_P_RST" in defines or "LBT_P_ICMP" in defines:
        defines["LBT_P_MAX"] = MAX_PORT_KEYS
        defines["LBT_P_CACHE"] = 1 << PORT_CACHE_BITS
        defines["LBT_P_SHIFT"] = 64 - PORT_CACHE_BITS
    if missing:
        notes.append("closed ports unnamed without " + " and ".join(missing))


# What the queues probe's tp_btf programs read, (struct, member, size, define); tx also
# reads the GSO fields of skb_shinfo(skb) = skb->head + skb->end (an offset on 64-bit).
TYPED_READS = (("sk_buff", "dev", 8, "LBT_SKB_DEV"),
               ("sk_buff", "queue_mapping", 2, "LBT_SKB_QUEUE_MAPPING"),
               ("sk_buff", "len", 4, "LBT_SKB_LEN"),
               ("net_device", "name", 16, "LBT_DEV_NAME"))  # fmt: skip
TYPED_TX_READS = (("sk_buff", "head", 8, "LBT_SKB_HEAD"),
                  ("sk_buff", "end", 4, "LBT_SKB_END"),
                  ("skb_shared_info", "gso_size", 2, "LBT_SHINFO_GSO_SIZE"),
                  ("skb_shared_info", "gso_segs", 2, "LBT_SHINFO_GSO_SEGS"))  # fmt: skip


def _offsets(btf: BtfTypes, reads: Sequence[tuple[str, str, int, str]]) -> Optional[dict[str, int]]:
    """define -> byte offset of each member, None unless every one has the size read."""
    out = {}
    for struct_name, member, size, define in reads:
        found = btf.member(struct_name, member)
        if found is None or found[1] != size:
            return None
        out[define] = found[0]
    return out


def _typed_queues(
    host: Host, formats: dict[str, Optional[TracepointFormat]], defines: dict[str, Any]
) -> dict[str, int]:
    """The queues probe's events it reads as BTF-typed tracepoints (tp_btf), by the BTF id
    of their `btf_trace_<event>` typedef, and the defines those programs need.

    A tp_btf program gets the skb (and on tx the device) itself: it reads the device's name
    in place instead of copying the record's name string with a helper call (the copy was
    most of the probe's cost, docs/probes.md). Needs the running kernel's BTF (vmlinux),
    its typedef for the event (Linux 5.5+ has one per tracepoint), and the members read at
    byte offsets with the sizes read. Without them, every program stays on the records.
    """
    blob = host.fs.read_bytes(f"{BTF_DIR}/vmlinux")
    if not blob:
        return {}
    try:
        btf = BtfTypes(blob)
    except BtfError:
        return {}
    common = _offsets(btf, TYPED_READS)
    if common is None:
        return {}
    tx = _offsets(btf, TYPED_TX_READS)
    if tx is not None and tx["LBT_SHINFO_GSO_SEGS"] != tx["LBT_SHINFO_GSO_SIZE"] + 2:
        tx = None  # the program reads both in one 4-byte copy
    out = {}
    for need in NEEDS["queues"]:
        type_id = btf.type_id(KIND_TYPEDEF, f"btf_trace_{need.event}")
        if type_id is None or not usable(need, formats):
            continue
        if need.event == "net_dev_start_xmit":
            if tx is None:
                continue
            defines["LBT_Q_BTF_TX"] = None
            defines.update(tx)
        else:
            defines["LBT_Q_BTF"] = None
        out[need.event] = type_id
    if out:
        defines.update(common)
    return out


def _min_napi_id(host: Host) -> int:
    """The kernel's MIN_NAPI_ID, NR_CPUS + 1: smaller values in skb->napi_id are a sending
    CPU, not a NAPI id. `kernel_max` is NR_CPUS - 1; unknown: never trust the field."""
    kernel_max = host.fs.read_int("/sys/devices/system/cpu/kernel_max")
    return kernel_max + 2 if kernel_max is not None else 0xFFFFFFFF
