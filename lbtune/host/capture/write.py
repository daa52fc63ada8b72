"""Host capture: the /proc, /sys and /etc files lbtune reads, plus command recordings, as a tarball.

`lbtune capture` writes a gzip tarball laid out as a host tree (like a small sosreport): kernel
files under `proc/`, `sys/`, `etc/`, recordings of `ethtool`, `ss`, `tc` and `ip` under
`sos_commands/networking/`, and a manifest `lbtune-capture.json` at the root. Unpacked, it is a
`--root` for every lbtune command, so a host can be diagnosed elsewhere; two captures taken a
while apart give deltas (both record /proc/uptime and the same file set).

What is read is restricted to what lbtune reads (see docs/capture.md); sysfs symlinks are kept
as the kernel has them (relative), and a symlink that leads out of the captured set is never
followed (host/capture/tree.py holds the files while they are read). `unpack_capture`
(host/capture/unpack.py) is the safe inverse.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import tarfile
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lbtune import __version__
from lbtune.host.capture.manifest import MANIFEST
from lbtune.host.capture.tree import UNSAFE, CaptureTree, safe_member
from lbtune.host.capture.unpack import link_inside as _inside
from lbtune.host.capture.unpack import unpack_capture
from lbtune.host.host import Host
from lbtune.host.identity import MACHINE_ID, machine_hash
from lbtune.host.kernel.cputopology import CPU_SYS
from lbtune.host.kernel.irqbalance import CONFIG_FILES as IRQBALANCE_CONFIG
from lbtune.host.kernel.irqbalance import UNIT_WANTS as IRQBALANCE_WANTS
from lbtune.host.net import rss
from lbtune.host.net.ethtool import (
    RECORD_DIR,
    EthtoolSource,
    format_ethtool_g,
    format_ethtool_i,
    format_ethtool_l,
    format_ethtool_S,
)
from lbtune.host.net.qdisc import TC_QDISC_RECORD, format_tc_qdisc
from lbtune.host.net.sockdiag import SS_RECORD, format_ss
from lbtune.host.outfile import check_output, write_output

__all__ = ["MANIFEST", "unpack_capture", "write_capture"]

FORMAT_VERSION = 1


PROC_FILES = ("/proc/cmdline", "/proc/uptime", "/proc/version", "/proc/interrupts",
              "/proc/softirqs", "/proc/stat", "/proc/irq/default_smp_affinity")  # fmt: skip
PROC_NET_FILES = ("netstat", "snmp", "snmp6", "softnet_stat", "sockstat", "sockstat6", "dev",
                  "stat/nf_conntrack", "ip_vs", "ip_vs_stats", "route", "ipv6_route")  # fmt: skip
# /proc/net/ip_vs_conn is left out: one line per connection, easily hundreds of megabytes.
IRQ_FILES = ("smp_affinity", "smp_affinity_list", "effective_affinity",
             "effective_affinity_list", "affinity_hint", "node")  # fmt: skip
# Non-net sysctls: what lbtune reads (inventory, profiles' fs./vm./kernel. keys) plus boot_id,
# which tells whether two captures come from the same boot (counters comparable).
SYSCTL_FILES = (
    "kernel/hostname", "kernel/osrelease", "kernel/ostype", "kernel/version",
    "kernel/random/boot_id", "kernel/pid_max", "kernel/threads-max", "kernel/timer_migration",
    "kernel/numa_balancing", "fs/file-max", "fs/file-nr", "fs/nr_open", "vm/swappiness",
)  # fmt: skip
# Secrets are not captured: a capture is meant to be handed to someone else.
PROCESSES = ("irqbalance",)  # /proc/PID/comm kept only for these (irqbalance detection)

NODE_SYS = "/sys/devices/system/node"
CPU_FILES = ("online", "possible", "present", "offline", "isolated", "nohz_full", "kernel_max",
             "smt/active", "smt/control")  # fmt: skip
CPUFREQ_FILES = ("scaling_governor", "scaling_available_governors", "scaling_driver",
                 "scaling_min_freq", "scaling_max_freq", "cpuinfo_min_freq",
                 "cpuinfo_max_freq")  # fmt: skip
NODE_FILES = ("online", "possible", "has_cpu", "has_memory", "has_normal_memory")
# Attributes of a NIC's bus device. A list, not a walk: PCI directories hold `config`,
# `resource*`, `rom` and `vpd`, which are large, binary, or slow/hanging to read.
DEVICE_FILES = (
    "numa_node", "local_cpulist", "local_cpus", "vendor", "device", "subsystem_vendor",
    "subsystem_device", "class", "irq", "uevent", "modalias", "enable", "current_link_speed",
    "current_link_width", "max_link_speed", "max_link_width", "sriov_numvfs", "sriov_totalvfs",
    "features", "status",
)  # fmt: skip
NETDEV_DIRS = ("statistics", "bonding", "bridge", "brport")
NETDEV_LINKS = re.compile(r"^(?:(?:lower_|upper_).+|master)$")
ETC_FILES = ("/etc/default/grub", "/etc/sysctl.conf", "/etc/os-release",
             "/etc/systemd/system/lbtune-boot.service",
             "/etc/systemd/system/multi-user.target.wants/lbtune-boot.service",
             "/etc/systemd/system/irqbalance.service", "/usr/lib/systemd/system/irqbalance.service",
             "/lib/systemd/system/irqbalance.service")  # fmt: skip
ETC_TREES = ("/etc/sysctl.d", "/etc/lbtune")
_VIRTIO = re.compile(r"^virtio\d+$")


@dataclass(frozen=True)
class Skipped:
    """A path that exists but was not captured, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class CaptureResult:
    """What `write_capture` wrote."""

    output: str
    bytes: int  # size of the tarball
    files: int  # regular files in it, manifest included
    links: int
    skipped: tuple[Skipped, ...]
    hostname: Optional[str]
    kernel: Optional[str]
    netns: Optional[str]
    uptime: Optional[float]


