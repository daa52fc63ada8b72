"""What the running machine can do for lbtune, each answer with the reason and the fix.

Checks only look: nothing here mounts, loads a module or changes a setting. Where tracefs is
not mounted, tracepoints are looked up in the kernel's BTF (every tracepoint has a
`btf_trace_<event>` type there), so the answer does not need a mount.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from lbtune.host.host import Host
from lbtune.host.kernel.cmdline import KernelCmdline
from lbtune.host.net.nic import nic_names

TRACEFS = "/sys/kernel/tracing"
BTF_VMLINUX = "/sys/kernel/btf/vmlinux"

# (subsystem, event, what lbtune uses it for)
TRACEPOINTS: tuple[tuple[str, str, str], ...] = (
    ("skb", "kfree_skb", "drops by reason and kernel location"),
    ("net", "netif_receive_skb_entry", "per-queue receive packets"),
    ("net", "napi_gro_receive_entry", "per-queue receive packets (GRO drivers)"),
    ("net", "napi_gro_frags_entry", "per-queue receive packets (GRO frags drivers)"),
    ("net", "netif_receive_skb_list_entry", "per-queue receive packets (list receive)"),
    ("net", "netif_rx_entry", "per-queue receive packets (netif_rx: veth without NAPI)"),
    ("net", "net_dev_start_xmit", "per-queue transmit packets"),
    ("napi", "napi_poll", "NAPI budget exhaustion per queue"),
    ("tcp", "tcp_retransmit_skb", "retransmissions per flow"),
    ("sock", "inet_sock_set_state", "connection state changes"),
    ("irq", "softirq_entry", "softirq time per CPU"),
    ("irq", "softirq_exit", "softirq time per CPU"),
)


@dataclass(frozen=True)
class Capability:
    """One thing lbtune may need: is it there, what was seen, and how to get it."""

    name: str
    available: bool
    detail: str
    fix: str = ""
    group: str = "host"


class _Btf:
    """Lazy, cached substring lookups in the kernel's BTF blob (type names are NUL-terminated)."""

    def __init__(self, host: Host) -> None:
        self.path = host.fs.path(BTF_VMLINUX)
        self._data: Optional[bytes] = None

    @property
    def present(self) -> bool:
        return os.path.exists(self.path)

    def has_name(self, name: str) -> bool:
        if self._data is None:
            try:
                with open(self.path, "rb") as f:
                    self._data = f.read()
            except OSError:
                self._data = b""
        return b"\0" + name.encode() + b"\0" in self._data


def _root() -> Capability:
    euid = os.geteuid()
    return Capability(
        "root",
        euid == 0,
        "running as root" if euid == 0 else f"running as uid {euid}",
        "" if euid == 0 else "run with sudo: apply, probes and --netns need root",
    )


def _bcc() -> list[Capability]:
    from lbtune.host.trace.bpf import NO_BCC_ENV

    if os.environ.get(NO_BCC_ENV, "") not in ("", "0"):
        why = f"switched off by {NO_BCC_ENV}={os.environ[NO_BCC_ENV]}"
        return [Capability("bcc python module", False, why, f"unset {NO_BCC_ENV}", "probes")]
    try:
        import bcc

        version = getattr(bcc, "__version__", "") or "present"
    except Exception as e:  # ImportError, or bcc failing to find libbcc
        return [
            Capability(
                "bcc python module",
                False,
                f"cannot import bcc: {e}",
                "apt-get install python3-bpfcc, and use a venv with system site packages "
                "(`make setup` does both)",
                "probes",
            )
        ]
    return [Capability("bcc python module", True, f"bcc {version}", "", "probes")]


def _bcc_compile() -> Capability:
    """Compile a trivial program and load it into the verifier (not attached anywhere)."""
    try:
        from bcc import BPF

        prog = BPF(text=b"int lbtune_doctor(void *ctx) { return 0; }")
        try:
            prog.load_func(b"lbtune_doctor", BPF.TRACEPOINT)
        finally:
            prog.cleanup()
    except Exception as e:
        return Capability(
            "bcc compiles and loads",
            False,
            f"{type(e).__name__}: {e}".splitlines()[0],
            "kernel headers: `make setup` installs linux-headers-amd64 and links "
            "/lib/modules/$(uname -r)/{build,source} to them",
            "probes",
        )
    return Capability("bcc compiles and loads", True, "test program verified", "", "probes")


def _headers(release: str) -> Capability:
    build = f"/lib/modules/{release}/build"
    if os.path.isdir(build):
        target = os.path.realpath(build)
        same = release in os.path.basename(target)
        detail = f"{build} -> {target}"
        if not same:
            detail += " (headers of another kernel: fine for tracepoint-only probes)"
        return Capability("kernel headers", True, detail, "", "probes")
    return Capability(
        "kernel headers",
        False,
        f"{build} missing",
        "apt-get install linux-headers-amd64 (or `make setup`, which also links build/source)",
        "probes",
    )


