"""The sysctl values a profile may hold: keys no profile sets, per-key integer ranges and
multi-field shapes, and the forwarding switches the load-balancer roles must keep on."""

from __future__ import annotations

# Sysctls that make the kernel run a program or are otherwise a foothold: no profile sets them.
FORBIDDEN_SYSCTLS = frozenset(
    {
        "kernel.core_pattern",
        "kernel.modprobe",
        "kernel.hotplug",
        "kernel.poweroff_cmd",
        "kernel.usermodehelper.bset",
        "kernel.usermodehelper.inheritable",
        "kernel.kptr_restrict",
        "kernel.yama.ptrace_scope",
        "kernel.unprivileged_bpf_disabled",
        "kernel.modules_disabled",
    }
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
_HOST = r"[A-Za-z0-9]([A-Za-z0-9.-]{0,62})?"  # __NEW_UTS_LEN 64
STRINGS: dict[str, str] = {
    "net.ipv4.tcp_congestion_control": _NAME,
    "net.ipv4.tcp_allowed_congestion_control": f"{_NAME}( {_NAME}){{0,31}}",
    "net.core.default_qdisc": _NAME,
    "net.core.rps_default_mask": _MASK,
    "net.core.flow_limit_cpu_bitmap": _MASK,
    "net.ipv4.ip_local_reserved_ports": r"[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?)*",
    "kernel.hostname": _HOST,
    "kernel.domainname": _HOST,
}
