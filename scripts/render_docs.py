"""Render the numbers README.md and docs/*.md quote from their sources (bench/results).

Usage: python scripts/render_docs.py --check | --write | --list

A generated region is delimited in the Markdown by HTML comments, which Markdown does not
show:

    inline:  the fix took <!-- gen:KEY -->0.26<!-- /gen:KEY --> s
    block:   <!-- gen:KEY -->
             | a | table |
             <!-- /gen:KEY -->

Everything between the markers is what the render function registered for KEY returns (a
block when the region starts with a newline). `--write` rewrites the regions in place;
`--check` exits 1 and lists each region whose text differs from its source (and any KEY
that is not registered); nothing else in a file is touched. tests/unit/test_docs_numbers.py
runs the check on the committed tree.

Adding a source is a few lines: a function returning the text, registered under its KEY,
e.g.

    @register("fixloops.proven")
    def _proven() -> str:
        from tests.fixloops import proven_count
        return str(proven_count())

and `<!-- gen:fixloops.proven --><!-- /gen:fixloops.proven -->` where the number goes,
then `--write`. Bench figures below read bench/results/*.json only (`result`, `row`).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional

TOP = Path(__file__).resolve().parent.parent
FILES = ("README.md", "docs/*.md", "CHANGELOG.md")  # CHANGELOG: regions in Unreleased only
REGION = re.compile(r"<!-- gen:(?P<key>[\w.:-]+) -->(?P<body>.*?)<!-- /gen:(?P=key) -->",
                    re.DOTALL)  # fmt: skip
OPEN = re.compile(r"<!-- (/?)gen:([\w.:-]+) -->")

REGISTRY: dict[str, Callable[[], str]] = {}


def register(key: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    """Register `fn` as the source of every region named KEY."""

    def deco(fn: Callable[[], str]) -> Callable[[], str]:
        if key in REGISTRY:
            raise ValueError(f"render_docs: {key} registered twice")
        REGISTRY[key] = fn
        return fn

    return deco


def figures(table: dict[str, Callable[[], Any]]) -> None:
    """Register many one-line figures at once (each value is rendered with str())."""
    for key, fn in table.items():
        register(key)(lambda fn=fn: str(fn()))


# --- reading bench/results ----------------------------------------------------------------


@functools.cache
def result(name: str) -> dict[str, Any]:
    """bench/results/NAME.json."""
    doc: dict[str, Any] = json.loads((TOP / "bench" / "results" / f"{name}.json").read_text())
    return doc


def meta(name: str) -> dict[str, Any]:
    m: dict[str, Any] = result(name)["meta"]
    return m


def row(source: str, /, **match: Any) -> dict[str, Any]:
    """The one row of SOURCE's results whose fields equal `match` (a KeyError otherwise)."""
    found = [r for r in result(source)["results"]
             if all(r.get(k) == v for k, v in match.items())]  # fmt: skip
    if len(found) != 1:
        raise KeyError(f"{source}: {len(found)} rows match {match}")
    return found[0]


def md_table(name: str, index: int = 0, columns: Optional[list[str]] = None) -> str:
    """Table INDEX of bench/results/NAME.md (the script's own), optionally only COLUMNS."""
    tables: list[list[str]] = []
    cur: list[str] = []
    for line in (TOP / "bench" / "results" / f"{name}.md").read_text().splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    lines = tables[index]
    if columns is None:
        return "\n".join(lines)
    split = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    idx = [split[0].index(c) for c in columns]
    return "\n".join("| " + " | ".join(cells[i] for i in idx) + " |" if n != 1
                     else "|" + "|".join(cells[i] for i in idx) + "|"
                     for n, cells in enumerate(split))  # fmt: skip


def n(v: float, digits: int = 0) -> str:
    """A number with thousands separators: 6,114 or 0.26."""
    return f"{v:,.{digits}f}"


def ratio(v: float) -> str:
    """A ratio as the tables print it: 1.0, 0.20, 0.068."""
    if v == 1.0:
        return "1.0"
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def median(xs: list[float]) -> float:
    s = sorted(xs)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def load_start(name: str) -> float:
    """The 1-minute load average when the run started (meta.host_load, or older keys)."""
    m = meta(name)
    if "host_load" in m:
        return float(m["host_load"]["start"][0])
    return float(m["loadavg_1min_before_after"][0])


def load_end(name: str) -> float:
    m = meta(name)
    if "host_load" in m:
        return float(m["host_load"]["end"][0])
    return float(m["loadavg_1min_before_after"][1])


# --- make test (bench/suite.py) ------------------------------------------------------------


def _tier_min(name: str) -> str:
    return f"{row('suite', name=name)['seconds'] / 60:.1f}"


@register("nic_apply.table")
def _nic_apply_table() -> str:
    return md_table("nic_apply")


@register("nic_spread.table")
def _nic_spread_table() -> str:
    return md_table("nic_spread")


figures({
    "suite.commit": lambda: meta("suite")["commit"],
    "suite.vm_min": lambda: _tier_min("vm"),
    "suite.py_min": lambda: _tier_min("py"),
    "suite.lab_min": lambda: _tier_min("lab"),
    "suite.lint_min": lambda: _tier_min("lint"),
    "suite.tox_min": lambda: f"{meta('suite')['tox_seconds'] / 60:.1f}",
    "suite.make_test_min": lambda: f"{meta('suite')['wall_seconds'] / 60:.1f}",
})

# --- proven fixes (tests/fixloops.py: the fix loops' own declarations) ----------------------


def _fixloops() -> Any:
    import tests.fixloops as fixloops  # imports the loop modules; runs nothing

    return fixloops


def _unproven() -> str:
    missing = _fixloops().unproven_profile_fix_rules()
    if not missing:
        return "every one has its loop"
    return "not proven by a loop: " + "; ".join(f"`{r}` ({why})" for r, why in missing.items())


def _tiers() -> str:
    counts: dict[str, int] = {}
    for _rule, tier in _fixloops().proven_fixes():
        counts[tier] = counts.get(tier, 0) + 1
    names = {"netns": "namespace", "lab": "UML lab", "vm": "VM lab"}
    return ", ".join(f"{names.get(t, t)} {n}" for t, n in counts.items())


figures({
    "fixloops.proven": lambda: len(_fixloops().proven_fixes()),
    "fixloops.profile_fix": lambda: len(_fixloops().profile_fix_rules()),
    "fixloops.tiers": _tiers,
    "fixloops.unproven": _unproven,
    "fixloops.no_profile_fix": lambda: ", ".join(
        f"`{r}` ({why})" for r, why in _fixloops().no_profile_fix_rules().items()),
})

# --- start-up (bench/run.py) -------------------------------------------------------------

def _completions() -> list[dict[str, Any]]:
    return [r for r in result("completion")["results"] if r["name"].startswith("Tab completion")]


figures({
    "startup.help.ratio": lambda: f"{row('startup', name='lbtune --help')['ratio']:.2f}x",
    "startup.version.ratio": lambda: (
        f"{row('startup', name='lbtune --version (the click group)')['ratio']:.2f}x"),
    "startup.commit": lambda: meta("startup")["commit"],
})

# --- Tab completion (bench/completion.py): the slowest of its completion cases ---------------

