"""The tiers rule (tests/tiers.py), proved on a tiny suite run by a real pytest in a subprocess:
under CI=true or LBTUNE_REQUIRE_TIERS=1 every skip fails with its reason, except a
`capability:` skip; outside CI both kinds skip."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.tiers import required, skip_reason

REPO = pathlib.Path(__file__).resolve().parents[2]

SUITE = '''
import pytest

needs_tool = pytest.mark.skipif(True, reason="frobtool not installed (make setup)")


@pytest.fixture
def lab():
    pytest.skip("lab kernel unavailable: /nonexistent is not executable")


def test_plain_skip():
    pytest.skip("needs root")


def test_capability_skip():
    pytest.skip("capability: this kernel has no TCP_LISTEN_OVERFLOW drop reason")


@needs_tool
def test_marker_skip():
    pass


def test_fixture_skip(lab):
    pass


@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert False


def test_passes():
    pass
'''

MODULE_SKIP = '''
import pytest

pytest.importorskip("no_such_module_lbtune", reason="the probes need bcc")


def test_never_collected():
    pass
'''


def _run(tmp_path: pathlib.Path, env: dict[str, str], *files: str) -> dict[str, tuple[str, str]]:
    """Run pytest (with only the tiers plugin) on the tiny suite; name -> (outcome, message)."""
    (tmp_path / "test_tiny.py").write_text(SUITE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    xml = tmp_path / "out.xml"
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "LBTUNE_REQUIRE_TIERS")}
    base["PYTHONPATH"] = str(REPO)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-p", "no:cacheprovider",
         "-q", f"--junitxml={xml}", "--rootdir", str(tmp_path), "-c", os.devnull,
         "--continue-on-collection-errors", *files],
        cwd=tmp_path, env={**base, **env}, capture_output=True, text=True, check=False,
        timeout=120,
    )  # fmt: skip
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):  # noqa: S314 (our pytest wrote it)
        name = case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("skipped", "failure", "error"):
                outcome, message = child.tag, child.get("message", "")
                if child.tag == "error" and message == "collection failure":
                    message = child.text or ""
        out[name] = (outcome, message)
    return out


@pytest.mark.parametrize("env", [{"CI": "true"}, {"LBTUNE_REQUIRE_TIERS": "1"}],
                         ids=["CI=true", "LBTUNE_REQUIRE_TIERS=1"])  # fmt: skip
def test_under_ci_a_skip_fails_with_its_reason_and_a_capability_stays_skipped(
    tmp_path: pathlib.Path, env: dict[str, str]
) -> None:
    r = _run(tmp_path, env, "test_tiny.py", "test_module_skip.py")
    assert r["test_plain_skip"] == ("failure", r["test_plain_skip"][1])
    assert r["test_plain_skip"][1].startswith("tier cannot run: needs root")
    assert r["test_capability_skip"] == (
        "skipped", "capability: this kernel has no TCP_LISTEN_OVERFLOW drop reason")
    # skipif markers and fixture skips fail at setup (pytest calls that an error)
    assert r["test_marker_skip"][0] == "error"
    assert "tier cannot run: frobtool not installed" in r["test_marker_skip"][1]
    assert r["test_fixture_skip"][0] == "error"
    assert "tier cannot run: lab kernel unavailable" in r["test_fixture_skip"][1]
    assert r["test_xfail"][0] == "skipped"  # an xfail is not a tier that cannot run
    assert r["test_passes"] == ("passed", "")
    # a module skipped at collection (importorskip) is a collection error, with the reason
    (module,) = [v for k, v in r.items() if "module_skip" in k]
    assert module[0] == "error" and "tier cannot run: the probes need bcc" in module[1]


@pytest.mark.parametrize("env", [{}, {"CI": "false", "LBTUNE_REQUIRE_TIERS": "0"}],
                         ids=["unset", "CI=false"])  # fmt: skip
def test_outside_ci_both_kinds_skip(tmp_path: pathlib.Path, env: dict[str, str]) -> None:
    r = _run(tmp_path, env, "test_tiny.py")
    assert r["test_plain_skip"] == ("skipped", "needs root")
    assert r["test_capability_skip"][0] == "skipped"
    assert r["test_marker_skip"] == ("skipped", "frobtool not installed (make setup)")
    assert r["test_fixture_skip"][0] == "skipped"
    assert r["test_passes"] == ("passed", "")


def test_required_reads_the_values_ci_systems_set() -> None:
    assert required({"CI": "true"}) and required({"CI": "True"}) and required({"CI": "1"})
    assert required({"CI": "woodpecker"}) and required({"LBTUNE_REQUIRE_TIERS": "1"})
    assert not required({}) and not required({"CI": "false"}) and not required({"CI": "0"})
    assert not required({"CI": "", "LBTUNE_REQUIRE_TIERS": "no"})


def test_skip_reason_strips_pytests_prefix() -> None:
    assert skip_reason(("f.py", 3, "Skipped: capability: no BTF")) == "capability: no BTF"
    assert skip_reason("plain") == "plain"


def test_the_lab_tier_fails_under_ci_when_the_lab_kernel_is_missing(tmp_path: pathlib.Path) -> None:
    """`CI=true LBTUNE_LAB_KERNEL=/nonexistent tox -e lab` must fail: one lab test, the real
    conftest (tests/lab/conftest.py's lab_kernel fixture), no boot needed to see it."""
    node = "tests/lab/test_uml_runner.py::test_lab_kernel_reports_uml_version"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI", "LBTUNE_"))}
    xml = tmp_path / "lab.xml"
    for extra, outcome in (({"CI": "true"}, "error"), ({}, "skipped")):
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", node,
             f"--junitxml={xml}"],
            cwd=REPO, env={**env, **extra, "LBTUNE_LAB_KERNEL": "/nonexistent"},
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert r.returncode == (1 if extra else 0), r.stdout + r.stderr
        (case,) = ET.parse(xml).getroot().iter("testcase")  # noqa: S314 (our pytest wrote it)
        (result,) = [c for c in case if c.tag in ("skipped", "failure", "error")]
        assert result.tag == outcome
        assert "lab kernel unavailable: no lab kernel: /nonexistent not found" in result.get(
            "message", "")
