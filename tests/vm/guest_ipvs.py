"""Runs inside the VM guest (Debian's 6.1): IPVS where ip_vs is a module nobody loaded.

The lab's guest-side IPVS phases (tests/lab/guest/ipvs_dr.py, ipvs_table.py) are kernel
agnostic; here they run on a kernel whose ip_vs and schedulers are modules: the DR bed is
built without loading ip_vs, the reads (`ipvs plan`, `ipvs status`) must not load it, the
first `lbtune ipvs apply` must, and the schedulers the configs name (rr, wlc, sh; wrr, lc,
mh in the export round trip) load on demand. Then the reconcile / drift / rollback and
export phases.
"""

from __future__ import annotations

import os
from typing import Any


def modules() -> list[str]:
    """Loaded IPVS modules (ip_vs and ip_vs_*), from /proc/modules."""
    with open("/proc/modules", encoding="utf-8") as f:
        names = [line.split()[0] for line in f]
    return sorted(n for n in names if n == "ip_vs" or n.startswith("ip_vs_"))


def run() -> dict[str, Any]:
    from tests.lab.guest.dr_lab import Bed, cli, config, write
    from tests.lab.guest.ipvs_dr import phase_idempotence, phase_rollback
    from tests.lab.guest.ipvs_table import export_round_trip

    out: dict[str, Any] = {"at_boot": modules()}
    bed = Bed(3, load_ipvs=False)
    try:
        cfg = write("/tmp/dr.toml", config("rr"))
        out["plan"] = cli("ipvs", "plan", cfg, "--json", netns="dir")
        out["status"] = cli("ipvs", "status", "--json", netns="dir")
        out["after_status"] = modules()
        out["apply"] = cli("ipvs", "apply", cfg, "--json", netns="dir")
        out["after_apply"] = modules()
        out["idempotence"] = phase_idempotence(cfg)
        out["rollback"] = phase_rollback()
        out["after_rollback"] = modules()
    finally:
        bed.close()
    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state-table"
    out["export"] = export_round_trip()
    out["after_export"] = modules()
    return out
