"""`lbtune ipvs agent --misc-check URL` against hostile servers: keepalived's misc_dynamic reads
exit 2..255 as weight + 2, so every failure must exit 1 (an internal error's 70 would be
weight 68 for a server that failed its check), and a server that drips its answer is cut
by the total deadline (`--timeout`), not waited on for ever.

Each check runs as a real process (as keepalived runs it); the 120 s limit only keeps a
hang from stalling the suite: the assertion is the exit code. The same cases go through a
real keepalived in the lab (tests/lab/test_misc_check_keepalived_lab.py).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.hostile_http import GOOD_WEIGHT, Hostile


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbtune", "ipvs", "agent", *args],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def _one_line_error(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1, r.stderr


def test_a_good_agent_sets_its_weight_and_unknown_keeps_it():
    with Hostile("good") as srv:
        assert _check("--misc-check", srv.url).returncode == 2 + GOOD_WEIGHT
    with Hostile("unknown") as srv:  # the agent could not read its listeners: not an outage
        assert _check("--misc-check", srv.url).returncode == 0


@pytest.mark.parametrize("kind", ["down", "bad_status", "http09", "huge_headers", "deep_json",
                                  "deep_json_small", "not_json", "status_500", "drip_header",
                                  "drip_body"])  # fmt: skip
def test_every_bad_answer_fails_the_check(kind):
    with Hostile(kind) as srv:
        r = _check("--misc-check", srv.url, "--timeout", "1")
    assert r.returncode == 1, (kind, r.returncode, r.stderr)
    if kind != "down":
        _one_line_error(r)
    if kind.startswith("drip"):
        assert "within 1 s" in r.stderr  # the total deadline cut it


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/\x01",  # a control character
    "http://127.0.0.1:9/\x7f",
    "http://[::1/",  # a bad IPv6 literal
    "http://[zz::1]:80/",
    "http://127.0.0.1:99999/",
    "http://user@127.0.0.1:9/",
    "ftp://127.0.0.1/",
    "http:///",
])  # fmt: skip
def test_bad_urls_fail_the_check(url):
    r = _check("--misc-check", url)
    assert r.returncode == 1, (url, r.stderr)
    _one_line_error(r)


@pytest.mark.parametrize("args", [
    ("--timeout", "inf"), ("--timeout", "1e300"), ("--timeout", "nan"), ("--timeout", "-1"),
    ("--timeout", "0"), ("--timeout", "abc"),  # the last one is click's own usage error
    ("--bogus-option",),
])  # fmt: skip
def test_bad_options_fail_the_check(args):
    with Hostile("good") as srv:
        r = _check("--misc-check", srv.url, *args)
    assert r.returncode == 1, (args, r.stderr)
    assert "Traceback" not in r.stderr


def test_the_json_document_of_a_failed_check_says_exit_1():
    with Hostile("http09") as srv:
        r = _check("--misc-check", srv.url, "--json")
    assert r.returncode == 1
    assert '"exit": 1' in r.stdout
