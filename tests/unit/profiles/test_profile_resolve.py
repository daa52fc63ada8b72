"""Resolving profiles against the 48-CPU mlx5/ixgbe fixture host (tests/data/hosts/dell-r750-*).

Host facts used (from that tree's README.md): CPUs 0-47, NUMA node 1 = 12-23,36-47 (where
ens1f0np0 is), isolated 2-11,26-35; ens1f0np0 has 48 combined channels max (24 set), rings
1024 (max 8192), IRQ 96+i = mlx5_comp{i} for i in 0..47, tx queues 0..23.
"""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.tune.plan import Mode, Target
from lbtune.tune.profile import load_profile, resolve

DATA_CPUS = [*range(12, 24), *range(36, 48)]  # node 1 minus housekeeping "0-1"

LB_DR_SYSCTL = {
    # from base
    "net.core.somaxconn": ("4096", Mode.RAISE),
    "net.ipv4.tcp_max_syn_backlog": ("4096", Mode.RAISE),
    "net.ipv4.tcp_syncookies": ("1", Mode.SET),
    "net.core.rmem_max": ("16777216", Mode.RAISE),
    "net.core.wmem_max": ("16777216", Mode.RAISE),
    "net.ipv4.tcp_rmem": ("4096 131072 16777216", Mode.RAISE),
    "net.ipv4.tcp_wmem": ("4096 16384 16777216", Mode.RAISE),
    # lb-dr (netdev_max_backlog overrides base's 8192)
    "net.core.netdev_max_backlog": ("32768", Mode.RAISE),
    "kernel.timer_migration": ("0", Mode.SET),
    "net.core.netdev_budget": ("600", Mode.RAISE),
    "net.ipv4.conf.all.rp_filter": ("2", Mode.SET),
    "net.ipv4.conf.default.rp_filter": ("2", Mode.SET),
    "net.ipv4.conf.all.arp_ignore": ("1", Mode.SET),
    "net.ipv4.conf.all.arp_announce": ("2", Mode.SET),
    "net.ipv4.conf.all.send_redirects": ("0", Mode.SET),
    "net.ipv4.conf.default.send_redirects": ("0", Mode.SET),
    "net.ipv4.conf.ens1f0np0.send_redirects": ("0", Mode.SET),
    "vm.swappiness": ("10", Mode.LOWER),
}


def _by_kind(targets: list[Target], kind: str) -> dict[str, Target]:
    return {t.knob.obj: t for t in targets if t.knob.kind == kind}


def test_lb_dr_sysctl_targets(dell: HostInventory) -> None:
    targets = resolve(load_profile("lb-dr"), dell, "ens1f0np0")
    sysctl = _by_kind(targets, "sysctl")
    assert {k: (t.value, t.mode) for k, t in sysctl.items()} == LB_DR_SYSCTL
    assert sysctl["net.ipv4.conf.ens1f0np0.send_redirects"].key == (
        "sysctl.net.ipv4.conf.{data}.send_redirects"
    )
    assert sysctl["kernel.timer_migration"].key == "sysctl.kernel.timer_migration"
    assert all(t.reason for t in targets)
    # no knob twice (make_plan would refuse)
    assert len({t.knob.ident for t in targets}) == len(targets)


def test_lb_dr_nic_and_irq_targets(dell: HostInventory) -> None:
    # planned as the CLI plans it: a LazyInventory has the host's ethtool (its rule table)
    from lbtune.host.host import Host
    from lbtune.host.inventory import LazyInventory
    from tests.conftest import DELL, HOSTS

    inv = LazyInventory(Host.open(str(HOSTS / DELL)))
    targets = resolve(load_profile("lb-dr"), inv, "ens1f0np0")
    # one channel per data CPU, and one more for flow_rules' control queue (mlx5 has rules)
    assert {k: t.value for k, t in _by_kind(targets, "channels").items()} == {
        "ens1f0np0:combined": "25"
    }
    assert {k: t.value for k, t in _by_kind(targets, "ring").items()} == {
        "ens1f0np0:rx": "8192",
        "ens1f0np0:tx": "8192",
    }
    irqs = _by_kind(targets, "irq_affinity")
    # every completion vector of the port, dealt over the 24 data CPUs in order, but the
    # control queue's (queue 24: IRQ 120) on a housekeeping CPU
    want = {96 + i: str(DATA_CPUS[i % 24]) for i in range(48)}
    want[120] = "0"
    assert {int(k): t.value for k, t in irqs.items()} == want
    assert all(t.key == "nic.data.irq_affinity" for t in irqs.values())
    assert {k: t.value for k, t in _by_kind(targets, "rps_cpus").items()} == {
        f"ens1f0np0:rx-{q}": "" for q in range(25)
    }
    assert {k: t.value for k, t in _by_kind(targets, "xps_cpus").items()} == {
        f"ens1f0np0:tx-{q}": str(DATA_CPUS[q]) for q in range(24)
    }
    ban = _by_kind(targets, "irqbalance_ban")["banned_cpus"]
    assert ban.value == "2-23,26-47"  # data cores + the already isolated CPUs
    # and the pinned IRQs themselves: a CPU ban does not stop irqbalance moving them
    banirq = _by_kind(targets, "irqbalance_banirq")["banned_irqs"]
    assert banirq.value == ",".join(str(96 + i) for i in range(48))
    assert banirq.key == "irqbalance.ban"
    # order: sysctls, irqbalance, then channels before IRQ placement, RPS and XPS
    kinds = [t.knob.kind for t in targets]
    first = {k: kinds.index(k) for k in set(kinds)}
    assert first["sysctl"] < first["irqbalance_ban"] < first["channels"] < first["irq_affinity"]
    assert first["irq_affinity"] < first["rps_cpus"] < first["xps_cpus"]


