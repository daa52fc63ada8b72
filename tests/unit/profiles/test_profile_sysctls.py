"""Sysctls in profiles (issue 20 item 18): values are type-checked when the profile is read
(integers, integer vectors, and text only for the sysctls that take text); a key this kernel
does not have is refused at once, naming it; irqbalance is not resolved from a namespace."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.inventory import LazyInventory
from lbtune.tune.profile import parse_profile_text, resolve
from tests.conftest import KVM, TINY, copy_host, run_cli


def _sysctl(key: str, value: str) -> str:
    return f'[profile]\nname = "t"\n[sysctl]\n"{key}" = {{ value = {value}, reason = "r" }}\n'


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("net.core.somaxconn", '"abc; rm -rf /"'),
        ("net.core.somaxconn", '"4096 x"'),
        ("vm.swappiness", '"ten"'),
        ("net.ipv4.conf.all.rp_filter", '"$(reboot)"'),
        ("net.ipv4.tcp_congestion_control", '"bbr; reboot"'),
        ("net.ipv4.tcp_congestion_control", '"name_longer_than_16"'),
        ("net.core.default_qdisc", '"fq codel"'),
        ("net.ipv4.ip_local_reserved_ports", '"8080,x"'),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_when_read(key: str, value: str) -> None:
    with pytest.raises(BadInput, match=key.replace(".", r"\.")):
        parse_profile_text(_sysctl(key, value), "t.toml")


@pytest.mark.parametrize(
    ("key", "value", "stored"),
    [
        ("net.core.somaxconn", "8192", "8192"),
        ("net.core.somaxconn", '"8192"', "8192"),
        ("net.ipv4.tcp_rmem", '"4096  131072 16777216"', "4096 131072 16777216"),
        ("kernel.printk", '"4 4 1 7"', "4 4 1 7"),  # any vector of integers
        ("net.ipv4.tcp_congestion_control", '"bbr"', "bbr"),
        ("net.ipv4.tcp_allowed_congestion_control", '"reno cubic bbr"', "reno cubic bbr"),
        ("net.core.default_qdisc", '"fq_codel"', "fq_codel"),
        ("net.core.rps_default_mask", '"ff,ffffffff"', "ff,ffffffff"),
        ("net.ipv4.ip_local_reserved_ports", '"8080,9000-9100"', "8080,9000-9100"),
    ],
)
def test_values_of_the_right_type_are_kept(key: str, value: str, stored: str) -> None:
    assert parse_profile_text(_sysctl(key, value), "t.toml").sysctl[key].value == stored


def test_a_text_value_plans_and_applies_nowhere(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "t.toml"
    prof.write_text(_sysctl("net.core.somaxconn", '"abc; rm -rf /"'))
    before = (root / "proc/sys/net/core/somaxconn").read_text()
    for cmd in ("plan", "apply", "verify"):
        r = run_cli("--root", str(root), cmd, str(prof))
        assert r.exit_code == 2 and "somaxconn" in r.stderr, (cmd, r)
        assert len(r.stderr.strip().splitlines()) == 1
    assert (root / "proc/sys/net/core/somaxconn").read_text() == before


def test_a_sysctl_this_kernel_lacks_is_refused_by_plan_apply_and_verify(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "t.toml"
    prof.write_text(
        '[profile]\nname = "t"\n[sysctl]\n'
        '"net.core.somaxconn" = { value = 8192, reason = "r" }\n'
        '"net.core.no_such_knob" = { value = 1, reason = "r" }\n'
    )
    before = (root / "proc/sys/net/core/somaxconn").read_text()
    for cmd in ("plan", "apply", "verify"):
        r = run_cli("--root", str(root), cmd, str(prof))
        assert r.exit_code == 2, (cmd, r)
        assert r.stderr.strip() == (
            "lbtune: sysctl net.core.no_such_knob: no such sysctl on this host"
        ), (cmd, r.stderr)
    assert (root / "proc/sys/net/core/somaxconn").read_text() == before
    assert not (tmp_path / "state" / "journal").exists() or not any(
        (tmp_path / "state" / "journal").iterdir()
    )


def test_twenty_thousand_unknown_keys_are_refused_at_the_first(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "many.toml"
    keys = "".join(f'"net.core.zz{i}" = {{ value = 1, reason = "r" }}\n' for i in range(20_000))
    prof.write_text('[profile]\nname = "many"\n[sysctl]\n' + keys)
    r = run_cli("--root", str(root), "plan", str(prof))
    assert r.exit_code == 2 and "sysctl net.core.zz0: no such sysctl" in r.stderr, r


def test_an_absent_family_stays_missing_and_a_typo_names_the_key(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "t.toml"
    prof.write_text(_sysctl("net.sctp.rto_min", "1"))  # module not loaded: planned as missing
    r = run_cli("--root", str(root), "plan", str(prof), "--json")
    assert r.exit_code == 0 and r.json["changes"][0]["action"] == "missing"
    prof.write_text(_sysctl("net.core.somaxcon", "1"))
    r = run_cli("--root", str(root), "plan", str(prof))
    assert r.exit_code == 2 and "did you mean net.core.somaxconn?" in r.stderr


BAN_ALL_BUT_HOUSEKEEPING = """[profile]
name = "ban"
[cpu]
housekeeping = { value = "0-1", reason = "r" }
[irqbalance]
ban = { value = "online - housekeeping", reason = "r" }
"""


def test_irqbalance_ban_is_not_resolved_from_a_namespace(tmp_path: pathlib.Path) -> None:
    # TINY has one online CPU: the ban selects none. On the host that is an error; from a
    # namespace irqbalance is never changed, so the set is not evaluated at all.
    profile = parse_profile_text(BAN_ALL_BUT_HOUSEKEEPING, "ban.toml")
    inv = LazyInventory(Host.open(str(copy_host(tmp_path, TINY))))
    with pytest.raises(BadInput, match=r"irqbalance\.ban .* selects no CPU"):
        resolve(profile, inv)
    assert [t.key for t in resolve(profile, inv, in_netns=True)] == []
