"""The pre-benchmark checklist per role on fixture host trees (and altered copies of them)."""

from __future__ import annotations

import pathlib
from typing import Optional

import pytest

from lbtune.diagnose.checklist import (
    Checklist,
    CheckResult,
    ClockState,
    LiveReadings,
    parse_ip_o_addr,
    run_checklist,
)
from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.vocab import Level
from tests.conftest import DELL, HOSTS, KVM, TINY, copy_host


def run(
    root: str | pathlib.Path,
    role: str,
    vip: Optional[str] = None,
    load: Optional[str] = None,
    iface: Optional[str] = None,
    probes: Optional[LiveReadings] = None,
) -> Checklist:
    path = root if isinstance(root, pathlib.Path) else HOSTS / root
    return run_checklist(
        Host.open(str(path)), role, vip=vip, load=load, iface=iface, readings=probes
    )


def check(cl: Checklist, name: str) -> CheckResult:
    hits = [c for c in cl.checks if c.name == name]
    assert len(hits) == 1, [c.name for c in cl.checks]
    return hits[0]


def sockstat(tw: int, orphan: int = 0) -> str:
    return (
        "sockets: used 210\n"
        f"TCP: inuse 12 orphan {orphan} tw {tw} alloc 20 mem 4\n"
        "UDP: inuse 3 mem 2\nUDPLITE: inuse 0\nRAW: inuse 0\nFRAG: inuse 0 memory 0\n"
    )


# ------------------------------------------------------------------ dell-r750 as lb-dr and web


def test_dell_as_lb_dr() -> None:
    cl = run(DELL, "lb-dr")
    assert cl.profile == "lb-dr" and cl.iface == "ens1f0np0"  # the fastest link up
    p = check(cl, "profile-in-sync")
    assert p.level is Level.FAIL
    assert "net.core.netdev_max_backlog = 1000 (want 32768)" in p.reason
    assert p.fix == "lbtune apply lb-dr --iface ens1f0np0"
    ib = check(cl, "irqbalance")
    # irqbalance bans only the isolated CPUs; the profile pins the mlx5 queues on node 1
    assert ib.level is Level.FAIL
    assert "pid 1187" in ib.reason and "12-23,36-47" in ib.reason
    assert "irqbalance.ban" in ib.fix
    rings = check(cl, "nic-rings")
    assert rings.level is Level.WARN and "ens1f0np0 rx 1024/8192 tx 1024/8192" in rings.reason
    assert "ethtool -G ens1f0np0 rx 8192 tx 8192" in rings.fix
    assert check(cl, "isolcpus").level is Level.PASS  # data CPUs are all housekeeping
    assert check(cl, "listen-backlog").level is Level.SKIP  # a director accepts nothing
    assert check(cl, "ephemeral-ports").level is Level.SKIP
    assert cl.failed


def test_dell_as_web_reads_listeners_and_conntrack() -> None:
    cl = run(DELL, "web")
    b = check(cl, "listen-backlog")
    assert b.level is Level.FAIL
    # nginx asked for 128 (somaxconn is 4096): the application's setting is the limit
    assert "port 80 (0.0.0.0) backlog 128 (the application's" in b.reason
    assert "< 1024" in b.reason and "somaxconn 4096" in b.reason
    assert "listen 80 backlog=4096" in b.fix
    ct = check(cl, "conntrack")
    assert ct.level is Level.FAIL
    assert "261000 of nf_conntrack_max 262144" in ct.reason and "(100%)" in ct.reason


def test_dell_iface_can_be_chosen() -> None:
    cl = run(DELL, "web", iface="eno1")
    assert cl.iface == "eno1"
    assert "eno1 rx 512/4096" in check(cl, "nic-rings").reason
    with pytest.raises(BadInput, match="no such interface"):
        run(DELL, "web", iface="eth9")


# ------------------------------------------------------------------ kvm-virtio as web


def test_kvm_as_web() -> None:
    cl = run(KVM, "web")
    assert cl.iface == "ens3"
    assert check(cl, "nic-rings").level is Level.PASS  # 256/256: virtio's max
    assert check(cl, "irqbalance").level is Level.PASS
    assert check(cl, "conntrack").level is Level.PASS
    assert check(cl, "cpu-governor").level is Level.SKIP
    assert "no cpufreq" in check(cl, "cpu-governor").reason
    assert check(cl, "clock-sync").level is Level.SKIP  # not the live host
    p = check(cl, "profile-in-sync")
    assert p.level is Level.FAIL and "net.core.somaxconn = 4096 (want 8192)" in p.reason
    # nginx's default backlog (511) is below the 1024 a load test needs
    b = check(cl, "listen-backlog")
    assert b.level is Level.FAIL and "port 80 (0.0.0.0) backlog 511" in b.reason
    d = check(cl, "sockets-drained")
    assert d.level is Level.WARN and d.reason.startswith("41 TIME_WAIT of tcp_max_tw_buckets")


