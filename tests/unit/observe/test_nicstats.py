"""read_all_nics / read_nic_counters on every fixture tree and on this machine."""

from __future__ import annotations

from typing import Optional

import pytest

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.net.ethtool import LiveEthtool, RecordedEthtool
from lbtune.observe.model import NicCounters
from lbtune.observe.nicstats import read_all_nics, read_nic_counters
from tests.conftest import AWS, DELL, HOSTS, KVM, TINY

# tree -> {interface: (driver, number of (direction, queue) entries, device drop counters > 0)}
EXPECTED = {
    DELL: {
        "eno1": ("ixgbe", 32, {"rx_missed_errors": 5521, "rx_no_dma_resources": 312}),
        "ens1f0np0": ("mlx5_core", 48, {"rx_out_of_buffer": 18342, "rx_discards_phy": 1207}),
        "ens1f1np1": ("mlx5_core", 96, {}),
    },
    KVM: {"ens3": ("virtio_net", 8, {})},
    AWS: {
        "ens5": ("ena", 16, {"bw_in_allowance_exceeded": 1731, "pps_allowance_exceeded": 20544}),
    },
    TINY: {
        "bond0": ("bonding", 0, {}),
        "bond0.100": ("802.1Q VLAN Support", 0, {}),
        "eth0": ("e1000", 0, {"rx_missed_errors": 3}),
        "veth0": ("veth", 8, {}),
    },
}


def read(tree: str, only: Optional[list[str]] = None) -> dict[str, NicCounters]:
    fs = HostFS(str(HOSTS / tree))
    return read_all_nics(fs, RecordedEthtool(fs), only)


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_every_fixture_tree(tree: str) -> None:
    nics = read(tree)
    assert sorted(nics) == sorted(EXPECTED[tree])  # lo left out, bonding_masters is a file
    for name, (driver, nqueues, drops) in EXPECTED[tree].items():
        nic = nics[name]
        assert (nic.dev, nic.driver, len(nic.queues)) == (name, driver, nqueues), name
        assert {k: v for k, v in nic.nic_drops.items() if v} == drops, name
        # /sys/class/net/DEV/statistics is read for every interface
        assert "rx_packets" in nic.stats and "rx_dropped" in nic.stats, name
        keys = [(q.direction, q.queue) for q in nic.queues]
        assert keys == sorted(keys)


def test_r750_hot_queue_and_sysfs_agree() -> None:
    nic = read(DELL)["ens1f0np0"]
    rx = {q.queue: q.packets or 0 for q in nic.queues if q.direction == "rx"}
    assert max(rx, key=rx.__getitem__) == 5
    assert 0.55 < rx[5] / sum(rx.values()) < 0.65
    assert nic.stats["rx_packets"] == sum(rx.values())
    assert nic.stats["rx_dropped"] == nic.nic_drops["rx_out_of_buffer"]  # mlx5e_get_stats
    assert nic.ethtool["rx_packets"] == nic.stats["rx_packets"]
    eno1 = read(DELL)["eno1"]
    assert eno1.stats["rx_missed_errors"] == eno1.nic_drops["rx_missed_errors"]


def test_per_queue_drops_virtio_and_veth() -> None:
    ens3 = read(KVM)["ens3"]
    drops = {q.queue: q.drops for q in ens3.queues if q.direction == "rx"}
    assert drops == {0: 0, 1: 0, 2: 37, 3: 0}
    assert ens3.stats["rx_dropped"] == 37
    veth = read(TINY)["veth0"]
    assert [q.queue for q in veth.queues if q.direction == "rx" and q.drops] == [3]


def test_devices_without_ethtool_stats() -> None:
    nics = read(TINY, ["bond0", "lo"])
    assert list(nics) == ["bond0", "lo"]  # `only` may name lo
    assert nics["bond0"].ethtool == {} and nics["bond0"].queues == ()
    assert nics["lo"].driver is None  # ethtool -i fails on lo, no device link


def test_only_and_unknown_names() -> None:
    assert list(read(DELL, ["eno1"])) == ["eno1"]
    with pytest.raises(BadInput, match=r"^no such interface: eth9$"):
        read(DELL, ["eno1", "eth9"])
    with pytest.raises(BadInput, match="no such interface: bonding_masters"):
        read(TINY, ["bonding_masters"])  # a file in /sys/class/net
    fs = HostFS(str(HOSTS / TINY))
    for bad in ("../../..", ".", ""):
        with pytest.raises(BadInput):
            read_nic_counters(fs, RecordedEthtool(fs), bad)


def test_this_machine() -> None:
    fs = HostFS("/")
    nics = read_all_nics(fs, LiveEthtool())
    assert "lo" not in nics
    for nic in nics.values():
        assert "rx_packets" in nic.stats
