"""The VM lab: Debian's own kernel on an emulated 4-CPU, 2-node machine with real NIC drivers.

The UML lab (lbtune.lab.guests.uml) is fast but has one CPU and no hardware. This backend boots the
distro kernel that scripts/vm-image.sh prepared (``linux-image-<ver>-amd64``, never installed
on the host) under qemu, so the product's hardware paths run against real drivers::

    from lbtune.lab.guests.vm import VmGuest
    with VmGuest.boot() as g:
        r = g.run(["lbtune", "show", "--json"], timeout=120)   # CompletedProcess (text)
        v = g.call("pkg.mod:func", [1, 2])                     # JSON value or LabError
        g.reboot(cmdline_extra=("isolcpus=3",))                # the guest's writes persist
        g.describe()                                           # kernel, accel, cpus, ...

The machine: 4 vCPUs on 2 NUMA nodes (CPUs 0-1, 2-3); eth0 virtio-net with 4 queue pairs (a
``multi_queue`` tap in a throwaway host network namespace that qemu runs in, removed
afterwards) behind a PCI expander bridge on node 1, so its PCI function has a node (numa_node 1,
local_cpulist 2-3) as a NIC in a multi-socket server does; eth1 e1000e (a tap in the same
namespace); a vmxnet3 on tap2 whose driver is not loaded at boot (the NIC whose rx ring qemu
overruns, for the nic-rx-drop fix loop: virtio and e1000e make qemu wait for a free buffer;
``modprobe vmxnet3`` makes it eth2); serial console to a log file.
Accelerator: KVM only when a short trial boot proves it works on this host (nested KVM can
hang after the decompressor), else TCG (``-accel tcg,thread=multi -cpu max``);
``LBTUNE_VM_ACCEL=kvm|tcg`` overrides, and the trial's answer is cached in the image cache
(its messages keep the words "KVM probe boot" that users and `lbtune doctor` output know).

Filesystems in the guest: the host's ``/`` read-only over virtio-9p is the lower layer of an
overlay whose upper layer is an ext4 image file per guest (virtio-blk; a 9p upper cannot hold
overlayfs whiteouts or xattrs), so what the guest writes - /etc, /var/lib/lbtune - survives a
guest reboot and nothing on the host changes; tmpfs on /tmp and /run; the kernel's full module
tree over /lib/modules/<ver>; the run's work directory at its host path (a second 9p export).
The guest agent (lbtune.lab.inguest.agent) serves the host's requests through that work
directory, in the one request protocol of both backends (lbtune.lab.protocol); kept up by
``lbtune lab up --vm`` (lbtune.lab.guests.session) it serves any process's requests.
``VmGuest.boot(init="systemd")`` boots the host's systemd as the guest's PID 1 instead of
the shell, with the agent as a service (render_systemd_units): a throwaway system whose
service manager is real, for the package's units (tests/vm/test_vm_units.py).

Cleanup on every exit path (normal, exception, KeyboardInterrupt): the qemu process group is
SIGKILLed and reaped, the network namespace deleted, work directory and state disk removed
(``LBTUNE_LAB_KEEP=1`` keeps them when the boot failed). After a kill -9 of the supervisor,
the next boot's ``reap_stale`` does it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from lbtune.host.atomic import write_json_atomic
from lbtune.host.deadline import wait_until
from lbtune.host.net.netns import netns_argv
from lbtune.host.runner import pid_alive
from lbtune.lab.guests.api import AgentClient, Guest, Watch, completed, guest_pythonpath
from lbtune.lab.guests.uml import ENV_KEEP
from lbtune.lab.inguest.entry import split_target
from lbtune.lab.protocol import (
    AGENT_LOG,
    FORK_CALLS,
    IN_VM_ENV,
    READY,
    REBOOT,
    LabError,
    LabTimeout,
    LabUnavailable,
    argv_request,
    call_request,
    stop_request,
)
from lbtune.lab.protocol import VM_CMDLINE_MARK as CMDLINE_MARK  # what in_lab() looks for

ENV_CACHE = "LBTUNE_VM_CACHE"
ENV_ACCEL = "LBTUNE_VM_ACCEL"
DEFAULT_CACHE = "/var/cache/lbtune/vm"
QEMU = "qemu-system-x86_64"
CPUS = 4
NODES = ((0, "0-1"), (1, "2-3"))
MEM_PER_NODE_MB = 1024
QUEUES = 4
NIC_NODE = 1  # eth0's NUMA node (the expander bridge's numa_node)
STATE_DISK_SIZE = "4G"  # sparse: the guest's writes only
BOOT_TIMEOUT = 300.0  # TCG on 2 shared cores: ~7 s alone, much more under load
KVM_TRIAL_TIMEOUT = 40.0
OWNER = "owner.json"  # in a work directory: who runs it (reap_stale)
LAST_BOOT = "last-boot.json"  # in the cache: what the most recent boot saw (lbtune doctor)
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_9P = "trans=virtio,version=9p2000.L,msize=262144"
SYSTEMD_TARGET = "vmlab.target"  # init="systemd": what PID 1 starts
SYSTEMD_AGENT = "vmlab-agent.service"
QMP_SOCKET = "qmp.sock"  # in the work directory: qemu's monitor, for vcpus()
CONSOLE_LOOK = 2.0  # seconds between looks at the console while a request runs
WEDGE_GRACE = 120.0  # a request unanswered this long after a kernel stall report fails
# What the guest kernel prints when it stalls or breaks (RCU stall reports, the soft- and
# hard-lockup watchdogs, a hung task, BUG/Oops, a panic).
TROUBLE = re.compile(
    r"rcu: INFO:|self-detected stall|soft lockup|hard LOCKUP|blocked for more than"
    r"|\bBUG: |\bOops\b|Kernel panic"
)


@dataclass(frozen=True)
class VmImage:
    """The boot files scripts/vm-image.sh prepared for one kernel version."""

    version: str
    kernel: str
    initrd: str
    modules_dir: str  # <cache>/<ver>/root/lib/modules/<ver>, bind-mounted in the guest


def cache_dir() -> str:
    return os.environ.get(ENV_CACHE) or DEFAULT_CACHE


def find_vm_image(cache: Optional[str] = None) -> VmImage:
    """The prepared image in the cache; LabUnavailable (saying how to make it) when absent."""
    base = Path(cache or cache_dir())
    hint = "run scripts/vm-image.sh (make setup does)"
    try:
        version = (base / "current").read_text(encoding="utf-8").strip()
    except OSError:
        raise LabUnavailable(f"no VM image in {base}: {hint}") from None
    d = base / version
    image = VmImage(
        version=version,
        kernel=str(d / "vmlinuz"),
        initrd=str(d / "initrd.img"),
        modules_dir=str(d / "root" / "lib" / "modules" / version),
    )
    for path in (d / "ready", Path(image.kernel), Path(image.initrd)):
        if not path.is_file():
            raise LabUnavailable(f"VM image {version} incomplete ({path} missing): {hint}")
    return image


def find_qemu() -> str:
    path = shutil.which(QEMU)
    if path is None:
        raise LabUnavailable(f"{QEMU} not found (install qemu-system-x86; make setup does)")
    return path


GUEST_OWN_DIRS = ("/tmp", "/run")  # noqa: S108 - the guest's own tmpfs (render_stage1)


def check_host() -> None:
    """LabUnavailable unless this host can run the VM lab (root, iproute2, paths the guest
    sees)."""
    if sys.platform != "linux":
        raise LabUnavailable("the VM lab runs on Linux hosts only")
    if os.geteuid() != 0:
        raise LabUnavailable("the VM lab needs root (a tap device in a throwaway netns)")
    if shutil.which("ip") is None:
        raise LabUnavailable("ip (iproute2) not found")
    # the guest sees the host's / except /tmp and /run, where it mounts its own tmpfs
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for what, given in (("Python", sys.executable), ("lbtune", here)):
        why = hidden_from_guest(what, given)
        if why is not None:
            raise LabUnavailable(why)


def hidden_from_guest(what: str, given: str) -> Optional[str]:
    """Why the VM guest cannot see `given` (`what`: "Python", "the checkout"), in one line,
    or None. The guest mounts its own tmpfs on /tmp and /run over the host's; a path is
    used as given (PATH, PYTHONPATH) and followed through its symlinks: both are checked."""
    for path in (os.path.abspath(given), os.path.realpath(given)):
        if any(path == top or path.startswith(top + "/") for top in GUEST_OWN_DIRS):
            return (
                f"the VM guest cannot run {what} from {path}: it mounts its own /tmp and "
                "/run over the host's (use a checkout and venv outside them)"
            )
    return None


def main(argv: Sequence[str]) -> int:
    """`python -m lbtune.lab.guests.vm CHECKOUT`: exit 2 with one line when the VM guest
    could not see CHECKOUT (the Makefile's `vm-paths`, before set-up and any tier runs)."""
    if len(argv) != 1:
        print("usage: python -m lbtune.lab.guests.vm CHECKOUT", file=sys.stderr)
        return 2
    why = hidden_from_guest("the checkout", argv[0])
    if why is not None:
        print(f"the vm tier cannot run here: {why}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------- boot scripts


def render_stage1(image: VmImage, workdir: str) -> str:
    """Initramfs stage (busybox sh): the overlay root, mounts, then switch_root to stage2."""
    q = shlex.quote
    mods = image.modules_dir
    return f"""\
echo "lbtune-vm: stage1"
fail() {{ echo "lbtune-vm: $1"; poweroff -f; }}
mount -t 9p -o {_9P},ro,cache=loose host /mnt/lower || fail "no host share"
mount -t ext4 /dev/vda /mnt/upper || fail "no state disk"
mkdir -p /mnt/upper/upper /mnt/upper/work
mount -t overlay overlay \\
  -o lowerdir=/mnt/lower,upperdir=/mnt/upper/upper,workdir=/mnt/upper/work \\
  /newroot || fail "overlay failed"
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mount -t tmpfs -o mode=755 tmpfs /newroot/run
mkdir -p /newroot/lib/modules/{q(image.version)} /newroot{q(workdir)}
mount --bind /mnt/lower{q(mods)} /newroot/lib/modules/{q(image.version)}
mount --move /mnt/work /newroot{q(workdir)}
mount --move /dev /newroot/dev
mount --move /sys /newroot/sys
mount --move /proc /newroot/proc
exec switch_root /newroot /bin/sh {q(workdir)}/stage2.sh
"""


def _agent_env(venv_bin: str, pythonpath: Sequence[str]) -> dict[str, str]:
    """The guest agent's environment (its commands inherit it)."""
    return {"PATH": f"{venv_bin}:{GUEST_PATH}", "HOME": "/root", "LANG": "C.UTF-8",
            IN_VM_ENV: "1", "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": ":".join(pythonpath), "PYTHONUNBUFFERED": "1"}  # fmt: skip


def _power_off(workdir: str) -> str:
    """After the agent: sync, then reboot when it was asked to, else power off."""
    q = shlex.quote
    return f"""\
sync
if [ "$(cat {q(workdir)}/reboot 2>/dev/null)" = 1 ]; then
  /bin/busybox reboot -f
fi
/bin/busybox poweroff -f
"""


def render_systemd_units(
    workdir: str, venv_bin: str, python: str, pythonpath: Sequence[str] = (), cwd: str = "/"
) -> dict[str, str]:
    """The guest agent as a systemd service, and the target PID 1 starts (init="systemd"):
    only the agent at boot (no default dependencies, so the boot is as quick as the shell's);
    a unit a test starts pulls in sysinit.target, journald and the rest as on any host."""
    env = " ".join(f'"{k}={v}"' for k, v in _agent_env(venv_bin, pythonpath).items())
    return {
        SYSTEMD_TARGET: f"""\
[Unit]
Description=lbtune VM lab: the guest agent under systemd
Requires={SYSTEMD_AGENT}
After={SYSTEMD_AGENT}
AllowIsolate=yes
""",
        SYSTEMD_AGENT: f"""\
[Unit]
Description=lbtune VM lab guest agent
DefaultDependencies=no

[Service]
Type=simple
Environment={env}
WorkingDirectory=-{cwd}
ExecStart={python} -m lbtune.lab.inguest.agent {workdir}
StandardOutput=append:{workdir}/agent.log
StandardError=inherit
ExecStopPost=/bin/sh {workdir}/poweroff.sh
""",
    }


def render_stage2(
    workdir: str, venv_bin: str, python: str, pythonpath: Sequence[str] = (), cwd: str = "/",
    init: str = "sh",
) -> str:
    """Root stage (the host's /bin/sh): kernel filesystems, then the agent; off or reboot.
    The agent's commands get the caller's PATH-to-venv, PYTHONPATH and working directory.
    With init="systemd" the shell execs systemd as PID 1 instead, which runs the agent as a
    service (render_systemd_units, written to /run/systemd/system) and powers off after it."""
    q = shlex.quote
    env = _agent_env(venv_bin, pythonpath)
    if init == "systemd":
        units = render_systemd_units(workdir, venv_bin, python, pythonpath, cwd)
        write = "".join(f"cat > /run/systemd/system/{name} <<'LBTUNE_UNIT'\n{text}LBTUNE_UNIT\n"
                        for name, text in units.items())  # fmt: skip
        tail = f"""\
mkdir -p /run/systemd/system
{write}echo "lbtune-vm: exec systemd $(cat /proc/uptime)"
exec /lib/systemd/systemd --unit={SYSTEMD_TARGET} --log-target=kmsg
"""
    else:
        tail = f"""\
{q(python)} -m lbtune.lab.inguest.agent {q(workdir)} > {q(workdir)}/agent.log 2>&1
echo "lbtune-vm: agent exited $?"
{_power_off(workdir)}"""
    return f"""\
export PATH={q(env["PATH"])} HOME=/root LANG=C.UTF-8 {IN_VM_ENV}=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH={q(env["PYTHONPATH"])} PYTHONUNBUFFERED=1
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /run/netns /var/lib/lbtune
hostname lbtune-vm
ip link set lo up
echo "lbtune-vm: stage2 $(cat /proc/uptime)"
cd {q(cwd)} 2>/dev/null || cd /
{tail}"""


def qemu_argv(
    qemu: str,
    image: VmImage,
    accel: str,
    workdir: str,
    state_disk: str,
    console: str,
    cmdline_extra: Sequence[str] = (),
    nics: bool = True,
) -> list[str]:
    """The qemu command line (no shell involved; see the module doc for the machine)."""
    mem = MEM_PER_NODE_MB * len(NODES)
    argv = [
        qemu,
        "-name",
        "lbtune-vm",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-monitor",
        "none",
        "-qmp",
        f"unix:{workdir}/{QMP_SOCKET},server=on,wait=off",
        "-serial",
        f"file:{console}",
        "-m",
        f"{mem}M",
        "-smp",
        f"{CPUS},sockets={len(NODES)},cores={CPUS // len(NODES)},threads=1",
    ]
    if accel == "kvm":
        # -arch-capabilities: qemu 7.2 aborts setting MSR 0x10a under some nested hypervisors
        argv += ["-accel", "kvm", "-cpu", "host,-arch-capabilities"]
    else:
        argv += ["-accel", "tcg,thread=multi", "-cpu", "max"]
    for node, cpus in NODES:
        argv += [
            "-object",
            f"memory-backend-ram,id=m{node},size={MEM_PER_NODE_MB}M",
            "-numa",
            f"node,nodeid={node},cpus={cpus},memdev=m{node}",
        ]
    # no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check can miss its
    # window and panic ("IO-APIC + timer doesn't work"); seen once in a loaded run here.
    cmdline = ["console=ttyS0", "panic=-1", "loglevel=5", "no_timer_check", "rdinit=/init",
               CMDLINE_MARK, *cmdline_extra]  # fmt: skip
    argv += ["-kernel", image.kernel, "-initrd", image.initrd, "-append", " ".join(cmdline)]
    argv += [
        "-virtfs",
        "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
        f"local,path={workdir},mount_tag=work,security_model=none,multidevs=remap",
        "-drive",
        f"file={state_disk},format=raw,if=none,id=state,cache=unsafe",
        "-device",
        "virtio-blk-pci,drive=state",
    ]
    if nics:
        argv += [
            "-netdev",
            f"tap,id=n0,ifname=tap0,script=no,downscript=no,queues={QUEUES},vhost=off",
            # a pxb: a second PCI root bus whose ACPI _PXM puts its devices on NIC_NODE
            "-device",
            f"pxb,id=nicbr,bus=pci.0,bus_nr=64,numa_node={NIC_NODE}",
            "-device",
            # rss=on,hash=on: an RSS indirection table and hash fields (ethtool -x, -n/-N)
            f"virtio-net-pci,netdev=n0,mq=on,rss=on,hash=on,vectors={2 * QUEUES + 2},"
            "bus=nicbr,addr=0x1",
            "-netdev",
            "tap,id=n1,ifname=tap1,script=no,downscript=no,vhost=off",
            "-device",
            "e1000e,netdev=n1,bus=pci.0",
            "-netdev",
            "tap,id=n2,ifname=tap2,script=no,downscript=no,vhost=off",
            "-device",
            "vmxnet3,netdev=n2,bus=pci.0",
        ]
    return argv


def _run_ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {proc.stderr.strip()}")


# --------------------------------------------------------------------------- accelerator


def _kvm_usable_device() -> bool:
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError:
        return False
    os.close(fd)
    return True


def choose_accel(image: VmImage) -> tuple[str, str]:
    """("kvm"|"tcg", why): the override, the cached trial answer, or a trial boot now."""
    requested = os.environ.get(ENV_ACCEL, "").strip().lower()
    if requested in ("kvm", "tcg"):
        return requested, f"requested ({ENV_ACCEL})"
    if requested:
        raise LabUnavailable(f"{ENV_ACCEL}={requested!r}: expected kvm or tcg")
    if not _kvm_usable_device():
        return "tcg", "/dev/kvm cannot be opened"
    key = f"{os.uname().release} {image.version}"
    cache = Path(cache_dir()) / "kvm-probe.json"
    try:
        known = json.loads(cache.read_text(encoding="utf-8"))
        if known.get("key") == key:
            return str(known["accel"]), str(known["reason"]) + " (cached probe)"
    except (OSError, ValueError, KeyError):
        pass
    accel, reason = try_kvm(image)
    with contextlib.suppress(OSError):
        cache.write_text(
            json.dumps({"key": key, "accel": accel, "reason": reason}), encoding="utf-8"
        )
    return accel, reason


def try_kvm(image: VmImage) -> tuple[str, str]:
    """Boot once under KVM (no NICs): KVM when the guest agent comes up in time, else TCG."""
    try:
        g = VmGuest.start(image, "kvm", (), KVM_TRIAL_TIMEOUT, nics=False)
    except (LabError, LabUnavailable) as exc:
        lines = str(exc).splitlines()
        errors = [ln.split(": ", 1)[-1] for ln in lines if "error" in ln.lower()]
        why = "; ".join([lines[0], *errors[-1:]])
        return "tcg", f"a KVM probe boot failed ({why})"
    g.close()
    return "kvm", f"a KVM probe boot reached the guest agent in {g.boot_seconds:.1f} s"


# --------------------------------------------------------------------------- leftovers


def reap_stale(directory: Optional[str] = None) -> list[str]:
    """Clean up after VM guests whose supervisor died (kill -9 of a test run): kill the qemu
    process group, delete the netns, remove the work directory and state disk. Returns the
    work directories removed. A guest whose supervisor lives is left alone."""
    removed: list[str] = []
    base = Path(directory or tempfile.gettempdir())
    for wd in sorted(base.glob("lbtune-vm.*")):
        if not wd.is_dir():
            continue
        try:
            owner = json.loads((wd / OWNER).read_text(encoding="utf-8"))
            supervisor, qemu, netns = int(owner["supervisor"]), int(owner["qemu"]), owner["netns"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # booting right now, or not ours to judge
        if pid_alive(supervisor):
            continue
        try:  # the qemu we started still runs with our work directory on its command line
            cmdline = Path(f"/proc/{qemu}/cmdline").read_bytes()
        except OSError:
            cmdline = b""
        if str(wd).encode() in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(qemu, signal.SIGKILL)
        if isinstance(netns, str) and netns.startswith("lbtune-vm-"):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        shutil.rmtree(wd, ignore_errors=True)
        wd.with_name(wd.name + ".state.img").unlink(missing_ok=True)
        removed.append(str(wd))
    return removed


# --------------------------------------------------------------------------- doctor


def vm_lab_status() -> dict[str, Any]:
    """What can be said about the VM lab without booting it (for `lbtune doctor`): the image,
    qemu, /dev/kvm, the cached KVM trial and the last boot's facts; ``unchecked`` names what
    only a boot proves. ``available`` is False with ``problem`` and ``fix`` when it cannot run."""
    out: dict[str, Any] = {"available": False, "problem": "", "fix": "make setup (as root)"}
    try:
        image = find_vm_image()
        out["kernel"] = image.version
        out["qemu"] = find_qemu()
        check_host()
    except LabUnavailable as exc:
        out["problem"] = str(exc)
        return out
    out["available"] = True
    out["kvm_device"] = _kvm_usable_device()
    out["tun_device"] = os.path.exists("/dev/net/tun")
    try:
        trial = json.loads((Path(cache_dir()) / "kvm-probe.json").read_text(encoding="utf-8"))
        out["accelerator"] = f"{trial['accel']} ({trial['reason']})"
    except (OSError, ValueError, KeyError):
        out["accelerator"] = "not probed yet (the first boot probes KVM, else TCG)"
    try:
        out["last_boot"] = json.loads((Path(cache_dir()) / LAST_BOOT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        out["last_boot"] = None
    out["unchecked"] = "a boot (doctor boots nothing): multi-queue and drivers as last seen"
    if not out["tun_device"]:
        out["available"] = False
        out["problem"] = "/dev/net/tun missing: no tap for the guest's NICs"
    return out


# --------------------------------------------------------------------------- the guest


class ConsoleWatch:
    """The guest console from where it stood when a request was made: the first line that
    says the kernel is in trouble (TROUBLE), when it was seen, and the report it starts."""

    LIMIT = 1 << 20  # bytes of console kept from the start

    def __init__(self, path: Path, offset: Optional[int] = None) -> None:
        self.path = path
        self.offset = console_size(path) if offset is None else offset
        self.text = ""
        self.trouble: Optional[str] = None
        self.trouble_at: Optional[float] = None
        self._start = 0  # where the trouble line starts in `text`
        self._next = 0.0  # monotonic time of the next look (`due`)

    def due(self, now: float) -> bool:
        """Look at most every CONSOLE_LOOK seconds; True when this call looked."""
        if now < self._next:
            return False
        self._next = now + CONSOLE_LOOK
        self.look()
        return True

    def look(self) -> None:
        if len(self.text) >= self.LIMIT:
            return
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(self.LIMIT - len(self.text))
        except OSError:
            return
        # only whole lines: a line the kernel is still printing is read on the next look
        whole = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(whole)
        new = whole.decode("utf-8", errors="replace")
        if self.trouble is None:  # only the new lines are searched
            m = TROUBLE.search(new)
            if m:
                self._start = len(self.text) + new.rfind("\n", 0, m.start()) + 1
                self.trouble = new[self._start - len(self.text) :].split("\n", 1)[0].strip()
                self.trouble_at = time.monotonic()
        self.text += new

    def stalled_for(self, grace: float, now: float) -> bool:
        """Trouble was seen more than `grace` seconds before `now`."""
        return self.trouble_at is not None and now - self.trouble_at > grace

    def report(self, lines: int = 80) -> str:
        """The console from the trouble line on (at most `lines` lines)."""
        if self.trouble is None:
            return ""
        return "\n".join(self.text[self._start :].splitlines()[:lines])


class GuestWedged(LabError):
    """The guest kernel reported a stall (or worse) and then stopped answering requests.
    ``report`` holds what the kernel printed from the first trouble line and where each
    vCPU was, so a CI log says where the guest hung."""

    def __init__(self, message: str, report: str) -> None:
        super().__init__(message)
        self.report = report


def console_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def qmp_hmp(path: Path, command: str, timeout: float = 10.0) -> str:
    """Run a human-monitor command through qemu's QMP socket; its text output."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        reader = sock.makefile("rb")

        def reply() -> Any:
            while True:
                line = reader.readline(1 << 22)
                if not line:
                    raise ValueError("the monitor closed the connection")
                msg = json.loads(line)
                if "return" in msg or "error" in msg:
                    return msg

        greeting = json.loads(reader.readline(1 << 16) or b"{}")
        if "QMP" not in greeting:
            raise ValueError("not a QMP greeting")
        for req in (
            {"execute": "qmp_capabilities"},
            {"execute": "human-monitor-command", "arguments": {"command-line": command}},
        ):
            sock.sendall(json.dumps(req).encode() + b"\n")
            msg = reply()
            if "error" in msg:
                raise ValueError(str(msg["error"].get("desc", msg["error"])))
        text = str(msg["return"])
        if text.startswith("unknown command"):
            raise ValueError(text.strip())
        return text


_REGS = re.compile(r"[RE]IP=([0-9a-f]+) [RE]FL=([0-9a-f]+)\b.*?CPL=(\d).*?HLT=(\d)")


def vcpu_summary(text: str) -> str:
    """`info registers -a` cut to what says where each vCPU is: its RIP, whether its
    interrupts are on (RFL bit 9), its privilege level and whether it is halted."""
    out = []
    for block in re.split(r"^CPU#", text, flags=re.MULTILINE)[1:]:
        cpu = block.split(None, 1)[0]
        m = _REGS.search(" ".join(block.split()))
        if m:
            rip, rfl, cpl, hlt = m.groups()
            irq = "on" if int(rfl, 16) & 0x200 else "off"
            out.append(f"cpu{cpu} RIP={rip} irqs {irq} CPL={cpl}{' halted' if hlt == '1' else ''}")
    return "; ".join(out)


class VmGuest(Guest):
    """A running VM lab guest; use ``VmGuest.boot()`` as a context manager."""

    backend = "vm"

    def __init__(self, image: VmImage, accel: str, accel_reason: str, nics: bool,
                 init: str = "sh") -> None:  # fmt: skip
        self.image = image
        self.init = init  # "systemd": PID 1 is the host's systemd (render_stage2)
        self.accel = accel
        self.accel_reason = accel_reason
        self.nics = nics
        self.qemu = find_qemu()
        self.workdir = Path(tempfile.mkdtemp(prefix="lbtune-vm."))
        self.state_disk = self.workdir.with_name(self.workdir.name + ".state.img")
        self.netns = f"lbtune-vm-{secrets.token_hex(4)}"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.boots = 0
        self.boot_seconds = 0.0
        self.cmdline_extra: tuple[str, ...] = ()
        self.facts: dict[str, Any] = {}
        self._seq = 0
        self.wedge_grace = WEDGE_GRACE
        # set when a request went unanswered: every later request fails at once with it
        self.broken: Optional[LabError] = None
        self._marks: dict[str, int] = {}  # request id: the console's size when it was made
        self._netns_made = False
        self._closed = False

    # ---- life cycle

    @classmethod
    def boot(cls, cmdline_extra: Sequence[str] = (), timeout: float = BOOT_TIMEOUT,
             init: str = "sh") -> VmGuest:  # fmt: skip
        """Boot the VM lab guest; LabUnavailable (cannot run here) or LabError (boot failed).
        init="systemd": the host's systemd runs as the guest's PID 1 (tests/vm/test_vm_units.py)."""
        check_host()
        image = find_vm_image()
        find_qemu()
        reap_stale()
        accel, reason = choose_accel(image)
        return cls.start(image, accel, cmdline_extra, timeout, accel_reason=reason, init=init)

    @classmethod
    def start(
        cls,
        image: VmImage,
        accel: str,
        cmdline_extra: Sequence[str],
        timeout: float,
        *,
        accel_reason: str = "",
        nics: bool = True,
        init: str = "sh",
    ) -> VmGuest:
        """Boot `image` under `accel` once the host, image and accelerator are settled
        (``boot`` settles them; ``lbtune lab up --vm`` reports each step between them)."""
        g = cls(image, accel, accel_reason, nics, init)
        try:
            g._make_state_disk()
            if nics:
                g._make_netns()
            g._launch(tuple(cmdline_extra), timeout)
        except BaseException as exc:
            g.close(failed=True)
            if isinstance(exc, LabError) and g.kept:
                exc.workdir = str(g.workdir)
            raise
        return g

    def __enter__(self) -> VmGuest:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close(failed=exc_type is not None)

    def _make_state_disk(self) -> None:
        """The overlay's upper layer: an ext4 image file (sparse) kept across guest reboots.
        Not a 9p share: overlayfs cannot make whiteouts there (deleting a host file fails
        with ENXIO) nor keep its xattrs, both measured on this qemu/kernel pair."""
        mke2fs = shutil.which("mke2fs") or "/sbin/mke2fs"
        proc = subprocess.run(
            [
                mke2fs,
                "-q",
                "-F",
                "-t",
                "ext4",
                "-L",
                "lbtune-vm",
                str(self.state_disk),
                STATE_DISK_SIZE,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise LabUnavailable(f"cannot make the VM state disk: {proc.stderr.strip()}")

    def _make_netns(self) -> None:
        _run_ip("netns", "add", self.netns)
        self._netns_made = True
        _run_ip("-n", self.netns, "tuntap", "add", "dev", "tap0", "mode", "tap", "multi_queue")
        _run_ip("-n", self.netns, "tuntap", "add", "dev", "tap1", "mode", "tap")
        _run_ip("-n", self.netns, "tuntap", "add", "dev", "tap2", "mode", "tap")
        for tap in ("tap0", "tap1", "tap2"):
            _run_ip("-n", self.netns, "link", "set", tap, "up")

    @property
    def console_path(self) -> Path:
        return self.workdir / f"console.{self.boots}.log"

    def console(self) -> str:
        try:
            return self.console_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def _launch(self, cmdline_extra: tuple[str, ...], timeout: float) -> None:
        self.boots += 1
        self.cmdline_extra = cmdline_extra
        for stale in (READY, REBOOT):
            (self.workdir / stale).unlink(missing_ok=True)
        for sub in (self.agent.dir.requests, self.agent.dir.answers):
            shutil.rmtree(sub, ignore_errors=True)
        self.agent.dir.make()
        wd = str(self.workdir)
        venv_bin = os.path.dirname(sys.executable)
        (self.workdir / "stage1.sh").write_text(render_stage1(self.image, wd), encoding="utf-8")
        (self.workdir / "stage2.sh").write_text(
            render_stage2(wd, venv_bin, sys.executable, guest_pythonpath(), os.getcwd(),
                          self.init),
            encoding="utf-8",
        )
        (self.workdir / "poweroff.sh").write_text(_power_off(wd), encoding="utf-8")
        argv = qemu_argv(
            self.qemu,
            self.image,
            self.accel,
            wd,
            str(self.state_disk),
            str(self.console_path),
            cmdline_extra,
            self.nics,
        )
        argv = netns_argv(self.netns if self.nics else None, argv)
        log = open(self.workdir / f"qemu.{self.boots}.log", "wb")  # noqa: SIM115
        start = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        owner = {"supervisor": os.getpid(), "qemu": self.proc.pid, "netns": self.netns}
        (self.workdir / OWNER).write_text(json.dumps(owner), encoding="utf-8")
        ready = self.workdir / READY
        console = ConsoleWatch(self.console_path, 0)
        proc = self.proc

        def agent_up() -> bool:
            if ready.exists():
                return True
            if proc.poll() is not None:
                raise LabError(self._boot_failure(f"qemu exited {proc.returncode}"))
            self._check_wedge(console, "boot", time.monotonic())
            return False

        if not wait_until(agent_up, start + timeout - time.monotonic(), 0.1):
            raise LabTimeout(
                self._boot_failure(f"no guest agent after {timeout:g} s"), pgid=proc.pid
            )
        self.boot_seconds = time.monotonic() - start
        self.facts = json.loads(ready.read_text(encoding="utf-8"))
        self._record_boot()

    def _record_boot(self) -> None:
        """What this boot saw, for `lbtune doctor` (the cache's last-boot.json)."""
        record = {**self.describe(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        with contextlib.suppress(OSError):
            write_json_atomic(Path(cache_dir()) / LAST_BOOT, record, fsync=False)

    def _boot_failure(self, what: str) -> str:
        tail = "\n".join(self.console().splitlines()[-15:])
        qlog = (self.workdir / f"qemu.{self.boots}.log").read_text(errors="replace").strip()
        return (
            f"VM lab boot {self.boots} failed ({self.accel}): {what}"
            + (f"\nqemu: {qlog[-2000:]}" if qlog else "")
            + (f"\nconsole:\n{tail}" if tail else "")
        )

    def _stop_qemu(self, grace: float) -> None:
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        self.proc = None

    @property
    def kept(self) -> bool:
        return os.environ.get(ENV_KEEP) == "1"

    def close(self, failed: bool = False) -> None:
        """Power the guest off (or kill it), delete the netns and the directories."""
        if self._closed:
            return
        self._closed = True
        try:
            polite = not failed and self.broken is None
            if self.proc is not None and self.proc.poll() is None and polite:
                try:
                    self._request(stop_request(reboot=False))
                    self._stop_qemu(grace=30)
                except OSError:
                    pass
        finally:
            self._stop_qemu(grace=0)
            if self._netns_made:
                subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)
            if not (failed and self.kept):
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.state_disk.unlink(missing_ok=True)

    def reboot(self, cmdline_extra: Sequence[str] = (), timeout: float = BOOT_TIMEOUT) -> None:
        """A real guest reboot (sync, ``reboot -f``); qemu then starts again with this kernel
        command line extension. What the guest wrote (the overlay) persists."""
        self._alive()
        self._request(stop_request(reboot=True))
        self._stop_qemu(grace=timeout)
        try:
            self._launch(tuple(cmdline_extra), timeout)
        except BaseException:
            self.close(failed=True)
            raise

    # ---- requests

    def _alive(self) -> None:
        if self.broken is not None:
            first = str(self.broken).split(";", 1)[0]
            msg = f"the VM guest is not asked any more: {first}"
            if isinstance(self.broken, GuestWedged):
                raise GuestWedged(msg, self.broken.report)
            raise LabError(msg)
        if self._closed or self.proc is None or self.proc.poll() is not None:
            raise LabError(f"the VM lab guest is not running\n{self.console()[-2000:]}")

    @property
    def agent(self) -> AgentClient:
        """The host's half of the request protocol, in this guest's work directory."""
        return AgentClient(self.workdir)

    def running(self) -> bool:
        """qemu still runs (a stop request sent by another process ends it)."""
        return not self._closed and self.proc is not None and self.proc.poll() is None

    def _request(self, req: dict[str, Any]) -> str:
        self._seq += 1
        rid = f"{self._seq:06d}"
        self._marks[rid] = console_size(self.console_path)
        return self.agent.send(req, rid)

    def _no_answer(self, rid: str, timeout: float) -> str:
        """Why a request went unanswered, as far as the host can tell: whether the agent
        claimed it, and the last lines of the agent's log and of the guest console."""
        claimed = self.agent.claimed(rid)

        def tail(path: Path) -> str:
            try:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                return "(none)"
            return " | ".join(lines[-6:]) or "(empty)"

        return (f"the VM guest did not answer request {rid} in {timeout:g} s "
                f"({'claimed by the agent' if claimed else 'never claimed by the agent'}); "
                f"agent.log: {tail(self.workdir / AGENT_LOG)}; "
                f"console: {tail(self.console_path)}; vCPUs: {self.vcpus()}")  # fmt: skip

    def _check_wedge(self, console: ConsoleWatch, rid: str, now: float) -> None:
        """Raise (and keep as `broken`) GuestWedged once the console has shown trouble for
        longer than `wedge_grace` while request `rid` (or "boot") waits."""
        if console.due(now) and console.stalled_for(self.wedge_grace, now):
            assert console.trouble_at is not None
            self.broken = self._wedged(rid, console, now - console.trouble_at)
            raise self.broken

    def _wedged(self, rid: str, console: ConsoleWatch, waited: float) -> GuestWedged:
        """The guest kernel reported a stall (or worse) and the request (or, with rid "boot",
        the boot) stayed unanswered for `wedge_grace` seconds after it: say what the kernel
        said and where each vCPU is."""
        report = f"vCPUs: {self.vcpus()}\nkernel report (console.{self.boots}.log):\n"
        report += console.report()
        what = f"boot {self.boots} reached no guest agent" if rid == "boot" else (
            f"request {rid} unanswered"
        )
        return GuestWedged(
            f"the VM guest kernel wedged: {what} {waited:.0f} s after "
            f"{console.trouble!r}; {report}",
            report,
        )

    def vcpus(self) -> str:
        """Where each vCPU is, from qemu's monitor (QMP): RIP, interrupts on/off, halted."""
        try:
            text = qmp_hmp(self.workdir / QMP_SOCKET, "info registers -a")
        except (OSError, ValueError) as exc:
            return f"(qemu monitor: {exc})"
        return vcpu_summary(text) or "(qemu monitor: no registers)"

    def _answer(self, rid: str, timeout: float, watch: Optional[Watch] = None) -> dict[str, Any]:
        console = ConsoleWatch(self.console_path, self._marks.pop(rid, None))

        def check() -> None:
            self._alive()
            self._check_wedge(console, rid, time.monotonic())

        out = self.agent.wait(rid, timeout, watch, check)
        if out is None:
            self.broken = LabError(self._no_answer(rid, timeout))
            raise self.broken
        if "error" in out and "ok" not in out:
            raise LabError(f"VM guest agent: {out['error']}")
        return out

    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in the guest (in network namespace netns there); never raises for a
        non-zero exit (returncode -9: killed at the timeout)."""
        self._alive()
        rid = self._request(argv_request(argv, netns, timeout))
        out = self._answer(rid, timeout + 30)
        return completed(argv, out)

    def call(
        self,
        target: str,
        args: Sequence[Any] = (),
        timeout: float = 300,
        netns: Optional[str] = None,
        watch: Optional[Watch] = None,
        fresh: bool = False,
    ) -> Any:
        """Call ``target(*args)`` ("pkg.mod:func") in a guest Python process; its JSON value,
        or LabError carrying the guest traceback. ``watch(directory)`` is called while it
        runs with the directory the target finds in ``$LBTUNE_LAB_WORKDIR``. A new
        interpreter, or with `fork_calls(True)` a child of the agent's fork server
        (lbtune.lab.inguest.agent) unless `fresh` or `netns` is given."""
        split_target(target)
        self._alive()
        rid = self._request(call_request(target, args, timeout, netns, fresh))
        out = self._answer(rid, timeout + 30, watch)
        if not out.get("ok"):
            raise LabError(
                f"{target} failed in the VM guest: {out.get('error')}",
                guest_traceback=str(out.get("traceback", "")),
                exc_type=str(out.get("exc_type", "")),
            )
        return out.get("value")

    def fork_calls(self, on: bool) -> None:
        """Have the guest agent fork calls from its fork server (True) or start a new
        interpreter for each (False, the default); see lbtune.lab.inguest.agent."""
        flag = self.workdir / FORK_CALLS
        if on:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def describe(self) -> dict[str, Any]:
        """Kernel version, accelerator, CPUs, NUMA nodes, NICs and boot seconds."""
        return {
            "backend": "vm",
            "kernel": self.facts.get("kernel"),
            "accelerator": self.accel,
            "accelerator_reason": self.accel_reason,
            "cpus": self.facts.get("cpus"),
            "nodes": self.facts.get("nodes"),
            "nics": self.facts.get("nics"),
            "cmdline": self.facts.get("cmdline"),
            "boot_seconds": round(self.boot_seconds, 2),
            "boots": self.boots,
        }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
