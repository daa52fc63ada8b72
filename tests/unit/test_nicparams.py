"""Coalescing, features and pause: the `ethtool -c/-k/-a` parsers, formatters and in-place
rewriters (lbtune.host.net.nicparams), ethtool's feature aliases, and the recorded source's
setters on fixture trees."""

from __future__ import annotations

import errno

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net.ethtool import EthtoolIoctlError, RecordedEthtool
from lbtune.host.net.nicio import decode_coalesce
from lbtune.host.net.nicparams import (
    Coalesce,
    Feature,
    Features,
    Pause,
    feature_members,
    format_ethtool_a,
    format_ethtool_c,
    format_ethtool_k,
    parse_ethtool_a,
    parse_ethtool_c,
    parse_ethtool_k,
    rewrite_ethtool_a,
    rewrite_ethtool_c,
    rewrite_ethtool_k,
)
from tests.conftest import DELL, KVM, TINY, X710, copy_host

# `ethtool -k veth0` as ethtool 6.1 printed it on this project's build machine (kernel 6.18).
VETH_K_618 = (
    "Features for veth0:\n"
    "rx-checksumming: on\n"
    "tx-checksumming: on\n"
    "\ttx-checksum-ipv4: off [fixed]\n"
    "\ttx-checksum-ip-generic: on\n"
    "\ttx-checksum-ipv6: off [fixed]\n"
    "\ttx-checksum-fcoe-crc: off [fixed]\n"
    "\ttx-checksum-sctp: on\n"
    "scatter-gather: on\n"
    "\ttx-scatter-gather: on\n"
    "\ttx-scatter-gather-fraglist: on\n"
    "tcp-segmentation-offload: on\n"
    "\ttx-tcp-segmentation: on\n"
    "\ttx-tcp-ecn-segmentation: on\n"
    "\ttx-tcp-mangleid-segmentation: on\n"
    "\ttx-tcp6-segmentation: on\n"
    "\ttx-tcp-accecn-segmentation: on\n"
    "generic-segmentation-offload: on\n"
    "generic-receive-offload: off\n"
    "large-receive-offload: off [fixed]\n"
    "rx-vlan-offload: on\n"
    "tx-vlan-offload: on\n"
    "ntuple-filters: off [fixed]\n"
    "receive-hashing: off [fixed]\n"
    "highdma: on\n"
    "rx-vlan-filter: off [fixed]\n"
    "vlan-challenged: off [fixed]\n"
    "tx-gso-robust: off [fixed]\n"
    "tx-fcoe-segmentation: off [fixed]\n"
    "tx-gre-segmentation: on\n"
    "tx-gre-csum-segmentation: on\n"
    "tx-ipxip4-segmentation: on\n"
    "tx-ipxip6-segmentation: on\n"
    "tx-udp_tnl-segmentation: on\n"
    "tx-udp_tnl-csum-segmentation: on\n"
    "tx-gso-partial: off [fixed]\n"
    "tx-tunnel-remcsum-segmentation: off [fixed]\n"
    "tx-sctp-segmentation: on\n"
    "tx-esp-segmentation: off [fixed]\n"
    "tx-udp-segmentation: on\n"
    "tx-gso-list: on\n"
    "tx-nocache-copy: off\n"
    "loopback: off [fixed]\n"
    "rx-fcs: off [fixed]\n"
    "rx-all: off [fixed]\n"
    "tx-vlan-stag-hw-insert: on\n"
    "rx-vlan-stag-hw-parse: on\n"
    "rx-vlan-stag-filter: off [fixed]\n"
    "l2-fwd-offload: off [fixed]\n"
    "hw-tc-offload: off [fixed]\n"
    "esp-hw-offload: off [fixed]\n"
    "esp-tx-csum-hw-offload: off [fixed]\n"
    "rx-udp_tunnel-port-offload: off [fixed]\n"
    "tls-hw-tx-offload: off [fixed]\n"
    "tls-hw-rx-offload: off [fixed]\n"
    "rx-gro-hw: off [fixed]\n"
    "tls-hw-record: off [fixed]\n"
    "rx-gro-list: off\n"
    "macsec-hw-offload: off [fixed]\n"
    "rx-udp-gro-forwarding: off\n"
    "hsr-tag-ins-offload: off [fixed]\n"
    "hsr-tag-rm-offload: off [fixed]\n"
    "hsr-fwd-offload: off [fixed]\n"
    "hsr-dup-offload: off [fixed]\n"
)
VETH_K = "".join(VETH_K_618)

