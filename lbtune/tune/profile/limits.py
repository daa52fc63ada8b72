"""The sysctl values a profile may hold: the keys that are tuning (and why others are not),
per-key integer ranges and multi-field shapes, and the forwarding switches the load-balancer
roles must keep on."""

from __future__ import annotations

# What a tuning profile may set: sysctls that tune (queues, buffers, timers, memory, limits).
# An allowlist of namespaces, because the kernel.* and fs.* trees mostly hold what is not
# tuning - the host's identity, security switches, programs the kernel runs, crash policy -
# and a kernel adds new ones every release: a denylist would let each new one through.
# - net.* and vm.* are tuning namespaces, except the keys and prefixes of NOT_TUNING;
# - in kernel.* and fs.* only TUNING_KEYS and the TUNING_PREFIXES are;
# - every other tree (user.*, dev.*, abi.*, debug.*, crypto.*, ...) is not.
# NOT_TUNING says why for the keys a profile might be tempted to set (the refusal names it);
# an entry ending in "*" is a prefix.
NOT_TUNING: dict[str, str] = {
    "kernel.hostname": "the host's name (its identity, which lbtune's journals are checked "
    "against)",
    "kernel.domainname": "the host's NIS domain name (its identity)",
    "kernel.core_pattern": "makes the kernel run a program (a core_pattern pipe)",
    "kernel.modprobe": "makes the kernel run a program",
    "kernel.hotplug": "makes the kernel run a program",
    "kernel.poweroff_cmd": "makes the kernel run a program",
    "kernel.usermodehelper.*": "what programs the kernel runs may do",
    "kernel.randomize_va_space": "address-space randomisation (security)",
    "kernel.kptr_restrict": "who may read kernel addresses (security)",
    "kernel.dmesg_restrict": "who may read the kernel log (security)",
    "kernel.perf_event_paranoid": "who may use perf events (security)",
    "kernel.yama.*": "who may ptrace whom (security)",
    "kernel.modules_disabled": "a one-way lockdown switch (security)",
    "kernel.kexec_load_disabled": "a one-way lockdown switch (security)",
    "kernel.unprivileged_bpf_disabled": "who may load BPF programs (security)",
    "kernel.sysrq": "what the SysRq key may do (security)",
    "net.core.bpf_jit_*": "the BPF JIT's hardening and exposure (security)",
    "fs.protected_*": "link, FIFO and regular-file protections (security)",
    "fs.suid_dumpable": "core dumps of setuid programs (security)",
    "vm.mmap_min_addr": "the NULL-page protection (security)",
    "vm.mmap_rnd_*": "address-space randomisation (security)",
    "vm.unprivileged_userfaultfd": "who may use userfaultfd (security)",
}
TUNING_NAMESPACES = ("net.", "vm.")
TUNING_KEYS = frozenset(
    {
        "kernel.timer_migration",
        "kernel.numa_balancing",
        "kernel.pid_max",
        "kernel.threads-max",
        "kernel.printk",  # a slow console printing stalls the CPU that prints
        "kernel.watchdog",
        "kernel.nmi_watchdog",
        "kernel.soft_watchdog",
        "kernel.watchdog_thresh",
        "kernel.watchdog_cpumask",
        "kernel.perf_event_max_sample_rate",
        "kernel.perf_cpu_time_max_percent",
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
        "fs.file-max",
        "fs.nr_open",
        "fs.aio-max-nr",
        "fs.pipe-max-size",
        "fs.pipe-user-pages-hard",
        "fs.pipe-user-pages-soft",
    }
)
TUNING_PREFIXES = ("kernel.sched_", "fs.inotify.", "fs.epoll.")


def not_tuning(key: str) -> str | None:
    """Why sysctl `key` is not one a tuning profile may set, or None when it is."""
    for entry, why in NOT_TUNING.items():
        if key == entry or (entry.endswith("*") and key.startswith(entry[:-1])):
            return why
    if key.startswith(TUNING_NAMESPACES) or key in TUNING_KEYS:
        return None
    if key.startswith(TUNING_PREFIXES):
        return None
    return (
        "profiles set net.* and vm.* sysctls and, in kernel.* and fs.*, only the tuning keys "
        "docs/tuning.md lists"
    )


# Values that would turn forwarding off: refused for the LB roles.
FORWARDING = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv6.conf.all.forwarding",
)

# Per-key value ranges (inclusive), by full key or, for net.*.conf.<if>.X, by "conf.X".
INT_MAX = 2**31 - 1
RANGES: dict[str, tuple[int, int]] = {
    "net.core.somaxconn": (1, INT_MAX),
    "net.ipv4.tcp_max_syn_backlog": (1, INT_MAX),
    "net.core.netdev_max_backlog": (1, INT_MAX),
    "net.core.netdev_budget": (1, INT_MAX),
    "net.core.netdev_budget_usecs": (1, INT_MAX),
    "net.core.dev_weight": (1, INT_MAX),
    "net.core.rps_sock_flow_entries": (0, 1 << 29),
    "net.ipv4.ip_forward": (0, 1),
    "net.ipv4.ip_nonlocal_bind": (0, 1),
    "net.ipv4.tcp_syncookies": (0, 2),
    "net.ipv4.tcp_tw_reuse": (0, 2),
    "net.ipv4.tcp_fin_timeout": (1, 3600),
    "net.ipv4.tcp_slow_start_after_idle": (0, 1),
    "net.ipv4.tcp_max_tw_buckets": (0, INT_MAX),
    "kernel.timer_migration": (0, 1),
    "vm.swappiness": (0, 200),
    "fs.file-max": (1024, 2**63 - 1),
    "fs.nr_open": (1024, 1073741816),
    "conf.rp_filter": (0, 2),
    "conf.arp_ignore": (0, 8),
    "conf.arp_announce": (0, 2),
    "conf.arp_filter": (0, 1),
    "conf.send_redirects": (0, 1),
    "conf.accept_redirects": (0, 1),
    "conf.forwarding": (0, 1),
    "conf.disable_ipv6": (0, 1),
}
# Multi-field values: (fields, low, high, must not decrease).
FIELDS: dict[str, tuple[int, int, int, bool]] = {
    "net.ipv4.ip_local_port_range": (2, 1, 65535, True),
    "net.ipv4.tcp_rmem": (3, 1, INT_MAX, True),
    "net.ipv4.tcp_wmem": (3, 1, INT_MAX, True),
    "net.ipv4.tcp_mem": (3, 1, 2**63 - 1, True),
    "net.ipv4.udp_mem": (3, 1, 2**63 - 1, True),
}
ANY_INT = (-(2**63), 2**64 - 1)

# The sysctls whose value is text, and the shape of that text. Every other sysctl takes an
# integer or a vector of integers (`tcp_rmem = "4096 131072 16777216"`): a profile value
# like `somaxconn = "abc; rm -rf /"` is refused when the profile is read, whatever the host.
_NAME = r"[A-Za-z0-9_-]{1,15}"  # a congestion control or qdisc name (TCP_CA_NAME_MAX 16)
_MASK = r"[0-9a-fA-F]{1,8}(,[0-9a-fA-F]{1,8}){0,255}"  # a CPU mask as the kernel prints it
STRINGS: dict[str, str] = {
    "net.ipv4.tcp_congestion_control": _NAME,
    "net.ipv4.tcp_allowed_congestion_control": f"{_NAME}( {_NAME}){{0,31}}",
    "net.core.default_qdisc": _NAME,
    "net.core.rps_default_mask": _MASK,
    "net.core.flow_limit_cpu_bitmap": _MASK,
    "net.ipv4.ip_local_reserved_ports": r"[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*",
}