figures({
    "completion.max_ms": lambda: f"{max(r['median_ms'] for r in _completions()):.0f}",
    "completion.max_ratio": lambda: f"{max(r['ratio'] for r in _completions()):.1f}x",
    "completion.commit": lambda: meta("completion")["commit"],
})

# --- systemd units (bench/units.py): exposure per unit ------------------------------------

register("units.table")(lambda: md_table("units", 0, [
    "unit", "runs as", "capabilities kept", "exposure", "rating", "verify"]))
figures({
    "units.commit": lambda: meta("units")["commit"],
    "units.systemd": lambda: meta("units")["systemd"],
    "units.max_exposure": lambda: f"{max(r['exposure'] for r in result('units')['results']):.1f}",
})

# --- VM soak (bench/vm_soak.py) ------------------------------------------------------------

def _arm(arm: str) -> dict[str, Any]:
    return meta("vm_soak")["arms_summary"][arm]


def _loads() -> str:
    loads = [r["load1"] for r in result("vm_soak")["results"]]
    return f"{min(loads):.1f}-{max(loads):.1f}"


figures({
    "vm_soak.guests": lambda: meta("vm_soak")["guests"],
    "vm_soak.busy": lambda: meta("vm_soak")["load"],
    "vm_soak.loads": _loads,
    **{f"vm_soak.{arm}.{k}": (lambda arm=arm, k=k: _arm(arm)[k])
       for arm in ("apply", "control")
       for k in ("cycles", "guest_minutes", "wedges", "wedges_per_guest_hour")},
})


# --- exporter (bench/exporter.py) ----------------------------------------------------------

_NODE = "node_exporter (netstat,softnet,ipvs,conntrack)"
_FIX = "fixture 48 CPUs, 2 NICs"


def _exp(host: str, lbtune: bool) -> dict[str, Any]:
    return row("exporter", host=host, exporter="lbtune exporter" if lbtune else _NODE)


def _ground(host: str) -> dict[str, Any]:
    return next(r for r in result("exporter")["results"]
                if r["host"] == host and r["exporter"].startswith("node_exporter on the same"))


def _cpu_ratio(host: str) -> str:
    return f"{_exp(host, True)['cpu_ms_per_scrape'] / _exp(host, False)['cpu_ms_per_scrape']:.1f}"


register("exporter.table")(lambda: md_table("exporter", 0, [
    "host", "exporter", "series", "scrape ms (median)", "CPU ms/scrape", "drop-cause series",
    "finding series"]))
figures({
    "exporter.date": lambda: meta("exporter")["date"][:10],
    "exporter.rounds": lambda: meta("exporter")["rounds"],
    "exporter.node_version": lambda: meta("exporter")["node_exporter"].split("version ")[1]
    .split()[0],
    "exporter.fixture.series": lambda: _exp(_FIX, True)["series"],
    "exporter.live.series_ratio": lambda: f"{_exp('live', True)['ratio_series_to_node']:.2f}",
    "exporter.fixture.series_ratio": lambda: f"{_exp(_FIX, True)['ratio_series_to_node']:.2f}",
    "exporter.live.cpu_ratio": lambda: _cpu_ratio("live"),
    "exporter.fixture.cpu_ratio": lambda: _cpu_ratio(_FIX),
    "exporter.live.ground_ratio": lambda: f"{_exp('live', True)['ratio_cpu_to_ground']:.2f}",
    "exporter.fixture.ground_ratio": lambda: f"{_exp(_FIX, True)['ratio_cpu_to_ground']:.2f}",
    "exporter.fixture.ground_ms": lambda: f"{_ground(_FIX)['cpu_ms_per_scrape']:.2f}",
    "exporter.fixture.ground_series": lambda: f"{_ground(_FIX)['series']:,}",
    "exporter.ground_collectors": lambda: _ground("live")["exporter"].split("(")[1].split(";")[0]
    .replace(",", ", "),
    "exporter.load_start": lambda: f"{load_start('exporter'):.1f}",
    "exporter.load_end": lambda: f"{load_end('exporter'):.1f}",
    "exporter.fixture.floor_ms": lambda: f"{_exp_floor()['cpu_ms_per_scrape']:.2f}",
    "exporter.fixture.floor_ratio": lambda: f"{_exp_floor()['ratio_cpu_to_node']:.2f}",
    "exporter.fixture.node_ms": lambda: f"{_exp(_FIX, False)['cpu_ms_per_scrape']:.2f}",
    "exporter.fixture.lbtune_ms": lambda: f"{_exp(_FIX, True)['cpu_ms_per_scrape']:.2f}",
    # what reading the host costs a scrape (lbtune's row less the floor's), and what a 2x
    # goal leaves for it
    "exporter.fixture.reading_ms": lambda: (
        f"{_exp(_FIX, True)['cpu_ms_per_scrape'] - _exp_floor()['cpu_ms_per_scrape']:.2f}"),
    "exporter.fixture.left_ms": lambda: (
        f"{2 * _exp(_FIX, False)['cpu_ms_per_scrape'] - _exp_floor()['cpu_ms_per_scrape']:.2f}"),
})


def _exp_floor() -> dict[str, Any]:
    return next(r for r in result("exporter")["results"]
                if r["host"] == _FIX and r["exporter"].startswith("lbtune exporter, its sample"))

# --- Ansible (bench/ansible.py) ------------------------------------------------------------

register("ansible.table")(lambda: md_table("ansible"))
figures({
    "ansible.hosts": lambda: meta("ansible")["hosts"],
    "ansible.sysctls": lambda: meta("ansible")["sysctls"],
    "ansible.forks": lambda: meta("ansible")["forks"],
    "ansible.rounds": lambda: meta("ansible")["rounds"],
})

# --- failover (bench/failover.py) ----------------------------------------------------------


def _fo(name: str) -> dict[str, Any]:
    return row("failover", name=name)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)  # as failover.md's "failed per kill"


def _fo_loss(name: str) -> float:
    return median(_fo(name)["failover_loss_s"])


register("failover.table")(lambda: md_table("failover"))
figures({
    "failover.lab_kernel": lambda: meta("failover")["lab_kernel"],
    "failover.kills": lambda: meta("failover")["kills"],
    "failover.default.loss": lambda: f"{_fo_loss('default'):.1f}",
    "failover.default.bound": lambda: f"{_fo('default')['master_down_s']:.1f}",
    "failover.default.failed_per_s": lambda: f"{_mean(_fo('default')['failover_failed']) / _fo_loss('default'):.0f}",  # noqa: E501
    "failover.default.max_gap_ms": lambda: f"{_fo('default')['max_gap_s'] * 1000:.0f}",
    "failover.fast.loss": lambda: f"{_fo_loss('fast'):.2f}",
    "failover.fast.loss_max": lambda: f"{max(_fo('fast')['failover_loss_s']):.2f}",
    "failover.fast.ratio": lambda: f"{_fo_loss('fast') / _fo_loss('default'):.2f}",
    "failover.fast.failed_per_kill": lambda: f"{_mean(_fo('fast')['failover_failed']):.0f}",
    "failover.fast.kept": lambda: (lambda r: f"{r['established'] - r['lost']} of "
                                   f"{r['established']}")(_fo("fast")),
    "failover.fast.max_gap_ms": lambda: f"{_fo('fast')['max_gap_s'] * 1000:.0f}",
    "failover.nosync.lost": lambda: (lambda r: f"{r['lost']} of {r['established']}")(
        _fo("fast-nosync")),
})

