"""Linting a whole load command: its stages parsed by the tool parsers, then the host rules
(loadlint/rules.py) that compare each plan with the host's limits (ephemeral ports,
TIME_WAIT, listen backlogs, open files)."""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Optional, Sequence

from lbtune.diagnose.loadlint.model import (
    KNOWN_TOOLS,
    SLOW_RESPONSE,
    LoadFacts,
    LoadIssue,
    LoadPlan,
)
from lbtune.diagnose.loadlint.options import split_command, unwrap
from lbtune.diagnose.loadlint.rules import host_issues
from lbtune.diagnose.loadlint.tools import TOOLS
from lbtune.errors import BadInput


def _ulimit_nofile(argv: list[str]) -> Optional[int]:
    """N of `ulimit -n N` / `ulimit -Sn N` (the soft limit later stages start with)."""
    if posixpath.basename(argv[0]) != "ulimit" or len(argv) < 3:
        return None
    flags = "".join(a.lstrip("-") for a in argv[1:-1] if a.startswith("-"))
    if "n" in flags and argv[-1].isdigit() and "H" not in flags:
        return int(argv[-1])
    return None


def _parse(command: str) -> list[tuple[LoadPlan, list[LoadIssue]]]:
    stages = split_command(command)
    words = [w for s in stages for w in s]
    out = []
    nofile: Optional[int] = None
    seen: list[str] = []
    for stage in stages:
        argv = unwrap(stage)
        if not argv:
            continue
        limit = _ulimit_nofile(argv)
        if limit is not None:
            nofile = limit
            continue
        name = posixpath.basename(argv[0])
        seen.append(name)
        parser = TOOLS.get(name)
        if parser is None:
            continue
        parsed = parser(argv, words)
        if parsed is None:
            continue
        plan, issues = parsed
        if nofile is not None:
            plan = replace(plan, nofile_soft=nofile)
        out.append((plan, issues))
    if not out:
        what = ", ".join(dict.fromkeys(seen)) or "nothing"
        raise BadInput(
            f"--load: no load generator found in the command (saw {what}; "
            f"know {', '.join(KNOWN_TOOLS)})"
        )
    return out


def parse_load(command: str) -> list[LoadPlan]:
    """The load plans of a command line; BadInput when it cannot be split or runs no known tool."""
    return [plan for plan, _ in _parse(command)]


def open_connections(plan: LoadPlan) -> Optional[int]:
    """Connections one plan holds open at once, None when unknown.

    Fixed-rate tools without a connection count (vegeta, httperf) hold rate x response time;
    this assumes a saturated server's 250 ms, capped by the tool's own connection/worker limit.
    """
    if plan.rate and plan.tool in ("vegeta", "httperf"):
        n = int(plan.rate * SLOW_RESPONSE)
        return min(n, plan.connections) if plan.connections else n
    return plan.connections


def planned_connections(plans: Sequence[LoadPlan]) -> Optional[int]:
    """Connections all plans hold open at once (see `open_connections`), None when unknown."""
    counts = [n for n in map(open_connections, plans) if n is not None]
    return sum(counts) if counts else None


def lint_load(command: str, role: str, facts: LoadFacts) -> list[LoadIssue]:
    """Problems of the load command `command` run against (or from) a host of `role`.

    `role` says which side `facts` describe: `client` = the command runs on this host (its
    ports and open-file limit count); `web`, `lb-proxy`, `realserver` = this host serves the
    load (its listen backlogs and TIME_WAIT buckets count). Rules about the tool's own options
    apply to every role. BadInput when the command cannot be parsed.
    """
    out: list[LoadIssue] = []
    for plan, issues in _parse(command):
        out.extend(issues)
        out.extend(host_issues(plan, role, facts))
    return out
