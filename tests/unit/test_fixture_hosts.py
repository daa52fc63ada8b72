"""Host discovery against the fixture trees: every value asserted here is the designed truth.

The expectations are written out from each tree's README.md (the host's design), not derived
from lbtune or from the generator, so a wrong parser, a wrong IRQ match or a wrong link walk
fails here.
"""

from __future__ import annotations

import pytest

from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.host.net.ethtool import Channels, RingSizes
from lbtune.host.net.nic import Nic
from tests.conftest import AWS, DELL, HOSTS, KVM, TINY, X710

_cache: dict[str, HostInventory] = {}


def inventory(name: str) -> HostInventory:
    if name not in _cache:
        _cache[name] = discover_host(Host.open(str(HOSTS / name)))
    return _cache[name]


def irq_table(nic: Nic) -> dict[tuple[str, int], tuple[int, frozenset, frozenset, frozenset]]:
    """(direction, queue) -> (irq, affinity, effective, hint) as discovered."""
    out = {}
    for q in nic.irqs:
        key = (q.direction, q.queue)
        assert key not in out, f"{nic.name}: two IRQs for {key}"
        out[key] = (q.irq, q.affinity, q.effective, q.hint)
    return out


def fs(*ranges: range | list[int]) -> frozenset[int]:
    out: set[int] = set()
    for r in ranges:
        out.update(r)
    return frozenset(out)


# ======================================================================== dell-r750-mlx5-ixgbe

R750 = DELL
NODE0 = fs(range(0, 12), range(24, 36))
NODE1 = fs(range(12, 24), range(36, 48))
ISOLATED = fs(range(2, 12), range(26, 36))
HOUSEKEEPING = fs([0, 1], range(12, 26), range(36, 48))
# cpumask_local_spread(i, node 1) as mlx5 uses it for the hint of comp vector i.
SPREAD = [*range(12, 24), *range(36, 48), *range(0, 12), *range(24, 36)]


def test_r750_identity():
    inv = inventory(R750)
    assert inv.hostname == "lb1-r750"
    assert inv.kernel == "5.15.0-105-generic"
    assert inv.netns is None


def test_r750_cpus_and_smt():
    cpus = inventory(R750).cpus
    assert [c.id for c in cpus.cpus] == list(range(48))
    assert cpus.online == frozenset(range(48))
    assert cpus.possible == frozenset(range(48))
    assert cpus.smt_active
    core_ids = [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13]
    for c in cpus.cpus:
        first = c.id % 24
        assert c.siblings == {first, first + 24}, c
        assert c.package == (0 if first < 12 else 1), c
        assert c.core == core_ids[first % 12], c
        assert c.node == (0 if c.id in NODE0 else 1), c
        assert c.is_primary_thread == (c.id < 24), c
        assert c.online
        assert c.isolated == (c.id in ISOLATED)


def test_r750_numa_and_isolation():
    cpus = inventory(R750).cpus
    assert [(n.id, n.cpus) for n in cpus.nodes] == [(0, NODE0), (1, NODE1)]
    assert cpus.node_cpus(1) == NODE1
    assert cpus.node_of(40) == 1 and cpus.node_of(30) == 0
    assert cpus.isolated == ISOLATED
    assert cpus.nohz_full == ISOLATED
    assert cpus.housekeeping == HOUSEKEEPING
    assert cpus.default_irq_affinity == HOUSEKEEPING  # fff0,03fff003
    assert cpus.cmdline.isolcpus_flags() == ("managed_irq", "domain")
    assert cpus.cmdline.cpus("isolcpus") == ISOLATED
    assert cpus.cmdline.cpus("rcu_nocbs") == ISOLATED
    assert cpus.cmdline.cpus("irqaffinity") == HOUSEKEEPING


def test_r750_nic_list():
    assert [n.name for n in inventory(R750).nics] == ["eno1", "ens1f0np0", "ens1f1np1", "lo"]


def test_r750_eno1_ixgbe():
    nic = inventory(R750).nic("eno1")
    assert (nic.kind, nic.driver, nic.bus) == ("physical", "ixgbe", "0000:18:00.0")
    assert nic.numa_node == 0
    assert nic.local_cpus == NODE0
    assert (nic.ifindex, nic.mtu, nic.speed_mbps, nic.operstate) == (2, 1500, 10000, "up")
    assert nic.address == "b4:96:91:a7:3e:10"
    assert nic.txqueuelen == 1000
    assert [q.index for q in nic.rx_queues] == list(range(16))
    assert [q.index for q in nic.tx_queues] == list(range(16))
    assert all(q.rps_cpus == frozenset() and q.rps_flow_cnt == 0 for q in nic.rx_queues)
    assert [q.xps_cpus for q in nic.tx_queues] == [frozenset({q}) for q in range(16)]
    assert nic.rings == RingSizes(rx=512, tx=512, rx_max=4096, tx_max=4096)
    assert nic.channels == Channels(other=1, combined=16, other_max=1, combined_max=63)
    assert nic.lower == ()


