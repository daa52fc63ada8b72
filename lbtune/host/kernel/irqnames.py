"""How drivers name their per-queue interrupt vectors, as data.

Each family says how a /proc/interrupts action name maps to (direction, queue index) for one
NIC. `{dev}` is the interface name, `{bus}` its PCI address, `{virtio}` the virtio device
(`virtio2`). Drivers that name vectors by PCI address (mlx5) are matched by bus, because
their names do not contain the interface.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class IrqNameFamily:
    name: str  # what drivers use it (shown in `lbtune show --json`)
    template: str  # regex with {dev}/{bus}/{virtio} and one group for the queue index
    direction: str  # "combined", "rx" or "tx"


FAMILIES: tuple[IrqNameFamily, ...] = (
    IrqNameFamily("i40e", r"i40e-{dev}-TxRx-(\d+)", "combined"),
    IrqNameFamily("ice", r"ice-{dev}-TxRx-(\d+)", "combined"),
    IrqNameFamily("iavf", r"iavf-{dev}-TxRx-(\d+)", "combined"),
    # idpf_vport_intr_req_irq(): "<driver>-<netdev>-TxRx|Rx|Tx-<vector>" (since 6.7).
    IrqNameFamily("idpf", r"idpf-{dev}-TxRx-(\d+)", "combined"),
    IrqNameFamily("idpf rx", r"idpf-{dev}-Rx-(\d+)", "rx"),
    IrqNameFamily("idpf tx", r"idpf-{dev}-Tx-(\d+)", "tx"),
    IrqNameFamily("ixgbe/igb/bnxt_en", r"{dev}-TxRx-(\d+)", "combined"),
    IrqNameFamily("split rx", r"{dev}-rx-(\d+)", "rx"),
    IrqNameFamily("split tx", r"{dev}-tx-(\d+)", "tx"),
    IrqNameFamily("igb/e1000e rx", r"{dev}-rx(\d+)", "rx"),
    IrqNameFamily("igb/e1000e tx", r"{dev}-tx(\d+)", "tx"),
    # vmxnet3 (VMware guests), nfp and ThunderX nicvf all name queue vectors "-rxtx-N";
    # vmxnet3's "-event-N" and nicvf's "-rbdr-N"/"-qset-err-N" serve no queue.
    IrqNameFamily("vmxnet3/nfp/nicvf", r"{dev}-rxtx-(\d+)", "combined"),
    IrqNameFamily("bnx2x/qede", r"{dev}-fp-(\d+)", "combined"),
    IrqNameFamily("gve", r"{dev}-ntfy-block\.(\d+)", "combined"),
    # gve since 6.x names its notify blocks by PCI address; "gve-mgmnt@pci:<bus>" is not one.
    IrqNameFamily("gve (by bus)", r"gve-ntfy-blk(\d+)@pci:{bus}", "combined"),
    IrqNameFamily("mlx5", r"mlx5_comp(\d+)@pci:{bus}", "combined"),
    # Azure MANA (since the 6.2 fix "net: mana: Fix IRQ name - add PCI and queue number"):
    # "mana_q<N>@pci:<bus>"; its hardware channel "mana_hwc@pci:<bus>" serves no queue.
    IrqNameFamily("mana", r"mana_q(\d+)@pci:{bus}", "combined"),
    # hns3 (HiSilicon): "hns3-<bus>-TxRx-N", or -Rx-/-Tx- when a vector serves one side.
    IrqNameFamily("hns3", r"hns3-{bus}-TxRx-(\d+)", "combined"),
    IrqNameFamily("hns3 rx", r"hns3-{bus}-Rx-(\d+)", "rx"),
    IrqNameFamily("hns3 tx", r"hns3-{bus}-Tx-(\d+)", "tx"),
    # ena_setup_io_intr(): "%s-Tx-Rx-%d" with the netdev name; its management vector is
    # "ena-mgmnt@pci:<bus>" and serves no queue.
    IrqNameFamily("ena", r"{dev}-Tx-Rx-(\d+)", "combined"),
    IrqNameFamily("virtio rx", r"{virtio}-input\.(\d+)", "rx"),
    IrqNameFamily("virtio tx", r"{virtio}-output\.(\d+)", "tx"),
    # cxgb4 (in-tree): "<netdev>-Rx<N>" per ingress queue ("<netdev>-FWeventq" and the
    # offload queues are not NIC queues); Chelsio's own cxgb4 driver: "<netdev> (queue N)".
    IrqNameFamily("cxgb4 rx", r"{dev}-Rx(\d+)", "rx"),
    IrqNameFamily("cxgb4 (Chelsio)", r"{dev} \(queue (\d+)\)", "combined"),
    # sfc and cxgb4vf: "<netdev>-<N>".
    IrqNameFamily("sfc/cxgb4vf", r"{dev}-(\d+)", "combined"),
)


@dataclass(frozen=True)
class QueueIrqName:
    family: str
    direction: str
    queue: int


def match_queue_irq(
    action: str, dev: str, bus: Optional[str], virtio: Optional[str]
) -> Optional[QueueIrqName]:
    """The queue an interrupt action name belongs to, for this NIC; None if it is not one."""
    subs = {"dev": re.escape(dev)}
    for fam in FAMILIES:
        if "{bus}" in fam.template:
            if not bus:
                continue
            subs_f = {**subs, "bus": re.escape(bus)}
        elif "{virtio}" in fam.template:
            if not virtio:
                continue
            subs_f = {**subs, "virtio": re.escape(virtio)}
        else:
            subs_f = subs
        pattern = fam.template.format(**subs_f)
        m = re.fullmatch(pattern, action)
        if m:
            return QueueIrqName(fam.name, fam.direction, int(m.group(1)))
    return None
