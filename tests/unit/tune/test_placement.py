"""IRQ/XPS/RPS placement on the fixture inventories; expected maps written out from the READMEs.

dell-r750-mlx5-ixgbe: node 0 = 0-11,24-35, node 1 = 12-23,36-47, isolated 2-11,26-35, SMT
siblings c and c+24. ens1f0np0 (mlx5, node 1): IRQ 96+i = comp i, i = 0..47 (24 channels,
tx-0..23 exist). eno1 (ixgbe, node 0): IRQ 46+q = TxRx-q, q = 0..15, hint CPU q.
kvm-virtio-4vcpu: ens3 numa_node -1, IRQ 27+2q input.q (rx), 28+2q output.q (tx), q = 0..3.
"""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.tune.placement import candidate_cpus, irq_cpus, rps_for, xps_for
from tests.conftest import DELL, HOSTS, KVM, copy_host


@pytest.fixture(scope="module")
def dell() -> HostInventory:
    return discover_host(Host.open(str(HOSTS / DELL)))


@pytest.fixture(scope="module")
def kvm() -> HostInventory:
    return discover_host(Host.open(str(HOSTS / KVM)))


# comp0-23 -> 12..23,36..47 in order; the idle comp24-47 wrap round to the same CPUs.
MLX5_LOCAL = {
    96: 12, 97: 13, 98: 14, 99: 15, 100: 16, 101: 17, 102: 18, 103: 19,
    104: 20, 105: 21, 106: 22, 107: 23, 108: 36, 109: 37, 110: 38, 111: 39,
    112: 40, 113: 41, 114: 42, 115: 43, 116: 44, 117: 45, 118: 46, 119: 47,
    120: 12, 121: 13, 122: 14, 123: 15, 124: 16, 125: 17, 126: 18, 127: 19,
    128: 20, 129: 21, 130: 22, 131: 23, 132: 36, 133: 37, 134: 38, 135: 39,
    136: 40, 137: 41, 138: 42, 139: 43, 140: 44, 141: 45, 142: 46, 143: 47,
}  # fmt: skip

# primary threads of node 1 only: 12..23, four times round.
MLX5_LOCAL_NO_SMT = {
    96: 12, 97: 13, 98: 14, 99: 15, 100: 16, 101: 17, 102: 18, 103: 19,
    104: 20, 105: 21, 106: 22, 107: 23, 108: 12, 109: 13, 110: 14, 111: 15,
    112: 16, 113: 17, 114: 18, 115: 19, 116: 20, 117: 21, 118: 22, 119: 23,
    120: 12, 121: 13, 122: 14, 123: 15, 124: 16, 125: 17, 126: 18, 127: 19,
    128: 20, 129: 21, 130: 22, 131: 23, 132: 12, 133: 13, 134: 14, 135: 15,
    136: 16, 137: 17, 138: 18, 139: 19, 140: 20, 141: 21, 142: 22, 143: 23,
}  # fmt: skip


def test_mlx5_local(dell: HostInventory) -> None:
    assert irq_cpus(dell, "ens1f0np0", "local") == MLX5_LOCAL
    nic = dell.nic("ens1f0np0")
    assert irq_cpus(dell, nic, "local", skip_smt=True) == MLX5_LOCAL_NO_SMT


def test_mlx5_hints_are_the_local_spread(dell: HostInventory) -> None:
    # cpumask_local_spread(i, 1) gives comp i the i-th node-1 CPU: same as round-robin
    assert irq_cpus(dell, "ens1f0np0", "local", use_hint=True) == MLX5_LOCAL


def test_hint_wins_only_inside_the_candidates(dell: HostInventory) -> None:
    # candidates [12, 13, 40, 41]; hints: comp0 12, comp1 13, comp16 40, comp17 41 are used,
    # every other queue keeps its round-robin slot (position % 4).
    got = irq_cpus(dell, "ens1f0np0", "list", cpus={41, 13, 12, 40}, use_hint=True)
    rr = [12, 13, 40, 41]
    expected = {96 + i: rr[i % 4] for i in range(48)}
    expected.update({96: 12, 97: 13, 112: 40, 113: 41})
    assert got == expected
    assert got[112] == 40 and got[113] == 41  # round-robin alone would give 12 and 13
    assert irq_cpus(dell, "ens1f0np0", "list", cpus={41, 13, 12, 40})[112] == 12