def _tracing(host: Host, btf: _Btf) -> list[Capability]:
    out: list[Capability] = []
    mounted = os.path.isdir(f"{TRACEFS}/events")
    out.append(
        Capability(
            "tracefs mounted",
            mounted,
            TRACEFS if mounted else f"{TRACEFS} is not mounted",
            "" if mounted else f"mount -t tracefs nodev {TRACEFS} (as root, lbtune probe "
            "mounts it in a private mount namespace by itself)",
            "probes",
        )
    )
    stats = btf.has_name("BPF_ENABLE_STATS")
    out.append(
        Capability(
            "BPF run-time statistics",
            stats,
            "BPF_ENABLE_STATS: probes report their own cost (ns/event)"
            if stats
            else "no BPF_ENABLE_STATS in this kernel (< 5.8)",
            "" if stats else "probes run, but cannot say what they cost",
            "probes",
        )
    )
    for sub, event, why in TRACEPOINTS:
        if mounted:
            ok = os.path.isdir(f"{TRACEFS}/events/{sub}/{event}")
            how = "tracefs"
        elif btf.present:
            ok = btf.has_name(f"btf_trace_{event}")
            how = "BTF"
        else:
            out.append(
                Capability(f"{sub}:{event}", False, "cannot tell", "mount tracefs", "tracepoints")
            )
            continue
        out.append(
            Capability(
                f"{sub}:{event}",
                ok,
                f"{'present' if ok else 'absent'} ({how}): {why}",
                "" if ok else "needs a newer kernel",
                "tracepoints",
            )
        )
    fmt = f"{TRACEFS}/events/skb/kfree_skb/format"
    if os.path.exists(fmt):
        with open(fmt, encoding="utf-8", errors="replace") as f:
            has_reason = "field:enum skb_drop_reason reason" in f.read()
    else:
        has_reason = btf.has_name("skb_drop_reason")
    out.append(
        Capability(
            "drop reasons",
            has_reason,
            "kfree_skb carries a drop reason" if has_reason else "kernel < 5.17: location only",
            "",
            "tracepoints",
        )
    )
    return out


def _kernel(host: Host, btf: _Btf) -> list[Capability]:
    out = [
        Capability(
            "BTF",
            btf.present,
            BTF_VMLINUX if btf.present else "no /sys/kernel/btf/vmlinux",
            "" if btf.present else "kernel built without CONFIG_DEBUG_INFO_BTF",
            "kernel",
        )
    ]
    if os.path.isdir(TRACEFS + "/events"):
        kprobes = os.path.exists(f"{TRACEFS}/kprobe_events")
        how = "tracefs kprobe_events"
    else:
        kallsyms = host.fs.read("/proc/kallsyms") or ""
        kprobes = " register_kprobe\n" in kallsyms
        how = "/proc/kallsyms"
    out.append(
        Capability(
            "kprobes",
            kprobes,
            f"{'available' if kprobes else 'not in this kernel'} ({how})",
            "" if kprobes else "lbtune's probes use tracepoints only; nothing to do",
            "kernel",
        )
    )
    cmdline = KernelCmdline.parse(host.fs.read("/proc/cmdline") or "")
    modules = os.path.exists("/proc/modules") and not cmdline.has("nomodule")
    out.append(
        Capability(
            "loadable modules",
            modules,
            "/proc/modules present" if modules else "kernel without module support",
            "" if modules else "features not built in (e.g. IPVS) are only in the lab",
            "kernel",
        )
    )
    out.append(_ipvs(host, modules))
    return out


def _ipvs(host: Host, modules: bool) -> Capability:
    from lbtune.host.ipvs.table import PROC_IP_VS, ipvs_loaded, module_available

    # Looking up the IPVS netlink family would load the module: only files are read here.
    if ipvs_loaded(host.fs):
        head = (host.fs.read(PROC_IP_VS) or "").splitlines()[:1]
        return Capability("IPVS", True, head[0] if head else PROC_IP_VS, "", "kernel")
    if modules and module_available(host.fs):
        return Capability("IPVS", False, "ip_vs module not loaded",
                          "modprobe ip_vs (`lbtune ipvs apply` loads it)", "kernel")
    return Capability("IPVS", False, "no IPVS in the running kernel",
                      "not available on this kernel; IPVS runs in the UML lab", "kernel")


def _ethtool(host: Host) -> list[Capability]:
    out: list[Capability] = []
    for name in nic_names(host.fs):
        if name == "lo":
            continue
        ops = {
            "info": host.ethtool.driver_info(name) is not None,
            "rings": host.ethtool.rings(name) is not None,
            "channels": host.ethtool.channels(name) is not None,
            "stats": host.ethtool.stats(name) is not None,
        }
        yes = [k for k, v in ops.items() if v]
        no = [k for k, v in ops.items() if not v]
        detail = "supports " + (", ".join(yes) or "nothing")
        if no:
            detail += "; not " + ", ".join(no)
        out.append(Capability(f"ethtool {name}", bool(yes), detail, "", "nics"))
    return out


def _sock_diag() -> Capability:
    try:
        from pyroute2 import DiagSocket

        with DiagSocket() as ds:
            ds.bind()
            ds.get_sock_stats(states=1 << 10)  # TCP_LISTEN
        return Capability("sock_diag", True, "listening sockets readable", "", "kernel")
    except Exception as e:
        return Capability("sock_diag", False, f"{type(e).__name__}: {e}", "", "kernel")


def check_host(host: Host, compile_probe: bool = True) -> list[Capability]:
    """Every capability of the live host, in display order."""
    release = host.fs.read("/proc/sys/kernel/osrelease") or os.uname().release
    btf = _Btf(host)
    checks: list[Callable[[], list[Capability]]] = [
        lambda: [_root()],
        lambda: _kernel(host, btf),
        lambda: [_sock_diag()],
        _bcc,
        lambda: [_headers(release)],
        lambda: _tracing(host, btf),
        lambda: _ethtool(host),
    ]
    out: list[Capability] = []
    for check in checks:
        out.extend(check())
    bcc_ok = any(c.name == "bcc python module" and c.available for c in out)
    if compile_probe and os.geteuid() == 0 and bcc_ok:
        at = next(i for i, c in enumerate(out) if c.name == "kernel headers") + 1
        out.insert(at, _bcc_compile())
    return out