def test_lb_dr_needs_iface(dell: HostInventory) -> None:
    with pytest.raises(BadInput, match="pass --iface"):
        resolve(load_profile("lb-dr"), dell, None)


def test_unknown_interface_is_refused(dell: HostInventory) -> None:
    with pytest.raises(BadInput, match="eth9: no such interface"):
        resolve(load_profile("lb-dr"), dell, "eth9")
    with pytest.raises(BadInput, match="not an interface name"):
        resolve(load_profile("lb-dr"), dell, "../../x")


def test_sysctl_only_profiles_resolve_without_iface(dell: HostInventory) -> None:
    for name in ("base", "web", "lb-proxy"):
        targets = resolve(load_profile(name), dell, None)
        assert targets and all(t.knob.kind == "sysctl" for t in targets)


def test_realserver_dr_sets_all_and_the_facing_interface(dell: HostInventory) -> None:
    sysctl = _by_kind(resolve(load_profile("realserver-dr"), dell, "eno1"), "sysctl")
    for key, value in (("arp_ignore", "1"), ("arp_announce", "2"), ("rp_filter", "2")):
        assert sysctl[f"net.ipv4.conf.all.{key}"].value == value
        assert sysctl[f"net.ipv4.conf.eno1.{key}"].value == value


def test_loadgen_governor_on_every_online_cpu(dell: HostInventory) -> None:
    gov = _by_kind(resolve(load_profile("loadgen"), dell, None), "governor")
    assert set(gov) == {f"cpu{i}" for i in range(48)}
    assert {t.value for t in gov.values()} == {"performance"}


def test_runbook_resolves(dell: HostInventory) -> None:
    targets = resolve(load_profile("l2dsr-bmt-runbook"), dell, "ens1f0np0")
    assert _by_kind(targets, "ring")["ens1f0np0:rx"].value == "2047"
    assert _by_kind(targets, "cmdline")["isolcpus"].value == "0-12"
    assert _by_kind(targets, "irqbalance")["service"].value == "stopped"


def _resolve_text(tmp_path: pathlib.Path, text: str, iface: str | None, dell: HostInventory):
    (tmp_path / "t.toml").write_text(text)
    return resolve(load_profile("t", search=[tmp_path]), dell, iface)


@pytest.mark.parametrize(
    "text, iface, needle",
    [
        (
            '[profile]\nrole = "lb-dr"\n[sysctl]\n'
            '"net.ipv4.ip_forward" = { value = 0, reason = "r" }\n',
            None,
            "must keep forwarding",
        ),
        (
            '[profile]\nrole = "lb-proxy"\n[sysctl]\n'
            '"net.ipv4.conf.all.forwarding" = { value = 0, reason = "r" }\n',
            None,
            "must keep forwarding",
        ),
        ('[cmdline]\nisolcpus = { value = "online", reason = "r" }\n', None, "isolates every CPU"),
        (
            '[cmdline]\nisolcpus = { value = "0-23", reason = "r" }\n'
            'nohz_full = { value = "24-47", reason = "r" }\n',
            None,
            "isolates every CPU",
        ),
        (
            '[cmdline]\nisolcpus = { value = "40-63", reason = "r" }\n',
            None,
            "offline or absent CPUs 48-63",
        ),
        ('[irqbalance]\nban = { value = "0-3 & 8-9", reason = "r" }\n', None, "selects no CPU"),
        ('[irqbalance]\nban = { value = "all", reason = "r" }\n', None, "bans every CPU"),
        ('[irqbalance]\nban = { value = "nic-local", reason = "r" }\n', None, "nic-local needs"),
        (
            '[nic."data"]\nrings = { value = 16384, reason = "r" }\n',
            "ens1f0np0",
            "ring max is 8192",
        ),
        ('[nic."data"]\nchannels = { value = 64, reason = "r" }\n', "ens1f0np0", "at most 48"),
        (
            '[nic."eth7"]\nrings = { value = "max", reason = "r" }\n',
            None,
            "eth7: no such interface",
        ),
        (
            '[nic."data"]\nirq_affinity = { strategy = "list", reason = "r", '
            'cpus = "node1 - 12-23 - 36-47" }\n',
            "ens1f0np0",
            "selects no CPU",
        ),
        (
            '[nic."data"]\nrps = { cpus = "same", reason = "r" }\n',
            "ens1f0np0",
            "needs irq_affinity",
        ),
        (
            '[nic."data"]\nxps = { value = "match-irqs", reason = "r" }\n',
            "ens1f0np0",
            "needs irq_affinity",
        ),
        (
            '[nic."data"]\nrings = { value = "max", reason = "r" }\n'
            '[nic."ens1f0np0"]\nrings = { value = "max", reason = "r" }\n',
            "ens1f0np0",
            "both name",
        ),
    ],
)
def test_resolve_refusals(tmp_path, dell, text, iface, needle) -> None:
    with pytest.raises(BadInput) as e:
        _resolve_text(tmp_path, text, iface, dell)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_forwarding_may_be_lowered_outside_lb_roles(tmp_path, dell) -> None:
    text = (
        '[profile]\nrole = "web"\n[sysctl]\n"net.ipv4.ip_forward" = { value = 0, reason = "r" }\n'
    )
    assert _resolve_text(tmp_path, text, None, dell)[0].value == "0"


