"""`lint_profile`: the runbook profile is flagged with reasons, the role profiles are clean."""

from __future__ import annotations

import pytest

from lbtune.host.inventory import HostInventory
from lbtune.tune.lint import lint_profile
from lbtune.tune.profile import load_profile, parse_profile_text

ROLES = ["base", "web", "lb-dr", "lb-proxy", "realserver-dr", "loadgen"]


@pytest.mark.parametrize("name", ROLES)
def test_role_profiles_lint_clean(name: str, dell: HostInventory) -> None:
    p = load_profile(name)
    assert lint_profile(p) == []
    assert lint_profile(p, dell, "ens1f0np0") == []


def test_runbook_is_flagged_with_reasons() -> None:
    findings = {f.key: f for f in lint_profile(load_profile("l2dsr-bmt-runbook"))}
    expected = {
        "sysctl.net.core.somaxconn": "min(listen() backlog, somaxconn)",
        "sysctl.net.ipv4.tcp_max_syn_backlog": "syncookies",
        "sysctl.net.core.netdev_max_backlog": "latency",
        "sysctl.net.core.netdev_budget": "netdev_budget_usecs",
        "sysctl.net.core.dev_weight": "monopolise",
        "sysctl.net.ipv4.tcp_fin_timeout": "default 60",
        "sysctl.vm.swappiness": "load balancer",
        "sysctl.net.netfilter.nf_conntrack_max": "hash size",
        "sysctl.net.ipv6.conf.all.disable_ipv6": "breaks",
        "nic.data.rings": "power of two",
        "cmdline.isolcpus": "CPU 0",
    }
    for key, needle in expected.items():
        assert key in findings, key
        assert needle in findings[key].reason, (key, findings[key].reason)
    assert findings["sysctl.net.core.somaxconn"].desired == "500000"
    assert all(f.level.value in ("fail", "warn") for f in findings.values())


def test_runbook_against_the_host(dell: HostInventory) -> None:
    findings = lint_profile(load_profile("l2dsr-bmt-runbook"), dell, "ens1f0np0")
    iso = next(f for f in findings if f.key == "cmdline.isolcpus")
    assert "isolates CPU 0" in iso.reason and iso.desired == "0-12"
    assert not any(f.level.value == "fail" for f in findings)  # it resolves on this host


def _lint(text: str, inv: HostInventory | None = None, iface: str | None = None):
    return lint_profile(parse_profile_text(text, "t.toml", "t"), inv, iface)


def test_tw_recycle_is_an_error() -> None:
    (f,) = _lint('[sysctl]\n"net.ipv4.tcp_tw_recycle" = { value = 1, reason = "r" }\n')
    assert f.level.value == "fail" and "4.12" in f.reason


def test_syn_backlog_without_syncookies() -> None:
    (f,) = _lint(
        '[sysctl]\n"net.ipv4.tcp_max_syn_backlog" = { value = 262144, reason = "r" }\n'
        '"net.ipv4.tcp_syncookies" = { value = 0, reason = "r" }\n'
    )
    assert "syncookies off" in f.reason


def test_conntrack_with_too_few_buckets() -> None:
    (f,) = _lint(
        '[sysctl]\n"net.netfilter.nf_conntrack_max" = { value = 1048576, reason = "r" }\n'
        '"net.netfilter.nf_conntrack_buckets" = { value = 65536, reason = "r" }\n'
    )
    assert "16 entries per hash bucket" in f.reason
    assert not _lint(
        '[sysctl]\n"net.netfilter.nf_conntrack_max" = { value = 262144, reason = "r" }\n'
        '"net.netfilter.nf_conntrack_buckets" = { value = 65536, reason = "r" }\n'
    )


def test_rings_above_driver_max(dell: HostInventory) -> None:
    text = '[nic."data"]\nrings = { value = 16384, reason = "r" }\n'
    assert not _lint(text)
    findings = _lint(text, dell, "ens1f0np0")
    assert any(f.level.value == "fail" and "driver maximum" in f.reason for f in findings)
    assert any(f.key == "profile" and "does not resolve" in f.reason for f in findings)


def test_irq_affinity_without_irqbalance_handling() -> None:
    text = '[nic."data"]\nirq_affinity = { strategy = "local", reason = "r" }\n'
    (f,) = _lint(text)
    assert f.key == "irqbalance" and "move the queue IRQs" in f.reason
    assert not _lint(text + '[irqbalance]\nstate = { value = "stopped", reason = "r" }\n')


def test_too_few_housekeeping_cores(dell: HostInventory) -> None:
    text = '[cmdline]\nisolcpus = { value = "1-23,25-47", reason = "r" }\n'
    (f,) = _lint(text, dell)
    assert "leaves 1 housekeeping core(s) (0,24)" in f.reason


def test_lb_role_lowering_forwarding() -> None:
    findings = _lint(
        '[profile]\nrole = "lb-dr"\n[sysctl]\n"net.ipv4.ip_forward" = { value = 0, reason = "r" }\n'
    )
    assert [f.level.value for f in findings] == ["fail"]


def test_runbook_rss_check_is_taken_apart() -> None:
    """The runbook checks `ethtool -n p2p2 rx-flow-hash tcp4` only: udp4 is left as is."""
    findings = {f.key: f for f in lint_profile(load_profile("l2dsr-bmt-runbook"))}
    assert "udp4 stays at the driver's default" in findings["nic.data.rss_hash"].reason


def test_rss_and_flow_rule_lines_taken_apart() -> None:
    findings = {f.key: f for f in _lint(
        '[nic.eth0]\n'
        'rss_hash = { tcp4 = "sdfn", udp4 = "sd", reason = "r" }\n'
        'rss_indir = { value = "equal 8", reason = "r" }\n'
        'channels = { value = 16, reason = "r" }\n'
        'irq_affinity = { strategy = "local", reason = "r" }\n'
        'flow_rules = { rules = ["flow-type udp4 dst-port 53", "flow-type tcp4 dst-port 179"],'
        ' queue = 1, reason = "r" }\n'
    )}  # fmt: skip
    assert "every flow between two addresses lands on one queue" in findings[
        "nic.eth0.rss_hash.udp4"].reason  # fmt: skip
    assert "nic.eth0.rss_hash.tcp4" not in findings
    assert "refuses `ethtool -L`" in findings["nic.eth0.rss_indir"].reason
    assert "changes the channel count too" in findings["nic.eth0.rss_indir"].reason
    assert findings["nic.eth0.flow_rules"].desired == "flow-type udp4 dst-port 53"
    assert "housekeeping" in findings["nic.eth0.flow_rules.queue"].reason
    clean = _lint(
        '[nic.eth0]\nrss_hash = { tcp4 = "sdfn", udp4 = "sdfn", reason = "r" }\n'
        'rss_indir = { value = "data-queues", reason = "r" }\n'
        'flow_rules = { rules = ["flow-type tcp4 dst-port 179"], queue = "control", '
        'reason = "r" }\n'
    )
    assert clean == []