# -------------------------------------------------------------------- what is captured


def _capture_proc(t: CaptureTree) -> None:
    for p in PROC_FILES:
        t.add_file(p)
    for name in PROC_NET_FILES:
        t.add_file(f"/proc/net/{name}")
    for irq in t.listdir("/proc/irq"):
        if irq.isdigit():
            t.add_files(f"/proc/irq/{irq}", IRQ_FILES)
    t.add_tree("/proc/sys/net")
    for name in SYSCTL_FILES:
        t.add_file(f"/proc/sys/{name}")
    for pid in t.listdir("/proc"):
        if pid.isdigit() and t.fs.read(f"/proc/{pid}/comm") in PROCESSES:
            t.add_file(f"/proc/{pid}/comm")


def _capture_cpus(t: CaptureTree) -> None:
    t.add_files(CPU_SYS, CPU_FILES)
    for name in t.listdir(CPU_SYS):
        if re.fullmatch(r"cpu\d+", name):
            t.add_file(f"{CPU_SYS}/{name}/online")
            t.add_flat(f"{CPU_SYS}/{name}/topology")
            t.add_files(f"{CPU_SYS}/{name}/cpufreq", CPUFREQ_FILES)
    t.add_files(NODE_SYS, NODE_FILES)
    for name in t.listdir(NODE_SYS):
        if re.fullmatch(r"node\d+", name):
            t.add_files(f"{NODE_SYS}/{name}", ("cpulist", "cpumap", "distance"))
    for irq in t.listdir("/sys/kernel/irq"):
        if irq.isdigit():
            t.add_file(f"/sys/kernel/irq/{irq}/actions")


def _capture_bus_device(t: CaptureTree, real: str) -> None:
    t.add_files(real, DEVICE_FILES)
    t.record_link(f"{real}/driver", make_target_dir=True)
    t.add_flat(f"{real}/msi_irqs")


def _capture_netdev(t: CaptureTree, name: str) -> None:
    real = t.resolve(f"/sys/class/net/{name}")
    if real is None or not os.path.isdir(t.fs.path(real)):
        return
    t.add_flat(real)
    for sub in NETDEV_DIRS:
        t.add_flat(f"{real}/{sub}")
    for q in t.listdir(f"{real}/queues"):
        t.add_flat(f"{real}/queues/{q}")
    for entry in t.listdir(real):
        if NETDEV_LINKS.match(entry):
            t.record_link(f"{real}/{entry}")
    if not os.path.lexists(t.fs.path(f"{real}/device")):
        return
    dev = t.resolve(f"{real}/device")
    if dev is None:
        return
    _capture_bus_device(t, dev)
    if _VIRTIO.match(posixpath.basename(dev)):  # virtio-net: the PCI function is the parent
        _capture_bus_device(t, posixpath.dirname(dev))