def test_r750_eno1_every_queue_irq():
    nic = inventory(R750).nic("eno1")
    expected = {}
    for q in range(16):
        cpu = frozenset({(0, 24, 1, 25)[q % 4]})
        expected[("combined", q)] = (46 + q, cpu, cpu, frozenset({q}))
    assert irq_table(nic) == expected
    assert [q.name for q in nic.irqs] == [f"eno1-TxRx-{q}" for q in range(16)]
    assert {q.family for q in nic.irqs} == {"ixgbe/igb/bnxt_en"}
    assert {q.node for q in nic.irqs} == {0}
    assert 62 not in {q.irq for q in nic.irqs}  # the link vector "eno1"
    # The vectors of queues 2-11 were first hinted onto isolated CPUs (the driver's doing).
    assert {q.queue for q in nic.irqs if q.hint & ISOLATED} == set(range(2, 12))
    # Queue 0's vector never moved, the others have counts on their old CPU too.
    assert all(q.count > 0 for q in nic.irqs)


def test_r750_mlx5_port0():
    nic = inventory(R750).nic("ens1f0np0")
    assert (nic.kind, nic.driver, nic.bus) == ("physical", "mlx5_core", "0000:98:00.0")
    assert nic.numa_node == 1
    assert nic.local_cpus == NODE1
    assert (nic.ifindex, nic.mtu, nic.speed_mbps, nic.operstate) == (4, 9000, 100000, "up")
    assert len(nic.rx_queues) == 24 and len(nic.tx_queues) == 24
    assert [q.xps_cpus for q in nic.tx_queues] == [frozenset({SPREAD[i]}) for i in range(24)]
    assert nic.rings == RingSizes(rx=1024, tx=1024, rx_max=8192, tx_max=8192)
    assert nic.channels == Channels(combined=24, combined_max=48)


def test_r750_mlx5_port0_every_queue_irq():
    nic = inventory(R750).nic("ens1f0np0")
    # Active channels 0-23: on the hinted CPU, except the moves irqbalance made.
    cpu_of = {i: SPREAD[i] for i in range(24)}
    cpu_of.update({5: 41, 17: 17, 11: 47, 23: 23, 9: 20})  # 5<->17 and 11<->23 swapped, 9 stacked
    # Idle vectors 24-47 sit on the CPU of vector i-24's hint.
    cpu_of.update({i: SPREAD[i - 24] for i in range(24, 48)})
    expected = {
        ("combined", i): (
            96 + i,
            frozenset({cpu_of[i]}),
            frozenset({cpu_of[i]}),
            frozenset({SPREAD[i]}),
        )
        for i in range(48)
    }
    assert irq_table(nic) == expected
    assert [q.name for q in nic.irqs] == [f"mlx5_comp{i}@pci:0000:98:00.0" for i in range(48)]
    assert {q.family for q in nic.irqs} == {"mlx5"}
    assert {q.node for q in nic.irqs} == {1}
    assert 95 not in {q.irq for q in nic.irqs}  # mlx5_async0
    # More vectors than channels: only the first 24 ever interrupted.
    assert [q.queue for q in nic.irqs if q.count > 0] == list(range(24))
    # Where XPS and the IRQ disagree (the imperfections of the design).
    xps = {i: q.xps_cpus for i, q in enumerate(nic.tx_queues)}
    mismatched = sorted(q.queue for q in nic.irqs if q.queue < 24 and q.effective != xps[q.queue])
    assert mismatched == [5, 9, 11, 17, 23]
    assert 21 not in {c for q in nic.irqs[:24] for c in q.effective}