# ------------------------------------------------------------------ kvm-virtio as DR real server

IP_ADDR = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "{vip}"
    "2: ens3    inet 10.20.0.15/24 brd 10.20.0.255 scope global ens3\\       valid_lft forever "
    "preferred_lft forever\n"
    "2: ens3    inet6 fe80::f816:3eff:fe4a:1b2c/64 scope link \\       valid_lft forever "
    "preferred_lft forever\n"
)
VIP_ON_LO = (
    "1: lo    inet 192.0.2.10/32 scope global lo\\       valid_lft forever preferred_lft forever\n"
)
RECORD = "/sos_commands/networking/ip_-o_addr"


def test_kvm_as_realserver_needs_vip() -> None:
    with pytest.raises(BadInput, match="needs --vip"):
        run(KVM, "realserver")


def test_kvm_as_realserver_unprepared(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM, {RECORD: IP_ADDR.format(vip="")})
    cl = run(root, "realserver", vip="192.0.2.10")
    assert cl.profile == "realserver-dr"
    vip = check(cl, "dr-vip")
    assert vip.level is Level.FAIL and "not on lo" in vip.reason
    assert vip.fix == "ip addr add 192.0.2.10/32 dev lo"
    ign = check(cl, "dr-arp-ignore")
    assert ign.level is Level.FAIL and "ens3 0 (all 0, ens3 0)" in ign.reason
    assert "net.ipv4.conf.all.arp_ignore = 1" in ign.fix
    ann = check(cl, "dr-arp-announce")
    assert ann.level is Level.FAIL and "below 2" in ann.reason
    # ens3 has rp_filter 2 (loose) in the fixture
    assert check(cl, "dr-rp-filter").level is Level.PASS
    assert "lbtune apply realserver-dr --iface ens3" in check(cl, "profile-in-sync").fix


def test_kvm_as_realserver_ready_for_dr(tmp_path: pathlib.Path) -> None:
    root = copy_host(
        tmp_path,
        KVM,
        {
            RECORD: IP_ADDR.format(vip=VIP_ON_LO),
            "/proc/sys/net/ipv4/conf/all/arp_ignore": "1\n",
            "/proc/sys/net/ipv4/conf/ens3/arp_announce": "2\n",
        },
    )
    cl = run(root, "realserver", vip="192.0.2.10")
    assert check(cl, "dr-vip").level is Level.PASS
    # effective value = max(all, interface): all=1 covers ens3=0, ens3=2 covers all=0
    assert check(cl, "dr-arp-ignore").level is Level.PASS
    assert "ens3 1 (all 1, ens3 0)" in check(cl, "dr-arp-ignore").reason
    assert check(cl, "dr-arp-announce").level is Level.PASS


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("1: lo    inet 192.0.2.10/24 scope global lo\\ x\n", "on lo as /24"),
        ("2: ens3    inet 192.0.2.10/32 scope global ens3\\ x\n", "is on ens3"),
    ],
)
def test_vip_in_the_wrong_place(tmp_path: pathlib.Path, line: str, expect: str) -> None:
    root = copy_host(tmp_path, KVM, {RECORD: IP_ADDR.format(vip=line)})
    v = check(run(root, "realserver", vip="192.0.2.10"), "dr-vip")
    assert v.level is Level.FAIL and expect in v.reason


def test_strict_rp_filter_fails(tmp_path: pathlib.Path) -> None:
    root = copy_host(tmp_path, KVM, {"/proc/sys/net/ipv4/conf/ens3/rp_filter": "1\n"})
    r = check(run(root, "realserver", vip="192.0.2.10"), "dr-rp-filter")
    # effective = max(all, interface): all=2 makes the strict ens3=1 loose
    assert r.level is Level.PASS and "ens3 2 (all 2, ens3 1)" in r.reason
    root2 = copy_host(
        tmp_path / "b",
        KVM,
        {
            "/proc/sys/net/ipv4/conf/ens3/rp_filter": "1\n",
            "/proc/sys/net/ipv4/conf/all/rp_filter": "0\n",
        },
    )
    r = check(run(root2, "realserver", vip="192.0.2.10"), "dr-rp-filter")
    assert r.level is Level.FAIL and "ens3 1 (all 0, ens3 1)" in r.reason
    assert "rp_filter = 2" in r.fix


