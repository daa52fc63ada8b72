"""Lint a planned load-generator command line: will it measure the server, or itself?

`lbtune checklist --load "CMD"` hands the command here. It is split like a shell would split
it (`shlex`, never executed), each pipeline/list stage is recognised by its program name (ab,
wrk, wrk2, httperf, vegeta, hey, h2load, oha; wrappers such as `sudo`, `taskset` or `numactl`
are looked through) and its options are read into a `LoadPlan`: how many connections it keeps
open, whether it reuses them (keep-alive), at what fixed rate, against which port. Rules then
compare the plan with what the tool itself accepts and with the host's limits (`LoadFacts`:
ephemeral ports, TIME_WAIT, listen backlogs, open-file limits). Each `LoadIssue` says what is
wrong, with the numbers, and *why* in plain words, at a `Level` (fail or warn). Every rule is
listed in docs/checklist.md.

Modules: `model` (the values and constants), `facts` (reading the host's limits), `options`
(splitting and option parsing), `tools` (one parser per tool), `rules` (the host rules,
registered with `@host_rule`), `lint` (a command line's plans through every rule).
"""

from __future__ import annotations

from lbtune.diagnose.loadlint.facts import parse_port_list, read_load_facts
from lbtune.diagnose.loadlint.lint import (
    lint_load,
    open_connections,
    parse_load,
    planned_connections,
)
from lbtune.diagnose.loadlint.model import (
    KNOWN_TOOLS,
    TIME_WAIT_SECONDS,
    LoadFacts,
    LoadIssue,
    LoadPlan,
)
from lbtune.diagnose.loadlint.options import split_command

__all__ = [
    "KNOWN_TOOLS",
    "TIME_WAIT_SECONDS",
    "LoadFacts",
    "LoadIssue",
    "LoadPlan",
    "lint_load",
    "open_connections",
    "parse_load",
    "parse_port_list",
    "planned_connections",
    "read_load_facts",
    "split_command",
]