def _capture_etc(t: CaptureTree) -> None:
    for p in (*ETC_FILES, *IRQBALANCE_CONFIG, *IRQBALANCE_WANTS):
        t.add_file(p)
    for d in ETC_TREES:
        t.add_tree(d)
    if os.path.isdir(t.fs.path("/etc/systemd/system")):
        t.dirs.add("/etc/systemd/system")  # "systemd is used here" for irqbalance detection


def _record_rss(
    record: Callable[[str, Optional[str], str], None], eth: EthtoolSource, dev: str, why: str
) -> None:
    """`ethtool -x DEV`, `ethtool -n DEV` and `ethtool -n DEV rx-flow-hash FLOW` (the flow
    types profiles set) as ethtool 6.1 prints them."""
    rxfh = eth.rxfh(dev)
    record(f"ethtool -x {dev}", None if rxfh is None else rss.format_ethtool_x(dev, rxfh), why)
    rules = eth.ntuple_rules(dev)
    rings = None if rxfh is None else rxfh.rings
    text = None if rules is None and rings is None else rss.format_ethtool_n(rings, rules)
    record(f"ethtool -n {dev}", text, why)
    for flow in rss.CAPTURED_FLOWS:
        fields = eth.rx_flow_hash(dev, flow)
        text = None if fields is None else rss.format_rx_flow_hash(flow, fields)
        record(f"ethtool -n {dev} rx-flow-hash {flow}", text, why)


def _record_commands(t: CaptureTree, host: Host, names: list[str]) -> list[dict[str, Any]]:
    """ethtool, ss, tc and ip recordings in sosreport's layout; returns what was recorded."""
    done: list[dict[str, Any]] = []

    def record(cmd: str, text: Optional[str], why: str, kpath: str = "") -> None:
        kpath = kpath or f"{RECORD_DIR}/{cmd.replace(' ', '_')}"
        if text is None:
            t.skip(kpath, why)
            return
        t.add_text(kpath, text)
        done.append({"command": cmd, "file": kpath.lstrip("/")})

    eth = host.ethtool
    unsupported = "not supported by the device"
    for dev in names:
        if safe_member(f"{RECORD_DIR}/ethtool_-i_{dev}") is None:
            continue
        info = eth.driver_info(dev)
        record(f"ethtool -i {dev}", None if info is None else format_ethtool_i(info), unsupported)
        rings = eth.rings(dev)
        text = None if rings is None else format_ethtool_g(rings, dev)
        record(f"ethtool -g {dev}", text, unsupported)
        chans = eth.channels(dev)
        text = None if chans is None else format_ethtool_l(chans, dev)
        record(f"ethtool -l {dev}", text, unsupported)
        stats = eth.stats(dev)
        # ethtool prints "no stats available" (an error) for a device with no statistics.
        record(f"ethtool -S {dev}", format_ethtool_S(stats) if stats else None, unsupported)
        _record_rss(record, eth, dev, unsupported)
    try:
        listen, udp = host.listen_sockets(), host.udp_sockets()
        if listen is None and udp is None:
            record("ss -peaonmi", None, "no sock_diag", SS_RECORD)
        else:
            receivers = host.tcp_receivers() or []
            record("ss -peaonmi", format_ss(listen or [], udp or [], receivers), "", SS_RECORD)
    except OSError as e:
        record("ss -peaonmi", None, f"sock_diag: {e.strerror or e}", SS_RECORD)
    try:
        qdiscs = host.qdiscs()
        text = None if qdiscs is None else format_tc_qdisc(qdiscs)
        record("tc -s qdisc show", text, "no rtnetlink", TC_QDISC_RECORD)
    except OSError as e:
        record("tc -s qdisc show", None, f"rtnetlink: {e.strerror or e}", TC_QDISC_RECORD)
    if host.is_live:
        if host.runner.which("ip") is None:
            record("ip -o addr", None, "ip is not installed")
        else:
            r = host.runner.run(["ip", "-o", "addr"])
            record("ip -o addr", r.stdout if r.ok else None, r.stderr.strip() or "failed")
    return done