# --- IPVS reconcile (bench/ipvs.py) --------------------------------------------------------

_CMD = re.compile(r"(lbtune ipvs (?:apply|plan --debug|plan|serve)|python3 -c pass|ipvsadm -R)")
_BOLD = ("a third time", "plan (check mode", "through lbtune ipvs serve")


def _ipvs(size: str, case: str) -> dict[str, Any]:
    return row("ipvs", case=f"{size} {case}")


@register("ipvs.table")
def _ipvs_table() -> str:
    lines = ["| case | median ms | ratio to `ipvsadm -R` | operations | peak MiB |",
             "|---|---:|---:|---:|---:|"]
    for r in result("ipvs")["results"]:
        size, case = r["case"].split(" ", 1)
        if case == "ipvsadm -R":
            services, dests = (int(x) for x in size.split("x"))
            label = f"{n(services)} x {dests} ({n(services * (dests + 1))} objects): `ipvsadm -R`"
        else:
            label = _CMD.sub(r"`\1`", case)
        rat = ratio(r["ratio"])
        if size == "1000x10" and any(b in case for b in _BOLD):
            rat = f"**{rat}**"
        ops = "" if r["operations"] is None else str(r["operations"])
        peak = "" if r["peak_mib"] is None else f"{r['peak_mib']:.1f}"
        if case == "ipvsadm -R":
            peak = f"≤ {peak}"
        lines.append(f"| {label} | {r['median_ms']:.0f} | {rat} | {ops} | {peak} |")
    return "\n".join(lines)


@register("ipvs.adapt_table")
def _ipvs_adapt_table() -> str:
    first, second = meta("ipvs")["adapt"]["rounds"][:2]
    lines = ["| round | ms | table reads | per-service reads | weights written | locks |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, r in (("an agent says down: its weights go to 0", first),
                     ("the next round: nothing changes", second)):
        lines.append(f"| {label} | {r['ms']:.0f} | {r['table_reads']} | {r['service_reads']} | "
                     f"{r['changes']} | {r['locks']} |")
    return "\n".join(lines)


_NOOP = "lbtune ipvs apply a third time (repeated no-op: from the record)"
_EDIT = "lbtune ipvs apply, one weight edit"
_PLAN = "lbtune ipvs plan (check mode: from the record)"
_FULL_NOOP = "lbtune ipvs apply again (no-op: the full run, which records it)"
_EDIT_SERVE = "lbtune ipvs apply, one weight edit, through lbtune ipvs serve"
figures({
    "ipvs.commit": lambda: meta("ipvs")["commit"],
    "ipvs.lab_kernel": lambda: meta("ipvs")["lab_kernel"],
    "ipvs.rounds": lambda: meta("ipvs")["rounds"],
    "ipvs.big_rounds": lambda: meta("ipvs")["big_rounds"],
    "ipvs.load": lambda: "-".join(f"{x:.1f}" for x in meta("ipvs")["host_load_1min"]),
    "ipvs.1000.noop.ratio": lambda: ratio(_ipvs("1000x10", _NOOP)["ratio"]),
    "ipvs.1000.edit.ratio": lambda: ratio(_ipvs("1000x10", _EDIT)["ratio"]),
    "ipvs.1000.edit_serve.ratio": lambda: ratio(_ipvs("1000x10", _EDIT_SERVE)["ratio"]),
    "ipvs.1000.floor_ms": lambda: f"{_ipvs('1000x10', 'python3 -c pass (start-up floor)')['median_ms']:.0f}",  # noqa: E501
    "ipvs.1000.ipvsadm_s": lambda: f"{_ipvs('1000x10', 'ipvsadm -R')['median_ms'] / 1000:.1f}",
    "ipvs.adapt.within": lambda: "within" if max(
        r["ms"] for r in meta("ipvs")["adapt"]["rounds"][:2]) <= 2000 else "longer than",
    "ipvs.1000.server_mib": lambda: f"{meta('ipvs')['cases'][0]['server_kib'] / 1024:.1f}",
    "ipvs.10000.server_mib": lambda: f"{meta('ipvs')['cases'][1]['server_kib'] / 1024:.1f}",
    "ipvs.peak_floor_mib": lambda: f"{meta('ipvs')['peak_floor_kib'] / 1024:.1f}",
    "ipvs.1000.plan.ratio": lambda: ratio(_ipvs("1000x10", _PLAN)["ratio"]),
    "ipvs.1000.floor.ratio": lambda: ratio(
        _ipvs("1000x10", "python3 -c pass (start-up floor)")["ratio"]),
    "ipvs.1000.full_noop.ratio": lambda: ratio(_ipvs("1000x10", _FULL_NOOP)["ratio"]),
    "ipvs.10000.ipvsadm_s": lambda: f"{_ipvs('10000x5', 'ipvsadm -R')['median_ms'] / 1000:.0f}",
})

# --- director cluster (bench/cluster.py) ---------------------------------------------------
register("cluster.table")(lambda: md_table("cluster"))
register("cluster.throughput")(lambda: md_table("cluster", index=1))
figures({
    "cluster.commit": lambda: meta("cluster")["commit"],
    "cluster.lab_kernel": lambda: meta("cluster")["lab_kernel"],
    "cluster.kills": lambda: meta("cluster")["kills"],
})


# --- where a no-op apply spends its time (bench/ipvs_profile.py) ---------------------------

_PHASES = (  # docs label, key in fresh_ms or phases_ms of before, of now
    ("`python3 -c pass` (fresh process)", "python3 -c pass", "python3 -c pass"),
    ("imports of the apply path (fresh process, floor included)", "imports of the apply path",
     "imports of the apply path"),
    ("config parse (`load_config`: TOML and validation)", "config parse (load_config)",
     "config parse (load_config)"),
    ("netlink dump of the table (bytes only: 1 + 1,000 dumps)", "netlink dump (bytes only)",
     "netlink dump (bytes only)"),
    ("decoding the replies", "decode replies", "decode replies"),
    ("table read (dump + decode + objects, sorted)", "table read (dump + decode + objects)",
     "table read (dump + decode + objects)"),
    ("planner targets (`desired_targets`, every object)", "targets (desired_targets)",
     "targets (desired_targets)"),
    ("plan as apply makes it (`in_place` + the rest)", "",
     "plan without rows for services in place (in_place + make_plan)"),
    ("lock + journal check with an empty plan", "lock + journal check (apply_plan, empty)",
     "lock + journal check (apply_plan, empty)"),
    ("the whole no-op in one process (warm)", "in-process apply_director (all of the above)",
     "in-process apply_director (all of the above)"),
    ("the whole no-op, `lbtune ipvs apply` as a fresh process (the full run)",
     "lbtune ipvs apply (no-op), whole process", "lbtune ipvs apply (no-op), whole process"),
    ("the same without bytecode (every module compiled)", "",
     "lbtune ipvs apply (no-op), whole process, no bytecode"),
    ("the record's own check: the table's digest (dump + settings cut)", "",
     "the record's check: table digest (dump + settings cut, ipvs_memo.read_digest)"),
    ("**the repeated no-op, from the record, as a fresh process**", "",
     "lbtune ipvs apply (repeated no-op, from the record), whole process"),
)


