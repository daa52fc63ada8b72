"""What each NIC driver's `ethtool -S` counters mean: per-queue name patterns and drop counters.

Data only. Every driver names its statistics its own way (`rx5_packets`, `rx_queue_5_packets`,
`rx-5.packets`, `queue_5_rx_cnt`, `[5]: rx_ucast_packets`) and counts drops at different places
(the receive ring, the NIC's FIFO, the port buffer, a cloud policer). A `DriverMap` says, for one
driver, which names are per-queue counters (and of which queue, direction and kind) and which
device-level counters are drops, where the packet died and which knob helps. Adding a driver is
adding an entry to `DRIVERS`; `lbtune.observe.nicstats` applies the maps.

Names come from the drivers' ethtool string tables (drivers/net/ethernet/.../*_ethtool.c,
drivers/net/virtio_net.c, drivers/net/veth.c, the ENA and bnxt_en drivers) of 5.4-6.x kernels;
where a driver renamed counters both spellings are listed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping, Optional, Pattern

# Where a packet counted by a device-level drop counter died.
RING = "ring"  # the receive ring had no free descriptor/buffer: the host did not refill in time
FIFO = "fifo"  # the NIC's on-chip packet buffer overflowed before DMA to the host
PORT_BUFFER = "port-buffer"  # the port's receive buffer was full (congestion inside the NIC)
POLICER = "policer"  # dropped or shaped upstream by a rate/allowance limit (cloud ENI limits)
OTHER = "other"

# The knob that helps (names of lbtune's knob kinds where one applies).
KNOB_RINGS = "rings"  # bigger rx ring (`ethtool -G`, profile key rings.rx)
KNOB_CHANNELS_IRQ = "channels/irq"  # more queues, IRQs spread over more CPUs, on the NIC's node
KNOB_NONE_UPSTREAM = "none (upstream)"  # nothing on this host: a bigger instance or less traffic
KNOB_NONE = "none"


@dataclass(frozen=True)
class QueueNaming:
    """One naming shape of a driver's per-queue counters.

    `pattern` must fully match a counter name and has named groups `q` (queue index), `name`
    (the counter within the queue) and `dir` ("rx"/"tx") unless `direction` is fixed. `fields`
    maps `name` to "packets", "bytes", "drops" or another kind; names not listed are kept as
    extra counters under their own name. Several names mapping to one field are summed (bnxt
    counts unicast, multicast and broadcast packets separately).
    """

    pattern: Pattern[str]
    fields: Mapping[str, str] = field(default_factory=dict)
    direction: Optional[str] = None


@dataclass(frozen=True)
class NicDrop:
    """A device-level counter of packets the NIC (or the network in front of it) dropped."""

    name: str  # exact `ethtool -S` name
    meaning: str  # one sentence for the report
    where: str  # RING, FIFO, PORT_BUFFER, POLICER, OTHER
    knob: str  # KNOB_* (what to change), or a short text
    direction: str = "rx"


@dataclass(frozen=True)
class DriverMap:
    """How to read one driver's `ethtool -S` output."""

    driver: str  # as `ethtool -i` and the sysfs driver link name it
    queues: tuple[QueueNaming, ...]
    drops: tuple[NicDrop, ...] = ()
    note: str = ""  # caveats shown with findings, e.g. what the packet counter really counts

    def drop(self, name: str) -> Optional[NicDrop]:
        """The drop counter called `name`, if this driver has one."""
        for d in self.drops:
            if d.name == name:
                return d
        return None


def _q(pattern: str, direction: Optional[str] = None, **fields: str) -> QueueNaming:
    return QueueNaming(re.compile(pattern), dict(fields), direction)


# Common field maps.
_PB = {"packets": "packets", "bytes": "bytes"}
_PBD = {**_PB, "drops": "drops"}

# ---------------------------------------------------------------------------- drivers

