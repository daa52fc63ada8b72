"""irqbalance: is it running, is it enabled at boot, which CPUs/IRQs does it leave alone."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

from lbtune.host.fs import HostFS
from lbtune.host.kernel.cpulist import CpuListError, parse_cpulist, parse_cpumask

# Debian/Ubuntu, then RHEL family.
CONFIG_FILES = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
UNIT_WANTS = (
    "/etc/systemd/system/multi-user.target.wants/irqbalance.service",
    "/etc/systemd/system/default.target.wants/irqbalance.service",
)


@dataclass(frozen=True)
class IrqbalanceState:
    running: bool
    pid: Optional[int]
    enabled: Optional[bool]  # enabled at boot (systemd wants link); None if unknowable
    config_file: Optional[str]
    banned_cpus: frozenset[int]  # IRQBALANCE_BANNED_CPUS / _CPULIST
    banned_irqs: frozenset[int]  # --banirq in IRQBALANCE_ARGS
    oneshot: bool


def _read_env_file(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if key.startswith("export "):
            key = key[len("export ") :].strip()
        try:
            parts = shlex.split(value, comments=True)
        except ValueError:
            continue
        env[key] = " ".join(parts)
    return env


def find_process(fs: HostFS, comm: str) -> Optional[int]:
    """PID of a process whose /proc/PID/comm is `comm`, None when not running."""
    for entry in fs.listdir("/proc"):
        if entry.isdigit() and fs.read(f"/proc/{entry}/comm") == comm:
            return int(entry)
    return None


def discover_irqbalance(fs: HostFS) -> IrqbalanceState:
    pid = find_process(fs, "irqbalance")
    config_file = next((p for p in CONFIG_FILES if fs.exists(p)), None)
    env = _read_env_file(fs.read(config_file) or "") if config_file else {}
    banned: frozenset[int] = frozenset()
    try:
        if env.get("IRQBALANCE_BANNED_CPULIST"):
            banned = parse_cpulist(env["IRQBALANCE_BANNED_CPULIST"])
        elif env.get("IRQBALANCE_BANNED_CPUS"):
            banned = parse_cpumask(env["IRQBALANCE_BANNED_CPUS"])
    except CpuListError:
        banned = frozenset()
    args = env.get("IRQBALANCE_ARGS", "").split()
    banned_irqs = set()
    for i, a in enumerate(args):
        value = None
        if a.startswith("--banirq="):
            value = a.split("=", 1)[1]
        elif a in ("--banirq", "-i") and i + 1 < len(args):
            value = args[i + 1]
        if value and value.isdigit():
            banned_irqs.add(int(value))
    unit_known = fs.isdir("/etc/systemd/system")
    enabled = any(fs.islink(p) or fs.exists(p) for p in UNIT_WANTS) if unit_known else None
    oneshot = env.get("IRQBALANCE_ONESHOT", "").lower() in ("1", "yes", "true", "auto")
    return IrqbalanceState(
        running=pid is not None,
        pid=pid,
        enabled=enabled,
        config_file=config_file,
        banned_cpus=banned,
        banned_irqs=frozenset(banned_irqs),
        oneshot=oneshot,
    )
