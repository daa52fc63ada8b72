"""The tiers rule (tests/tiers.py), proved on a tiny suite run by a real pytest in a subprocess:
under CI=true or LBTUNE_REQUIRE_TIERS=1 every skip fails with its reason, except a skip for a
documented kernel capability; outside CI every kind skips. The documented list is the one
docs/testing.md shows, and every `capability:` reason in tests/ is on it."""

from __future__ import annotations

import ast
import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.tiers import CAPABILITIES, CAPABILITY, documented_capability, required, skip_reason

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


def test_root_called_a_capability():
    # the reason split in the source so a grep for misused capability: skips does not flag
    # this test of the rule itself
    pytest.skip("capability:" " root (network namespaces)")


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
    # root is not a kernel capability, whatever the reason says
    assert r["test_root_called_a_capability"][0] == "failure"
    assert r["test_root_called_a_capability"][1].startswith(
        "tier cannot run: capability:" " root (network namespaces) (not a kernel capability")
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
    assert r["test_root_called_a_capability"][0] == "skipped"
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


def test_the_documented_capabilities_are_the_ones_the_tiers_accept() -> None:
    text = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    listed = re.findall(r"^- `(capability: [^`]+)`", text, flags=re.M)
    assert sorted(listed) == sorted(CAPABILITIES)


def _capability_reasons(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, text) of each string in `path` that starts with "capability:" (an f-string by
    its leading literal part)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr) and node.values:
            node = node.values[0]
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.startswith(CAPABILITY)):  # fmt: skip
            out.append((node.lineno, node.value))
    return out


def test_every_capability_skip_in_the_tests_names_a_documented_capability() -> None:
    """A reason that starts "capability:" names a documented kernel capability (root, a
    program or the host/guest split would pass as one under CI otherwise)."""
    tests = REPO / "tests"
    here = pathlib.Path(__file__).resolve()
    found, wrong = 0, []
    for path in sorted(tests.rglob("*.py")):
        if path.resolve() in (here, tests / "tiers.py"):  # the rule's own examples and list
            continue
        for line, text in _capability_reasons(path):
            found += 1
            if not documented_capability(text):
                wrong.append(f"{path.relative_to(REPO)}:{line}: {text!r}")
    assert found >= len(CAPABILITIES)  # the scan sees the skips (6 kinds, 7 places today)
    assert not wrong, "undocumented capability skips:\n" + "\n".join(wrong)