MLX5 = DriverMap(
    driver="mlx5_core",
    queues=(
        # rx5_packets, rx5_bytes, rx5_xdp_drop, rx5_buff_alloc_err; tx5_packets, tx5_dropped
        # (tx: DMA mapping failures). ch5_* (events, polls) have no direction and are skipped;
        # rx5_xsk_* and rx5_xdp_tx_* stay extras under their own names.
        QueueNaming(
            re.compile(r"(?P<dir>rx|tx)(?P<q>\d+)_(?P<name>.+)"),
            {**_PB, "dropped": "drops"},
        ),
    ),
    drops=(
        NicDrop(
            "rx_out_of_buffer",
            "Packets dropped because a receive queue had no free buffer: the driver did not "
            "refill the ring in time (CPU busy or ring too small).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_discards_phy",
            "Packets the port discarded because the NIC's receive buffer was full: the adapter "
            "is congested and cannot move packets to the host fast enough.",
            PORT_BUFFER,
            KNOB_CHANNELS_IRQ,
        ),
        NicDrop(
            "rx_buff_alloc_err",
            "Receive buffers the driver failed to allocate (host memory pressure); the ring "
            "runs empty and rx_out_of_buffer follows.",
            OTHER,
            KNOB_NONE,
        ),
        NicDrop(
            "rx_oversize_pkts_sw_drop",
            "Packets the driver dropped for being larger than the configured MTU/buffer.",
            OTHER,
            KNOB_NONE,
        ),
        NicDrop(
            "tx_queue_dropped",
            "Transmit packets dropped by the driver (DMA mapping failure).",
            OTHER,
            KNOB_NONE,
            "tx",
        ),
    ),
    note="rxN_xdp_drop counts an XDP program's verdicts, not loss.",
)

