"""Driver IRQ naming families: which action names are queues of which NIC, and which are not."""

from __future__ import annotations

import pathlib
from typing import Optional

import pytest

from lbtune.host.kernel.interrupts import parse_interrupts
from lbtune.host.kernel.irqnames import FAMILIES, match_queue_irq

X86_515 = (
    pathlib.Path(__file__).resolve().parent.parent / "data/interrupts/x86-5.15-offline-cpu2.txt"
).read_text()

# (action, dev, bus, virtio) -> (family, direction, queue)
POSITIVE = [
    ("i40e-ens2f0-TxRx-3", "ens2f0", "0000:02:00.0", None, ("i40e", "combined", 3)),
    ("ice-ens5f0-TxRx-0", "ens5f0", "0000:04:00.0", None, ("ice", "combined", 0)),
    ("iavf-eth0-TxRx-1", "eth0", "0000:00:05.0", None, ("iavf", "combined", 1)),
    ("eno1-TxRx-15", "eno1", "0000:18:00.0", None, ("ixgbe/igb/bnxt_en", "combined", 15)),
    ("eno2np0-TxRx-7", "eno2np0", "0000:06:00.0", None, ("ixgbe/igb/bnxt_en", "combined", 7)),
    ("eth2-rx-1", "eth2", "0000:08:00.0", None, ("split rx", "rx", 1)),
    ("eth2-tx-0", "eth2", "0000:08:00.0", None, ("split tx", "tx", 0)),
    ("enp1s0f0-fp-2", "enp1s0f0", "0000:01:00.0", None, ("bnx2x/qede", "combined", 2)),
    ("eth0-rxtx-3", "eth0", "0000:03:00.0", None, ("vmxnet3/nfp/nicvf", "combined", 3)),
    ("ens4-ntfy-block.5", "ens4", "0000:00:04.0", None, ("gve", "combined", 5)),
    ("mlx5_comp7@pci:0000:98:00.0", "ens1f0np0", "0000:98:00.0", None, ("mlx5", "combined", 7)),
    (
        "mlx5_comp63@pci:0003:01:00.0",
        "enP3p1s0f0np0",
        "0003:01:00.0",
        None,
        ("mlx5", "combined", 63),
    ),
    ("ens5-Tx-Rx-4", "ens5", "0000:00:05.0", None, ("ena", "combined", 4)),
    ("virtio1-input.3", "ens3", "0000:00:03.0", "virtio1", ("virtio rx", "rx", 3)),
    ("virtio1-output.0", "ens3", "0000:00:03.0", "virtio1", ("virtio tx", "tx", 0)),
    ("ens1f0-2", "ens1f0", "0000:3b:00.0", None, ("sfc/cxgb4vf", "combined", 2)),
    # Real names from public /proc/interrupts listings (tests/data/interrupts/README.md says
    # where each came from):
    # Azure MANA, netdev list (Shradha Gupta, 2024-03) and scylladb/seastar PR 3195
    ("mana_q0@pci:7870:00:00.0", "eth1", "7870:00:00.0", None, ("mana", "combined", 0)),
    ("mana_q3@pci:7870:00:00.0", "enP30832s1", "7870:00:00.0", None, ("mana", "combined", 3)),
    # hns3, openeuler-mirror/wayca-scheduler README (wayca-irqdump output on Kunpeng 920)
    ("hns3-0000:7d:00.0-TxRx-0", "enp125s0f0", "0000:7d:00.0", None, ("hns3", "combined", 0)),
    ("hns3-0000:bd:00.0-Rx-2", "enp189s0f0", "0000:bd:00.0", None, ("hns3 rx", "rx", 2)),
    ("hns3-0000:bd:00.0-Tx-2", "enp189s0f0", "0000:bd:00.0", None, ("hns3 tx", "tx", 2)),
    # gve by PCI address (gVNIC lines in an open-source Go IRQ tuner's tests; see the README)
    ("gve-ntfy-blk1@pci:0000:00:08.0", "ens4", "0000:00:08.0", None,
     ("gve (by bus)", "combined", 1)),
    # vmxnet3 in VMware guests (several public blog listings: "ens160-rxtx-0")
    ("ens160-rxtx-2", "ens160", "0000:03:00.0", None, ("vmxnet3/nfp/nicvf", "combined", 2)),
    # idpf: kernel commit 3cc88e8405b8 ("idpf: fix memleak in vport interrupt configuration")
    ("idpf-ens6-TxRx-4", "ens6", "0000:00:06.0", None, ("idpf", "combined", 4)),
    ("idpf-ens6-Rx-1", "ens6", "0000:00:06.0", None, ("idpf rx", "rx", 1)),
    ("idpf-ens6-Tx-1", "ens6", "0000:00:06.0", None, ("idpf tx", "tx", 1)),
    # cxgb4: in-tree setup_sge_queues() "%s-Rx%d"; Chelsio's driver on a T62100 "ext1 (queue N)"
    ("enp4s0f4-Rx3", "enp4s0f4", "0000:04:00.4", None, ("cxgb4 rx", "rx", 3)),
    ("ext1 (queue 15)", "ext1", "0000:08:00.4", None, ("cxgb4 (Chelsio)", "combined", 15)),
]