def test_r750_mlx5_port1_down_and_other_function():
    inv = inventory(R750)
    nic = inv.nic("ens1f1np1")
    assert (nic.driver, nic.bus, nic.numa_node) == ("mlx5_core", "0000:98:00.1", 1)
    assert nic.operstate == "down"
    assert nic.speed_mbps is None  # speed reads -1 without a link
    assert len(nic.rx_queues) == 48 and len(nic.tx_queues) == 48
    assert nic.channels == Channels(combined=48, combined_max=48)
    expected = {
        ("combined", i): (
            145 + i,
            frozenset({SPREAD[i % 24]}),
            frozenset({SPREAD[i % 24]}),
            frozenset({SPREAD[i]}),
        )
        for i in range(48)
    }
    assert irq_table(nic) == expected
    assert all(q.count == 0 for q in nic.irqs)
    # Functions .0 and .1 of one card share driver and names up to the PCI function: no overlap.
    port0 = {q.irq for q in inv.nic("ens1f0np0").irqs}
    assert port0.isdisjoint(q.irq for q in nic.irqs)


def test_r750_loopback():
    lo = inventory(R750).nic("lo")
    assert (lo.kind, lo.driver, lo.bus, lo.numa_node, lo.local_cpus) == (
        "loopback",
        None,
        None,
        None,
        None,
    )
    assert (lo.ifindex, lo.mtu, lo.speed_mbps, lo.operstate) == (1, 65536, None, "unknown")
    assert lo.rings is None and lo.channels is None and lo.irqs == ()
    assert len(lo.rx_queues) == 1 and lo.tx_queues[0].xps_cpus is None


def test_r750_irqbalance():
    irqb = inventory(R750).irqbalance
    assert irqb.running and irqb.pid == 1187
    assert irqb.enabled is True
    assert irqb.config_file == "/etc/default/irqbalance"
    assert irqb.banned_cpus == ISOLATED
    assert irqb.banned_irqs == frozenset({62})
    assert irqb.oneshot is False


def test_r750_recorded_stats():
    eth = Host.open(str(HOSTS / R750)).ethtool
    mlx = eth.stats("ens1f0np0")
    assert mlx is not None
    assert mlx["rx_out_of_buffer"] == 18342
    assert mlx["rx_discards_phy"] == 1207
    assert "rx23_packets" in mlx and "rx24_packets" not in mlx
    assert mlx["rx_packets"] == sum(mlx[f"rx{i}_packets"] for i in range(24))
    ixgbe = eth.stats("eno1")
    assert ixgbe is not None
    assert (ixgbe["rx_missed_errors"], ixgbe["rx_no_dma_resources"]) == (5521, 312)
    assert ixgbe["rx_packets"] == sum(ixgbe[f"rx_queue_{i}_packets"] for i in range(16))
    info = eth.driver_info("ens1f0np0")
    assert info is not None
    assert (info.driver, info.bus_info, info.firmware) == (
        "mlx5_core",
        "0000:98:00.0",
        "22.36.1010 (DEL0000000027)",
    )
    assert eth.stats("lo") is None  # "no stats available"
    assert eth.driver_info("lo") is None  # "Operation not supported"


# ======================================================================== kvm-virtio-4vcpu



def test_kvm_cpus():
    inv = inventory(KVM)
    assert (inv.hostname, inv.kernel) == ("web-vm4", "6.1.0-18-cloud-amd64")
    cpus = inv.cpus
    assert cpus.online == cpus.possible == frozenset(range(4))
    assert not cpus.smt_active
    assert all(c.siblings == {c.id} and c.is_primary_thread and c.node == 0 for c in cpus.cpus)
    assert [(n.id, n.cpus) for n in cpus.nodes] == [(0, frozenset(range(4)))]
    assert cpus.isolated == frozenset() and cpus.nohz_full == frozenset()
    assert cpus.housekeeping == frozenset(range(4))
    assert cpus.default_irq_affinity == frozenset(range(4))


def test_kvm_virtio_net():
    inv = inventory(KVM)
    assert [n.name for n in inv.nics] == ["ens3", "lo"]
    nic = inv.nic("ens3")
    assert (nic.kind, nic.driver, nic.bus) == ("physical", "virtio_net", "0000:00:03.0")
    assert nic.numa_node == -1
    assert nic.local_cpus == frozenset(range(4))
    assert (nic.ifindex, nic.mtu, nic.speed_mbps, nic.address) == (
        2,
        1500,
        None,
        "fa:16:3e:4c:9b:21",
    )
    assert [(q.index, q.rps_cpus, q.rps_flow_cnt) for q in nic.rx_queues] == [
        (i, frozenset(range(4)), 4096) for i in range(4)
    ]
    assert [q.xps_cpus for q in nic.tx_queues] == [frozenset({i}) for i in range(4)]
    assert nic.rings == RingSizes(rx=256, tx=256, rx_max=256, tx_max=256)
    assert nic.channels == Channels(combined=4, combined_max=4)