def test_lb_role_is_inherited(tmp_path, dell) -> None:
    (tmp_path / "site.toml").write_text(
        '[profile]\ninclude = ["lb-proxy"]\n[sysctl]\n'
        '"net.ipv4.ip_forward" = { value = 0, reason = "r" }\n'
    )
    shipped = pathlib.Path(__file__).resolve().parents[3] / "profiles"
    p = load_profile("site", search=[tmp_path, shipped])
    assert p.role == "lb-proxy"
    with pytest.raises(BadInput, match="must keep forwarding"):
        resolve(p, dell, None)


def test_channels_from_cpus_and_strategies(tmp_path, dell) -> None:
    text = (
        '[nic."data"]\n'
        'channels = { value = "cpus", reason = "r" }\n'
        'irq_affinity = { strategy = "local", skip_smt = true, reason = "r" }\n'
        'rps = { cpus = "same", flow_cnt = 4096, reason = "r" }\n'
        'txqueuelen = { value = 10000, mode = "raise", reason = "r" }\n'
    )
    targets = _resolve_text(tmp_path, text, "ens1f0np0", dell)
    # local = node 1 (12-23,36-47) minus isolated (none there), first threads only: 12-23
    assert _by_kind(targets, "channels")["ens1f0np0:combined"].value == "12"
    irqs = _by_kind(targets, "irq_affinity")
    assert {t.value for t in irqs.values()} == {str(c) for c in range(12, 24)}
    rps = _by_kind(targets, "rps_cpus")
    assert set(rps) == {f"ens1f0np0:rx-{q}" for q in range(12)}
    assert {t.value for t in rps.values()} == {"12-23"}
    assert {t.value for t in _by_kind(targets, "rps_flow_cnt").values()} == {"4096"}
    tql = _by_kind(targets, "txqueuelen")["ens1f0np0"]
    assert (tql.value, tql.mode) == ("10000", Mode.RAISE)


def test_cmdline_flags_and_cpu_names(tmp_path, dell) -> None:
    text = (
        '[cpu]\nhousekeeping = "0-1,24-25"\napp = "node0 - housekeeping"\n'
        '[cmdline]\nisolcpus = { value = "app", flags = ["managed_irq", "domain"], reason = "r" }\n'
        'irqaffinity = { value = "housekeeping + node1", reason = "r" }\n'
    )
    targets = _by_kind(_resolve_text(tmp_path, text, None, dell), "cmdline")
    assert targets["isolcpus"].value == "managed_irq,domain,2-11,26-35"
    assert targets["irqaffinity"].value == "0-1,12-25,36-47"


# The 4-vCPU virtio guest (tests/data/hosts/kvm-virtio-4vcpu): ens3 has 4 queue pairs, IRQs
# 27+2q (input.q) and 28+2q (output.q), numa_node -1 (every CPU local), no isolation.
def _kvm_lb_dr(tmp_path: pathlib.Path, isolated: str) -> dict[str, dict[str, str]]:
    from tests.conftest import KVM, copy_host

    root = copy_host(tmp_path, KVM, {"/sys/devices/system/cpu/isolated": f"{isolated}\n"})
    inv = discover_host(Host.open(str(root)))
    targets = resolve(load_profile("lb-dr"), inv, "ens3")
    kinds = ("channels", "irq_affinity", "rps_cpus", "xps_cpus", "irqbalance_ban")
    return {kind: {k: t.value for k, t in _by_kind(targets, kind).items()} for kind in kinds}