# `ethtool -c` of an e1000e/igb-class NIC as posted in redhat-performance/tuned#726 (ethtool
# 6.x, tab-separated, CQE line).
C_TUNED_726 = (
    "Coalesce parameters for enp1s0:\n"
    "Adaptive RX: n/a  TX: n/a\n"
    "stats-block-usecs:\tn/a\n"
    "sample-interval:\tn/a\n"
    "pkt-rate-low:\t\tn/a\n"
    "pkt-rate-high:\t\tn/a\n\n"
    "rx-usecs:\t3\nrx-frames:\tn/a\nrx-usecs-irq:\tn/a\nrx-frames-irq:\tn/a\n\n"
    "tx-usecs:\t3\ntx-frames:\tn/a\ntx-usecs-irq:\tn/a\ntx-frames-irq:\tn/a\n\n"
    "rx-usecs-low:\tn/a\nrx-frame-low:\tn/a\ntx-usecs-low:\tn/a\ntx-frame-low:\tn/a\n\n"
    "rx-usecs-high:\tn/a\nrx-frame-high:\tn/a\ntx-usecs-high:\tn/a\ntx-frame-high:\tn/a\n\n"
    "CQE mode RX: n/a  TX: n/a\n"
)

# The ioctl-era layout (mlx4, Mellanox/sockperf#21): every field a number, one space after
# "Adaptive RX: on", no CQE line.
C_IOCTL_MLX4 = (
    "Coalesce parameters for eth2:\n"
    "Adaptive RX: on TX: off\n"
    "stats-block-usecs: 0\nsample-interval: 0\npkt-rate-low: 400000\npkt-rate-high: 450000\n\n"
    "rx-usecs: 16\nrx-frames: 88\nrx-usecs-irq: 0\nrx-frames-irq: 0\n\n"
    "tx-usecs: 0\ntx-frames: 0\ntx-usecs-irq: 0\ntx-frames-irq: 0\n\n"
    "rx-usecs-low: 0\nrx-frame-low: 0\ntx-usecs-low: 0\ntx-frame-low: 0\n\n"
    "rx-usecs-high: 128\nrx-frame-high: 0\ntx-usecs-high: 0\ntx-frame-high: 0\n\n"
)

# `ethtool -I -a` of an ice port (netdev patch, 2025): negotiated lines and counters.
A_ICE = (
    "Pause parameters for ens785f0np0:\n"
    "Autonegotiate:  on\nRX:             off\nTX:             off\n"
    "RX negotiated: off\nTX negotiated: off\n"
    "Statistics:\n  tx_pause_frames: 0\n  rx_pause_frames: 0\n"
)


def test_k_veth_parsed_by_kernel_names_and_formatted_back_byte_for_byte() -> None:
    f = parse_ethtool_k(VETH_K)
    assert f.get("rx-gro") == Feature("rx-gro", False, False, False)  # generic-receive-offload
    assert f.get("rx-lro") == Feature("rx-lro", False, True, None)  # large-receive-offload
    assert f.get("rx-checksum") == Feature("rx-checksum", True, False, True)
    assert f.get("tx-checksum-ipv4") == Feature("tx-checksum-ipv4", False, True, None)
    assert f.get("rx-udp-gro-forwarding") == Feature("rx-udp-gro-forwarding", False, False, False)
    names = [e.name for e in f.entries]
    # long names and group lines never appear as features
    for long in ("generic-receive-offload", "tcp-segmentation-offload", "tx-checksumming"):
        assert long not in names
    assert len(names) == len(set(names)) == 60
    assert format_ethtool_k(f, "veth0") == VETH_K


def test_k_requested_marks_and_lone_group_names() -> None:
    text = (
        "Features for br0:\n"
        "rx-checksumming: off [fixed]\n"
        "scatter-gather: on\n"  # a group of one member on this kernel: the member
        "tcp-segmentation-offload: on\n"
        "\ttx-tcp-segmentation: on\n"
        "\ttx-tcp6-segmentation: off [requested on]\n"
        "tx-gso-robust: off [requested on]\n"
        "highdma: on\n"
    )
    f = parse_ethtool_k(text)
    assert f.get("tx-scatter-gather") == Feature("tx-scatter-gather", True, False, True)
    assert f.get("tx-tcp6-segmentation") == Feature("tx-tcp6-segmentation", False, False, True)
    assert f.get("tx-gso-robust") == Feature("tx-gso-robust", False, False, True)
    assert f.get("tcp-segmentation-offload") is None


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "does not start with"),
        ("Features for x:\nrx-gro: maybe\n", "unexpected line"),
        ("Features for x:\nrx-gro: on\nrx-gro: off\n", "given twice"),
        ("Features for x:\ngeneric-receive-offload: on\nrx-gro: on\n", "given twice"),
        ("Features for x:\nrx gro: on\n", "unexpected line"),
        ("Features for x:\nrx-gro: on [broken]\n", "unexpected line"),
        ("Features for x:\n\x00\x01: on\n", "unexpected line"),
        ("Features for x:\n" + "a" * 5000 + ": on [", "unexpected line"),
    ],
)
def test_k_malformed_is_one_line_error(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile) as e:
        parse_ethtool_k(text, "ethtool_-k_x")
    assert problem in str(e.value) and "\n" not in str(e.value)