def test_kvm_virtio_rx_tx_split():
    nic = inventory(KVM).nic("ens3")
    expected = {}
    for q in range(4):
        one = frozenset({q})
        expected[("rx", q)] = (27 + 2 * q, one, one, one)
        expected[("tx", q)] = (28 + 2 * q, one, one, one)
    assert irq_table(nic) == expected
    # combined first (none), then rx by queue, then tx by queue
    assert [q.name for q in nic.irqs] == [f"virtio1-input.{q}" for q in range(4)] + [
        f"virtio1-output.{q}" for q in range(4)
    ]
    assert {q.family for q in nic.irqs} == {"virtio rx", "virtio tx"}
    assert {q.node for q in nic.irqs} == {-1}
    # virtio1-config (26), virtio-rng's virtio0-input (25) and virtio-blk's req.N are not queues
    assert {q.irq for q in nic.irqs}.isdisjoint({24, 25, 26, 35, 36, 37, 38, 39})


def test_kvm_irqbalance_absent_and_stats():
    inv = inventory(KVM)
    irqb = inv.irqbalance
    assert (irqb.running, irqb.pid, irqb.enabled, irqb.config_file) == (False, None, False, None)
    assert irqb.banned_cpus == frozenset() and irqb.banned_irqs == frozenset()
    stats = Host.open(str(HOSTS / KVM)).ethtool.stats("ens3")
    assert stats is not None
    assert [stats[f"rx_queue_{q}_drops"] for q in range(4)] == [0, 0, 37, 0]


# ======================================================================== aws-ena-c5n



def test_aws_cpus_smt():
    inv = inventory(AWS)
    assert inv.kernel == "6.1.72-96.166.amzn2023.x86_64"
    cpus = inv.cpus
    assert cpus.online == frozenset(range(8))
    assert cpus.smt_active
    for c in cpus.cpus:
        assert c.siblings == {c.id % 4, c.id % 4 + 4}
        assert c.core == c.id % 4 and c.package == 0 and c.node == 0
        assert c.is_primary_thread == (c.id < 4)
    assert cpus.nohz_full == frozenset()  # "(null)"
    assert cpus.isolated == frozenset()
    assert [(n.id, n.cpus) for n in cpus.nodes] == [(0, frozenset(range(8)))]


def test_aws_ena():
    inv = inventory(AWS)
    assert [n.name for n in inv.nics] == ["ens5", "lo"]
    nic = inv.nic("ens5")
    assert (nic.kind, nic.driver, nic.bus, nic.numa_node) == ("physical", "ena", "0000:00:05.0", 0)
    assert nic.local_cpus == frozenset(range(8))
    assert (nic.mtu, nic.speed_mbps) == (9001, 25000)
    assert len(nic.rx_queues) == len(nic.tx_queues) == 8
    assert all(q.xps_cpus == frozenset() for q in nic.tx_queues)
    assert nic.rings == RingSizes(rx=1024, tx=1024, rx_max=16384, tx_max=1024)
    assert nic.channels == Channels(combined=8, combined_max=8)
    expected = {
        ("combined", q): (30 + q, frozenset({q}), frozenset({q}), frozenset({q})) for q in range(8)
    }
    assert irq_table(nic) == expected
    assert [q.name for q in nic.irqs] == [f"ens5-Tx-Rx-{q}" for q in range(8)]
    assert {q.family for q in nic.irqs} == {"ena"}
    assert 29 not in {q.irq for q in nic.irqs}  # ena-mgmnt@pci:0000:00:05.0


def test_aws_irqbalance_installed_not_running():
    irqb = inventory(AWS).irqbalance
    assert (irqb.running, irqb.pid, irqb.enabled) == (False, None, False)
    assert irqb.config_file == "/etc/sysconfig/irqbalance"
    assert irqb.banned_cpus == frozenset() and irqb.banned_irqs == frozenset()


# ======================================================================== tiny-veth-bond



