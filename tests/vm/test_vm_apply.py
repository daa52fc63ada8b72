"""`lbtune apply lb-dr` on real queues (issue 19, items 1 and 2): Debian's 6.1 kernel, a 4-queue
virtio-net NIC (eth0) and an e1000e (eth1) in the 4-CPU, 2-node VM lab guest.

What is read back comes from the kernel (sysfs, /proc/irq, /proc/interrupts, ethtool) through
tests/vm/apply_guest.py, not from lbtune's readers; the planned CPUs are derived here from the
guest's topology, not taken from lbtune's plan.

x86 moves an interrupt's vector only when it fires: a new smp_affinity shows in
effective_affinity after the IRQ's next interrupt (until then the move is pending). So the
test sends traffic into eth0 from the host side of the tap (TCP SYNs to a closed port: every
flow is a received packet and a RST sent back) and reads effective_affinity after each queue
IRQ fired. The IRQs of queues a smaller channel count disabled cannot fire: for them the test
reads smp_affinity_list (what lbtune wrote; the kernel applies it at their next interrupt).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from lbtune.host.net.netns import NetnsThread
from lbtune.lab.guests.vm import VmGuest

pytestmark = pytest.mark.vm

G = "tests.vm.apply_guest"
PROFILES = Path(__file__).resolve().parent / "profiles"
HOUSEKEEPING = frozenset({0, 1})  # lb-dr's [cpu] housekeeping = "0-1"
GUEST_ADDR, HOST_ADDR, HOST_IP = "10.99.0.2/24", "10.99.0.1/24", "10.99.0.2"
LBTUNE_TIMEOUT = 900  # one lbtune run: ~15 s on an idle TCG guest, minutes on a loaded host


def cpus(text: str) -> frozenset[int]:
    """A kernel CPU list ("0-1,3"; "" or "(null)" = none), parsed here, not by lbtune."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part in ("", "(null)"):
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def mask(text: str) -> frozenset[int]:
    """A kernel hex CPU mask ("0000000c", "ff,ffffffff")."""
    value = int(text.strip().replace(",", "") or "0", 16)
    return frozenset(i for i in range(value.bit_length()) if value >> i & 1)


def lbtune(vm: VmGuest, *args: str) -> subprocess.CompletedProcess[str]:
    return vm.run(["lbtune", *args], timeout=LBTUNE_TIMEOUT)


def lbtune_json(vm: VmGuest, *args: str) -> Any:
    r = lbtune(vm, "--json", *args)
    assert r.returncode == 0, f"lbtune {' '.join(args)}: exit {r.returncode}\n{r.stderr}"
    return json.loads(r.stdout)


def rows(result: dict[str, Any], knob: str) -> dict[str, dict[str, Any]]:
    return {c["object"]: c for c in result["changes"] if c["kind"] == knob}


def _syns(dst: str, flows: int) -> int:
    """TCP connection attempts from `flows` source ports (each a new flow hash, so the tap's
    queues - the guest's rx queues - all get some); the guest answers each with a RST."""
    sent = 0
    for _ in range(flows):
        with socket.socket() as s:
            s.setblocking(False)
            s.connect_ex((dst, 9))
            sent += 1
            time.sleep(0.005)
    return sent


def fire_queue_irqs(vm: VmGuest, queues: int, deadline_s: float = 180) -> dict[str, Any]:
    """Traffic into eth0 until the rx and tx IRQs of queues 0..queues-1 all fired (bounded);
    the queue IRQ table after."""
    before = vm.call(f"{G}:queue_irqs", ["eth0"])
    active = {irq for irq, q in before.items() if q["queue"] < queues}
    deadline = time.monotonic() + deadline_s
    with NetnsThread(vm.netns) as ns:
        while True:
            ns.call(_syns, HOST_IP, 64)
            after: dict[str, Any] = vm.call(f"{G}:queue_irqs", ["eth0"])
            quiet = {irq for irq in active if after[irq]["count"] == before[irq]["count"]}
            if not quiet:
                return after
            assert time.monotonic() < deadline, f"queue IRQs {sorted(quiet)} never fired"


@pytest.fixture(scope="module", autouse=True)
def data_link(vm: VmGuest) -> None:
    """eth0 up with an address in the guest, the tap's end addressed on the host side: the
    path the traffic takes. Up before any snapshot, so it is part of every "before"."""
    vm.call(f"{G}:link_up", ["eth0", GUEST_ADDR])
    subprocess.run(["ip", "-n", vm.netns, "addr", "replace", HOST_ADDR, "dev", "tap0"],
                   check=True, capture_output=True)  # fmt: skip