def _machine(host: Host) -> Optional[str]:
    raw = host.fs.read(MACHINE_ID)
    return machine_hash(raw) if raw and raw.strip() else None


def collect(host: Host) -> tuple[CaptureTree, dict[str, Any]]:
    """Read everything a capture holds from `host`; returns the tree and the manifest."""
    t = CaptureTree(host.fs)
    wallclock = time.time()
    # Counters first, close together in time; configuration after.
    _capture_proc(t)
    names = t.listdir("/sys/class/net")
    for name in names:
        _capture_netdev(t, name)
    commands = _record_commands(t, host, names)
    _capture_cpus(t)
    _capture_etc(t)
    uptime_text = t.files.get("/proc/uptime", (b"", 0))[0].decode(errors="replace").split()
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "lbtune_version": __version__,
        "hostname": host.fs.read("/proc/sys/kernel/hostname"),
        "kernel": host.fs.read("/proc/sys/kernel/osrelease"),
        "boot_id": host.fs.read("/proc/sys/kernel/random/boot_id"),
        # A digest, not the id: machine-id(5) says the id itself is confidential.
        "machine": _machine(host),
        "netns": host.netns,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wallclock)),
        "wallclock": round(wallclock, 3),
        "uptime": float(uptime_text[0]) if uptime_text else None,
        "interfaces": names,
        "commands": commands,
    }
    return t, manifest


# -------------------------------------------------------------------- writing


def _tarinfo(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar(t: CaptureTree, manifest: dict[str, Any]) -> tuple[bytes, int, int]:
    """The tree as a gzip tarball; returns (tarball, regular files, links)."""
    mtime = int(manifest["wallclock"])
    files: dict[str, tuple[bytes, int]] = {}
    links: dict[str, str] = {}
    for kpath, (data, mode) in t.files.items():
        name = safe_member(kpath)
        if name is None:
            t.skip(kpath, "name is not safe in a tarball")
        else:
            files[name] = (data, mode)
    for kpath, target in t.links.items():
        name = safe_member(kpath)
        if name is None or UNSAFE.search(target) or not _inside(name, target):
            t.skip(kpath, "link is not safe in a tarball")
        elif name not in files:
            links[name] = target
    dirs: set[str] = set()
    for name in [*files, *links, *(n for n in map(safe_member, t.dirs) if n)]:
        parent = name if name not in files and name not in links else posixpath.dirname(name)
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    dirs -= set(links)
    manifest["files"] = sorted(files)
    manifest["links"] = {k: links[k] for k in sorted(links)}
    manifest["skipped"] = [{"path": p, "reason": r} for p, r in sorted(t.skipped.items())]
    blob = json.dumps(manifest, indent=1).encode() + b"\n"
    buf = io.BytesIO()  # a capture is tens of KiB: build it in memory, write it once
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = _tarinfo(MANIFEST, tarfile.REGTYPE, 0o644, mtime)
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for d in sorted(dirs):
            tar.addfile(_tarinfo(d, tarfile.DIRTYPE, 0o755, mtime))
        for name in sorted(files):
            data, mode = files[name]
            info = _tarinfo(name, tarfile.REGTYPE, mode, mtime)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        # Links last: a plain `tar x` then never writes through one.
        for name in sorted(links):
            info = _tarinfo(name, tarfile.SYMTYPE, 0o777, mtime)
            info.linkname = links[name]
            tar.addfile(info)
    return buf.getvalue(), len(files) + 1, len(links)


def write_capture(host: Host, output: str, force: bool = False) -> CaptureResult:
    """Capture `host` into the gzip tarball `output` (replaced only with `force`).

    `output` follows the rules of every `-o` (lbtune.host.outfile): checked before anything is
    read, written through a temporary file renamed into place, never through a device, FIFO
    or symlink, so a failed capture leaves no partial file behind.
    """
    check_output(output, force)
    t, manifest = collect(host)
    blob, n_files, n_links = _write_tar(t, manifest)
    out = write_output(output, blob, force)
    return CaptureResult(
        output=out,
        bytes=os.path.getsize(out),
        files=n_files,
        links=n_links,
        skipped=tuple(Skipped(p, r) for p, r in sorted(t.skipped.items())),
        hostname=manifest["hostname"],
        kernel=manifest["kernel"],
        netns=manifest["netns"],
        uptime=manifest["uptime"],
    )