def test_c_real_layouts() -> None:
    c = parse_ethtool_c(C_TUNED_726)
    assert c.values == (("rx-usecs", 3), ("tx-usecs", 3))  # the driver's supported set
    old = parse_ethtool_c(C_IOCTL_MLX4)
    assert old.get("adaptive-rx") == 1 and old.get("adaptive-tx") == 0
    assert old.get("pkt-rate-low") == 400000 and old.get("rx-frames-low") == 0
    assert old.get("rx-usecs-high") == 128 and old.get("cqe-mode-rx") is None
    assert "rx-usecs" in old.names and len(old.names) == 22


def test_c_format_round_trip() -> None:
    c = Coalesce((("adaptive-rx", 1), ("rx-usecs", 8), ("rx-frames", 128), ("cqe-mode-rx", 0)))
    text = format_ethtool_c(c, "eth9")
    assert "Adaptive RX: on  TX: n/a\n" in text and "rx-frame-low: n/a\n" in text
    assert parse_ethtool_c(text) == c


@pytest.mark.parametrize(
    "text, problem",
    [
        ("Coalesce for x\n", "does not start with"),
        ("Coalesce parameters for x:\nrx-usecs: -1\n", "not a 32-bit count"),
        ("Coalesce parameters for x:\nrx-usecs: 4294967296\n", "not a 32-bit count"),
        ("Coalesce parameters for x:\nrx-usecs: ١٢\n", "not a 32-bit count"),
        ("Coalesce parameters for x:\nAdaptive RX: yes  TX: off\n", "not on/off"),
        ("Coalesce parameters for x:\nrx-usecs: 1\nrx-usecs: 2\n", "given twice"),
        ("Coalesce parameters for x:\nwhat-is-this: 1\n", "unexpected line"),
        ("Coalesce parameters for x:\nrx-usecs 1\n", "unexpected line"),
    ],
)
def test_c_malformed(text: str, problem: str) -> None:
    with pytest.raises(MalformedHostFile) as e:
        parse_ethtool_c(text, "ethtool_-c_x")
    assert problem in str(e.value)


def test_a_real_layouts_and_malformed() -> None:
    assert parse_ethtool_a(A_ICE) == Pause(True, False, False)
    text = format_ethtool_a(Pause(False, True, True), "eth0")
    assert text == "Pause parameters for eth0:\nAutonegotiate:\toff\nRX:\t\ton\nTX:\t\ton\n"
    assert parse_ethtool_a(text) == Pause(False, True, True)
    for bad, problem in (
        ("Pause parameters for x:\nRX: on\nTX: on\n", "no 'Autonegotiate' line"),
        ("Pause parameters for x:\nAutonegotiate: on\nRX: sometimes\nTX: on\n", "not on/off"),
        ("Pause parameters for x:\nAutoneg: on\n", "unexpected line"),
        ("Cannot get device pause settings\n", "does not start with"),
    ):
        with pytest.raises(MalformedHostFile, match=problem):
            parse_ethtool_a(bad)