def expected_data_cpus(
    vm: VmGuest, housekeeping: frozenset[int] = HOUSEKEEPING
) -> tuple[frozenset[int], dict[str, Any]]:
    """lb-dr's data cores by its definition (the data NIC's node-local CPUs minus the
    housekeeping CPUs and minus isolated CPUs), from the guest's sysfs."""
    topo = vm.call(f"{G}:topology", ["eth0"])
    local = cpus(topo["local_cpulist"])
    if topo["numa_node"] >= 0:
        local &= cpus(topo["nodes"][str(topo["numa_node"])])
    local &= cpus(topo["online"])
    return local - housekeeping - cpus(topo["isolated"]), topo


def lb_dr_cycle(
    vm: VmGuest, profile: str = "lb-dr", housekeeping: frozenset[int] = HOUSEKEEPING
) -> dict[str, Any]:
    """apply lb-dr (or a profile built on it), read everything back, verify, apply again,
    rollback, compare: the evidence (asserted here) for the caller's extra checks."""
    data, topo = expected_data_cpus(vm, housekeeping)
    order = sorted(data)
    n = len(order)
    assert n >= 1, f"lb-dr leaves no data core on this guest: {topo}"
    before = vm.call(f"{G}:snapshot")
    irqs0 = vm.call(f"{G}:queue_irqs", ["eth0"])
    assert len(irqs0) == 8, irqs0  # input.0-3 and output.0-3

    applied = lbtune_json(vm, "apply", profile, "--iface", "eth0")
    assert applied["journal"] and applied["changed"] > 0, applied

    # the plan: one combined channel per data core, queue q's IRQs on data core q (round robin)
    assert {k: r["desired"] for k, r in rows(applied, "channels").items()} == {
        "eth0:combined": str(n)
    }
    planned = {int(k): r["desired"] for k, r in rows(applied, "irq_affinity").items()}
    want = {int(irq): str(order[q["queue"] % n]) for irq, q in irqs0.items()}
    assert planned == want
    assert {k: r["desired"] for k, r in rows(applied, "rps_cpus").items()} == {
        f"eth0:rx-{q}": "" for q in range(n)
    }
    assert {k: r["desired"] for k, r in rows(applied, "xps_cpus").items()} == {
        f"eth0:tx-{q}": str(order[q]) for q in range(n)
    }
    sysctls = {k: r["desired"] for k, r in rows(applied, "sysctl").items()}
    assert sysctls["net.ipv4.conf.eth0.send_redirects"] == "0"
    # RSS over the data queues (virtio-net with rss=on: a 128-entry table over 4 rings)
    assert {k: r["desired"] for k, r in rows(applied, "rss_indir").items()} == {
        "eth0": f"equal {n}"
    }

    # read back from the kernel
    now = vm.call(f"{G}:snapshot")
    assert f"Combined:\t{n}" in now["ethtool -l eth0"].split("Current hardware settings:")[1]
    assert set(x_table(now["ethtool -x eth0"])) == set(range(n))
    for q in range(n):
        assert mask(now[f"/sys/class/net/eth0/queues/rx-{q}/rps_cpus"]) == frozenset()
        assert mask(now[f"/sys/class/net/eth0/queues/tx-{q}/xps_cpus"]) == {order[q]}
    assert not any(f"/queues/tx-{q}/" in p for p in now for q in range(n, 4))  # gone
    for key, value in sysctls.items():
        path = "/proc/sys/" + key.replace(".", "/")
        assert now[path].split() == value.split(), key
    assert now["/proc/sys/net/ipv4/conf/eth0/send_redirects"] == "0\n"
    fired = fire_queue_irqs(vm, n)
    for irq, q in fired.items():
        assert cpus(q["smp_affinity_list"]) == {int(planned[int(irq)])}, (irq, q)
        if q["queue"] < n:  # fired after the apply: the kernel moved it
            assert cpus(q["effective_affinity_list"]) == {int(planned[int(irq)])}, (irq, q)

    verify = lbtune_json(vm, "verify")
    assert verify["in_sync"], verify
    assert not [k for k in verify["knobs"] if k["status"] == "drift"], verify

    again = lbtune_json(vm, "apply", profile, "--iface", "eth0")
    assert (again["changed"], again["journal"]) == (0, None), [
        c for c in again["changes"] if c["action"] == "change"
    ]

    back = lbtune_json(vm, "rollback")
    assert back["rolled_back"] == [applied["journal"]]
    after = vm.call(f"{G}:snapshot")
    assert after == before  # every value file and ethtool's view, byte for byte
    restored = fire_queue_irqs(vm, 4)
    for irq, q in restored.items():
        assert q["smp_affinity_list"] == irqs0[irq]["smp_affinity_list"]
        assert cpus(q["effective_affinity_list"]) <= cpus(q["smp_affinity_list"]), (irq, q)
    return {"data": data, "topology": topo, "planned": planned, "fired": fired}


