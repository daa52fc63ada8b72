"""The rules on the NICs' ethtool settings (RSS hash and indirection, LRO, coalescing, pause):
each fires on its fault with the knob and value that fix it, and stays quiet on a healthy
NIC, an idle one, or one whose settings are unknown. Samples and settings are built
directly (the rules read nothing else); the fixture-tree cases are in test_fix_profiles."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Optional

import pytest

from lbtune.diagnose.finding import Finding
from lbtune.diagnose.nicsettings import NicSettings
from lbtune.host.kernel.interrupts import CpuCounts, IrqLine
from lbtune.host.net.ethtool import Channels
from lbtune.host.net.nic import Nic, QueueIrq
from lbtune.host.net.nicparams import Coalesce, Feature, Features, Pause
from lbtune.host.net.rss import NtupleRule, Rxfh
from lbtune.observe.model import IpvsStats, NicCounters, QueueCounters, Sample, SoftnetCpu
from lbtune.vocab import Level
from tests.conftest import AWS, DELL, HOSTS, KVM, TINY, X710, copy_host, run_cli
from tests.unit.diagnose.test_rules import config, run, sample

NIC_RULES = (
    "rss-hash-l3-only",
    "rss-indirection-gap",
    "lro-on-forwarding-host",
    "coalescing",
    "pause-frames",
)


def nic(name: str = "eth0", driver: str = "mlx5_core", queues: int = 4, **kw: Any) -> Nic:
    """A PCI NIC with `queues` combined channels, one IRQ (100 + i) per queue."""
    irqs = tuple(
        QueueIrq(100 + q, "combined", q, f"mlx5_comp{q}@pci:0000:41:00.0", "mlx5", None, None,
                 None, None, 0)
        for q in range(queues)
    )  # fmt: skip
    ch = Channels(combined=queues, combined_max=queues)
    base = Nic(name, 2, "physical", driver, "0000:41:00.0", 0, None, 25000, 1500, "up", None,
               1000, (), (), None, ch, irqs, ())  # fmt: skip
    return dataclasses.replace(base, **kw)


def counters(
    rx: list[int], driver: str = "mlx5_core", rx_packets: Optional[int] = None, **ethtool: int
) -> NicCounters:
    qs = tuple(QueueCounters("rx", q, packets=p, drops=0) for q, p in enumerate(rx))
    total = sum(rx) if rx_packets is None else rx_packets
    return NicCounters("eth0", driver, {"rx_packets": total}, qs, {}, dict(ethtool))


def window(before: NicCounters, after: NicCounters, **kw: Any) -> tuple[Sample, Sample]:
    after_kw = {k[6:]: v for k, v in kw.items() if k.startswith("after_")}
    before_kw = {k[7:]: v for k, v in kw.items() if k.startswith("before_")}
    return (
        sample(0, nics={"eth0": before}, **before_kw),
        sample(2, nics={"eth0": after}, **after_kw),
    )


def found(
    rule: str,
    samples: tuple[Sample, Sample],
    settings: Optional[NicSettings],
    the_nic: Optional[Nic] = None,
    **sysctls: str,
) -> list[Finding]:
    """`rule`'s findings on the window with eth0's settings; sysctls as net__ipv4__ip_forward."""
    conf = config(**{k.replace("__", "."): v for k, v in sysctls.items()})
    nics = {"eth0": the_nic or nic()}
    res = run(conf, *samples, nics=nics, nic_settings={"eth0": settings} if settings else {})
    return [f for f in res if f.rule == rule]


# ----------------------------------------------------------------------- rss-hash-l3-only

HASH_SD = NicSettings("eth0", flow_hash=(("tcp4", "sdfn"), ("udp4", "sd"), ("udp6", "sd")))
HASH_FULL = NicSettings("eth0", flow_hash=(("tcp4", "sdfn"), ("udp4", "sdfn")))
ONE_QUEUE = window(counters([0, 0, 0, 0]), counters([90_000, 120, 80, 0]))
SPREAD = window(counters([0, 0, 0, 0]), counters([23_000, 22_000, 24_000, 21_000]))


def test_rss_hash_l3_only_fires_on_one_queue_with_ports_left_out() -> None:
    (f,) = found("rss-hash-l3-only", ONE_QUEUE, HASH_SD)
    assert f.object == "eth0 rx-queue 0" and f.count == 90_000 and f.level is Level.WARN
    assert "udp4 sd" in f.cause and "udp6 sd" in f.cause and "tcp4" not in f.cause
    (fix,) = f.fixes  # one profile line takes both flow types
    assert (fix.knob, fix.current, fix.desired) == (
        "rx-flow-hash eth0 udp4, udp6", "udp4 sd, udp6 sd", "sdfn")  # fmt: skip
    assert fix.command == "ethtool -N eth0 rx-flow-hash udp4 sdfn"
    assert "ethtool -N eth0 rx-flow-hash udp6 sdfn" in fix.note
    (line,) = fix.profile_lines
    assert line.startswith('nic."eth0".rss_hash = { udp4 = "sdfn", udp6 = "sdfn", reason = ')


def test_rss_hash_l3_only_quiet_when_hashed_on_ports_spread_idle_or_unknown() -> None:
    assert found("rss-hash-l3-only", ONE_QUEUE, HASH_FULL) == []  # skew of few big flows
    assert found("rss-hash-l3-only", SPREAD, HASH_SD) == []
    idle = window(counters([0, 0, 0, 0]), counters([900, 1, 0, 0]))
    assert found("rss-hash-l3-only", idle, HASH_SD) == []
    assert found("rss-hash-l3-only", ONE_QUEUE, None) == []  # settings not read


def test_no_rss_means_no_hash_to_blame() -> None:
    # virtio-net without VIRTIO_NET_F_RSS: a table of size 0 and no hash fields ("None")
    virtio = NicSettings("eth0", flow_hash=(("udp4", ""), ("tcp4", "")), rxfh=Rxfh(indir=()))
    assert virtio.l3_only() == ()
    assert found("rss-hash-l3-only", ONE_QUEUE, virtio) == []
    # with RSS on, a flow type hashed on nothing at all puts every such flow on one queue
    unhashed = dataclasses.replace(virtio, rxfh=Rxfh(indir=(0, 1, 2, 3) * 32))
    assert unhashed.l3_only() == ("udp4", "tcp4")


def test_two_queues_are_skewed_only_well_above_half() -> None:
    two = nic(queues=2)
    even_ish = window(counters([0, 0]), counters([70_000, 30_000]))
    assert found("rss-hash-l3-only", even_ish, HASH_SD, two) == []
    (f,) = found("rss-hash-l3-only", window(counters([0, 0]), counters([80_000, 20_000])),
                 HASH_SD, two)  # fmt: skip
    assert f.object == "eth0 rx-queue 0"


# -------------------------------------------------------------------- rss-indirection-gap

BUSY = window(counters([0] * 4, rx_packets=0), counters([40_000, 40_000, 0, 0]))


def test_indirection_gap_names_the_queues_rss_never_feeds() -> None:
    s = NicSettings("eth0", rxfh=Rxfh(indir=(0, 1) * 64))  # kept from before `ethtool -L 4`
    (f,) = found("rss-indirection-gap", BUSY, s)
    assert f.object == "eth0 rss" and f.count == 2 and f.gauge
    assert "rx queue(s) 2-3 have an IRQ" in f.cause
    (fix,) = f.fixes
    assert fix.command == "ethtool -X eth0 equal 4"
    assert (fix.current, fix.desired) == ("queues 0-1", "queues 0-3")
    # the profile's value follows the channel count (a fixed table would stop `ethtool -L`)
    assert [(x.path, x.fields) for x in fix.settings] == [
        ("nic.eth0.rss_indir", (("value", "data-queues"),))]  # fmt: skip


def test_indirection_feeding_the_control_queue_is_found_and_the_fix_skips_it() -> None:
    ssh = NtupleRule(1023, "tcp4", (("dst-port", "22"),), 3)
    fed_all = NicSettings("eth0", rxfh=Rxfh(indir=(0, 1, 2, 3) * 32), ntuple=(ssh,))
    (f,) = found("rss-indirection-gap", BUSY, fed_all)
    assert "control queue(s) 3" in f.cause
    (fix,) = f.fixes
    assert fix.command == "ethtool -X eth0 weight 1 1 1 0"
    # rules made by hand: no profile value leaves their queue out (data-queues leaves out
    # only the profile's own control queue), so the table is a manual fix
    assert fix.scope == "manual" and fix.settings == ()
    # the data queues only: the control queue left out on purpose is no gap
    data_only = dataclasses.replace(fed_all, rxfh=Rxfh(indir=(0, 1, 2) * 42 + (0, 1)))
    assert found("rss-indirection-gap", BUSY, data_only) == []


def test_a_queue_other_rules_steer_to_is_a_data_queue() -> None:
    # an administrator's VXLAN rule (the dell fixture's) is not control-plane traffic
    vxlan = NtupleRule(1023, "udp4", (("dst-port", "4789"),), 3)
    s = NicSettings("eth0", rxfh=Rxfh(indir=(0, 1, 2, 3) * 32), ntuple=(vxlan,))
    assert s.control_queues() == frozenset()
    assert found("rss-indirection-gap", BUSY, s) == []
    vrrp = NtupleRule(1022, "ip4", (("l4proto", "112"),), 3)
    assert dataclasses.replace(s, ntuple=(vxlan, vrrp)).control_queues() == {3}


def test_indirection_quiet_when_every_queue_is_fed_or_the_nic_is_idle() -> None:
    full = NicSettings("eth0", rxfh=Rxfh(indir=(0, 1, 2, 3) * 32))
    assert found("rss-indirection-gap", BUSY, full) == []
    gap = NicSettings("eth0", rxfh=Rxfh(indir=(0, 1) * 64))
    idle = window(counters([0] * 4), counters([10, 0, 0, 0]))
    assert found("rss-indirection-gap", idle, gap) == []
    assert found("rss-indirection-gap", BUSY, NicSettings("eth0")) == []  # no -x support
    # queues without an IRQ (not serviced anyway) are not reported
    no_irqs = nic(irqs=())
    assert found("rss-indirection-gap", BUSY, gap, no_irqs) == []


# ------------------------------------------------------------------ lro-on-forwarding-host


def features(lro: bool, fixed: bool = False) -> NicSettings:
    return NicSettings("eth0", features=Features((
        Feature("rx-gro", True, False), Feature("rx-lro", lro, fixed))))  # fmt: skip


TRAFFIC = window(counters([0] * 4), counters([5000, 5000, 5000, 5000]))


def test_lro_on_a_forwarding_host_is_a_failure_with_the_feature_fix() -> None:
    (f,) = found("lro-on-forwarding-host", TRAFFIC, features(True), net__ipv4__ip_forward="1")
    assert f.level is Level.FAIL and f.object == "eth0" and f.count == 20_000
    assert "net.ipv4.ip_forward = 1" in f.cause
    (fix,) = f.fixes
    assert (fix.current, fix.desired, fix.command) == ("on", "off", "ethtool -K eth0 lro off")
    assert fix.settings and fix.scope == "profile"


def test_lro_on_an_ipvs_director_without_ip_forward() -> None:
    ipvs = window(
        counters([0] * 4),
        counters([5000] * 4),
        before_ipvs=IpvsStats(0, 100, 0, 0, 0),
        after_ipvs=IpvsStats(9, 700, 0, 0, 0),
    )
    (f,) = found("lro-on-forwarding-host", ipvs, features(True), net__ipv4__ip_forward="0")
    assert "IPVS forwarded 600 packets" in f.cause


def test_lro_quiet_when_off_not_forwarding_or_idle_and_fixed_lro_is_manual() -> None:
    lro = "lro-on-forwarding-host"
    assert found(lro, TRAFFIC, features(False), net__ipv4__ip_forward="1") == []
    assert found(lro, TRAFFIC, features(True), net__ipv4__ip_forward="0") == []
    idle = window(counters([0] * 4), counters([0] * 4))
    assert found("lro-on-forwarding-host", idle, features(True), net__ipv4__ip_forward="1") == []
    (f,) = found("lro-on-forwarding-host", TRAFFIC, features(True, fixed=True),
                 net__ipv4__ip_forward="1")  # fmt: skip
    assert [(x.scope, x.settings) for x in f.fixes] == [("manual", ())]


# ------------------------------------------------------------------------------ coalescing


def storm(per_queue: int, squeeze: int, processed: int = 200_000) -> tuple[Sample, Sample]:
    """2 s; queue IRQ 100 fired `per_queue` times on CPU 1, which squeezed `squeeze` times."""

    def at(t: float, k: int) -> Sample:
        irqs = {100 + q: IrqLine(100 + q, CpuCounts.of({0: 0, 1: k * per_queue if q == 0 else 5}),
                                 "PCI-MSIX", (f"mlx5_comp{q}",)) for q in range(4)}  # fmt: skip
        sn = (SoftnetCpu(0, 0, 0, 0, 0, 0), SoftnetCpu(1, k * processed, 0, k * squeeze, 0, 0))
        return sample(t, interrupts=irqs, softnet=sn)

    return at(0, 0), at(2, 1)


def coalesce(**values: int) -> NicSettings:
    return NicSettings("eth0", coalesce=Coalesce(tuple(values.items())))


OFF = coalesce(**{"adaptive-rx": 0, "adaptive-tx": 0, "rx-usecs": 0, "rx-frames": 0})


def test_coalescing_storm_on_a_squeezed_cpu_turns_adaptive_on() -> None:
    (f,) = found("coalescing", storm(100_000, 50), OFF)
    assert f.object == "eth0 irqs" and f.count == 100_000 and "50,000" in f.title
    assert "rx-usecs = 0" in f.cause and "CPU(s) 1" in f.cause
    (fix,) = f.fixes
    assert (fix.knob, fix.desired, fix.command) == (
        "coalesce eth0 adaptive-rx", "on", "ethtool -C eth0 adaptive-rx on")  # fmt: skip


def test_coalescing_without_adaptive_support_raises_rx_usecs() -> None:
    e1000e = nic(driver="e1000e", queues=1)
    (f,) = found("coalescing", storm(100_000, 50), coalesce(**{"rx-usecs": 0}), e1000e)
    (fix,) = f.fixes
    assert (fix.current, fix.desired) == ("0", "50")


def test_coalescing_quiet_without_storm_squeeze_or_with_coalescing_on() -> None:
    assert found("coalescing", storm(100_000, 0), OFF) == []  # the CPU keeps up
    assert found("coalescing", storm(10_000, 50), OFF) == []  # 5,000/s: no storm
    assert found("coalescing", storm(100_000, 50), coalesce(**{"rx-usecs": 64})) == []
    on = coalesce(**{"adaptive-rx": 1, "rx-usecs": 0})
    assert found("coalescing", storm(100_000, 50), on) == []
    # e1000e's rx-usecs 3 is its dynamic conservative throttling mode, not 3 us
    e1000e = nic(driver="e1000e", queues=1)
    assert found("coalescing", storm(100_000, 50), coalesce(**{"rx-usecs": 3}), e1000e) == []
    assert found("coalescing", storm(100_000, 50), None) == []


# ---------------------------------------------------------------------------- pause-frames

PAUSE_ON = NicSettings("eth0", pause=Pause(autoneg=True, rx=True, tx=True))


def pause(driver: str, **moved: int) -> tuple[Sample, Sample]:
    zero = {k: 0 for k in moved}
    return window(counters([0], driver, **zero), counters([100], driver, **moved))


def test_pause_frames_sent_by_the_host() -> None:
    s = pause("e1000e", tx_flow_control_xoff=400, tx_flow_control_xon=390, rx_flow_control_xon=0)
    (f,) = found("pause-frames", s, PAUSE_ON)
    assert f.title == "eth0 sent 790 pause frames" and f.count == 790
    assert {e.counter for e in f.evidence} == {
        "ethtool eth0 tx_flow_control_xoff", "ethtool eth0 tx_flow_control_xon"}  # fmt: skip
    profile, manual = f.fixes
    # autonegotiated pause: autoneg goes off with it (e1000e keeps the negotiated values)
    assert (profile.command, profile.scope) == ("ethtool -A eth0 autoneg off tx off", "profile")
    assert [s.path for s in profile.settings] == ["nic.eth0.pause.autoneg", "nic.eth0.pause.tx"]
    assert manual.scope == "manual"


def test_pause_frames_received_per_driver_names() -> None:
    (f,) = found("pause-frames", pause("mlx5_core", rx_pause_ctrl_phy=5000), PAUSE_ON)
    assert f.title == "eth0 received 5,000 pause frames"
    no_autoneg = NicSettings("eth0", pause=Pause(autoneg=False, rx=True, tx=True))
    (f,) = found("pause-frames", pause("mlx5_core", rx_pause_ctrl_phy=5000), no_autoneg)
    assert f.fixes[0].command == "ethtool -A eth0 rx off"
    (f,) = found("pause-frames", pause("i40e", **{"port.link_xoff_rx": 80}), None)
    assert [x.scope for x in f.fixes] == ["manual"]  # pause settings unknown: no profile line


def test_pause_frames_quiet_below_noise_or_for_drivers_without_them() -> None:
    assert found("pause-frames", pause("e1000e", tx_flow_control_xoff=3), PAUSE_ON) == []
    # ena has no pause counters: a counter of that name means nothing there
    assert found("pause-frames", pause("ena", tx_flow_control_xoff=900), PAUSE_ON) == []


def test_every_nic_rule_is_quiet_on_a_healthy_busy_host() -> None:
    healthy = NicSettings(
        "eth0",
        coalesce=coalesce(**{"adaptive-rx": 1, "rx-usecs": 8}).coalesce,
        features=features(False).features,
        pause=Pause(True, False, False),
        flow_hash=(("tcp4", "sdfn"), ("udp4", "sdfn")),
        rxfh=Rxfh(indir=(0, 1, 2, 3) * 32),
    )
    a, b = SPREAD
    for rule in NIC_RULES:
        assert found(rule, (a, b), healthy, net__ipv4__ip_forward="1") == [], rule


@pytest.mark.parametrize("host", [DELL, KVM, AWS, TINY, X710])
def test_every_nic_rule_is_quiet_on_every_healthy_fixture_tree(host: str) -> None:
    """The recorded ethtool -c/-k/-a (and -x/-n where recorded) of real drivers, read
    through `--root`: no finding (their faults are made on copies in test_fix_profiles)."""
    rules = [a for r in NIC_RULES for a in ("--rule", r)]
    res = run_cli("--root", str(HOSTS / host), "diagnose", "--json", *rules)
    assert res.exit_code == 0, res.stdout + res.stderr
    assert res.json["findings"] == []
    assert not [k for k in res.json.get("missing", {}) if k.startswith("ethtool")]


def test_written_fixes_apply_on_the_tree_silence_the_rules_and_roll_back_exactly(
    tmp_path: pathlib.Path,
) -> None:
    """Every NIC-settings fault at once on a copy of the dell tree; `diagnose
    --write-profile`, `apply` (the recorded setters rewrite the ethtool files as the kernel
    would change them), the rules go quiet, and `rollback` gives the recordings back byte for
    byte. pause-frames stays: its counters count since boot in a capture, and pause off stops
    new frames, which only a later window (a live host, or --baseline) can show."""
    from tests.unit.diagnose.test_fix_profiles import CASES

    files: dict[str, str] = {}
    for rule in ("lro-on-forwarding-host", "coalescing", "pause-frames", "rss-hash-l3-only"):
        files.update(CASES[rule][0][1]())
    files.update(CASES["rss-indirection-gap"][0][1]())  # a user table over 12 of 24 queues
    root = copy_host(tmp_path, DELL, files)
    net = root / "sos_commands" / "networking"
    before = {p.name: p.read_bytes() for p in net.iterdir()}
    rules = [a for r in NIC_RULES for a in ("--rule", r)]
    fix = tmp_path / "fix.toml"
    res = run_cli("--root", str(root), "diagnose", "--json", *rules, "--write-profile", str(fix))
    assert res.exit_code == 1, res.stderr
    assert sorted(f["rule"] for f in res.json["findings"]) == sorted(NIC_RULES)
    res = run_cli("--root", str(root), "apply", str(fix), "--yes")
    assert res.exit_code == 0, res.stdout + res.stderr
    res = run_cli("--root", str(root), "diagnose", "--json", *rules)
    assert [f["rule"] for f in res.json["findings"]] == ["pause-frames"]
    res = run_cli("--root", str(root), "rollback")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert {p.name: p.read_bytes() for p in net.iterdir()} == before
