"""Channels and RPS in one profile on a real veth: per-queue knobs are planned against the
queue count the plan produces (hardening issue item 8)."""

from __future__ import annotations

import pathlib

from tests.conftest import run_cli
from tests.netns.conftest import ip

PROFILE = """[profile]
name = "chrps"
[nic.v0]
channels = { value = 4, reason = "one queue per core" }
rps = { cpus = "0", reason = "steer to CPU 0" }
"""


def test_channels_then_rps_verifies_and_second_apply_plans_nothing(veth4, tmp_path, monkeypatch):
    ns = veth4
    ip("netns", "exec", ns, "ethtool", "-L", "v0", "rx", "1", "tx", "1")
    prof = tmp_path / "chrps.toml"
    prof.write_text(PROFILE)
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))

    r = run_cli("--netns", ns, "apply", str(prof), "--json")
    assert r.exit_code == 0, r.stderr
    rows = {(c["kind"], c["object"]): c for c in r.json["changes"]}
    for q in range(4):  # rx-1..3 do not exist before the channel change
        assert rows[("rps_cpus", f"v0:rx-{q}")]["action"] == "change", rows
    assert rows[("rps_cpus", "v0:rx-3")]["current"] is None

    v = run_cli("--netns", ns, "verify", str(prof), "--json")
    assert v.exit_code == 0, v.stdout + v.stderr
    assert {k["status"] for k in v.json["knobs"]} == {"ok"}

    again = run_cli("--netns", ns, "plan", str(prof), "--json")
    assert [c for c in again.json["changes"] if c["action"] != "ok"] == []

    rb = run_cli("--netns", ns, "rollback")
    assert rb.exit_code == 0, rb.stderr
    queues = ip("netns", "exec", ns, "ls", "/sys/class/net/v0/queues").split()
    assert queues == ["rx-0", "tx-0"]
    assert pathlib.Path(tmp_path / "state").is_dir()