def x_table(text: str) -> list[int]:
    """The indirection table of `ethtool -x` text ("    8:      0     1 ..." rows), parsed
    here, not by lbtune."""
    out: list[int] = []
    for line in text.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip().isdigit() and rest.split() and rest.split()[0].isdigit():
            out += [int(v) for v in rest.split()]
    return out


def flow_hash_lines(text: str) -> list[str]:
    """The field lines of `ethtool -n DEV rx-flow-hash FLOW` ("IP SA", "IP DA", ...)."""
    return [ln.strip() for ln in text.splitlines()[2:] if ln.strip()]


def _udp_flows(dst: str, port: int, flows: int) -> int:
    """`flows` UDP datagrams from one address to one port, each from its own source port."""
    for _ in range(flows):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"x" * 64, (dst, port))
    return flows


def udp_spread(vm: VmGuest, flows: int = 400) -> dict[int, int]:
    """Per-queue packets eth0 received for `flows` UDP flows of one client to one port."""
    before = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    with NetnsThread(vm.netns) as ns:
        ns.call(_udp_flows, HOST_IP, 5353, flows)
    time.sleep(1)
    after = vm.call(f"{G}:rx_queue_packets", ["eth0"])
    return {int(q): after[q] - before[q] for q in sorted(after, key=int)}


def test_rss_as_the_kernel_reports_it(vm: VmGuest) -> None:
    """lbtune show (SIOCETHTOOL GRSSH/GRXFH/GRXRINGS) against the ethtool binary's view."""
    x = vm.call(f"{G}:ethtool", ["-x", "eth0"])
    table = x_table(x)
    assert len(table) == 128 and set(table) == {0, 1, 2, 3}, x
    key = x.split("RSS hash key:\n", 1)[1].splitlines()[0]
    shown = lbtune_json(vm, "show", "--iface", "eth0")["nics"][0]["rss"]
    assert shown["table_size"] == 128 and shown["rings"] == 4, shown
    assert {int(q): n for q, n in shown["shares"].items()} == {q: table.count(q) for q in range(4)}
    assert shown["key"] == key and shown["hfunc"] == "toeplitz"
    letters = {"IP SA": "s", "IP DA": "d", "L4 bytes 0 & 1 [TCP/UDP src port]": "f",
               "L4 bytes 2 & 3 [TCP/UDP dst port]": "n", "None": ""}  # fmt: skip
    e1 = lbtune_json(vm, "show", "--iface", "eth1")["nics"][0]["rss"]
    for nic, rss in (("eth0", shown), ("eth1", e1)):
        assert set(rss["hash_fields"]) == {"tcp4", "udp4", "tcp6", "udp6"}, (nic, rss)
        for flow, fields in rss["hash_fields"].items():
            text = vm.call(f"{G}:ethtool", ["-n", nic, "rx-flow-hash", flow])
            assert "".join(letters[ln] for ln in flow_hash_lines(text)) == fields, (flow, text)
    assert shown["rules"] is None  # virtio_net has no rule table: "not supported"
    # the e1000e reports hash fields (GRXFH) but has no indirection table: ethtool -x fails
    assert not vm.call(f"{G}:ethtool", ["-x", "eth1"]).startswith("rc=0")
    assert e1["table_size"] == 0 and e1["table"] == "none" and e1["rules"] is None