def test_lb_dr_on_a_4_cpu_virtio_guest_plans_only_the_queues_it_keeps(tmp_path) -> None:
    got = _kvm_lb_dr(tmp_path, "")
    # data cores: 0-3 minus housekeeping 0-1 = 2-3: two channels, queue q on data core q % 2
    assert got["channels"] == {"ens3:combined": "2"}
    assert got["irq_affinity"] == {str(27 + 2 * q + d): str(2 + q % 2) for q in range(4)
                                   for d in (0, 1)}  # fmt: skip
    assert got["rps_cpus"] == {"ens3:rx-0": "", "ens3:rx-1": ""}
    # tx-2 and tx-3 disappear with the channel change: XPS is planned for tx-0 and tx-1 only
    assert got["xps_cpus"] == {"ens3:tx-0": "2", "ens3:tx-1": "3"}
    assert got["irqbalance_ban"] == {"banned_cpus": "2-3"}


def test_lb_dr_keeps_queue_irqs_off_isolated_cpus(tmp_path) -> None:
    got = _kvm_lb_dr(tmp_path, "3")
    assert got["channels"] == {"ens3:combined": "1"}
    assert set(got["irq_affinity"].values()) == {"2"}  # never the isolated CPU 3
    assert len(got["irq_affinity"]) == 8
    assert got["rps_cpus"] == {"ens3:rx-0": ""}
    assert got["xps_cpus"] == {"ens3:tx-0": "2"}
    assert got["irqbalance_ban"] == {"banned_cpus": "2-3"}  # data core + isolated


# -- [profile] iface = "optional" ------------------------------------------------------------

OPTIONAL = (
    '[profile]\niface = "optional"\n[sysctl]\n'
    '"net.core.somaxconn" = { value = 8192, reason = "r" }\n'
    '[nic."data"]\nfeatures.gro = { value = "on", reason = "r" }\n'
    'rss_hash = { udp4 = "sdfn", reason = "r" }\n'
)


def test_optional_iface_leaves_the_data_sections_out_without_iface(tmp_path, dell):
    (tmp_path / "t.toml").write_text(OPTIONAL)
    p = load_profile("t", search=[tmp_path])
    assert p.iface_optional and p.has_data_sections and not p.needs_iface
    targets = resolve(p, dell, None)
    assert {t.knob.kind for t in targets} == {"sysctl"}


def test_optional_iface_tunes_the_data_nic_when_given(tmp_path, dell):
    targets = _resolve_text(tmp_path, OPTIONAL, "eno1", dell)
    kinds = {(t.knob.kind, t.knob.obj): t.value for t in targets}
    assert kinds[("feature", "eno1:rx-gro")] == "on"
    assert kinds[("rss_hash", "eno1:udp4")] == "sdfn"


def test_optional_iface_is_inherited_and_an_including_profile_can_require_it(tmp_path, dell):
    base2 = OPTIONAL.replace("[profile]\n", '[profile]\nname = "base2"\n')
    (tmp_path / "base2.toml").write_text(base2)
    (tmp_path / "t.toml").write_text('[profile]\ninclude = ["base2"]\n')
    assert not load_profile("t", search=[tmp_path]).needs_iface
    (tmp_path / "t.toml").write_text('[profile]\ninclude = ["base2"]\niface = "required"\n')
    p = load_profile("t", search=[tmp_path])
    assert p.needs_iface
    with pytest.raises(BadInput, match="pass --iface IF"):
        resolve(p, dell, None)


def test_a_data_key_in_a_sysctl_still_needs_iface(tmp_path, dell):
    text = OPTIONAL.replace(
        '"net.core.somaxconn"', '"net.ipv4.conf.{data}.rp_filter" = { value = 2, reason = "r" }\n'
        '"net.core.somaxconn"'
    )
    (tmp_path / "t.toml").write_text(text)
    assert load_profile("t", search=[tmp_path]).needs_iface


def test_iface_takes_required_or_optional_only(tmp_path):
    (tmp_path / "t.toml").write_text('[profile]\niface = "sometimes"\n')
    with pytest.raises(BadInput, match=r"profile\.iface"):
        load_profile("t", search=[tmp_path])


@pytest.mark.parametrize("name", ["web", "lb-proxy"])
def test_shipped_terminating_profiles_tune_the_nic_only_with_iface(name, dell):
    p = load_profile(name)
    assert p.iface_optional and not p.needs_iface
    assert not {t.knob.kind for t in resolve(p, dell, None)} - {"sysctl"}
    assert "feature" in {t.knob.kind for t in resolve(p, dell, "eno1")}
