"""Features, coalescing and pause on a real veth in a throwaway namespace: the live readers
against `ethtool` itself, and `lbtune --netns` apply / verify / rollback of features
(rx-gro, tx checksumming, rx-udp-gro-forwarding toggle live on a veth), byte for byte as
`ethtool -k` prints them. A veth has no coalescing and no pause: refused where a profile
names the interface."""

from __future__ import annotations

import pathlib
import subprocess

from tests.netns.conftest import in_netns


def ethtool(ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "ethtool", *args],
                          capture_output=True, text=True, check=False)  # fmt: skip


def live_params(dev: str) -> tuple[object, object, object]:
    from lbtune.host.net.ethtool import LiveEthtool
    from lbtune.host.net.nicparams import format_ethtool_k

    e = LiveEthtool()
    k = e.features(dev)
    return (None if k is None else format_ethtool_k(k, dev)), e.coalesce(dev), e.pause(dev)


def test_live_readers_print_what_ethtool_prints(veth4: str) -> None:
    k, c, a = in_netns(veth4, live_params, "v0")
    assert k == ethtool(veth4, "-k", "v0").stdout  # every feature, fixed mark and group
    assert c is None and "Operation not supported" in ethtool(veth4, "-c", "v0").stderr
    assert a is None and "Operation not supported" in ethtool(veth4, "-a", "v0").stderr


def write_profile(tmp_path: pathlib.Path, body: str) -> str:
    p = tmp_path / "nic.toml"
    p.write_text(f'[profile]\nname = "nic"\n\n[nic.v0]\n{body}')
    return str(p)


def test_apply_verify_rollback_features_live(cli, veth4, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    before = ethtool(veth4, "-k", "v0").stdout
    assert "generic-receive-offload: off\n" in before  # a veth's default
    p = write_profile(tmp_path, (
        'features.gro = { value = "on", reason = "terminating host" }\n'
        'features.tx = { value = "off", reason = "the tx-checksum-* members it can change" }\n'
        'features.rx-udp-gro-forwarding = { value = "on", reason = "UDP GRO when forwarding" }\n'
    ))  # fmt: skip
    r = cli("--netns", veth4, "apply", p, "--yes", "--json")
    assert r.exit_code == 0, r.stderr
    changed = sorted(c["object"] for c in r.json["changes"] if c["action"] == "change")
    assert changed == ["v0:rx-gro", "v0:rx-udp-gro-forwarding", "v0:tx-checksum-ip-generic",
                       "v0:tx-checksum-sctp"]  # fmt: skip
    during = ethtool(veth4, "-k", "v0").stdout
    assert "generic-receive-offload: on\n" in during
    assert "\ttx-checksum-ip-generic: off\n" in during
    assert "rx-udp-gro-forwarding: on\n" in during
    # the kernel drops what needs checksumming (TSO) and says it was asked for
    assert "\ttx-tcp-segmentation: off [requested on]\n" in during
    v = cli("--netns", veth4, "verify", p)
    assert v.exit_code == 0, v.stdout + v.stderr
    rb = cli("--netns", veth4, "rollback")
    assert rb.exit_code == 0, rb.stderr
    assert ethtool(veth4, "-k", "v0").stdout == before  # byte for byte


def test_a_fixed_feature_or_missing_family_is_refused(cli, veth4, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    before = ethtool(veth4, "-k", "v0").stdout
    for body, message in (
        ('features.lro = { value = "on", reason = "r" }',
         "nic.v0.features.lro: rx-lro is fixed off on v0 (veth): the driver cannot change it"),
        ('coalesce.rx-usecs = { value = 50, reason = "r" }',
         "nic.v0.coalesce.rx-usecs: v0 (veth) has no interrupt coalescing settings"),
        ('pause.rx = { value = "off", reason = "r" }',
         "nic.v0.pause.rx: v0 (veth) has no pause frame settings"),
    ):  # fmt: skip
        r = cli("--netns", veth4, "apply", write_profile(tmp_path, body + "\n"), "--yes")
        assert r.exit_code == 2, r.stdout + r.stderr
        assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert ethtool(veth4, "-k", "v0").stdout == before