def test_udp_hashed_on_addresses_lands_on_one_queue_and_the_profile_spreads_it(
    vm: VmGuest,
) -> None:
    """The fault (udp4 hashed on `sd`: every flow of one client to one port on one queue),
    the written fix (rss_hash udp4 sdfn, and a table over queues 0-1), read back from the
    kernel, the flows spread; rollback puts the fault back byte for byte.

    virtio_net (6.1) sends new hash fields to the device only while the `rxhash` feature is
    on (virtnet_set_hashflow); with it off the device keeps hashing on all four fields
    whatever `ethtool -n` says, until the next table change sends them along. So the fault
    is made with rxhash on, and rxhash stays on after: turning it off sets the device's hash
    types to none (virtnet_set_features), which is not the state the guest booted with (off,
    but hashing on all fields): RSS would then send every packet to queue 0."""
    r = vm.call(f"{G}:ethtool", ["-K", "eth0", "rxhash", "on"])
    assert r.startswith("rc=0"), r
    r = vm.call(f"{G}:ethtool", ["-N", "eth0", "rx-flow-hash", "udp4", "sd"])
    assert r.startswith("rc=0"), r
    try:
        before = vm.call(f"{G}:snapshot")
        assert flow_hash_lines(before["ethtool -n eth0 rx-flow-hash udp4"]) == ["IP SA", "IP DA"]
        faulty = udp_spread(vm)
        # one queue takes them all (an ARP or IPv6 neighbour packet may land elsewhere)
        assert max(faulty.values()) >= 0.95 * sum(faulty.values()) >= 200, faulty

        prof = str(PROFILES / "rss-udp-spread.toml")
        applied = lbtune_json(vm, "apply", prof)
        changed = {
            (c["kind"], c["object"]): c["desired"]
            for c in applied["changes"]
            if c["action"] == "change"
        }
        assert changed == {("rss_indir", "eth0"): "equal 2", ("rss_hash", "eth0:udp4"): "sdfn"}
        now = vm.call(f"{G}:snapshot")
        assert len(flow_hash_lines(now["ethtool -n eth0 rx-flow-hash udp4"])) == 4
        assert x_table(now["ethtool -x eth0"]) == [i % 2 for i in range(128)]
        fixed = udp_spread(vm)
        total = sum(fixed.values())
        assert fixed[2] + fixed[3] <= 0.05 * total, fixed  # the table feeds queues 0-1 only
        assert min(fixed[0], fixed[1]) >= 0.3 * total > 0, fixed  # the ports spread the flows
        print(f"udp4 sd: per-queue {faulty}; after the fix: {fixed}")
        assert lbtune_json(vm, "verify", prof)["in_sync"]

        back = lbtune_json(vm, "rollback")
        assert back["rolled_back"] == [applied["journal"]]
        assert vm.call(f"{G}:snapshot") == before
    finally:
        vm.call(f"{G}:ethtool", ["-N", "eth0", "rx-flow-hash", "udp4", "sdfn"])


def test_lb_dr_on_the_virtio_nic_applies_verifies_and_rolls_back(vm: VmGuest) -> None:
    ev = lb_dr_cycle(vm)
    # the virtio NIC sits on node 1 (lbtune.lab.guests.vm: a PCI expander bridge with numa_node=1):
    # its node-local CPUs 2-3 are also the CPUs outside the housekeeping pair 0-1
    assert (ev["topology"]["numa_node"], ev["topology"]["local_cpulist"]) == (1, "2-3")
    assert ev["data"] == {2, 3}
    assert set(ev["planned"].values()) == {"2", "3"}


def test_lb_dr_keeps_the_data_queues_on_the_nics_node(vm: VmGuest) -> None:
    # With housekeeping CPU 0 only, CPU 1 (node 0) is free but not node-local: a planner that
    # ignored the NIC's node would give it a queue; lb-dr's data cores stay 2-3.
    ev = lb_dr_cycle(vm, str(PROFILES / "lb-dr-node-local.toml"), frozenset({0}))
    topo = ev["topology"]
    assert (topo["numa_node"], topo["nodes"]) == (1, {"0": "0-1", "1": "2-3"}), topo
    assert cpus(topo["online"]) - {0} - cpus(topo["isolated"]) == {1, 2, 3}  # node-blind
    assert ev["data"] == {2, 3}
    assert set(ev["planned"].values()) == {"2", "3"}


