"""`diagnose` without the probes: no root (a real unprivileged process), no bcc (the
documented LBTUNE_NO_BCC switch), --no-probes, and a recorded tree. Each report says in
every format whether the probes ran, and without them what is missing and how to get it,
in one line; the diagnosis itself runs on counters as before."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.conftest import DELL, HOSTS, fork_call, needs_root, run_cli

NOBODY = 65534


def _as_nobody(*args: str) -> Any:
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    return run_cli(*args)


@needs_root
def test_without_root_the_report_says_so_in_one_line_and_uses_counters():
    res = fork_call(_as_nobody, "diagnose", "--duration", "0.2", "--json")
    assert res.exit_code in (0, 1), res.stderr
    probes = res.json["probes"]
    assert probes["status"] == "unavailable"
    assert probes["reason"] == "not root" and "root" in probes["fix"]
    text = fork_call(_as_nobody, "diagnose", "--duration", "0.2")
    lines = [ln for ln in text.stdout.splitlines() if "counters only" in ln]
    assert len(lines) == 1 and "run lbtune as root" in lines[0], text.stdout
    assert "Traceback" not in text.stderr


@needs_root
def test_without_bcc_the_report_names_what_is_missing_and_the_fix(monkeypatch):
    monkeypatch.setenv("LBTUNE_NO_BCC", "1")
    res = run_cli("diagnose", "--duration", "0.2", "--format", "md")
    assert res.exit_code in (0, 1), res.stderr
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("- probes:")]
    line = line.replace("\\", "")  # Markdown escapes
    assert "switched off (LBTUNE_NO_BCC=1)" in line and "python3-bpfcc" in line, line
    assert "unset LBTUNE_NO_BCC" in line
    doc = run_cli("diagnose", "--duration", "0.2", "--json").json
    assert doc["probes"]["status"] == "unavailable" and doc["probes"]["drops"] == []
    html = run_cli("diagnose", "--duration", "0.2", "--format", "html").stdout
    assert "probes counters only" in html


def test_no_probes_says_off():
    res = run_cli("diagnose", "--duration", "0.2", "--no-probes", "--json")
    assert res.exit_code in (0, 1), res.stderr
    assert res.json["probes"]["status"] == "off"
    text = run_cli("diagnose", "--duration", "0.2", "--no-probes").stdout
    assert "probes: off (--no-probes): counters only" in text


@pytest.mark.parametrize("fmt", ["text", "md", "html", "json"])
def test_a_recorded_tree_says_the_probes_did_not_run(fmt):
    res = run_cli("--root", str(HOSTS / DELL), "diagnose", "--format", fmt)
    assert res.exit_code in (0, 1), res.stderr
    if fmt == "json":
        assert res.json["probes"]["status"] == "not-applicable"
    else:
        assert "not run on a recorded tree" in res.stdout