def test_dr_vip_record_missing_is_skipped() -> None:
    v = check(run(KVM, "realserver", vip="192.0.2.10"), "dr-vip")
    assert v.level is Level.SKIP and "ip_-o_addr" in v.reason


def test_parse_ip_o_addr() -> None:
    addrs = parse_ip_o_addr(IP_ADDR.format(vip=VIP_ON_LO) + "5: veth0@if2    inet 10.9.0.1/30 x\n")
    assert [(a.ifname, a.family, a.addr, a.prefix) for a in addrs] == [
        ("lo", 4, "127.0.0.1", 8),
        ("lo", 4, "192.0.2.10", 32),
        ("ens3", 4, "10.20.0.15", 24),
        ("ens3", 6, "fe80::f816:3eff:fe4a:1b2c", 64),
        ("veth0", 4, "10.9.0.1", 30),
    ]


# ------------------------------------------------------------------ tiny-veth-bond as client


def test_tiny_as_client() -> None:
    cl = run(TINY, "client")
    assert cl.profile == "loadgen"
    assert cl.iface is None  # bond0.100 and veth0 are both up: no single data interface
    p = check(cl, "profile-in-sync")
    assert p.level is Level.FAIL and p.fix == "lbtune apply loadgen"
    ports = check(cl, "ephemeral-ports")
    assert ports.level is Level.PASS and "28232" in ports.reason and "32768-60999" in ports.reason
    rings = check(cl, "nic-rings")  # the e1000 under the bond
    assert rings.level is Level.WARN and "eth0 rx 256/4096" in rings.reason
    assert check(cl, "listen-backlog").level is Level.SKIP
    assert check(cl, "conntrack").level is Level.SKIP  # no conntrack files in the tree


def test_tiny_as_client_with_too_many_connections() -> None:
    cl = run(TINY, "client", load="wrk -t2 -c30000 -d30s http://10.0.0.1/")
    ports = check(cl, "ephemeral-ports")
    assert ports.level is Level.FAIL
    assert "30000 planned connections" in ports.reason and "28232" in ports.reason
    # the port comparison is the host check's; the lint does not repeat it
    assert not [c for c in cl.checks if c.name == "load:connections-above-ports"]
    assert check(cl, "load-command").level is Level.PASS


def test_tiny_as_client_with_ab_lint() -> None:
    cl = run(TINY, "client", load="ab -n 1000 http://10.0.0.1/")
    assert check(cl, "load:ab-no-concurrency").level is Level.FAIL
    assert check(cl, "load:ab-no-keepalive").level is Level.WARN
    assert "one client's latency" in check(cl, "load:ab-no-concurrency").reason


def test_tiny_lb_dr_needs_an_interface() -> None:
    cl = run(TINY, "lb-dr")
    p = check(cl, "profile-in-sync")
    assert p.level is Level.SKIP and "--iface" in p.fix
    assert check(cl, "irqbalance").level is Level.SKIP
    cl = run(TINY, "lb-dr", iface="veth0")
    assert check(cl, "profile-in-sync").level is Level.FAIL  # veth0 has no rings: no resolve
    assert "does not resolve" in check(cl, "profile-in-sync").reason


# ------------------------------------------------------------------ sockets, governor, probes


def test_sockets_drained(tmp_path: pathlib.Path) -> None:
    root = copy_host(
        tmp_path,
        KVM,
        {"/proc/net/sockstat": sockstat(0), "/proc/sys/net/ipv4/tcp_max_tw_buckets": "8192\n"},
    )
    assert check(run(root, "web"), "sockets-drained").level is Level.PASS
    (root / "proc/net/sockstat").write_text(sockstat(12, 1))
    d = check(run(root, "web"), "sockets-drained")
    assert d.level is Level.WARN and "12 TIME_WAIT" in d.reason and "1 orphaned" in d.reason
    assert "8192" in d.reason
    (root / "proc/net/sockstat").write_text(sockstat(5000))
    assert check(run(root, "web"), "sockets-drained").level is Level.FAIL