def test_rings_on_the_e1000e_are_planned_applied_read_back_and_rolled_back(vm: VmGuest) -> None:
    profile = str(PROFILES / "rings-e1000e-max.toml")
    before = vm.call(f"{G}:snapshot")
    assert "RX:\t\t4096" in before["ethtool -g eth1"].split("Current hardware settings:")[0]
    plan = lbtune_json(vm, "plan", profile)
    ring = rows(plan, "ring")
    assert {k: (r["current"], r["desired"], r["action"]) for k, r in ring.items()} == {
        "eth1:rx": ("256", "4096", "change"),
        "eth1:tx": ("256", "4096", "change"),
    }
    applied = lbtune_json(vm, "apply", profile)
    assert applied["changed"] == 2
    current = vm.call(f"{G}:snapshot")["ethtool -g eth1"].split("Current hardware settings:")[1]
    assert "RX:\t\t4096" in current and "TX:\t\t4096" in current, current
    assert lbtune(vm, "verify").returncode == 0
    assert lbtune_json(vm, "rollback")["rolled_back"] == [applied["journal"]]
    assert vm.call(f"{G}:snapshot") == before


def test_virtio_rings_resize_within_the_queue_size_qemu_gave(vm: VmGuest) -> None:
    # Issue 19 expected virtio-net rings to be unsettable here (no ring reset). Live, Debian's
    # 6.1 and QEMU 7.2 negotiate VIRTIO_F_RING_RESET (bit 40 of the device's features) and
    # `ethtool -G` resizes the rings up to the 256 QEMU gave: "max" is a no-op, 128 is a real
    # change, 512 is refused in one line before anything is written.
    features = vm.run(["cat", "/sys/class/net/eth0/device/features"]).stdout.strip()
    assert features[40] == "1", features
    before = vm.call(f"{G}:snapshot")
    same = lbtune_json(vm, "plan", str(PROFILES / "rings-virtio-max.toml"))
    assert {
        k: (r["current"], r["desired"], r["action"]) for k, r in rows(same, "ring").items()
    } == {
        "eth0:rx": ("256", "256", "ok"),
        "eth0:tx": ("256", "256", "ok"),
    }
    applied = lbtune_json(vm, "apply", str(PROFILES / "rings-virtio-128.toml"))
    assert {
        k: (r["current"], r["desired"], r["action"]) for k, r in rows(applied, "ring").items()
    } == {
        "eth0:rx": ("256", "128", "change"),
        "eth0:tx": ("256", "128", "change"),
    }
    current = vm.call(f"{G}:snapshot")["ethtool -g eth0"].split("Current hardware settings:")[1]
    assert "RX:\t\t128" in current and "TX:\t\t128" in current, current
    assert lbtune_json(vm, "rollback")["rolled_back"] == [applied["journal"]]
    assert vm.call(f"{G}:snapshot") == before
    big = lbtune(vm, "plan", str(PROFILES / "rings-virtio-512.toml"))
    assert big.returncode == 2, big
    assert big.stderr.strip().splitlines() == [
        "lbtune: rings-virtio-512: nic.eth0.rings = 512: eth0 rx ring max is 256"
    ]


def test_show_and_capture_print_what_ethtool_prints_for_every_nic(vm: VmGuest) -> None:
    """Coalescing, features and pause of the virtio-net, the e1000e and the vmxnet3: `lbtune
    show --json` against ethtool's own values, and `lbtune capture`'s `ethtool -c/-k`
    recordings against ethtool's text, byte for byte."""
    assert vm.call("tests.vm.loop_targets:vmxnet3_up") == {"dev": "eth2"}
    shown = {n["name"]: n for n in lbtune_json(vm, "show")["nics"]}
    human = lbtune(vm, "show", "--iface", "eth1").stdout
    assert "  coalesce rx-usecs 3\n" in human and "  pause autoneg on rx on tx on\n" in human
    assert shown["eth0"]["coalesce"] == {"rx-usecs": 0, "rx-frames": 1, "tx-usecs": 0,
                                         "tx-frames": 1}  # fmt: skip
    assert shown["eth1"]["coalesce"] == {"rx-usecs": 3}  # the e1000e's supported set
    assert shown["eth1"]["pause"] == {"autoneg": True, "rx": True, "tx": True}
    assert shown["eth0"]["pause"] is None  # virtio-net: no pause
    assert lbtune(vm, "capture", "-o", "/tmp/nic-cap.tar.gz", "--force").returncode == 0
    seen = vm.call(f"{G}:ethtool_and_recordings", [["eth0", "eth1", "eth2"], "/tmp/nic-cap.tar.gz"])
    for nic in ("eth0", "eth1", "eth2"):
        k = seen[f"-k {nic}"]
        assert k["rc"] == 0 and k["recorded"] == k["stdout"], nic  # byte for byte
        assert shown[nic]["features"]["rx-gro"]["active"] == (
            "generic-receive-offload: on\n" in k["stdout"]
        )
        c = seen[f"-c {nic}"]
        if c["rc"] == 0:
            assert c["recorded"] == c["stdout"], nic
        else:
            assert shown[nic]["coalesce"] is None and c["recorded"] is None, (nic, c)
        a = seen[f"-a {nic}"]
        if a["rc"] == 0:
            words = dict(line.split(":") for line in a["stdout"].splitlines()[1:4])
            assert {k.strip().lower()[:7]: v.strip() == "on" for k, v in words.items()} == {
                "autoneg": shown[nic]["pause"]["autoneg"],
                "rx": shown[nic]["pause"]["rx"],
                "tx": shown[nic]["pause"]["tx"],
            }, (nic, a)
        else:
            assert shown[nic]["pause"] is None, (nic, a)


