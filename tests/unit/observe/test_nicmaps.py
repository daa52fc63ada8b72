"""Driver maps against real `ethtool -S` names of each driver (per queue and device drops)."""

from __future__ import annotations

import pytest

from lbtune.observe.model import QueueCounters
from lbtune.observe.nicmaps import DRIVERS, driver_map
from lbtune.observe.nicstats import map_queue_counters, nic_drop_counters

WHERE = {"ring", "fifo", "port-buffer", "policer", "other"}


def queues(driver: str, stats: dict[str, int]) -> dict[tuple[str, int], QueueCounters]:
    return {(q.direction, q.queue): q for q in map_queue_counters(driver, stats)}


def test_every_map_is_well_formed() -> None:
    for name, dm in DRIVERS.items():
        assert dm.driver == name
        for naming in dm.queues:
            assert {"q", "name"} <= set(naming.pattern.groupindex), name
            assert naming.direction in ("rx", "tx") or "dir" in naming.pattern.groupindex
        for d in dm.drops:
            assert d.where in WHERE and d.direction in ("rx", "tx"), (name, d.name)
            assert d.meaning.endswith(".") and d.knob, (name, d.name)
        assert len({d.name for d in dm.drops}) == len(dm.drops)


def test_lookup() -> None:
    assert driver_map(None) is None and driver_map("") is None and driver_map("e100") is None
    mlx5 = driver_map("mlx5_core")
    assert mlx5 is not None
    d = mlx5.drop("rx_out_of_buffer")
    assert d is not None and (d.where, d.direction) == ("ring", "rx") and "rings" in d.knob
    assert mlx5.drop("rx_buffer_passed_thres_phy") is None  # a threshold event, not a drop
    assert map_queue_counters("e100", {"rx_queue_0_packets": 1}) == ()
    assert nic_drop_counters(None, {"rx_missed_errors": 1}) == {}


def test_mlx5() -> None:
    stats = {
        "rx_packets": 300,
        "rx5_packets": 200,
        "rx5_bytes": 20000,
        "rx5_xdp_drop": 3,
        "rx5_buff_alloc_err": 1,
        "rx5_xsk_packets": 9,
        "rx0_packets": 100,
        "tx5_packets": 50,
        "tx5_bytes": 5000,
        "tx5_dropped": 2,
        "ch5_events": 77,
        "rx_out_of_buffer": 1200000,
        "rx_discards_phy": 17,
        "rx_buffer_passed_thres_phy": 5,
        "rx_xdp_drop": 3,
    }
    q = queues("mlx5_core", stats)
    assert set(q) == {("rx", 0), ("rx", 5), ("tx", 5)}  # ch5_* has no direction
    rx5 = q[("rx", 5)]
    assert (rx5.packets, rx5.bytes, rx5.drops) == (200, 20000, None)
    # XDP verdicts, allocation failures and XSK packets stay extras, never "packets"/"drops"
    assert rx5.extra == {"xdp_drop": 3, "buff_alloc_err": 1, "xsk_packets": 9}
    assert (q[("tx", 5)].packets, q[("tx", 5)].drops) == (50, 2)
    drops = nic_drop_counters("mlx5_core", stats)
    assert drops == {"rx_out_of_buffer": 1200000, "rx_discards_phy": 17}
    dm = driver_map("mlx5_core")
    assert dm is not None
    phy = dm.drop("rx_discards_phy")
    assert phy is not None and phy.where == "port-buffer"


def test_ixgbe() -> None:
    stats = {
        "rx_packets": 10,
        "rx_queue_0_packets": 4,
        "rx_queue_0_bytes": 400,
        "rx_queue_11_packets": 6,
        "tx_queue_11_packets": 8,
        "tx_queue_11_bytes": 800,
        "rx_missed_errors": 5521,
        "rx_no_dma_resources": 312,
        "tx_pb_0_pxon": 1,
        "rx_pb_7_pxoff": 2,
        "fdir_miss": 3,
    }
    q = queues("ixgbe", stats)
    assert set(q) == {("rx", 0), ("rx", 11), ("tx", 11)}
    assert q[("rx", 11)].packets == 6 and q[("rx", 11)].drops is None
    assert q[("tx", 11)].bytes == 800
    assert nic_drop_counters("ixgbe", stats) == {
        "rx_missed_errors": 5521,
        "rx_no_dma_resources": 312,
    }
    dm = driver_map("ixgbe")
    assert dm is not None
    wheres = {d.name: d.where for d in dm.drops}
    assert wheres == {"rx_missed_errors": "fifo", "rx_no_dma_resources": "ring"}