NEGATIVE = [
    # other interface whose name starts or ends alike
    ("eth10-TxRx-0", "eth1", "0000:05:00.0", None),
    ("eth1-TxRx-0", "eth10", "0000:06:00.0", None),
    ("i40e-ens2f0-TxRx-3", "ens2f", "0000:02:00.0", None),
    ("i40e-ens2f01-TxRx-3", "ens2f0", "0000:02:00.0", None),
    # vectors of the NIC that serve no queue
    ("eno1", "eno1", "0000:18:00.0", None),  # ixgbe/igb link ("other") vector
    ("i40e-0000:02:00.0:misc", "ens2f0", "0000:02:00.0", None),
    ("mlx5_async0@pci:0000:98:00.0", "ens1f0np0", "0000:98:00.0", None),
    ("ena-mgmnt@pci:0000:00:05.0", "ens5", "0000:00:05.0", None),
    ("virtio1-config", "ens3", "0000:00:03.0", "virtio1"),
    # the other PCI function of the same card
    ("mlx5_comp0@pci:0000:98:00.1", "ens1f0np0", "0000:98:00.0", None),
    ("mlx5_comp0@pci:0000:98:00.0", "ens1f0np0", None, None),  # bus unknown: cannot claim it
    # other virtio devices
    ("virtio10-input.0", "ens3", "0000:00:03.0", "virtio1"),
    ("virtio0-input", "ens3", "0000:00:03.0", "virtio1"),  # virtio-rng's queue
    ("virtio1-input.0", "ens3", "0000:00:03.0", None),
    ("virtio2-req.0", "ens3", "0000:00:03.0", "virtio1"),
    # vectors of these drivers that serve no queue
    ("mana_hwc@pci:7870:00:00.0", "eth1", "7870:00:00.0", None),
    ("mana_q0@pci:7870:00:00.1", "eth1", "7870:00:00.0", None),  # another function
    ("gve-mgmnt@pci:0000:00:08.0", "ens4", "0000:00:08.0", None),
    ("ens34-event-2", "ens34", "0000:02:02.0", None),  # vmxnet3 event vector
    ("enp5s0f1-rbdr-0", "enp5s0f1", "0000:05:00.1", None),  # nicvf buffer ring
    ("enp4s0f4-FWeventq", "enp4s0f4", "0000:04:00.4", None),
    ("0000:08:00.4-ofld3", "ext1", "0000:08:00.4", None),
    ("ext10 (queue 1)", "ext1", "0000:08:00.4", None),
    ("hns3-0000:7d:00.1-TxRx-0", "enp125s0f0", "0000:7d:00.0", None),
    # not NICs at all / malformed
    ("nvme0q1", "ens3", "0000:00:04.0", None),
    ("eno1-TxRx-", "eno1", "0000:18:00.0", None),
    ("eno1-TxRx-1 ", "eno1", "0000:18:00.0", None),
    ("eth0.100-TxRx-0", "eth0x100", "0000:00:03.0", None),  # dots in names are literal
    ("eth0x100-TxRx-0", "eth0.100", "0000:00:03.0", None),
]


@pytest.mark.parametrize(("action", "dev", "bus", "virtio", "want"), POSITIVE)
def test_queue_names(action: str, dev: str, bus: Optional[str], virtio: Optional[str], want):
    m = match_queue_irq(action, dev, bus, virtio)
    assert m is not None, action
    assert (m.family, m.direction, m.queue) == want


@pytest.mark.parametrize(("action", "dev", "bus", "virtio"), NEGATIVE)
def test_not_queue_names(action: str, dev: str, bus: Optional[str], virtio: Optional[str]):
    assert match_queue_irq(action, dev, bus, virtio) is None


MANA = (
    pathlib.Path(__file__).resolve().parent.parent / "data/interrupts/azure-mana-6.5.txt"
).read_text()


def test_mana_queue_irqs_in_azure_interrupts():
    """An Azure VM's MANA queues (issue 9 item 13): four queue vectors, not the hardware
    channel, not the other PCI function's."""
    assert queue_irqs(MANA, "enP30832s1", "7870:00:00.0") == {
        25: ("combined", 0),
        26: ("combined", 1),
        27: ("combined", 2),
        28: ("combined", 3),
    }


def test_every_family_is_exercised():
    assert {w[0] for *_, w in POSITIVE} == {f.name for f in FAMILIES} - {
        "igb/e1000e rx",
        "igb/e1000e tx",
    }


def queue_irqs(text: str, dev: str, bus: Optional[str]) -> dict[int, tuple[str, int]]:
    out = {}
    for irq, line in parse_interrupts(text).items():
        for action in line.actions:
            m = match_queue_irq(action, dev, bus, None)
            if m:
                out[irq] = (m.direction, m.queue)
    return out


def test_queue_irqs_in_a_real_interrupts_file():
    """Every NIC in one /proc/interrupts gets exactly its own queue vectors."""
    assert queue_irqs(X86_515, "ens2f0", "0000:02:00.0") == {
        41: ("combined", 0),
        42: ("combined", 1),
    }
    assert queue_irqs(X86_515, "ens5f0", "0000:04:00.0") == {51: ("combined", 0)}
    assert queue_irqs(X86_515, "eno2np0", "0000:06:00.0") == {
        60: ("combined", 0),
        61: ("combined", 1),
    }
    assert queue_irqs(X86_515, "eth2", "0000:08:00.0") == {
        71: ("rx", 0),
        72: ("rx", 1),
        73: ("tx", 0),
        74: ("tx", 1),
    }
    assert queue_irqs(X86_515, "ens1f0np0", "0000:98:00.0") == {81: ("combined", 0)}
    assert queue_irqs(X86_515, "ens1f1np1", "0000:98:00.1") == {82: ("combined", 0)}
    assert queue_irqs(X86_515, "eth1", None) == {90: ("combined", 0)}
    assert queue_irqs(X86_515, "eth10", None) == {91: ("combined", 0)}