def test_coalescing_pause_and_features_apply_read_back_and_roll_back(vm: VmGuest) -> None:
    assert vm.call("tests.vm.loop_targets:vmxnet3_up") == {"dev": "eth2"}
    before = vm.call(f"{G}:snapshot")
    profile = str(PROFILES / "nic-params.toml")
    plan = lbtune_json(vm, "plan", profile)
    assert {k: (r["current"], r["desired"], r["action"])
            for k, r in rows(plan, "coalesce").items()} == {"eth1:rx-usecs": ("3", "100", "change")}
    assert [(o, r["action"]) for o, r in rows(plan, "pause").items()] == [
        ("eth1:autoneg", "change"), ("eth1:rx", "change")]  # autoneg first
    assert {o for o, r in rows(plan, "feature").items() if r["action"] == "change"} == {
        "eth0:rx-gro", "eth1:rx-gro", "eth2:rx-gro"}  # fmt: skip
    applied = lbtune_json(vm, "apply", profile, "--yes")
    assert applied["changed"] == 6
    now = vm.call(f"{G}:snapshot")
    assert "\nrx-usecs: 100\n" in now["ethtool -c eth1"], now["ethtool -c eth1"]
    assert "Autonegotiate:\toff\nRX:\t\toff\n" in now["ethtool -a eth1"], now["ethtool -a eth1"]
    for nic in ("eth0", "eth1", "eth2"):
        assert "generic-receive-offload: off\n" in now[f"ethtool -k {nic}"], nic
    assert lbtune(vm, "verify").returncode == 0
    assert lbtune_json(vm, "rollback")["rolled_back"] == [applied["journal"]]
    assert vm.call(f"{G}:snapshot") == before  # every ethtool view, byte for byte


def test_e1000e_keeps_rx_pause_while_autoneg_is_on(vm: VmGuest) -> None:
    # The driver takes `-A rx off` (rc 0) and keeps rx on while pause autonegotiation is on:
    # lbtune's read-back sees it, restores what it wrote and says so (exit 4).
    before = vm.call(f"{G}:snapshot")
    r = lbtune(vm, "apply", str(PROFILES / "pause-e1000e-rx-only.toml"), "--yes")
    assert r.returncode == 4, (r.returncode, r.stderr)
    assert "pause:eth1:rx" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert vm.call(f"{G}:snapshot") == before


def test_lb_dr_keeps_queue_irqs_off_isolated_cpus(vm: VmGuest) -> None:
    # Last in the module: the guest comes back with CPU 3 isolated (and the link set up again).
    vm.reboot(cmdline_extra=("isolcpus=3", "nohz_full=3"))
    vm.call(f"{G}:link_up", ["eth0", GUEST_ADDR])
    ev = lb_dr_cycle(vm)
    assert cpus(ev["topology"]["isolated"]) == {3}, ev["topology"]
    assert ev["data"] == {2}
    assert set(ev["planned"].values()) == {"2"}
    for irq, q in ev["fired"].items():
        assert 3 not in cpus(q["smp_affinity_list"]), (irq, q)
        if q["queue"] < len(ev["data"]):
            assert 3 not in cpus(q["effective_affinity_list"]), (irq, q)