def test_i40e_both_spellings() -> None:
    stats = {
        "rx-5.packets": 11,
        "rx-5.bytes": 1100,
        "tx-5.packets": 12,
        "tx-5.bytes": 1200,
        "port.rx_discards": 44,
        "rx_dropped": 3,
        "veb.rx_bytes": 9,
        "port.tx_dropped_link_down": 1,
    }
    q = queues("i40e", stats)
    assert (q[("rx", 5)].packets, q[("rx", 5)].bytes, q[("tx", 5)].packets) == (11, 1100, 12)
    assert nic_drop_counters("i40e", stats) == {"port.rx_discards": 44, "rx_dropped": 3}
    old = queues("i40e", {"tx-0.tx_packets": 5, "rx-0.rx_packets": 6, "rx-0.rx_bytes": 60})
    assert (old[("tx", 0)].packets, old[("rx", 0)].packets, old[("rx", 0)].bytes) == (5, 6, 60)


def test_ice() -> None:
    stats = {
        "rx_queue_5_packets": 7,
        "rx_queue_5_bytes": 700,
        "tx_queue_5_packets": 8,
        "rx_dropped.nic": 21,
        "rx_dropped": 2,
        "rx_crc_errors.nic": 0,
    }
    q = queues("ice", stats)
    assert (q[("rx", 5)].packets, q[("tx", 5)].packets) == (7, 8)
    assert nic_drop_counters("ice", stats) == {"rx_dropped.nic": 21, "rx_dropped": 2}
    old = queues("ice", {"rx-queue-3.rx_packets": 4, "tx-queue-3.tx_bytes": 40})
    assert (old[("rx", 3)].packets, old[("tx", 3)].bytes) == (4, 40)


def test_virtio_net_both_generations() -> None:
    # up to 6.9 (drivers/net/virtio_net.c virtnet_rq_stats_desc)
    old = {
        "rx_queue_1_packets": 500,
        "rx_queue_1_bytes": 50000,
        "rx_queue_1_drops": 9,
        "rx_queue_1_xdp_drops": 1,
        "rx_queue_1_kicks": 30,
        "tx_queue_1_packets": 400,
        "tx_queue_1_tx_timeouts": 0,
    }
    q = queues("virtio_net", old)
    rx1 = q[("rx", 1)]
    assert (rx1.packets, rx1.bytes, rx1.drops) == (500, 50000, 9)
    assert rx1.extra == {"xdp_drops": 1, "kicks": 30}
    assert q[("tx", 1)].packets == 400
    # 6.10+: rxN_ names and totals without a queue; packets moved to netlink qstats
    new = {
        "rx_drops": 9,
        "rx_kicks": 30,
        "rx1_drops": 9,
        "rx1_kicks": 30,
        "rx1_hw_drops": 2,
        "tx1_kicks": 5,
    }
    q = queues("virtio_net", new)
    assert set(q) == {("rx", 1), ("tx", 1)}
    assert (q[("rx", 1)].packets, q[("rx", 1)].drops) == (None, 9)
    assert q[("rx", 1)].extra == {"kicks": 30, "hw_drops": 2}
    assert nic_drop_counters("virtio_net", old) == {}


def test_veth() -> None:
    stats = {
        "peer_ifindex": 2,
        "rx_queue_5_xdp_packets": 70,
        "rx_queue_5_xdp_bytes": 7000,
        "rx_queue_5_drops": 112,
        "rx_queue_5_xdp_drops": 4,
        "rx_queue_5_xdp_tx_errors": 0,
        "tx_queue_5_xdp_xmit": 3,
        "tx_queue_5_xdp_xmit_errors": 0,
    }
    q = queues("veth", stats)
    rx5 = q[("rx", 5)]
    assert (rx5.packets, rx5.bytes, rx5.drops) == (70, 7000, 112)
    assert rx5.extra == {"xdp_drops": 4, "xdp_tx_errors": 0}
    assert q[("tx", 5)].extra == {"xdp_xmit": 3, "xdp_xmit_errors": 0}
    assert queues("veth", {"rx_queue_0_rx_drops": 5})[("rx", 0)].drops == 5  # 5.5-5.8


