"""The engine against real per-namespace sysctls: apply, verify, rollback restores exactly."""

from __future__ import annotations

from tests.netns.conftest import in_netns

# Per-network-namespace sysctls (safe to change in a throwaway namespace).
TARGETS = {
    "net.core.somaxconn": "8192",
    "net.ipv4.tcp_fin_timeout": "15",
    "net.ipv4.ip_local_port_range": "10240 65000",
    "net.ipv4.tcp_max_syn_backlog": "8192",
    "net.ipv4.tcp_tw_reuse": "1",
    "net.ipv4.conf.all.rp_filter": "2",
}


def read_all() -> dict[str, str]:
    out = {}
    for key in TARGETS:
        with open("/proc/sys/" + key.replace(".", "/"), "rb") as f:
            out[key] = f.read().decode()
    return out


def round_trip(state_dir: str) -> dict[str, object]:
    from lbtune.host.host import Host
    from lbtune.tune import engine
    from lbtune.tune.journal import StateDir
    from lbtune.tune.knobs.sysctl import SysctlKnob
    from lbtune.tune.plan import Target, make_plan

    host = Host.open("/", netns="test")
    state = StateDir(host, override=state_dir)
    targets = [Target(SysctlKnob(k), v, "test") for k, v in TARGETS.items()]
    before = read_all()
    plan = make_plan(host, "netns-test", targets)
    journal = engine.apply_plan(host, plan, state)
    during = read_all()
    verdicts = [v.status.value for v in engine.verify_targets(host, targets)]
    second = make_plan(host, "netns-test", targets).to_apply
    engine.rollback(host, state)
    after = read_all()
    return {
        "before": before,
        "during": during,
        "after": after,
        "verdicts": verdicts,
        "second": len(second),
        "changed": len(plan.to_apply),
        "journal": journal.id if journal else None,
    }


def test_apply_verify_rollback_in_namespace(netns, tmp_path):
    host_before = read_all()
    res = in_netns(netns, round_trip, str(tmp_path / "state"))
    assert res["changed"] == len(TARGETS)
    for key, value in TARGETS.items():
        assert res["during"][key].split() == value.split(), key
    assert set(res["verdicts"]) == {"ok"}
    assert res["second"] == 0
    assert res["after"] == res["before"]  # byte-identical, tabs and newline included
    assert read_all() == host_before  # the host's own values never moved
