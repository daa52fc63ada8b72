"""Issue 20 item 18: from a namespace, `[irqbalance] ban` is not resolved. irqbalance is
host-global and never changed from a namespace, so a ban that selects no CPU there (lb-dr's
`data_cpus + isolated` on a 2-CPU host) must not stop the plan; on the host it still does."""

from __future__ import annotations

# `online - online` selects no CPU on any host, as lb-dr's ban does on a 2-CPU one.
PROFILE = """[profile]
name = "ban"
[irqbalance]
ban = { value = "online - online", reason = "r" }
[sysctl]
"net.core.somaxconn" = { value = 8192, reason = "r" }
"""


def test_an_irqbalance_ban_that_selects_nothing_plans_from_a_namespace(cli, netns, tmp_path):
    prof = tmp_path / "ban.toml"
    prof.write_text(PROFILE)
    host = cli("plan", str(prof))
    assert host.exit_code == 2 and "irqbalance.ban" in host.stderr, host
    r = cli("--netns", netns, "plan", str(prof), "--json")
    assert r.exit_code == 0, r.stderr
    rows = {(c["kind"], c["object"]): c["action"] for c in r.json["changes"]}
    assert rows[("sysctl", "net.core.somaxconn")] == "change"
    assert ("irqbalance_ban", "banned_cpus") not in rows  # not resolved, never applied
