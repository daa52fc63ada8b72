"""Runs inside the UML lab kernel: host-global sysctls and persistence files, for real.

The guest's root filesystem is the host's, read-only; tmpfs mounts give lbtune a writable
/etc/sysctl.d and /etc/systemd/system (no systemd runs in the guest).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

KEYS = [
    "fs/file-max",
    "fs/nr_open",
    "vm/swappiness",
    "net/core/netdev_max_backlog",
    "net/core/somaxconn",
    "net/ipv4/ip_local_port_range",
]


def read() -> dict[str, str]:
    out = {}
    for k in KEYS:
        with open("/proc/sys/" + k) as f:
            out[k] = f.read()
    return out


def run(profile: str) -> dict[str, Any]:
    for d in ("/etc/sysctl.d", "/etc/systemd/system"):
        subprocess.run(["mount", "-t", "tmpfs", "none", d], check=True)
    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"  # the guest's /tmp is a tmpfs
    from tests.conftest import run_cli

    before = read()
    applied = run_cli("apply", profile, "--persist", "--json")
    during = read()
    conf = ""
    if os.path.exists("/etc/sysctl.d/60-lbtune.conf"):
        with open("/etc/sysctl.d/60-lbtune.conf") as f:
            conf = f.read()
    verify = run_cli("verify")
    history = run_cli("history", "--json")
    rollback = run_cli("rollback")
    after = read()
    return {
        "apply": [applied.exit_code, applied.stderr],
        "changed": applied.json["changed"] if applied.exit_code == 0 else None,
        "verify": verify.exit_code,
        "history": history.json if history.exit_code == 0 else None,
        "rollback": [rollback.exit_code, rollback.stderr],
        "conf": conf,
        "conf_after": os.path.exists("/etc/sysctl.d/60-lbtune.conf"),
        "before": before,
        "during": during,
        "after": after,
    }