def test_ena() -> None:
    stats = {
        "queue_5_rx_cnt": 90,
        "queue_5_rx_bytes": 9000,
        "queue_5_tx_cnt": 80,
        "queue_5_tx_bytes": 8000,
        "queue_5_rx_page_alloc_fail": 1,
        "queue_5_tx_tx_poll": 6,
        "bw_in_allowance_exceeded": 1731,
        "bw_out_allowance_exceeded": 0,
        "pps_allowance_exceeded": 20544,
        "conntrack_allowance_exceeded": 0,
        "linklocal_allowance_exceeded": 0,
        "conntrack_allowance_available": 99999,
        "ena_admin_q_aborted_cmd": 0,
    }
    q = queues("ena", stats)
    assert (q[("rx", 5)].packets, q[("rx", 5)].bytes, q[("tx", 5)].packets) == (90, 9000, 80)
    assert q[("rx", 5)].extra == {"page_alloc_fail": 1}
    assert q[("tx", 5)].extra == {"tx_poll": 6}
    drops = nic_drop_counters("ena", stats)
    assert drops["pps_allowance_exceeded"] == 20544 and len(drops) == 5
    assert "conntrack_allowance_available" not in drops  # a gauge, not drops
    dm = driver_map("ena")
    assert dm is not None and {d.where for d in dm.drops} == {"policer"}


def test_bnxt_sums_unicast_multicast_broadcast() -> None:
    stats = {
        "[5]: rx_ucast_packets": 300,
        "[5]: rx_mcast_packets": 5,
        "[5]: rx_bcast_packets": 1,
        "[5]: rx_discards": 23554,
        "[5]: rx_errors": 3,
        "[5]: rx_ucast_bytes": 30000,
        "[5]: rx_mcast_bytes": 500,
        "[5]: rx_bcast_bytes": 100,
        "[5]: tx_ucast_packets": 90,
        "[5]: tpa_packets": 4,
        "[0]: rx_ucast_packets": 100,
        "rx_total_discard_pkts": 23554,
        "rx_good_frames": 406,
    }
    q = queues("bnxt_en", stats)
    rx5 = q[("rx", 5)]
    assert (rx5.packets, rx5.bytes, rx5.drops) == (306, 30600, 23554)
    assert rx5.extra == {"errors": 3}
    assert q[("tx", 5)].packets == 90 and q[("rx", 0)].packets == 100
    assert nic_drop_counters("bnxt_en", stats) == {"rx_total_discard_pkts": 23554}


def test_igb_per_queue_drops() -> None:
    q = queues("igb", {"rx_queue_2_packets": 9, "rx_queue_2_drops": 4, "tx_queue_2_restart": 1})
    assert (q[("rx", 2)].packets, q[("rx", 2)].drops) == (9, 4)
    assert q[("tx", 2)].extra == {"restart": 1}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_queue_order(driver: str) -> None:
    names = {
        "mlx5_core": "{d}{q}_packets",
        "i40e": "{d}-{q}.packets",
        "ena": "queue_{q}_{d}_cnt",
        "bnxt_en": "[{q}]: {d}_ucast_packets",
        "vmxnet3": "{D} Queue#{q}: ucast pkts {d}",
    }
    fmt = names.get(driver, "{d}_queue_{q}_packets")
    stats = {fmt.format(d=d, D=d.capitalize(), q=q): 1 for q in (10, 2, 0) for d in ("tx", "rx")}
    got = [(q.direction, q.queue) for q in map_queue_counters(driver, stats)]
    if DRIVERS[driver].queues:
        assert got == [("rx", 0), ("rx", 2), ("rx", 10), ("tx", 0), ("tx", 2), ("tx", 10)]
    else:
        assert got == []


def test_extras_read_as_a_dict() -> None:
    """`extra` is built when first read: it reads, compares, prints and records as the dict
    of the queue's other counters."""
    from lbtune.observe.recording import encode

    stats = {"rx5_packets": 200, "rx5_xdp_drop": 3, "rx5_buff_alloc_err": 1, "tx5_packets": 5}
    rx5 = queues("mlx5_core", stats)[("rx", 5)]
    want = {"xdp_drop": 3, "buff_alloc_err": 1}
    assert dict(rx5.extra) == want and rx5.extra == want and want == rx5.extra
    assert len(rx5.extra) == 2 and rx5.extra["xdp_drop"] == 3 and "xsk_packets" not in rx5.extra
    assert repr(rx5.extra) == repr(want) and list(rx5.extra) == list(want)
    assert encode(rx5)["extra"] == want
    assert queues("mlx5_core", stats)[("tx", 5)].extra == {}