def _phase_or_none(name: str, key: str) -> Optional[float]:
    d = result(name)
    v = d["fresh_ms"].get(key, d["phases_ms"].get(key))
    return None if v is None else float(v)


def _phase(name: str, key: str) -> float:
    v = _phase_or_none(name, key)
    if v is None:
        raise KeyError(f"{name}: no phase {key!r}")
    return v


def _floor(name: str) -> float:
    return _phase(name, "python3 -c pass")


@register("ipvs_profile.table")
def _profile_table() -> str:
    lines = ["| phase | before ms | x floor | now ms | x floor |", "|---|---:|---:|---:|---:|"]
    for label, before, now in _PHASES:
        cells = []
        for name, key in (("ipvs_profile_before", before), ("ipvs_profile", now)):
            v = _phase_or_none(name, key) if key else None
            x = "" if v is None else (f"{v / _floor(name):.1f}" if v / _floor(name) >= 1
                                      else f"{v / _floor(name):.2f}")
            ms = "" if v is None else f"{v:.0f}"
            if v is not None and label.startswith("**"):
                ms, x = f"**{ms}**", f"**{x}**"
            cells += [ms, x]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ms(name: str, key: str) -> str:
    return f"{_phase(name, key):.0f}"


figures({
    "ipvs_profile.before.floor_ms": lambda: _ms("ipvs_profile_before", "python3 -c pass"),
    "ipvs_profile.before.commit": lambda: meta("ipvs_profile_before")["commit"],
    "ipvs_profile.floor_ms": lambda: _ms("ipvs_profile", "python3 -c pass"),
    "ipvs_profile.digest_ms": lambda: _ms("ipvs_profile", _PHASES[12][2]),
    "ipvs_profile.dump_ms": lambda: _ms("ipvs_profile", "netlink dump (bytes only)"),
    "ipvs_profile.record_ms": lambda: _ms("ipvs_profile", _PHASES[13][2]),
    "ipvs_profile.imports_ms": lambda: f"{_phase('ipvs_profile', 'imports of the apply path') - _floor('ipvs_profile'):.0f}",  # noqa: E501
    "ipvs_profile.parse_ms": lambda: _ms("ipvs_profile", "config parse (load_config)"),
    "ipvs_profile.decode_ms": lambda: _ms("ipvs_profile", "decode replies"),
    "ipvs_profile.warm_ms": lambda: f"~{_r10(_phase('ipvs_profile', _PHASES[9][2]))}",
    "ipvs_profile.past_imports_ms": lambda: f"~{_r10(_phase('ipvs_profile', _PHASES[10][2]) - _phase('ipvs_profile', _PHASES[1][2]))}",  # noqa: E501
    "ipvs_profile.bytecode_ms": lambda: f"~{_r10(_phase('ipvs_profile', _PHASES[11][2]) - _phase('ipvs_profile', _PHASES[10][2]))}",  # noqa: E501
    "ipvs_profile.pre_plan_ratio": lambda: ratio(sum(_phase("ipvs_profile", k) for k in (
        "imports of the apply path", "config parse (load_config)", "decode replies"))
        / _ipvs("1000x10", "ipvsadm -R")["median_ms"]),
})


def _r10(v: float) -> str:
    return n(round(v, -1))

# --- the agent at 100,000 connections (bench/agent_scale.py) -------------------------------

register("agent_scale.table")(lambda: _agent_table())


def _agent_table() -> str:
    labels = [
        "before: `/proc/net/tcp{,6}` read whole, split per line (as committed it refused the "
        "file: past lbtune's 4 MiB read cap)",
        "`/proc/net/tcp{,6}` streamed, one regex (the fallback now)",
        "sock_diag without filters, every established socket decoded",
        "sock_diag: ESTABLISHED mask + port filter program, counted not decoded",
        None,
        "**the agent running**, a sample every 1 s for 30 s (count spaced out to 5 %)",
    ]
    lines = ["| how the agent counts | CPU ms per count | of which kernel | % of one core at the "
             "1 s interval |", "|---|---:|---:|---:|"]
    for label, r in zip(labels, result("agent_scale")["results"]):
        if label is None:
            continue
        cpu = f"{r['cpu_ms_median']:.1f}"
        core = f"{r['core_percent_at_1s']:.1f}"
        if label.startswith("**"):
            cpu, core = f"{cpu} per sample", f"**{core}**"
        lines.append(f"| {label} | {cpu} | {r['system_ms_median']:.1f} | {core} |")
    return "\n".join(lines)


def _agent(i: int) -> dict[str, Any]:
    r: dict[str, Any] = result("agent_scale")["results"][i]
    return r


figures({
    "agent_scale.count": lambda: n(meta("agent_scale")["connections"]),
    "agent_scale.sockets": lambda: n(2 * meta("agent_scale")["connections"]),
    "agent_scale.rounds": lambda: meta("agent_scale")["rounds"],
    "agent_scale.load": lambda: (lambda ld: f"{ld[0]:.0f}-{ld[1]:.0f}")(
        sorted(meta("agent_scale")["loadavg_1min_before_after"])),
    "agent_scale.vs_proc": lambda: f"{_agent(1)['cpu_ms_median'] / _agent(3)['cpu_ms_median']:.0f}",
    "agent_scale.vs_decoded": lambda: f"{_agent(2)['cpu_ms_median'] / _agent(3)['cpu_ms_median']:.0f}",  # noqa: E501
    "agent_scale.own_ms": lambda: f"{_agent(3)['user_ms_median']:.0f}",
    "agent_scale.count_core_pct": lambda: f"{_agent(3)['core_percent_at_1s']:.1f}",
    "agent_scale.running_core_pct": lambda: f"{_agent(5)['core_percent_at_1s']:.1f}",
    "agent_scale.window_s": lambda: f"{meta('agent_scale').get('window_seconds', 30):.0f}",
    "agent_scale.kernel_pct": lambda: f"{100 * _agent(3)['system_ms_median'] / _agent(3)['cpu_ms_median']:.0f}",  # noqa: E501
})

# --- adaptive weights (bench/adapt.py) -----------------------------------------------------


@register("adapt.table")
def _adapt_table() -> str:
    lines = ["| scheme | req/s | p50 ms | p99 ms | errors | shares rs1/rs2/rs3 "
             "| Mbit/s rs1/rs2/rs3 | conns rs1/rs2/rs3 | weights |",
             "|---|---:|---:|---:|---:|---|---|---|---|"]
    for r in result("adapt")["results"]:
        names = sorted(r["shares"])
        shares = "/".join(f"{100 * r['shares'][s]:.0f}" for s in names) + " %"
        mbit = "/".join(f"{r['egress_mbit'][s]:.1f}" for s in names)
        conns = "/".join(f"{r['connections'][s]:.0f}" for s in names)
        weights = ("/".join(f"{r['weights'][s]:.0f}" for s in names)
                   + f" ({r['weight_changes']} changes)") if r["weights"] else "1/1/1"
        lines.append(f"| {r['scheme']} | {r['rps']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | "
                     f"{r['errors']} | {shares} | {mbit} | {conns} | {weights} |")
    return "\n".join(lines)


def _ad(scheme: str) -> dict[str, Any]:
    return row("adapt", scheme=scheme)


