"""Guest side of the VM persist and irqbalance tests: run as a script in the VM lab guest
(``python tests/vm/guest_state.py VERB [ARGS...]``), it prints one JSON value on stdout.

Verbs:
  snapshot IFACE FILE...   the values lb-dr tunes on IFACE (channels, each queue IRQ's
                           affinity, RPS/XPS, txqueuelen, lb-dr's sysctls), the kernel command
                           line and isolation, and each FILE's bytes (hex; null when absent)
  irqbalance-start ARG...  start /usr/sbin/irqbalance the way Debian's irqbalance.service does
                           (environment from /etc/default/irqbalance, `--foreground
                           $IRQBALANCE_ARGS`) plus ARGs, detached; its pid once it is up
  irqbalance-stop PID      SIGTERM, then wait (bounded) until it is gone
  irqbalance-env PID       the IRQBALANCE_* variables of that process (/proc/PID/environ)
  irqs                     every IRQ of /proc/interrupts with a name: its affinity lists
  spread REGEX CPUS        write CPUS to the smp_affinity_list of every IRQ whose name matches
                           (the ones the kernel refuses are left); what each reads afterwards
  wait-within REGEX CPUS TIMEOUT
                           wait (bounded) until an IRQ whose name matches REGEX has its
                           affinity within CPUS (irqbalance placed it); those IRQs, which are
                           within, and the seconds waited

The guest has no systemd: the tests are its service manager (and its bootloader).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Optional

LB_DR_SYSCTLS = (
    "kernel.timer_migration",
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.ipv4.conf.all.rp_filter",
    "net.ipv4.conf.default.rp_filter",
    "net.ipv4.conf.all.arp_ignore",
    "net.ipv4.conf.all.arp_announce",
    "net.ipv4.conf.all.send_redirects",
    "net.ipv4.conf.default.send_redirects",
    "vm.swappiness",
)
IRQBALANCE_ENV = "/etc/default/irqbalance"


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def _bytes_hex(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            return fh.read().hex()
    except FileNotFoundError:
        return None


def queue_irqs(iface: str) -> dict[str, int]:
    """{"virtio1-input.0": IRQ, ...} for the virtio device behind iface."""
    dev = os.path.basename(os.readlink(f"/sys/class/net/{iface}/device"))
    out: dict[str, int] = {}
    with open("/proc/interrupts", encoding="utf-8") as fh:
        for line in fh:
            words = line.split()
            if words and words[0].rstrip(":").isdigit() and words[-1].startswith(dev + "-"):
                out[words[-1]] = int(words[0].rstrip(":"))
    return out


def channels(iface: str) -> Optional[int]:
    out = subprocess.run(["ethtool", "-l", iface], capture_output=True, text=True, check=False)
    current = out.stdout.split("Current hardware settings:")[-1]
    m = re.search(r"^Combined:\s*(\d+)", current, re.MULTILINE)
    return int(m.group(1)) if m else None


def snapshot(iface: str, files: list[str]) -> dict[str, Any]:
    base = f"/sys/class/net/{iface}"
    irqs = {
        name: {
            "irq": irq,
            "affinity": _read(f"/proc/irq/{irq}/smp_affinity_list"),
            "effective": _read(f"/proc/irq/{irq}/effective_affinity_list"),
        }
        for name, irq in sorted(queue_irqs(iface).items())
    }
    queues = {
        q: _read(f"{base}/queues/{q}/{'rps_cpus' if q.startswith('rx') else 'xps_cpus'}")
        for q in sorted(os.listdir(f"{base}/queues"))
    }
    return {
        "cmdline": _read("/proc/cmdline"),
        "isolated": _read("/sys/devices/system/cpu/isolated"),
        "nohz_full": _read("/sys/devices/system/cpu/nohz_full"),
        "channels": channels(iface),
        "txqueuelen": _read(f"{base}/tx_queue_len"),
        "irqs": irqs,
        "queues": queues,
        "sysctl": {k: _read("/proc/sys/" + k.replace(".", "/")) for k in LB_DR_SYSCTLS},
        "files": {f: _bytes_hex(f) for f in files},
    }


def unit_environment() -> dict[str, str]:
    """What systemd's EnvironmentFile= gives irqbalance: KEY=VALUE lines, quotes removed."""
    env: dict[str, str] = {}
    text = _read(IRQBALANCE_ENV) or ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        words = shlex.split(value)
        env[key.strip()] = " ".join(words)
    return env


