"""The diagnose rules: kernel counter movements turned into findings with cause and fix.

One module per area (listen queues, socket receive, closed ports, CPUs, NICs, NIC
parameters, RSS, routing, conntrack, TCP limits, transmit); each rule registers itself with
`@rule` in `registry.py` and declares the configuration it reads. A rule fires only when
something was lost or a limit was hit inside the window, or traffic moved in it against a
setting that misdirects it, so an idle host gives no findings. Every rule id is
documented in docs/diagnose.md with its counters, meaning and fix (a test checks that).
"""

from __future__ import annotations

from lbtune.diagnose.rules import (  # noqa: F401 (importing registers the rules)
    closed_port,
    conntrack,
    cpu,
    listen,
    nic,
    nicparams,
    receive,
    routing,
    rss,
    tcp_limits,
    transmit,
)
from lbtune.diagnose.rules.registry import RULES, Rule, rule, run_rules, sample_spec, select

__all__ = ["RULES", "Rule", "rule", "run_rules", "sample_spec", "select"]