figures({
    "adapt.lab_kernel": lambda: meta("adapt")["lab_kernel"],
    "adapt.rounds": lambda: {1: "one round", 2: "two rounds", 3: "three rounds"}.get(
        meta("adapt")["rounds"], f"{meta('adapt')['rounds']} rounds"),
    "adapt.duration": lambda: f"{meta('adapt')['duration']:.0f}",
    "adapt.best_static": lambda: meta("adapt")["ratios"]["best_static_rps"],
    "adapt.rps_ratio": lambda: f"{meta('adapt')['ratios']['rps_vs_best_static']:.3f}",
    "adapt.p99_ratio": lambda: f"{meta('adapt')['ratios']['p99_vs_best_static']:.2f}",
    "adapt.errors": lambda: _ad("adapt")["errors"],
    "adapt.rr.rps": lambda: f"{_ad('rr')['rps']:.0f}",
    "adapt.rr.p99_s": lambda: f"{_ad('rr')['p99_ms'] / 1000:.1f}",
    "adapt.wlc.rps": lambda: f"{_ad('wlc')['rps']:.0f}",
    "adapt.wlc.p99_s": lambda: f"{_ad('wlc')['p99_ms'] / 1000:.0f}",
    "adapt.adapt.p99_s": lambda: f"{_ad('adapt')['p99_ms'] / 1000:.1f}",
    "adapt.adapt.weights": lambda: "/".join(f"{v:.0f}" for _k, v in sorted(
        _ad("adapt")["weights"].items())),
    "adapt.adapt.changes": lambda: _ad("adapt")["weight_changes"],
    "adapt.goal": lambda: _adapt_goal(),
    "adapt.rr.timeouts": lambda: (lambda e: "no request hit wrk's 10 s timeout" if not e else
                                  f"{e} requests hit wrk's 10 s timeout")(_ad("rr")["errors"]),
    "adapt.median": lambda: _adapt_median(),
    "adapt.wlc.rs3_conns": lambda: f"{_ad('wlc')['connections']['rs3']:.0f}",
    "adapt.rr.rs3_conns": lambda: f"{_ad('rr')['connections']['rs3']:.0f}",
    "adapt.wlc.conns": lambda: (lambda c: f"{c['rs3']:.0f} vs {c['rs1']:.0f}")(
        _ad("wlc")["connections"]),
    "adapt.adapt.conns": lambda: (lambda c: f"{c['rs3']:.0f} vs " + (
        f"{c['rs1']:.0f}" if round(c["rs1"]) == round(c["rs2"])
        else f"{min(c['rs1'], c['rs2']):.0f}-{max(c['rs1'], c['rs2']):.0f}"))(
        _ad("adapt")["connections"]),
})

def _adapt_goal() -> str:
    r = meta("adapt")["ratios"]
    rps, p99 = r["rps_vs_best_static"] >= 1.0, r["p99_vs_best_static"] <= 1.0
    errors = _ad("adapt")["errors"] == 0
    if rps and p99 and errors:
        return "is met here, by " + ("a small margin" if r["rps_vs_best_static"] < 1.05
                                     else "a clear margin") + " on req/s and " + (
            "a large one" if r["p99_vs_best_static"] < 0.5 else "a small one") + " on p99"
    missed = [w for w, ok in (("req/s", rps), ("p99", p99), ("errors", errors)) if not ok]
    return f"is not met here on {' and '.join(missed)}" + (
        ", by less than 5 %" if missed == ["req/s"] and r["rps_vs_best_static"] > 0.95 else "")


def _adapt_median() -> str:
    a, w = _ad("adapt")["p50_ms"], _ad("wlc")["p50_ms"]
    if a > w:
        return (f"The price is the median: more connections wait on rs1 and rs2 (p50 {a:.0f} ms "
                f"vs {w:.0f} ms).")
    return f"The median did not pay for it in this run (p50 {a:.0f} ms vs {w:.0f} ms)."


_SETTLE = 10.0  # seconds into a round: changes before it are settling, after it the wobble


def _adapt_changes() -> list[list[float]]:
    """Per adapt round, the times (s into the round) of its weight changes (adapt-raw.json)."""
    doc = result("adapt-raw")
    raw = doc.get("raw", doc)
    return [[e["t"] for e in sc["events"] if e.get("kind") == "weight"]
            for sc in raw["schemes"] if sc["scheme"] == "adapt"]  # fmt: skip


figures({
    "adapt.settled_s": lambda: f"{max(max((t for t in ts if t < _SETTLE), default=0.0) for ts in _adapt_changes()):.0f}",  # noqa: E501
    "adapt.later_changes": lambda: (lambda k: {0: "never", 1: "once", 2: "twice"}.get(
        k, f"{k} times"))(sum(1 for ts in _adapt_changes() for t in ts if t >= _SETTLE)),
    "adapt.wobble": lambda: "smoothing and the deadband keep the load's wobble out" if sum(
        1 for ts in _adapt_changes() for t in ts if t >= _SETTLE) <= 3
    else "the smoothing and the deadband did not keep this run's wobble out",
    "adapt.first_poll_changes": lambda: sum(sum(1 for t in ts if ts and t == min(ts))
                                            for ts in _adapt_changes()),
})

# --- DR versus proxy (bench/lab.py) --------------------------------------------------------

register("lab.table")(lambda: md_table("lab"))
figures({
    "lab.rounds": lambda: meta("lab")["rounds"],
    "lab.duration": lambda: f"{meta('lab')['duration']:.0f}",
    "lab.dr_vs_proxy": lambda: _dr_vs_proxy(),
})

def _dr_vs_proxy() -> str:
    ratios = []
    for threads in sorted({r["threads"] for r in result("lab")["results"]}):
        dr, proxy = (row("lab", mode=m, threads=threads)["rps"] for m in ("dr", "proxy"))
        ratios.append(dr / proxy)
    lo, hi = min(ratios), max(ratios)
    return f"{lo:.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f}"


# --- monitor (bench/monitor.py) ------------------------------------------------------------

register("monitor.table")(lambda: md_table("monitor", 0, [
    "case", "CPU s per minute", "ratio to network-top"]))
figures({
    "monitor.rate": lambda: n(meta("monitor")["udp_rate"]),
    "monitor.nop.ratio": lambda: (
        f"{row('monitor', case='lbtune monitor --no-probes')['ratio_to_network_top']:.2f}x"),
})

# --- the monitor replaying a 48-CPU host (bench/monitor_replay.py) -------------------------

_BIG = "48-CPU host (fixture), probes"

register("monitor_replay.table")(lambda: md_table("monitor_replay", 0, [
    "case", "CPUs", "rx queues", "CPU s per minute", "each round", "ratio to the small host",
    "recording KB per tick", "KB per tick written whole (format /1)"]))


def _replay_tail() -> Optional[float]:
    """The long run's last three minutes, CPU s per minute (its kept history nearly full)."""
    long = meta("monitor_replay").get("long_cpu_per_minute") or []
    return sum(long[-3:]) / len(long[-3:]) if long else None


def _replay_verdict() -> str:
    """The 48-CPU replay against the goal: met when every round is within it (one round's
    figure moves by a tenth of the goal between runs) and so is the long run once the ten
    minutes of samples the monitor keeps have filled."""
    big, goal = row("monitor_replay", case=_BIG), meta("monitor_replay")["goal_cpu_per_minute"]
    rounds = big.get("rounds_cpu_per_minute") or [big["cpu_per_minute"]]
    tail = _replay_tail()
    if not all(r <= goal for r in rounds) or (tail is not None and tail > goal):
        return "Not met"
    if tail is None:
        return "Met in every round (no long run)"
    return f"Met in every round and after {meta('monitor_replay')['long_minutes']} minutes"