def test_rewriters_change_only_the_values_and_undo_byte_for_byte() -> None:
    c2 = rewrite_ethtool_c(C_TUNED_726, {"rx-usecs": 100})
    assert parse_ethtool_c(c2).get("rx-usecs") == 100 and "rx-usecs:\t100\n" in c2
    assert rewrite_ethtool_c(c2, {"rx-usecs": 3}) == C_TUNED_726
    m2 = rewrite_ethtool_c(C_IOCTL_MLX4, {"adaptive-rx": 0, "adaptive-tx": 1})
    assert m2.splitlines()[1] == "Adaptive RX: off TX: on"
    assert rewrite_ethtool_c(m2, {"adaptive-rx": 1, "adaptive-tx": 0}) == C_IOCTL_MLX4
    k2 = rewrite_ethtool_k(VETH_K, {"rx-gro": True, "tx-tcp-segmentation": False})
    f2 = parse_ethtool_k(k2)
    assert f2.get("rx-gro") and f2.get("rx-gro").active  # type: ignore[union-attr]
    assert "generic-receive-offload: on\n" in k2
    assert "tcp-segmentation-offload: on\n" in k2  # other members still on
    assert rewrite_ethtool_k(k2, {"rx-gro": False, "tx-tcp-segmentation": True}) == VETH_K
    every_tso = {n: False for n in feature_members("tso", [e.name for e in f2.entries])}
    assert "tcp-segmentation-offload: off\n" in rewrite_ethtool_k(VETH_K, every_tso)
    a2 = rewrite_ethtool_a(A_ICE, {"rx": True})
    assert parse_ethtool_a(a2) == Pause(True, True, False)
    assert rewrite_ethtool_a(a2, {"rx": False}) == A_ICE


def test_feature_aliases_resolve_as_ethtool_does() -> None:
    names = [e.name for e in parse_ethtool_k(VETH_K).entries]
    assert feature_members("gro", names) == ("rx-gro",)
    assert feature_members("generic-receive-offload", names) == ("rx-gro",)
    assert feature_members("lro", names) == ("rx-lro",)
    assert feature_members("rx-gro-hw", names) == ("rx-gro-hw",)
    tso = feature_members("tso", names)
    assert tso[0] == "tx-tcp-segmentation" and "tx-tcp6-segmentation" in tso
    assert all("tcp" in n and n.endswith("segmentation") for n in tso)
    assert set(feature_members("tx", names)) == {n for n in names if n.startswith("tx-checksum-")}
    assert feature_members("ufo", names) == ()  # no tx-udp-fragmentation on this kernel
    assert feature_members("warp-drive", names) == ()


def test_decode_coalesce_reply_attributes() -> None:
    attrs = {2: (100).to_bytes(4, "little"), 11: b"\x01", 6: (0).to_bytes(4, "little")}
    import sys

    if sys.byteorder == "big":  # pragma: no cover
        attrs = {k: v[::-1] if len(v) == 4 else v for k, v in attrs.items()}
    c = decode_coalesce(attrs)
    assert c.values == (("adaptive-rx", 1), ("rx-usecs", 100), ("tx-usecs", 0))


def test_fixture_trees_read_and_setters_behave_like_the_kernel(tmp_path) -> None:  # type: ignore[no-untyped-def]
    e = RecordedEthtool(HostFS(str(copy_host(tmp_path, TINY))))
    assert e.coalesce("eth0") == Coalesce((("rx-usecs", 3),))
    assert e.coalesce("veth0") is None and e.pause("veth0") is None
    assert e.pause("eth0") == Pause(True, True, True)
    with pytest.raises(EthtoolIoctlError) as err:
        e.set_coalesce("eth0", {"rx-usecs-high": 10})  # not in e1000's set
    assert err.value.errno == errno.EOPNOTSUPP
    with pytest.raises(EthtoolIoctlError) as err:
        e.set_features("eth0", {"rx-lro": True})  # fixed
    assert err.value.errno == errno.EOPNOTSUPP
    with pytest.raises(EthtoolIoctlError) as err:
        e.set_features("eth0", {"rx-nonsense": True})
    assert err.value.errno == errno.EINVAL
    with pytest.raises(EthtoolIoctlError):
        e.set_pause("veth0", rx=False)
    e.set_coalesce("eth0", {"rx-usecs": 100})
    e.set_features("eth0", {"rx-gro": False})
    e.set_pause("eth0", autoneg=False, rx=False)
    assert e.coalesce("eth0") == Coalesce((("rx-usecs", 100),))
    assert not e.features("eth0").get("rx-gro").active  # type: ignore[union-attr]
    assert e.pause("eth0") == Pause(False, False, True)


@pytest.mark.parametrize(
    "tree, dev", [(DELL, "eno1"), (DELL, "ens1f0np0"), (KVM, "ens3"), (X710, "enp49s0f0")]
)
def test_fixture_recordings_are_ethtool_61_layout(tree: str, dev: str) -> None:
    from tests.conftest import HOSTS

    d = HOSTS / tree / "sos_commands" / "networking"
    k = (d / f"ethtool_-k_{dev}").read_text()
    assert format_ethtool_k(parse_ethtool_k(k), dev) == k
    c = (d / f"ethtool_-c_{dev}").read_text()
    assert format_ethtool_c(parse_ethtool_c(c), dev) == c
    assert isinstance(parse_ethtool_k(k), Features)
