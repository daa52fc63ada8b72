"""The fleet tier: the exporter scraped by Debian's Prometheus, its alert rules, promtool; the
Ansible collection (its deploy role against a systemd-nspawn container: tests/fleet/nspawn.py).

Everything here runs in the tox `py` env. Tests that need a network namespace or to run the
real Prometheus server need root: without it they skip, and under CI that skip fails like any
tier that cannot run (tests/tiers.py; root is not a kernel capability). The tools themselves
come from `scripts/setup.sh` (Debian's `prometheus` package has `prometheus` and `promtool`).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
RULES = REPO / "docs" / "alerts" / "lbtune.rules.yml"
LBTUNE = [sys.executable, "-m", "lbtune"]


def promtool(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip


def check_metrics(text: str) -> None:
    """`promtool check metrics` passes on `text` (no lint problem, no parse error)."""
    r = promtool("check", "metrics", stdin=text)
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (
        r.stdout + r.stderr
    )


def parse(text: str) -> dict[str, Any]:
    """{family: {frozenset(labels): value}} with the Prometheus project's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