def test_governor(tmp_path: pathlib.Path) -> None:
    files = {
        f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_governor": g + "\n"
        for c, g in enumerate(["performance", "powersave", "performance", "schedutil"])
    }
    g = check(run(copy_host(tmp_path, KVM, files), "client"), "cpu-governor")
    assert g.level is Level.WARN and "on 2 of 4 CPUs (1,3)" in g.reason
    assert "powersave/schedutil" in g.reason and 'governor.all = "performance"' in g.fix
    files = {k: "performance\n" for k in files}
    g = check(run(copy_host(tmp_path / "b", KVM, files), "client"), "cpu-governor")
    assert g.level is Level.PASS and "4 CPUs" in g.reason


def test_live_probes_clock_and_nofile() -> None:
    bad = LiveReadings((1024, 4096), ClockState(False, "not synchronised (STA_UNSYNC)"))
    cl = run(KVM, "client", probes=bad)
    c = check(cl, "clock-sync")
    assert c.level is Level.WARN and "STA_UNSYNC" in c.reason
    n = check(cl, "nofile")
    assert n.level is Level.WARN and "soft 1024 hard 4096" in n.reason
    assert "ulimit -n 4096" in n.fix
    good = LiveReadings((65536, 1048576), ClockState(True, "synchronised"))
    cl = run(KVM, "client", probes=good)
    assert check(cl, "clock-sync").level is Level.PASS
    assert check(cl, "nofile").level is Level.PASS
    # a server's own limit is not this shell's: informational only
    assert check(run(KVM, "web", probes=bad), "nofile").level is Level.PASS


def test_conntrack_sized_by_the_planned_load(tmp_path: pathlib.Path) -> None:
    # kvm: 0 of 65536 entries; 100/s new connections x 120 s TIME_WAIT in conntrack = 12000
    cl = run(KVM, "client", load="hey -z 60s -c 10 -q 10 -disable-keepalive http://x/")
    ct = check(cl, "conntrack")
    assert ct.level is Level.PASS and "adds about 12010" in ct.reason
    cl = run(KVM, "client", load="hey -z 60s -c 100 -q 10 -disable-keepalive http://x/")
    assert check(cl, "conntrack").level is Level.FAIL  # 1000/s x 120 s > 65536


