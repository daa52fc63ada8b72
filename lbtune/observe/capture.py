"""Host capture: the /proc, /sys and /etc files lbtune reads, plus command recordings, as a tarball.

`lbtune capture` writes a gzip tarball laid out as a host tree (like a small sosreport): kernel
files under `proc/`, `sys/`, `etc/`, recordings of `ethtool`, `ss`, `tc` and `ip` under
`sos_commands/networking/`, and a manifest `lbtune-capture.json` at the root. Unpacked, it is a
`--root` for every lbtune command, so a host can be diagnosed elsewhere; two captures taken a
while apart give deltas (both record /proc/uptime and the same file set).

What is read is restricted to what lbtune reads (see docs/capture.md); sysfs symlinks are kept
as the kernel has them (relative), and a symlink that leads out of the captured set is never
followed. `unpack_capture` is the safe inverse: it refuses absolute names, `..`, links that
point outside the tree, devices and other special files, on any Python >= 3.9.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from lbtune import __version__
from lbtune.errors import BadInput
from lbtune.host.ethtool import (
    RECORD_DIR,
    format_ethtool_g,
    format_ethtool_i,
    format_ethtool_l,
    format_ethtool_S,
)
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.irqbalance import CONFIG_FILES as IRQBALANCE_CONFIG
from lbtune.host.irqbalance import UNIT_WANTS as IRQBALANCE_WANTS
from lbtune.host.qdisc import TC_QDISC_RECORD, format_tc_qdisc
from lbtune.host.sockdiag import SS_RECORD, format_ss

MANIFEST = "lbtune-capture.json"
FORMAT_VERSION = 1

# Where a symlink may lead: a link to anywhere else (/etc/shadow, /proc/self/environ, a file in
# /root) is listed as skipped and not followed. `/lib/systemd/system` is there because systemd's
# `*.wants/` links are absolute and /lib is itself a link to usr/lib on merged-/usr systems.
# (/proc is read only at the paths below, never through a link.)
ALLOWED = (
    "/sys", "/etc/default/grub", "/etc/default/irqbalance", "/etc/sysconfig/irqbalance",
    "/etc/sysctl.conf", "/etc/sysctl.d", "/etc/lbtune", "/etc/systemd/system",
    "/etc/os-release", "/usr/lib/os-release", "/usr/lib/systemd/system", "/lib/systemd/system",
)  # fmt: skip

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
SECRET_SYSCTLS = frozenset({"tcp_fastopen_key", "stable_secret"})
PROCESSES = ("irqbalance",)  # /proc/PID/comm kept only for these (irqbalance detection)

CPU_SYS = "/sys/devices/system/cpu"
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
MAX_FILE = 64 << 20  # bytes; a bigger kernel file is skipped, never truncated
_VIRTIO = re.compile(r"^virtio\d+$")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN_REL = re.compile(r"^(\.\./)*([^./][^/]*/)*[^./][^/]*$")


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


def _allowed(kpath: str) -> bool:
    return any(kpath == a or kpath.startswith(a + "/") for a in ALLOWED)


def _safe_member(kpath: str) -> Optional[str]:
    """Tar member name of a kernel path; None when it cannot be a safe relative name."""
    name = posixpath.normpath(kpath).lstrip("/")
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") for p in parts) or _UNSAFE.search(name):
        return None
    return name


def _read_all(path: str) -> Optional[bytes]:
    """A file's whole content; None when larger than MAX_FILE.

    sysfs and procfs report sizes of 4096 or 0, so files are read to EOF, never copied by
    size; in modest chunks, because sysctl handlers allocate a buffer of the requested size
    and fail a large read with ENOMEM.
    """
    chunks: list[bytes] = []
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > MAX_FILE:
                return None
            chunks.append(chunk)


class _Tree:
    """The files, links and directories collected so far, keyed by kernel path."""

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs
        self.files: dict[str, tuple[bytes, int]] = {}  # kernel path -> (content, mode)
        self.links: dict[str, str] = {}  # kernel path -> relative target
        self.dirs: set[str] = set()
        self.skipped: dict[str, str] = {}

    # ---------------------------------------------------------------- resolution
    def resolve(self, kpath: str) -> Optional[str]:
        """The link-free kernel path of `kpath`, recording every symlink met on the way.

        /proc is taken as it is (its links, `net -> self/net`, are the reader's own view and
        are stored as plain directories). None when absent or when a link leaves the set.
        """
        kpath = posixpath.normpath(kpath)
        if kpath == "/proc" or kpath.startswith("/proc/"):
            return kpath if os.path.lexists(self.fs.path(kpath)) else None
        parts = [p for p in kpath.split("/") if p]
        cur, i, hops = "", 0, 0
        pending: dict[str, str] = {}  # links met; kept only when the path resolves
        while i < len(parts):
            nxt = f"{cur}/{parts[i]}"
            try:
                st = os.lstat(self.fs.path(nxt))
            except OSError:
                return None  # absent: not captured, not worth a note
            if not stat.S_ISLNK(st.st_mode):
                cur, i = nxt, i + 1
                continue
            hops += 1
            if hops > 40:
                self.skip(kpath, "too many levels of symbolic links")
                return None
            try:
                full = self._link_dest(nxt, cur or "/", parts[i + 1 :], pending)
            except OSError:  # removed meanwhile
                return None
            if full is None:
                return None
            parts, cur, i = [p for p in full.split("/") if p], "", 0
        self.links.update(pending)
        return cur or "/"

    def _link_dest(
        self, link: str, parent: str, rest: list[str], into: dict[str, str]
    ) -> Optional[str]:
        """Put `link` (as a relative link) in `into`; return the path `link/REST` leads to.

        None, and nothing recorded, when that path is outside the captured set.
        """
        target = os.readlink(self.fs.path(link))
        dest = posixpath.normpath(posixpath.join(parent, target))
        full = posixpath.join(dest, *rest)
        if not _allowed(full):
            self.skip(link, f"symlink to {target} leads out of the capture")
            return None
        # Keep the kernel's own text (`../../../virtio2`) when it is plain ups then downs.
        into[link] = target if _PLAIN_REL.match(target) else posixpath.relpath(dest, parent)
        return full

    def record_link(self, kpath: str, make_target_dir: bool = False) -> None:
        """Keep a symlink whose target is not itself captured (`driver`, `lower_eth0`)."""
        try:
            if not os.path.islink(self.fs.path(kpath)):
                return
            dest = self._link_dest(kpath, posixpath.dirname(kpath), [], self.links)
        except OSError as e:
            self.skip(kpath, e.strerror or str(e))
            return
        if dest is not None and make_target_dir and dest.startswith("/sys/"):
            self.dirs.add(dest)

    def skip(self, kpath: str, reason: str) -> None:
        self.skipped.setdefault(kpath, reason)

    # ---------------------------------------------------------------- adding files
    def add_file(self, kpath: str) -> None:
        """Capture one file (following allowed links); absent files are silently left out."""
        real = self.resolve(kpath)
        if real is not None:
            self._read_into(real)

    def _read_into(self, real: str) -> None:
        path = self.fs.path(real)
        try:
            st = os.stat(path)
        except OSError:
            return
        if stat.S_ISDIR(st.st_mode):
            return
        if not stat.S_ISREG(st.st_mode):
            self.skip(real, "not a regular file")
            return
        if not st.st_mode & 0o444:
            self.skip(real, "write-only")
            return
        if posixpath.basename(real) in SECRET_SYSCTLS and real.startswith("/proc/sys/"):
            self.skip(real, "secret (not captured)")
            return
        try:
            data = _read_all(path)
        except OSError as e:
            self.skip(real, f"read: {e.strerror or e}")
            return
        if data is None:
            self.skip(real, f"larger than {MAX_FILE >> 20} MiB")
            return
        self.files[real] = (data, st.st_mode & 0o777)

    def add_files(self, kdir: str, names: Iterable[str]) -> Optional[str]:
        """Capture `kdir/NAME` for each name; returns the link-free directory (None: absent)."""
        real = self.resolve(kdir)
        if real is None or not os.path.isdir(self.fs.path(real)):
            return None
        for name in names:
            self.add_file(f"{real}/{name}")
        return real

    def _entries(self, real: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.fs.path(real)) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError as e:
            if not isinstance(e, (FileNotFoundError, NotADirectoryError)):
                self.skip(real, e.strerror or str(e))
            return []

    def add_flat(self, kdir: str) -> Optional[str]:
        """Capture the regular files directly in `kdir` (no links, no subdirectories)."""
        real = self.resolve(kdir)
        if real is None:
            return None
        for e in self._entries(real):
            if e.is_file(follow_symlinks=False):
                self._read_into(f"{real}/{e.name}")
        return real

    def add_tree(self, kdir: str) -> None:
        """Capture a directory recursively; links inside are kept and followed if allowed."""
        real = self.resolve(kdir)
        if real is None or not os.path.isdir(self.fs.path(real)):
            return
        self.dirs.add(real)
        for e in self._entries(real):
            child = f"{real}/{e.name}"
            if e.is_symlink():
                self.add_file(child)
            elif e.is_dir(follow_symlinks=False):
                self.add_tree(child)
            else:
                self._read_into(child)

    def add_text(self, kpath: str, text: str) -> None:
        self.files[kpath] = (text.encode(), 0o644)

    def listdir(self, kdir: str) -> list[str]:
        real = self.resolve(kdir)
        return [e.name for e in self._entries(real)] if real else []


# -------------------------------------------------------------------- what is captured


def _capture_proc(t: _Tree) -> None:
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


def _capture_cpus(t: _Tree) -> None:
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


def _capture_bus_device(t: _Tree, real: str) -> None:
    t.add_files(real, DEVICE_FILES)
    t.record_link(f"{real}/driver", make_target_dir=True)
    t.add_flat(f"{real}/msi_irqs")


def _capture_netdev(t: _Tree, name: str) -> None:
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


def _capture_etc(t: _Tree) -> None:
    for p in (*ETC_FILES, *IRQBALANCE_CONFIG, *IRQBALANCE_WANTS):
        t.add_file(p)
    for d in ETC_TREES:
        t.add_tree(d)
    if os.path.isdir(t.fs.path("/etc/systemd/system")):
        t.dirs.add("/etc/systemd/system")  # "systemd is used here" for irqbalance detection


def _record_commands(t: _Tree, host: Host, names: list[str]) -> list[dict[str, Any]]:
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
        if _safe_member(f"{RECORD_DIR}/ethtool_-i_{dev}") is None:
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
    try:
        listen, udp = host.listen_sockets(), host.udp_sockets()
        if listen is None and udp is None:
            record("ss -peaonmi", None, "no sock_diag", SS_RECORD)
        else:
            record("ss -peaonmi", format_ss(listen or [], udp or []), "", SS_RECORD)
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


def collect(host: Host) -> tuple[_Tree, dict[str, Any]]:
    """Read everything a capture holds from `host`; returns the tree and the manifest."""
    t = _Tree(host.fs)
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
        "netns": host.netns,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wallclock)),
        "wallclock": round(wallclock, 3),
        "uptime": float(uptime_text[0]) if uptime_text else None,
        "interfaces": names,
        "commands": commands,
    }
    return t, manifest


# -------------------------------------------------------------------- writing


def _check_output(output: str, force: bool) -> str:
    out = os.path.abspath(output)
    if os.path.isdir(out):
        raise BadInput(f"-o {output}: is a directory")
    if os.path.lexists(out) and not force:
        raise BadInput(f"-o {output}: exists; pass --force to replace it")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise BadInput(f"-o {output}: directory {parent} does not exist")
    return out


def _tarinfo(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _write_tar(t: _Tree, manifest: dict[str, Any], path: str) -> tuple[int, int]:
    """Write the tree as a gzip tarball at `path`; returns (regular files, links)."""
    mtime = int(manifest["wallclock"])
    files: dict[str, tuple[bytes, int]] = {}
    links: dict[str, str] = {}
    for kpath, (data, mode) in t.files.items():
        name = _safe_member(kpath)
        if name is None:
            t.skip(kpath, "name is not safe in a tarball")
        else:
            files[name] = (data, mode)
    for kpath, target in t.links.items():
        name = _safe_member(kpath)
        if name is None or _UNSAFE.search(target) or not _inside(name, target):
            t.skip(kpath, "link is not safe in a tarball")
        elif name not in files:
            links[name] = target
    dirs: set[str] = set()
    for name in [*files, *links, *(n for n in map(_safe_member, t.dirs) if n)]:
        parent = name if name not in files and name not in links else posixpath.dirname(name)
        while parent and parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    dirs -= set(links)
    manifest["files"] = sorted(files)
    manifest["links"] = {k: links[k] for k in sorted(links)}
    manifest["skipped"] = [{"path": p, "reason": r} for p, r in sorted(t.skipped.items())]
    blob = json.dumps(manifest, indent=1).encode() + b"\n"
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
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
    return len(files) + 1, len(links)


def write_capture(host: Host, output: str, force: bool = False) -> CaptureResult:
    """Capture `host` into the gzip tarball `output` (replaced only with `force`).

    The tarball is written next to `output` and renamed into place, so a failed capture never
    leaves a partial file behind.
    """
    out = _check_output(output, force)
    t, manifest = collect(host)
    tmp = f"{out}.lbtune-tmp-{os.getpid()}"
    try:
        n_files, n_links = _write_tar(t, manifest, tmp)
        os.replace(tmp, out)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
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


def read_manifest(fs: HostFS) -> Optional[dict[str, Any]]:
    """The manifest of an unpacked capture, None when the tree is not an lbtune capture."""
    path = os.path.join(fs.root, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# -------------------------------------------------------------------- unpacking

MAX_UNPACKED = 4 << 30  # bytes; a bigger archive is refused (sosreports are far smaller)


def _member_name(member: tarfile.TarInfo, tarball: str) -> str:
    """The member's relative name ("" for the archive's own `./`); BadInput when unsafe."""
    raw = member.name
    parts = [p for p in raw.rstrip("/").split("/") if p != "."]
    if raw.startswith("/") or "\x00" in raw or any(p in ("", "..") for p in parts):
        raise BadInput(f"{tarball}: unsafe member name {raw!r}")
    return "/".join(parts)


def _inside(name: str, target: str) -> bool:
    """Whether a link at `name` pointing to `target` (relative) stays inside the tree."""
    if target.startswith("/") or "\x00" in target:
        return False
    dest = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return dest != ".." and not dest.startswith("../")


def unpack_capture(tarball: str, dest: str) -> str:
    """Extract a capture (or sosreport) tarball into `dest` safely; returns the host root.

    `dest` must not exist or be an empty directory. Refused (BadInput, nothing left half-done
    outside `dest`): absolute names, `..`, symlinks or hard links pointing outside the tree,
    members below a symlink, devices, FIFOs and other special files, more than 4 GiB. Links
    are created last, so no file is ever written through one. The returned root is `dest`, or
    its single top-level directory when the archive has one (sosreport-HOST-DATE/).
    """
    if os.path.isdir(dest) and os.listdir(dest):
        raise BadInput(f"{dest}: not empty")
    try:
        tar = tarfile.open(tarball, "r:*")  # noqa: SIM115 (closed by the `with` below)
    except FileNotFoundError:
        raise BadInput(f"{tarball}: no such file") from None
    except (tarfile.TarError, OSError) as e:
        raise BadInput(f"{tarball}: not a readable tar archive ({e})") from None
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise BadInput(f"{tarball}: corrupt archive ({e})") from None
        plan = _check_members(members, tarball)
        created = not os.path.exists(dest)
        os.makedirs(dest, exist_ok=True)
        root = os.path.realpath(dest)
        try:
            _extract(tar, plan, root, tarball)
        except BaseException:
            _remove_contents(root, also_root=created)  # never leave half a host tree
            raise
    tops = {name.split("/", 1)[0] for _, name in plan}
    if len(tops) == 1:
        (top,) = tops
        candidate = os.path.join(root, top)
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            entries = set(os.listdir(candidate))
            if entries & {"proc", "sys", MANIFEST}:
                return candidate
    return root


def _remove_contents(root: str, also_root: bool) -> None:
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # unlinks symlinks, never follows them
        else:
            os.unlink(path)
    if also_root:
        os.rmdir(root)


def _check_members(
    members: list[tarfile.TarInfo], tarball: str
) -> list[tuple[tarfile.TarInfo, str]]:
    plan: list[tuple[tarfile.TarInfo, str]] = []
    links: set[str] = set()
    total = 0
    for m in members:
        name = _member_name(m, tarball)
        if not name:
            if not m.isdir():
                raise BadInput(f"{tarball}: unsafe member name {m.name!r}")
            continue  # "./", the archive's root
        if m.issym():
            if not _inside(name, m.linkname):
                raise BadInput(f"{tarball}: link {m.name} -> {m.linkname} points outside")
            links.add(name)
        elif m.islnk():
            target = _member_name(tarfile.TarInfo(m.linkname), tarball)
            if target not in {n for mm, n in plan if mm.isreg()}:
                raise BadInput(f"{tarball}: hard link {m.name} -> {m.linkname} is not to a file")
        elif m.isreg():
            total += m.size
        elif not m.isdir():
            raise BadInput(f"{tarball}: {m.name} is a device or special file")
        if total > MAX_UNPACKED:
            raise BadInput(f"{tarball}: more than {MAX_UNPACKED >> 30} GiB unpacked")
        plan.append((m, name))
    for m, name in plan:
        parent = posixpath.dirname(name)
        while parent:
            if parent in links:
                raise BadInput(f"{tarball}: {m.name} lies below the symlink {parent}")
            parent = posixpath.dirname(parent)
    return plan


def _extract(
    tar: tarfile.TarFile, plan: list[tuple[tarfile.TarInfo, str]], root: str, tarball: str
) -> None:
    def target(name: str) -> str:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        return path

    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    for m, name in plan:
        if m.isdir():
            path = os.path.join(root, name)
            os.makedirs(path, mode=0o755, exist_ok=True)
        elif m.isreg():
            src = tar.extractfile(m)
            if src is None:
                raise BadInput(f"{tarball}: cannot read {m.name}")
            path = target(name)
            if os.path.isdir(path) and not os.path.islink(path):
                raise BadInput(f"{tarball}: {m.name} is both a directory and a file")
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "wb") as f:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
            # Permission bits only (no set-id); 0444 sysctls stay read-only: lbtune reads
            # "global even inside a namespace" from that.
            os.chmod(path, m.mode & 0o777 | 0o400)
    for m, name in plan:
        if m.islnk():
            src_path = os.path.join(root, _member_name(tarfile.TarInfo(m.linkname), tarball))
            path = target(name)
            with open(src_path, "rb") as s, os.fdopen(os.open(path, flags, 0o600), "wb") as d:
                d.write(s.read())
        elif m.issym():
            path = target(name)
            if os.path.lexists(path):
                raise BadInput(f"{tarball}: {m.name} exists twice")
            os.symlink(m.linkname, path)
    for m, name in plan:  # resolves chains of links too
        if m.issym():
            real = os.path.realpath(os.path.join(root, name))
            if real != root and not real.startswith(root + os.sep):
                raise BadInput(f"{tarball}: link {m.name} -> {m.linkname} resolves outside")