def test_ixgbe_local_excludes_isolated(dell: HostInventory) -> None:
    # node 0 housekeeping CPUs: 0, 1, 24, 25
    assert irq_cpus(dell, "eno1", "local") == {
        46: 0, 47: 1, 48: 24, 49: 25, 50: 0, 51: 1, 52: 24, 53: 25,
        54: 0, 55: 1, 56: 24, 57: 25, 58: 0, 59: 1, 60: 24, 61: 25,
    }  # fmt: skip
    assert 62 not in irq_cpus(dell, "eno1", "local")  # the link vector is no queue


def test_ixgbe_isolated_primary_threads(dell: HostInventory) -> None:
    assert irq_cpus(dell, "eno1", "isolated", skip_smt=True) == {
        46: 2, 47: 3, 48: 4, 49: 5, 50: 6, 51: 7, 52: 8, 53: 9,
        54: 10, 55: 11, 56: 2, 57: 3, 58: 4, 59: 5, 60: 6, 61: 7,
    }  # fmt: skip


def test_split_rx_tx_share_a_cpu(kvm: HostInventory) -> None:
    # numa_node -1: all online CPUs 0-3
    assert irq_cpus(kvm, "ens3", "local") == {
        27: 0, 28: 0, 29: 1, 30: 1, 31: 2, 32: 2, 33: 3, 34: 3,
    }  # fmt: skip
    assert irq_cpus(kvm, "ens3", "list", cpus={3, 1}) == {
        27: 1, 28: 1, 29: 3, 30: 3, 31: 1, 32: 1, 33: 3, 34: 3,
    }  # fmt: skip


def test_offline_cpus_and_empty_sets(dell: HostInventory, kvm: HostInventory) -> None:
    with pytest.raises(BadInput):
        irq_cpus(dell, "ens1f0np0", "list")  # no list given
    with pytest.raises(BadInput):
        irq_cpus(dell, "ens1f0np0", "list", cpus={99})
    with pytest.raises(BadInput):
        irq_cpus(kvm, "ens3", "isolated")  # nothing isolated on the VM
    with pytest.raises(BadInput):
        irq_cpus(dell, "ens1f0np0", "spread")
    with pytest.raises(BadInput):
        irq_cpus(dell, "nosuch0", "local")


def test_offline_cpus_are_skipped(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM)
    (root / "sys/devices/system/cpu/online").write_text("0,2-3\n")
    inv = discover_host(Host.open(str(root)))
    assert candidate_cpus(inv, "ens3", "local") == frozenset({0, 2, 3})
    assert irq_cpus(inv, "ens3", "local") == {
        27: 0, 28: 0, 29: 2, 30: 2, 31: 3, 32: 3, 33: 0, 34: 0,
    }  # fmt: skip
    (root / "sys/devices/system/cpu/online").write_text("0\n")
    inv = discover_host(Host.open(str(root)))
    with pytest.raises(BadInput):
        irq_cpus(inv, "ens3", "list", cpus={1, 2})


def test_xps_follows_irq_placement(dell: HostInventory, kvm: HostInventory) -> None:
    nic = dell.nic("ens1f0np0")
    xps = xps_for(MLX5_LOCAL, nic)
    # only tx-0..23 exist; comp i >= 24 serve no queue
    assert xps == {i: frozenset({MLX5_LOCAL[96 + i]}) for i in range(24)}
    assert xps[11] == frozenset({23}) and xps[12] == frozenset({36})
    ens3 = kvm.nic("ens3")
    assert xps_for(irq_cpus(kvm, ens3, "list", cpus={3, 1}), ens3) == {
        0: frozenset({1}),
        1: frozenset({3}),
        2: frozenset({1}),
        3: frozenset({3}),
    }


def test_rps_set(dell: HostInventory) -> None:
    rps = rps_for(dell, "ens1f0np0", "local", skip_smt=True)
    assert sorted(rps) == list(range(24))
    assert set(rps.values()) == {frozenset(range(12, 24))}