IXGBE = DriverMap(
    driver="ixgbe",
    queues=(_q(r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<name>.+)", **_PB),),
    drops=(
        NicDrop(
            "rx_missed_errors",
            "Packets lost because the NIC's receive FIFO overflowed: descriptors were not "
            "returned fast enough (all rings full, interrupts or PCIe too slow).",
            FIFO,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_no_dma_resources",
            "Packets dropped because the target queue had no free receive descriptor (ring "
            "full; per-queue drop enable).",
            RING,
            KNOB_RINGS,
        ),
    ),
)

I40E = DriverMap(
    driver="i40e",
    queues=(
        # rx-5.packets, tx-5.bytes; before 4.x: tx-5.tx_packets, rx-5.rx_bytes
        _q(
            r"(?P<dir>rx|tx)-(?P<q>\d+)\.(?P<name>.+)",
            **_PB,
            rx_packets="packets",
            rx_bytes="bytes",
            tx_packets="packets",
            tx_bytes="bytes",
        ),
    ),
    drops=(
        NicDrop(
            "port.rx_discards",
            "Packets the port discarded because no receive descriptor was available on the "
            "target queue (the host did not refill the ring in time).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "port.rx_dropped",  # the same counter before it was renamed port.rx_discards
            "Packets the port discarded because no receive descriptor was available "
            "(older name of port.rx_discards).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_dropped",
            "Packets this function (VSI) dropped: no buffer on its queues, or filtered or "
            "unknown protocol in the stack.",
            OTHER,
            KNOB_RINGS,
        ),
    ),
)

ICE = DriverMap(
    driver="ice",
    queues=(
        _q(r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<name>.+)", **_PB),
        # before 5.x: rx-queue-5.rx_packets
        _q(
            r"(?P<dir>rx|tx)-queue-(?P<q>\d+)\.(?P<name>.+)",
            rx_packets="packets",
            rx_bytes="bytes",
            tx_packets="packets",
            tx_bytes="bytes",
        ),
    ),
    drops=(
        NicDrop(
            "rx_dropped.nic",
            "Packets the port discarded because no receive descriptor was available on the "
            "target queue (ring empty).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_dropped",
            "Packets this function (VSI) dropped: no buffer on its queues, or filtered or "
            "unknown protocol in the stack.",
            OTHER,
            KNOB_RINGS,
        ),
    ),
)

IGB = DriverMap(
    driver="igb",
    # rx_queue_5_drops: packets dropped for lack of descriptors on that queue (RQDPC)
    queues=(_q(r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<name>.+)", **_PBD),),
    drops=(
        NicDrop(
            "rx_missed_errors",
            "Packets lost because the NIC's receive FIFO overflowed before DMA to the host.",
            FIFO,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
    ),
)

E1000 = DriverMap(
    driver="e1000",
    queues=(),  # one queue each way and no per-queue counters
    drops=(
        NicDrop(
            "rx_missed_errors",
            "Packets lost because the NIC's receive FIFO overflowed (the ring had no free "
            "descriptors long enough).",
            FIFO,
            KNOB_RINGS,
        ),
    ),
)
E1000E = DriverMap(driver="e1000e", queues=(), drops=E1000.drops)

VIRTIO_NET = DriverMap(
    driver="virtio_net",
    queues=(
        # up to 6.9: rx_queue_5_packets, rx_queue_5_drops, tx_queue_5_packets ...
        _q(r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<name>.+)", **_PBD),
        # 6.10+: rx5_drops, rx5_kicks, device stats rx5_hw_drops ... (packets and bytes
        # moved to netlink queue stats; this project's 6.18 build machine shows no rx5_packets)
        _q(r"(?P<dir>rx|tx)(?P<q>\d+)_(?P<name>.+)", **_PBD),
    ),
    drops=(),  # per-queue drops only (driver receive errors); the device counts nothing more
    note="virtio drops are per queue (rx_queue_N_drops): packets the guest driver dropped. "
    "From 6.10 ethtool has no per-queue packet counts (they moved to netlink queue stats).",
)

VETH = DriverMap(
    driver="veth",
    queues=(
        # rx_queue_5_xdp_packets/xdp_bytes/drops/xdp_redirect/xdp_drops/xdp_tx/xdp_tx_errors,
        # tx_queue_5_xdp_xmit/xdp_xmit_errors (drivers/net/veth.c, 5.9+); 5.5-5.8 used
        # rx_queue_5_rx_drops.
        _q(
            r"(?P<dir>rx|tx)_queue_(?P<q>\d+)_(?P<name>.+)",
            xdp_packets="packets",
            xdp_bytes="bytes",
            drops="drops",
            rx_drops="drops",
        ),
    ),
    drops=(),
    note="veth counts per-queue packets and drops only while its NAPI path is active (an XDP "
    "program or GRO on the device).",
)

ENA = DriverMap(
    driver="ena",
    queues=(
        # queue_5_rx_cnt, queue_5_rx_bytes, queue_5_tx_cnt, queue_5_rx_page_alloc_fail ...
        _q(r"queue_(?P<q>\d+)_(?P<dir>rx|tx)_(?P<name>.+)", cnt="packets", bytes="bytes"),
    ),
    drops=tuple(
        NicDrop(name, meaning, POLICER, KNOB_NONE_UPSTREAM, direction)
        for name, meaning, direction in (
            (
                "bw_in_allowance_exceeded",
                "Packets queued or dropped because inbound bandwidth exceeded the instance's "
                "allowance.",
                "rx",
            ),
            (
                "bw_out_allowance_exceeded",
                "Packets queued or dropped because outbound bandwidth exceeded the instance's "
                "allowance.",
                "tx",
            ),
            (
                "pps_allowance_exceeded",
                "Packets queued or dropped because bidirectional packets per second exceeded "
                "the instance's allowance.",
                "rx",
            ),
            (
                "conntrack_allowance_exceeded",
                "Packets dropped because the instance's connection-tracking allowance was "
                "exhausted (security-group tracked flows).",
                "rx",
            ),
            (
                "linklocal_allowance_exceeded",
                "Packets dropped because traffic to link-local services (DNS, metadata, NTP) "
                "exceeded its packets-per-second limit.",
                "tx",
            ),
        )
    ),
    note="ENA allowance counters are the cloud's policer in front of the instance.",
)

BNXT = DriverMap(
    driver="bnxt_en",
    queues=(
        # [5]: rx_ucast_packets, [5]: rx_mcast_packets, [5]: rx_discards, [5]: tx_ucast_bytes
        _q(
            r"\[(?P<q>\d+)\]: (?P<dir>rx|tx)_(?P<name>.+)",
            ucast_packets="packets",
            mcast_packets="packets",
            bcast_packets="packets",
            ucast_bytes="bytes",
            mcast_bytes="bytes",
            bcast_bytes="bytes",
            discards="drops",
        ),
    ),
    drops=(
        NicDrop(
            "rx_total_discard_pkts",
            "Packets the NIC discarded because a receive ring had no free buffer (sum of the "
            "per-ring rx_discards).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_total_ring_discards",  # 6.3+ name of the same sum
            "Packets the NIC discarded because a receive ring had no free buffer (sum of the "
            "per-ring rx_discards).",
            RING,
            f"{KNOB_RINGS}, {KNOB_CHANNELS_IRQ}",
        ),
        NicDrop(
            "rx_total_oom_discards",
            "Packets dropped because the driver could not allocate a buffer (host memory).",
            OTHER,
            KNOB_NONE,
        ),
    ),
)

VMXNET3 = DriverMap(
    driver="vmxnet3",
    queues=(
        # vmxnet3 repeats the names in each queue's section; lbtune.host.net.ethtool qualifies
        # them as "Rx Queue#5: pkts rx OOB" (the Nth "Rx Queue#" header is queue N).
        _q(
            r"Rx Queue#(?P<q>\d+): (?P<name>.+)",
            "rx",
            **{
                "ucast pkts rx": "packets",
                "mcast pkts rx": "packets",
                "bcast pkts rx": "packets",
                "ucast bytes rx": "bytes",
                "mcast bytes rx": "bytes",
                "bcast bytes rx": "bytes",
                # out of buffers: a frame arrived when the queue's ring had no free buffer
                "pkts rx OOB": "drops",
            },
        ),
        _q(
            r"Tx Queue#(?P<q>\d+): (?P<name>.+)",
            "tx",
            **{
                "ucast pkts tx": "packets",
                "mcast pkts tx": "packets",
                "bcast pkts tx": "packets",
                "ucast bytes tx": "bytes",
                "mcast bytes tx": "bytes",
                "bcast bytes tx": "bytes",
                "pkts tx discard": "drops",
            },
        ),
    ),
    note="pkts rx OOB (per queue) counts frames that found the queue's rx ring without a "
    "free buffer; the netdev's rx_dropped does not include them.",
)

DRIVERS: dict[str, DriverMap] = {
    m.driver: m
    for m in (MLX5, IXGBE, I40E, ICE, IGB, E1000, E1000E, VIRTIO_NET, VETH, ENA, BNXT, VMXNET3)
}


def driver_map(driver: Optional[str]) -> Optional[DriverMap]:
    """The map for a driver name (`ethtool -i` / sysfs), None when lbtune does not know it."""
    if not driver:
        return None
    return DRIVERS.get(driver)


# ---------------------------------------------------------------------------- pause frames

# Direction of a pause-frame counter: RX_PAUSE counts pause frames the NIC received (the switch
# or the link partner asked this host to stop sending: congestion upstream); TX_PAUSE counts
# pause frames it sent (its own receive buffer was filling: the host asked the switch to hold
# traffic, so the loss happens in the switch, where this host's counters do not see it).
RX_PAUSE = "rx"
TX_PAUSE = "tx"


@dataclass(frozen=True)
class PauseCounter:
    """An `ethtool -S` counter of IEEE 802.3x pause frames (XON and XOFF alike)."""

    name: str
    direction: str  # RX_PAUSE or TX_PAUSE


def _pause(rx: tuple[str, ...], tx: tuple[str, ...]) -> tuple[PauseCounter, ...]:
    return tuple(PauseCounter(n, RX_PAUSE) for n in rx) + tuple(
        PauseCounter(n, TX_PAUSE) for n in tx
    )


# Link-level pause counters by driver, from the drivers' ethtool string tables (e1000e,
# igb, igc, ixgbe: *_flow_control_xon/xoff; i40e: port.link_xon/xoff_rx/tx; ice: the
# same with ".nic" (and without, in older out-of-tree releases); mlx5: the physical port's
# pause control frames; bnxt_en: rx/tx_pause_frames). ena, virtio_net, veth and vmxnet3
# have none: no pause frames on their links (or none the guest can see).
_INTEL_FC = _pause(
    ("rx_flow_control_xon", "rx_flow_control_xoff"),
    ("tx_flow_control_xon", "tx_flow_control_xoff"),
)
PAUSE_COUNTERS: dict[str, tuple[PauseCounter, ...]] = {
    "e1000": _INTEL_FC,
    "e1000e": _INTEL_FC,
    "igb": _INTEL_FC,
    "igc": _INTEL_FC,
    "ixgbe": _INTEL_FC,
    "i40e": _pause(
        ("port.link_xon_rx", "port.link_xoff_rx"), ("port.link_xon_tx", "port.link_xoff_tx")
    ),
    "ice": _pause(
        ("link_xon_rx.nic", "link_xoff_rx.nic", "link_xon_rx", "link_xoff_rx"),
        ("link_xon_tx.nic", "link_xoff_tx.nic", "link_xon_tx", "link_xoff_tx"),
    ),
    "mlx5_core": _pause(("rx_pause_ctrl_phy",), ("tx_pause_ctrl_phy",)),
    "bnxt_en": _pause(("rx_pause_frames",), ("tx_pause_frames",)),
}


def pause_counters(driver: Optional[str]) -> tuple[PauseCounter, ...]:
    """The pause-frame counters of a driver, () when it has none lbtune knows."""
    return PAUSE_COUNTERS.get(driver or "", ())
