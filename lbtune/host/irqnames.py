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
    IrqNameFamily("ixgbe/igb/bnxt_en", r"{dev}-TxRx-(\d+)", "combined"),
    IrqNameFamily("split rx", r"{dev}-rx-(\d+)", "rx"),
    IrqNameFamily("split tx", r"{dev}-tx-(\d+)", "tx"),
    IrqNameFamily("igb/e1000e rx", r"{dev}-rx(\d+)", "rx"),
    IrqNameFamily("igb/e1000e tx", r"{dev}-tx(\d+)", "tx"),
    IrqNameFamily("nfp", r"{dev}-rxtx-(\d+)", "combined"),
    IrqNameFamily("bnx2x/qede", r"{dev}-fp-(\d+)", "combined"),
    IrqNameFamily("gve", r"{dev}-ntfy-block\.(\d+)", "combined"),
    IrqNameFamily("mlx5", r"mlx5_comp(\d+)@pci:{bus}", "combined"),
    # ena_setup_io_intr(): "%s-Tx-Rx-%d" with the netdev name; its management vector is
    # "ena-mgmnt@pci:<bus>" and serves no queue.
    IrqNameFamily("ena", r"{dev}-Tx-Rx-(\d+)", "combined"),
    IrqNameFamily("virtio rx", r"{virtio}-input\.(\d+)", "rx"),
    IrqNameFamily("virtio tx", r"{virtio}-output\.(\d+)", "tx"),
    IrqNameFamily("sfc", r"{dev}-(\d+)", "combined"),
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