def test_summary_and_failed() -> None:
    cl = run(KVM, "web")
    s = cl.summary()
    assert set(s) == {"pass", "warn", "fail", "skip"}
    assert sum(s.values()) == len(cl.checks)
    assert cl.failed == (s["fail"] > 0)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": "director"}, "unknown role"),
        ({"role": "realserver", "vip": "10.0.0.300"}, "not an IP address"),
        ({"role": "realserver", "vip": "127.0.0.1"}, "not a service address"),
        ({"role": "web", "vip": "192.0.2.1"}, "--vip is for"),
        ({"role": "client", "load": "wrk -H 'x"}, "cannot split"),
        ({"role": "client", "load": "curl http://x/"}, "no load generator"),
    ],
)
def test_bad_input(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        run_checklist(Host.open(str(HOSTS / KVM)), **kwargs)


# ------------------------------------------------------------------ the data NIC's ethtool settings


def _recorded(name: str, **values: str) -> dict[str, str]:
    from tests.unit.diagnose.test_fix_profiles import recorded

    return recorded(DELL, name, **values)


def test_nic_settings_of_the_dell_director_pass_as_recorded() -> None:
    cl = run(DELL, "lb-dr")
    assert check(cl, "nic-offloads").level is Level.PASS  # LRO off on the mlx5
    assert check(cl, "nic-coalescing").reason == "ens1f0np0 rx-usecs 8 adaptive"
    p = check(cl, "nic-pause")
    assert p.level is Level.PASS and "rx on tx on; no pause frames" in p.reason


def test_lro_on_a_director_fails_and_gro_off_on_a_web_server_warns(tmp_path) -> None:
    lro = _recorded("ethtool_-k_ens1f0np0", **{"large-receive-offload": "on"})
    c = check(run(copy_host(tmp_path, DELL, lro, "lro"), "lb-dr"), "nic-offloads")
    assert c.level is Level.FAIL and "LRO (rx-lro) on ens1f0np0 while role lb-dr" in c.reason
    assert c.fix.endswith(", or ethtool -K ens1f0np0 lro off")
    assert c.fix.startswith("nic.data.features.lro (profile lb-dr)")
    # the same LRO on a web server that does not forward is not this check's business
    assert check(run(copy_host(tmp_path, DELL, lro, "web"), "web", iface="ens1f0np0"),
                 "nic-offloads").level is Level.PASS  # fmt: skip
    gro = _recorded("ethtool_-k_ens1f0np0", **{"generic-receive-offload": "off"})
    c = check(run(copy_host(tmp_path, DELL, gro, "gro"), "web", iface="ens1f0np0"),
              "nic-offloads")  # fmt: skip
    assert c.level is Level.WARN and c.fix.endswith("or ethtool -K ens1f0np0 gro on")


def test_high_rx_usecs_without_adaptive_warns(tmp_path) -> None:
    slow = _recorded("ethtool_-c_ens1f0np0", **{"Adaptive RX": "off  TX: on", "rx-usecs": "256"})
    c = check(run(copy_host(tmp_path, DELL, slow), "lb-dr"), "nic-coalescing")
    assert c.level is Level.WARN and "ens1f0np0 rx-usecs 256" in c.reason
    assert "ethtool -C ens1f0np0 adaptive-rx on" in c.fix


def test_pause_frames_counted_with_flow_control_on_warn(tmp_path) -> None:
    sent = _recorded("ethtool_-S_ens1f0np0", tx_pause_ctrl_phy="184223")
    c = check(run(copy_host(tmp_path, DELL, sent), "lb-dr"), "nic-pause")
    assert c.level is Level.WARN
    assert "ens1f0np0 sent 184223 pause frames since boot" in c.reason
    assert c.fix.endswith("or ethtool -A ens1f0np0 rx off tx off")


def test_nic_settings_checks_skip_where_the_driver_reports_none() -> None:
    cl = run(TINY, "web")  # veth and a bond over an e1000: no RSS at all
    assert check(cl, "nic-rss-hash").level is Level.SKIP
    assert check(cl, "nic-rss-indirection").level is Level.SKIP


def test_rss_hash_on_addresses_only_warns_for_the_ixgbe() -> None:
    assert check(run(DELL, "lb-dr"), "nic-rss-hash").level is Level.PASS  # mlx5: sdfn
    c = check(run(DELL, "lb-dr", iface="eno1"), "nic-rss-hash")
    assert c.level is Level.WARN and "eno1 udp4 sd, eno1 udp6 sd" in c.reason
    assert c.fix == ("nic.data.rss_hash (profile lb-dr), or ethtool -N eno1 rx-flow-hash udp4 "
                     "sdfn; ethtool -N eno1 rx-flow-hash udp6 sdfn")
    # virtio-net without RSS: nothing to hash, nothing to blame
    c = check(run(KVM, "web"), "nic-rss-hash")
    assert c.level is Level.SKIP and "does no RSS" in c.reason


def test_rss_indirection_with_a_control_queue(tmp_path) -> None:
    from tests.unit.diagnose.test_fix_profiles import via_setters

    # the VXLAN rule of the fixture steers data: queue 3 in the table is right
    assert check(run(DELL, "lb-dr"), "nic-rss-indirection").level is Level.PASS

    def ssh_to_23(eth) -> None:  # type: ignore[no-untyped-def]
        from lbtune.host.net.rss import NtupleRule

        eth.add_ntuple_rule("ens1f0np0", NtupleRule(-1, "tcp4", (("dst-port", "22"),), 23))

    root = copy_host(tmp_path, DELL, via_setters(DELL, ssh_to_23), "ssh")
    c = check(run(root, "lb-dr"), "nic-rss-indirection")
    assert c.level is Level.WARN and "control queue(s) 23" in c.reason
    # a control queue of rules made by hand: no profile value leaves it out
    assert c.fix == "ethtool -X ens1f0np0 weight " + " ".join(["1"] * 23 + ["0"])

    def table_over_12(eth) -> None:  # type: ignore[no-untyped-def]
        eth.set_rxfh("ens1f0np0", indir=[i % 12 for i in range(256)])

    root = copy_host(tmp_path, DELL, via_setters(DELL, table_over_12), "gap")
    c = check(run(root, "lb-dr"), "nic-rss-indirection")
    assert c.level is Level.WARN and "queue(s) 12-23 get no RSS traffic" in c.reason
    assert c.fix == ('nic.data.rss_indir (profile lb-dr) = "data-queues", or '
                     "ethtool -X ens1f0np0 equal 24")


def test_ixgbe_rx_usecs_1_is_its_dynamic_mode() -> None:
    c = check(run(DELL, "lb-dr", iface="eno1"), "nic-coalescing")
    assert c.level is Level.PASS and c.reason == "eno1 rx-usecs 1 (dynamic throttling)"