def _replay_long() -> str:
    m = meta("monitor_replay")
    lines = ["| minute | CPU s | RSS MB |", "|---:|---:|---:|"]
    long = zip(m.get("long_cpu_per_minute") or [], m.get("long_rss_mb") or [])
    for minute, (used, mb) in enumerate(long, 1):
        lines.append(f"| {minute} | {used:.2f} | {mb:.0f} |")
    return "\n".join(lines)


def _replay_threads() -> str:
    lines = ["| case | lbtune-feed | main (Textual) | other |", "|---|---:|---:|---:|"]
    for case, split in meta("monitor_replay")["threads_ms_per_tick"].items():
        lines.append(f"| {case} | {split['lbtune-feed']:.2f} | {split['main']:.2f} | "
                     f"{split['other']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def _replay_parts() -> str:
    lines = ["| part | CPU ms |", "|---|---:|"]
    for part, ms in meta("monitor_replay")["feed_parts_ms_per_tick"].items():
        lines.append(f"| {part} | {ms:.2f} |")
    return "\n".join(lines)


register("monitor_replay.threads")(_replay_threads)
register("monitor_replay.parts")(_replay_parts)
register("monitor_replay.long")(_replay_long)
figures({
    "monitor_replay.commit": lambda: meta("monitor_replay")["commit"],
    "monitor_replay.big": lambda: f"{row('monitor_replay', case=_BIG)['cpu_per_minute']:.2f}",
    "monitor_replay.goal": lambda: f"{meta('monitor_replay')['goal_cpu_per_minute']:.1f}",
    "monitor_replay.verdict": _replay_verdict,
    "monitor_replay.rounds": lambda: meta("monitor_replay")["rounds"],
    "monitor_replay.long_minutes": lambda: meta("monitor_replay")["long_minutes"],
    "monitor_replay.long_tail": lambda: f"{t:.2f}" if (t := _replay_tail()) is not None else "-",
    "monitor_replay.long_rss": lambda: (
        f"{(meta('monitor_replay').get('long_rss_mb') or [float('nan')])[-1]:.0f}"),
    "monitor_replay.big_ms": lambda: (
        f"{row('monitor_replay', case=_BIG)['cpu_per_minute'] / 60 * 1000:.0f}"),
    "monitor_replay.big_kb": lambda: f"{row('monitor_replay', case=_BIG)['kb_per_tick']:.0f}",
    "monitor_replay.big_kb_whole": lambda: (
        f"{row('monitor_replay', case=_BIG)['kb_per_tick_whole']:.0f}"),
})

# --- what the monitor's kept samples hold (bench/monitor_memory.py) ------------------------

_MEM_READ = "48-CPU host (fixture tree), read"
_MEM_REPLAY = "48-CPU host (fixture), replay"
_MEM_LIVE = "this host (2 CPUs), live"


def _mem(case: str, before: bool = False) -> dict[str, Any]:
    return row("monitor_memory_before" if before else "monitor_memory", name=case)


register("monitor_memory.table")(lambda: md_table("monitor_memory"))
register("monitor_memory.before_table")(lambda: md_table("monitor_memory_before"))
figures({
    "monitor_memory.before_commit": lambda: meta("monitor_memory_before")["commit"],
    "monitor_memory.before_read_mb": lambda: f"{_mem(_MEM_READ, True)['held_mb']:.0f}",
    "monitor_memory.before_replay_mb": lambda: f"{_mem(_MEM_REPLAY, True)['held_mb']:.0f}",
    "monitor_memory.before_irq_counts_bytes": lambda: (
        f"{_mem(_MEM_READ, True)['irq_counts_bytes']:,}"),
    "monitor_memory.read_irq_kb": lambda: (
        f"{_mem(_MEM_READ)['parts_kb_per_sample']['interrupts']:.0f}"),
    "monitor_memory.commit": lambda: meta("monitor_memory")["commit"],
    "monitor_memory.read_kb": lambda: f"{_mem(_MEM_READ)['held_kb_per_sample']:.0f}",
    "monitor_memory.read_mb": lambda: f"{_mem(_MEM_READ)['held_mb']:.0f}",
    "monitor_memory.replay_mb": lambda: f"{_mem(_MEM_REPLAY)['held_mb']:.0f}",
    "monitor_memory.irq_rows": lambda: _mem(_MEM_READ)["irq_rows"],
    "monitor_memory.irq_counts_bytes": lambda: f"{_mem(_MEM_READ)['irq_counts_bytes']:,}",
    "monitor_memory.live_snmp": lambda: _mem(_MEM_LIVE)["snmp_counters"],
})

# --- where the watchers' CPU goes (bench/watch_profile.py) ---------------------------------


def _profile_table(*parts: str) -> str:
    """The rows of bench/results/watch_profile.json whose part is one of PARTS."""
    lines = ["| part | what | CPU ms | share |", "|---|---|---:|---:|"]
    for r in result("watch_profile")["results"]:
        if r["part"] in parts:
            lines.append(f"| {r['part']} | {r['what']} | {r['ms']:.2f} | {r['share'] * 100:.0f}% |")
    return "\n".join(lines)


register("watch_profile.monitor")(
    lambda: _profile_table("monitor threads", "sample (live)", "frame (live)"))
register("watch_profile.scrape")(
    lambda: _profile_table("scrape (live)", "scrape (48-CPU fixture)"))


def _paced(part: str) -> dict[str, Any]:
    """The paced-scrape row of a scrape part of bench/results/watch_profile.json."""
    return next(r for r in result("watch_profile")["results"]
                if r["part"] == part and r["what"].startswith("the whole scrape, one every"))


figures({
    "watch_profile.live_paced_ratio": lambda: f"{_paced('scrape (live)')['share']:.1f}",
    "watch_profile.fixture_paced_ratio":
        lambda: f"{_paced('scrape (48-CPU fixture)')['share']:.1f}",
    "watch_profile.live_paced_ms": lambda: f"{_paced('scrape (live)')['ms']:.2f}",
    "watch_profile.fixture_paced_ms": lambda: f"{_paced('scrape (48-CPU fixture)')['ms']:.2f}",
    "exporter.live.lbtune_ms": lambda: f"{_exp('live', True)['cpu_ms_per_scrape']:.2f}",
    "watch_profile.commit": lambda: meta("watch_profile")["commit"],
    "watch_profile.monitor_cpu": lambda: f"{meta('watch_profile')['monitor_cpu_per_minute']:.2f}",
})

# --- probes (bench/probes.py) --------------------------------------------------------------

_PROBE_ROWS = (
    ("lbtune probe drops", "lbtune probe drops"),
    ("lbtune probe queues", "lbtune probe queues"),
    ("lbtune probe drops queues napi", "lbtune probe drops queues napi"),
    ("floor: an empty program on skb:kfree_skb", "floor: empty program, skb:kfree_skb"),
    ("floor: an empty program on the queues probe's tracepoints",
     "floor: empty program, queues' tracepoints"),
    ("bcc netqtop (counts nothing here)", "bcc netqtop"),
    ("floor: an empty tp_btf program on the queues probe's tracepoints",
     "floor: empty tp_btf program, queues' tracepoints"),
)


def _pr(name: str, workload: str = "full socket") -> dict[str, Any]:
    return row("probes", name=name, workload=workload)


@register("probes.table")
def _probes_table() -> str:
    lines = ["| case | loss of packets per CPU-second |", "|---|---:|"]
    lines += [f"| {label} | {_pr(name)['loss_cpu_pct']:.1f}% |" for label, name in _PROBE_ROWS]
    return "\n".join(lines)


_ALL = "lbtune probe drops queues napi"
_ALL_FLOOR = "floor: empty program, drops queues napi's tracepoints"
_COPY = "floor: device-name copy alone, queues' tracepoints"


@register("probes.programs")
def _probes_programs() -> str:
    """Per tracepoint: `drops queues napi`'s program and an empty one, both workloads."""
    lines = ["| workload | probe | tracepoint | ns/event | empty program ns/event | ratio |",
             "|---|---|---|---:|---:|---:|"]
    for workload in ("full socket", "closed port"):
        mine, floor = _pr(_ALL, workload)["programs"], _pr(_ALL_FLOOR, workload)["programs"]
        for tp, p in mine.items():
            f = floor.get(tp, {})
            if not p["events"] or p["ns_per_event"] is None or not f.get("ns_per_event"):
                continue  # a tracepoint this traffic does not pass
            probe = next(g for g, tps in _PROBE_TPS.items() if tp in tps)
            lines.append(f"| {workload} | {probe} | `{tp}` | {p['ns_per_event']:.1f} | "
                         f"{f['ns_per_event']:.1f} | {p['ns_per_event'] / f['ns_per_event']:.2f} |")
    return "\n".join(lines)


_PROBE_TPS = {"drops": ("skb:kfree_skb", "tcp:tcp_send_reset", "icmp:icmp_send"),
              "queues": ("net:net_dev_start_xmit", "net:netif_receive_skb_entry",
                         "net:napi_gro_receive_entry", "net:napi_gro_frags_entry",
                         "net:netif_receive_skb_list_entry", "net:netif_rx_entry"),
              "napi": ("napi:napi_poll",)}


def _goal(source: str, workload: str, probe: str) -> float:
    """`drops queues napi`'s ns/event of one probe in one workload (the goal rows)."""
    rows = [g for g in meta(source)["goal_rows"]
            if g["workload"] == workload and g["probe"] == probe]  # fmt: skip
    if len(rows) != 1:
        raise KeyError(f"{source}: {len(rows)} goal rows for {workload} {probe}")
    value: float = rows[0]["ns_per_event"]
    return value


def _icmp(source: str) -> float:
    """`drops queues napi`'s icmp_send program on the closed-port flood, ns/event."""
    value: float = row(source, name=_ALL, workload="closed port")["programs"][
        "icmp:icmp_send"]["ns_per_event"]
    return value


@register("probes.goal")
def _probes_goal() -> str:
    """`drops queues napi` per probe against the empty program on its tracepoints."""
    lines = ["| workload | probe | ns/event | empty program ns/event | ratio (goal ≤ 1.5) |",
             "|---|---|---:|---:|---:|"]
    for g in meta("probes")["goal_rows"]:
        lines.append(f"| {g['workload']} | {g['probe']} | {g['ns_per_event']:.1f} | "
                     f"{g['floor_ns']:.1f} | {g['ratio_to_floor']:.2f} |")
    return "\n".join(lines)


figures({
    "probes.rounds": lambda: meta("probes")["rounds"],
    "probes.seconds": lambda: f"{meta('probes')['seconds']:.0f}",
    "probes.commit": lambda: meta("probes")["commit"],
    "probes.load": lambda: "{} at the start, {} at the end".format(
        *(meta("probes")["host_load"][k][0] for k in ("start", "end"))),
    "probes.drops.ns": lambda: f"{_pr('lbtune probe drops')['ns_per_event']:.1f}",
    "probes.queues.ns": lambda: f"{_pr('lbtune probe queues')['ns_per_event']:.1f}",
    "probes.all.ns": lambda: f"{_pr(_ALL)['ns_per_event']:.1f}",
    "probes.closed.drops.ns": lambda: f"{_pr('lbtune probe drops', 'closed port')['ns_per_event']:.1f}",  # noqa: E501
    "probes.closed.all.ns": lambda: f"{_pr(_ALL, 'closed port')['ns_per_event']:.1f}",
    "probes.floor.ns": lambda: "{:.0f}-{:.0f}".format(*(lambda v: (min(v), max(v)))(
        [p["ns_per_event"] for w in ("full socket", "closed port")
         for p in _pr(_ALL_FLOOR, w)["programs"].values() if p["events"]])),
    "probes.closed.drops.goal_ns": lambda: f"{_goal('probes', 'closed port', 'drops'):.1f}",
    "probes.before.closed.drops.goal_ns": lambda: f"{_goal('probes_before', 'closed port', 'drops'):.1f}",  # noqa: E501
    "probes.closed.icmp.ns": lambda: f"{_icmp('probes'):.1f}",
    "probes.before.closed.icmp.ns": lambda: f"{_icmp('probes_before'):.1f}",
    "probes.copy.ns": lambda: f"{_pr(_COPY)['ns_pooled']:.1f}",
    "probes.queues_empty.ns": lambda: f"{_pr(_PROBE_ROWS[4][1])['ns_pooled']:.1f}",
    "probes.drops.loss": lambda: f"{_pr('lbtune probe drops')['loss_cpu_pct']:.1f}",
    "probes.kfree_floor.loss": lambda: f"{_pr(_PROBE_ROWS[3][1])['loss_cpu_pct']:.1f}",
    "probes.pps_spread": lambda: (lambda r: f"{max(r) / min(r):.1f}")(
        _pr("no probe")["rounds_pps"]),
    "probes.queues_floor": lambda: f"{_pr(_PROBE_ROWS[4][1])['loss_cpu_pct']:.1f}",
    "probes.typed_floor": lambda: f"{_pr(_PROBE_ROWS[6][1])['loss_cpu_pct']:.1f}",
    "probes.typed_empty.ns": lambda: f"{_pr(_PROBE_ROWS[6][1])['ns_pooled']:.1f}",
    "probes.queues.goal_ns": lambda: f"{_goal('probes', 'full socket', 'queues'):.1f}",
    "probes.closed.queues.goal_ns": lambda: f"{_goal('probes', 'closed port', 'queues'):.1f}",
    "probes.records.queues.goal_ns": lambda: f"{_goal('probes_records', 'full socket', 'queues'):.1f}",  # noqa: E501
    "probes.records.closed.queues.goal_ns": lambda: f"{_goal('probes_records', 'closed port', 'queues'):.1f}",  # noqa: E501
})

# --- tuning (bench/tune.py) ----------------------------------------------------------------

_RUNBOOK = "runbook netns: save originals, sysctl -p, sysctl -p originals"
_TWICE = "python3 -c pass, twice (start-up floor of apply + rollback)"


@register("tune.table")
def _tune_table() -> str:
    rows = (
        ("runbook: save originals, `sysctl -p`, `sysctl -p` originals", _RUNBOOK, None),
        ("`python3 -c pass`, twice", _TWICE, None),
        ("`lbtune --netns NS apply web --yes` + `lbtune --netns NS rollback`",
         "lbtune netns apply web + rollback", None),
        ("`lbtune --root <48-CPU fixture> plan lb-dr`", "lbtune fixture plan lb-dr",
         "(goal ≤ 150 ms)"),
        ("`lbtune --root <48-CPU fixture> apply lb-dr` + `rollback`",
         "lbtune fixture apply lb-dr + rollback", "(goal ≤ 150 ms per step)"),
    )
    lines = ["| case | median ms | ratio |", "|---|---:|---:|"]
    for label, case, goal in rows:
        r = row("tune", case=case)
        lines.append(f"| {label} | {r['median_ms']:.1f} | {goal or r['ratio']} |")
    return "\n".join(lines)


figures({
    "tune.rounds": lambda: meta("tune")["rounds"],
    "tune.twice_ratio": lambda: f"{row('tune', case=_TWICE)['ratio']:.1f}",
})

# --- the VM lab (bench/vm.py, bench/vm_rx.py, bench/lab_up_vm.py) --------------------------


def _vm_median(key: str) -> float:
    return median([r[key] for r in result("vm")["results"]])


figures({
    "vm.commit": lambda: meta("vm")["commit"],
    "vm.date": lambda: meta("vm")["date"][:10],
    "vm.loads": lambda: " and ".join(f"{r['load1']:.1f}" for r in result("vm")["results"]),
    "vm.rounds": lambda: meta("vm")["rounds"],
    "vm.boot_s": lambda: f"{_vm_median('boot_s'):.1f}",
    "vm.python_s": lambda: f"{_vm_median('python_s'):.1f}",
    "vm.show_s": lambda: f"{_vm_median('show_s'):.1f}",
    "vm.call_forked_s": lambda: f"{_vm_median('call_forked_s'):.2f}",
    "vm.call_fresh_s": lambda: f"{_vm_median('call_fresh_s'):.2f}",
    "vm.reboot_s": lambda: f"{_vm_median('reboot_s'):.1f}",
})


def _rx(ring: int, flows: int, rate: int) -> dict[str, Any]:
    return row("vm_rx", nic="vmxnet3", ring=ring, flows=flows, rate=rate)


figures({
    "vm_rx.ring32.oob": lambda: _rx(32, 64, 1000)["oob"],
    "vm_rx.ring32.sent": lambda: _rx(32, 64, 1000)["sent"],
    "vm_rx.ring32.burst1_lost": lambda: (lambda r: "none" if r["received"] == r["sent"]
                                         else n(r["sent"] - r["received"]))(_rx(32, 1, 1000)),
})

_LAB_UP_NOTES = {"lbtune lab up": "one guest at a time, whichever backend"}


@register("lab_up_vm.session")
def _lab_up_session() -> str:
    """The session as a terminal shows it: progress lines (stderr) before the result line."""
    lines = ["```"]
    for r in result("lab_up_vm")["results"]:
        cmd = f"$ {r['command']}"
        if r["exit_code"]:
            note = _LAB_UP_NOTES.get(r["command"], "")
            cmd = f"{cmd:<33}# exit {r['exit_code']}" + (f": {note}" if note else "")
        out = r["output"].rstrip("\n").splitlines()
        progress = [x for x in out if x.startswith("lbtune lab:")]
        lines += [cmd, *progress, *[x for x in out if not x.startswith("lbtune lab:")]]
    return "\n".join([*lines, "```"])


def _lab_up_boot() -> str:
    status = next(r for r in result("lab_up_vm")["results"] if r["command"].endswith("--json"))
    return f"{json.loads(status['output'])['boot_seconds']:.0f}"


figures({
    "lab_up_vm.boot_s": _lab_up_boot,
    "lab_up_vm.left": lambda: "Nothing was" if not meta("lab_up_vm")["left_in_tmpdir"] else
    f"{len(meta('lab_up_vm')['left_in_tmpdir'])} entries were",
    "lab_up_vm.date": lambda: meta("lab_up_vm")["date"][:10],
    "lab_up_vm.load": lambda: f"{meta('lab_up_vm')['load1']:.1f}",
})


# --- the regions ---------------------------------------------------------------------------


def files(root: Path = TOP) -> list[Path]:
    out: list[Path] = []
    for pattern in FILES:
        out += sorted(p for p in root.glob(pattern) if p.is_file())
    return out


def render_text(text: str) -> tuple[str, list[str]]:
    """TEXT with every region rendered, and the problems found (unknown keys, bad markers)."""
    problems: list[str] = []
    opened = [m for m in OPEN.finditer(text)]
    if len(opened) != 2 * len(REGION.findall(text)):
        problems.append("unbalanced gen markers")

    def sub(m: re.Match[str]) -> str:
        key, body = m.group("key"), m.group("body")
        fn = REGISTRY.get(key)
        if fn is None:
            problems.append(f"{key}: no such key")
            return m.group(0)
        try:
            value = fn()
        except (KeyError, IndexError, OSError, ValueError, TypeError) as e:
            problems.append(f"{key}: cannot render ({type(e).__name__}: {e})")
            return m.group(0)
        if body.startswith("\n"):
            value = "\n" + value.strip("\n") + "\n"
        return f"<!-- gen:{key} -->{value}<!-- /gen:{key} -->"

    return REGION.sub(sub, text), problems


def keys_used(root: Path = TOP) -> dict[str, list[str]]:
    """KEY -> the files whose regions name it."""
    used: dict[str, list[str]] = {}
    for path in files(root):
        for m in REGION.finditer(path.read_text()):
            used.setdefault(m.group("key"), []).append(str(path.relative_to(root)))
    return used


def differences(root: Path = TOP) -> list[str]:
    """One line per region whose text differs from its source (and per problem)."""
    out = []
    for path in files(root):
        text = path.read_text()
        new, problems = render_text(text)
        rel = path.relative_to(root)
        out += [f"{rel}: {p}" for p in problems]
        if new == text:
            continue
        old_regions = {(m.start(), m.group("key")): m.group("body") for m in REGION.finditer(text)}
        new_bodies = [m.group("body") for m in REGION.finditer(new)]
        for ((start, key), body), fresh in zip(old_regions.items(), new_bodies):
            if body != fresh:
                line = text.count("\n", 0, start) + 1
                shown = body.strip() if "\n" not in body.strip() else "(table)"
                want = fresh.strip() if "\n" not in fresh.strip() else "(table)"
                out.append(f"{rel}:{line}: {key}: the text says {shown!r}, the source {want!r}")
    return out


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 listing what differs")
    mode.add_argument("--write", action="store_true", help="rewrite the regions in place")
    mode.add_argument("--list", action="store_true", help="every KEY and where it is used")
    args = ap.parse_args(argv)
    if args.list:
        used = keys_used()
        for key in sorted(REGISTRY):
            print(f"{key}  {', '.join(sorted(set(used.get(key, [])))) or '(unused)'}")
        return 0
    if args.check:
        diff = differences()
        for line in diff:
            print(line)
        return 1 if diff else 0
    failed = False
    for path in files():
        text = path.read_text()
        new, problems = render_text(text)
        for p in problems:
            print(f"{path.relative_to(TOP)}: {p}", file=sys.stderr)
            failed = True
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(TOP)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