def test_tiny_offline_cpu():
    cpus = inventory(TINY).cpus
    assert [c.id for c in cpus.cpus] == [0, 1]
    assert cpus.online == frozenset({0})
    assert cpus.possible == frozenset({0, 1})
    cpu0, cpu1 = cpus.cpus
    assert (cpu0.online, cpu0.package, cpu0.core, cpu0.siblings) == (True, 0, 0, frozenset({0}))
    # An offline CPU has no topology directory: nothing but its id is known.
    assert (cpu1.online, cpu1.package, cpu1.core, cpu1.siblings) == (
        False,
        None,
        None,
        frozenset({1}),
    )
    assert not cpus.smt_active
    # No NUMA in this kernel: one implicit node holding every CPU.
    assert [(n.id, n.cpus) for n in cpus.nodes] == [(0, frozenset({0, 1}))]
    assert cpus.housekeeping == frozenset({0})
    assert cpus.default_irq_affinity == frozenset({0, 1})
    assert cpus.cmdline.get("maxcpus") == "1"


def test_tiny_nics_without_queue_irqs():
    inv = inventory(TINY)
    # bonding_masters is a file in /sys/class/net, not an interface
    assert [n.name for n in inv.nics] == ["bond0", "bond0.100", "eth0", "lo", "veth0"]
    assert all(n.irqs == () for n in inv.nics)


def test_tiny_e1000_legacy_interrupt():
    nic = inventory(TINY).nic("eth0")
    assert (nic.kind, nic.driver, nic.bus) == ("physical", "e1000", "0000:00:03.0")
    assert nic.numa_node is None  # CONFIG_NUMA=n: no attribute
    assert nic.local_cpus == frozenset({0})
    assert (nic.speed_mbps, nic.mtu, nic.address) == (1000, 1500, "52:54:00:12:34:56")
    assert len(nic.rx_queues) == len(nic.tx_queues) == 1
    assert nic.tx_queues[0].xps_cpus is None
    assert nic.rings == RingSizes(rx=256, tx=256, rx_max=4096, tx_max=4096)
    assert nic.channels is None
    assert nic.lower == ()


def test_tiny_bond_and_vlan():
    inv = inventory(TINY)
    bond = inv.nic("bond0")
    assert (bond.kind, bond.driver, bond.bus, bond.numa_node, bond.local_cpus) == (
        "bond",
        "bonding",
        None,
        None,
        None,
    )
    assert bond.lower == ("eth0",)
    assert len(bond.rx_queues) == len(bond.tx_queues) == 16
    assert bond.rings is None and bond.channels is None
    vlan = inv.nic("bond0.100")
    assert (vlan.kind, vlan.driver, vlan.bus) == ("vlan", "802.1Q VLAN Support", None)
    assert vlan.lower == ("bond0",)
    assert (vlan.ifindex, vlan.txqueuelen, vlan.speed_mbps) == (4, 0, 1000)


def test_tiny_veth():
    veth = inventory(TINY).nic("veth0")
    assert (veth.kind, veth.driver, veth.bus, veth.numa_node) == ("veth", "veth", None, None)
    assert (veth.ifindex, veth.speed_mbps) == (6, 10000)
    assert len(veth.rx_queues) == len(veth.tx_queues) == 4
    assert veth.rings is None
    assert veth.channels == Channels(rx=4, tx=4, rx_max=4, tx_max=4)
    eth = Host.open(str(HOSTS / TINY)).ethtool
    stats = eth.stats("veth0")
    assert stats is not None
    assert stats["rx_queue_3_drops"] == 112 and stats["peer_ifindex"] == 2
    assert eth.stats("bond0") is None and eth.stats("bond0.100") is None


def test_tiny_irqbalance_unknowable():
    irqb = inventory(TINY).irqbalance
    assert (irqb.running, irqb.enabled, irqb.config_file) == (False, None, None)


def test_only_limits_nics():
    inv = discover_host(Host.open(str(HOSTS / R750)), only=["eno1", "nope"])
    assert [n.name for n in inv.nics] == ["eno1"]


@pytest.mark.parametrize("name", [R750, KVM, AWS, TINY, X710])
def test_every_queue_irq_is_in_msi_irqs_and_named_for_the_nic(name):
    """Cross-check discovered IRQs against the raw tree, independently of lbtune's matching."""
    inv = inventory(name)
    root = HOSTS / name
    for nic in inv.nics:
        if not nic.irqs:
            continue
        dev = root / "sys/class/net" / nic.name / "device"
        pci = dev.resolve()
        if pci.name.startswith("virtio"):
            pci = pci.parent
        msi = {int(p.name) for p in (pci / "msi_irqs").iterdir()}
        assert {q.irq for q in nic.irqs} <= msi
        for q in nic.irqs:
            assert (root / f"proc/irq/{q.irq}/smp_affinity_list").read_text().strip()
