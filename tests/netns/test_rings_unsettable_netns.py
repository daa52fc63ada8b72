"""A live NIC without rings (veth: `ethtool -g` is not supported) in a throwaway namespace:
`rings = "max"` and `rings = 512` are planned, applied and verified the same way (issue 19
item 2): "missing" rows with "unsettable: the driver reports no ring sizes", exit 0, nothing
changed (the fixture-tree cases are tests/cli/test_rings_unsettable.py)."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from tests.conftest import run_cli


def test_veth_rings_max_and_a_number_have_one_outcome(
    netns: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    subprocess.run(["ip", "-n", netns, "link", "add", "rg0", "type", "veth", "peer", "name",
                    "rg1"], check=True)  # fmt: skip
    # the kernel's own answer: no ring parameters on veth
    g = subprocess.run(["ip", "netns", "exec", netns, "ethtool", "-g", "rg0"],
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert g.returncode != 0 and "not supported" in g.stderr, (g.returncode, g.stderr)
    outcomes = set()
    for value in ('"max"', "512"):
        name = "rings-" + value.strip('"')
        prof = tmp_path / f"{name}.toml"
        prof.write_text(f'[profile]\nname = "{name}"\n[nic."rg0"]\n'
                        f'rings = {{ value = {value}, reason = "r" }}\n')  # fmt: skip
        plan = run_cli("--netns", netns, "plan", str(prof), "--json")
        assert plan.exit_code == 0, plan.stderr
        rows = tuple((c["object"], c["action"], c["note"]) for c in plan.json["changes"])
        assert [r[:2] for r in rows] == [("rg0:rx", "missing"), ("rg0:tx", "missing")], rows
        assert all(r[2] == "unsettable: the driver reports no ring sizes (ethtool -g is not "
                   "supported)" for r in rows), rows  # fmt: skip
        applied = run_cli("--netns", netns, "apply", str(prof), "--yes")
        assert applied.exit_code == 0 and "nothing to change" in applied.stdout, applied.stderr
        verify = run_cli("--netns", netns, "verify", str(prof), "--json")
        assert verify.exit_code == 0, verify.stdout + verify.stderr
        statuses = {k["status"] for k in verify.json["knobs"]}
        assert statuses == {"missing"}, verify.json
        outcomes.add((rows, plan.exit_code, applied.exit_code, verify.exit_code))
    assert len(outcomes) == 1, outcomes
