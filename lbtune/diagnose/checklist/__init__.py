"""The pre-benchmark checklist: is this host ready for a load test in its role?

`run_checklist(host, role)` runs named checks and gives each a `Level` (pass, warn, fail,
skip), a reason with the numbers it saw, and a fix (a profile key for `lbtune apply`, or a
command). A check whose source is unavailable (a host tree without that file, a namespace
that cannot see it) is skipped with the reason, never guessed. `--load CMD` adds the planned
load: its connection count sizes the port, backlog, conntrack and file checks, and
`lbtune.diagnose.loadlint` lints the command itself. Every check and threshold is documented
in docs/checklist.md.

Modules: `model` (values, thresholds, the shared context), `system` (how the host is set up),
`nic` (the data NIC's ethtool settings), `capacity` (room for the load), `realserver` (IPVS
DR real server), `run` (the entry point).
"""

from __future__ import annotations

from lbtune.diagnose.checklist.model import (
    CHECK_LEVELS,
    ROLE_PROFILES,
    ROLES,
    Checklist,
    CheckResult,
    LiveReadings,
)
from lbtune.diagnose.checklist.realserver import IfAddr, parse_ip_o_addr
from lbtune.diagnose.checklist.run import (
    parse_vip,
    pick_data_interface,
    read_live,
    run_checklist,
)
from lbtune.host.kernel.timesync import ClockState

__all__ = [
    "CHECK_LEVELS",
    "ROLES",
    "ROLE_PROFILES",
    "CheckResult",
    "Checklist",
    "ClockState",
    "IfAddr",
    "LiveReadings",
    "parse_ip_o_addr",
    "parse_vip",
    "pick_data_interface",
    "read_live",
    "run_checklist",
]