def irqbalance_start(extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    unit_env = unit_environment()
    env.update(unit_env)
    argv = ["/usr/sbin/irqbalance", "--foreground", *unit_env.get("IRQBALANCE_ARGS", "").split()]
    os.makedirs("/run/irqbalance", exist_ok=True)  # the unit's RuntimeDirectory=
    log = open("/run/irqbalance/log", "ab")  # noqa: SIM115 - handed to the daemon
    proc = subprocess.Popen(
        [*argv, *extra],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # up: its /proc entry names it
        if proc.poll() is not None:
            return {"pid": None, "exit": proc.returncode, "log": _read("/run/irqbalance/log")}
        if _read(f"/proc/{proc.pid}/comm") == "irqbalance":
            break
        time.sleep(0.1)
    return {"pid": proc.pid, "argv": [*argv, *extra], "env": unit_env}


def irqbalance_stop(pid: int) -> dict[str, Any]:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return {"stopped": True, "was_running": False}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        comm = _read(f"/proc/{pid}/comm")
        stat = _read(f"/proc/{pid}/stat") or ""
        if comm != "irqbalance" or stat.split(") ")[-1].startswith("Z"):
            return {"stopped": True, "was_running": True}
        time.sleep(0.1)
    return {"stopped": False, "was_running": True}


def irqbalance_env(pid: int) -> dict[str, Any]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            raw = fh.read().split(b"\0")
    except OSError:
        return {"running": False}
    env = dict(v.decode(errors="replace").partition("=")[::2] for v in raw if b"=" in v)
    return {
        "running": _read(f"/proc/{pid}/comm") == "irqbalance",
        "env": {k: v for k, v in env.items() if k.startswith("IRQBALANCE_")},
    }


def irqs() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with open("/proc/interrupts", encoding="utf-8") as fh:
        for line in fh:
            words = line.split()
            if not words or not words[0].rstrip(":").isdigit():
                continue
            irq = int(words[0].rstrip(":"))
            out[words[-1]] = {
                "irq": irq,
                "affinity": _read(f"/proc/irq/{irq}/smp_affinity_list"),
                "effective": _read(f"/proc/irq/{irq}/effective_affinity_list"),
            }
    return out


def _cpus(text: Optional[str]) -> set[int]:
    cpus: set[int] = set()
    for part in (text or "").split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def spread(regex: str, cpus: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, v in irqs().items():
        if re.search(regex, name):
            try:
                with open(f"/proc/irq/{v['irq']}/smp_affinity_list", "w", encoding="ascii") as fh:
                    fh.write(cpus)
            except OSError:
                pass
            out[name] = _read(f"/proc/irq/{v['irq']}/smp_affinity_list")
    return out


def wait_within(regex: str, cpus: str, timeout: float) -> dict[str, Any]:
    start = time.monotonic()
    allowed = _cpus(cpus)
    while True:
        now = {k: v for k, v in irqs().items() if re.search(regex, k)}
        within = sorted(k for k, v in now.items() if _cpus(v["affinity"]) <= allowed)
        if within or time.monotonic() - start > timeout:
            waited = round(time.monotonic() - start, 1)
            return {"within": within, "irqs": now, "waited": waited}
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    verb, args = argv[0], argv[1:]
    if verb == "snapshot":
        out: Any = snapshot(args[0], args[1:])
    elif verb == "irqbalance-start":
        out = irqbalance_start(args)
    elif verb == "irqbalance-stop":
        out = irqbalance_stop(int(args[0]))
    elif verb == "irqbalance-env":
        out = irqbalance_env(int(args[0]))
    elif verb == "irqs":
        out = irqs()
    elif verb == "spread":
        out = spread(args[0], args[1])
    elif verb == "wait-within":
        out = wait_within(args[0], args[1], float(args[2]))
    else:
        sys.stderr.write(f"unknown verb {verb!r}\n")
        return 2
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
