"""`lbtune show --root <fixture> --json` on every fixture host, checked against the raw files."""

from __future__ import annotations

import re

import pytest

FIXTURES = ["dell-r750-mlx5-ixgbe", "kvm-virtio-4vcpu", "aws-ena-c5n", "tiny-veth-bond"]


def raw_queue_irqs(root, pattern: str) -> dict[int, tuple[int, str]]:
    """queue index -> (irq, smp_affinity_list text), straight from the fixture's files."""
    out = {}
    for line in (root / "proc" / "interrupts").read_text().splitlines()[1:]:
        m = re.match(r"\s*(\d+):.*\s" + pattern + r"\s*$", line)
        if m:
            irq, queue = int(m.group(1)), int(m.group(2))
            aff = (root / "proc" / "irq" / str(irq) / "smp_affinity_list").read_text().strip()
            out[queue] = (irq, aff)
    return out


def expand(cpulist: str) -> list[int]:
    cpus: list[int] = []
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


@pytest.mark.parametrize("name", FIXTURES)
def test_show_json_on_fixture(cli, hosts, name):
    r = cli("--root", str(hosts / name), "show", "--json")
    assert r.exit_code == 0, r.stderr
    data = r.json
    assert data["cpus"]["cpus"], "no CPUs parsed"
    assert data["nics"], "no NICs parsed"
    text = cli("--root", str(hosts / name), "show", "--all")
    assert text.exit_code == 0, text.stderr
    for nic in data["nics"]:
        assert nic["name"] in text.stdout


@pytest.mark.parametrize(
    ("nic", "pattern"),
    [
        ("ens1f0np0", r"mlx5_comp(\d+)@pci:0000:98:00\.0"),
        ("ens1f1np1", r"mlx5_comp(\d+)@pci:0000:98:00\.1"),
        ("eno1", r"eno1-TxRx-(\d+)"),
    ],
)
def test_every_mlx5_and_ixgbe_queue_maps_to_irq_and_cpus(cli, hosts, nic, pattern):
    root = hosts / "dell-r750-mlx5-ixgbe"
    r = cli("--root", str(root), "show", "--json", "--iface", nic)
    assert r.exit_code == 0, r.stderr
    got = {q["queue"]: (q["irq"], q["affinity"]) for q in r.json["nics"][0]["irqs"]}
    want = {q: (irq, expand(aff)) for q, (irq, aff) in raw_queue_irqs(root, pattern).items()}
    assert len(want) >= 16
    assert got == want


def test_virtio_rx_tx_split(cli, hosts):
    root = hosts / "kvm-virtio-4vcpu"
    r = cli("--root", str(root), "show", "--json")
    nic = next(n for n in r.json["nics"] if n["driver"] == "virtio_net")
    rx = {q["queue"]: q["irq"] for q in nic["irqs"] if q["direction"] == "rx"}
    tx = {q["queue"]: q["irq"] for q in nic["irqs"] if q["direction"] == "tx"}
    assert rx == {q: irq for q, (irq, _) in raw_queue_irqs(root, r"virtio\d+-input\.(\d+)").items()}
    assert tx == {
        q: irq for q, (irq, _) in raw_queue_irqs(root, r"virtio\d+-output\.(\d+)").items()
    }
    assert len(rx) == len(tx) == 4


def test_ena_queues(cli, hosts):
    root = hosts / "aws-ena-c5n"
    r = cli("--root", str(root), "show", "--json")
    nic = next(n for n in r.json["nics"] if n["driver"] == "ena")
    got = {q["queue"]: q["irq"] for q in nic["irqs"]}
    want = {q: irq for q, (irq, _) in raw_queue_irqs(root, r"ens5-Tx-Rx-(\d+)").items()}
    assert got == want and len(got) == 8


def test_virtual_devices_have_no_queue_irqs(cli, hosts):
    r = cli("--root", str(hosts / "tiny-veth-bond"), "show", "--json")
    nics = {n["name"]: n for n in r.json["nics"]}
    for name in ("veth0", "bond0", "bond0.100", "lo"):
        assert nics[name]["irqs"] == [], name
    assert nics["bond0"]["kind"] == "bond" and nics["bond0.100"]["kind"] == "vlan"


@pytest.mark.parametrize("broken", ["broken-sysfs", "broken-nic-mtu"])
def test_malformed_fixture_is_one_line_exit_2(cli, hosts, broken):
    r = cli("--root", str(hosts / broken), "show")
    assert r.exit_code == 2
    assert r.stderr.startswith("lbtune: ") and r.stderr.count("\n") == 1
    assert str(hosts / broken) in r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_iface_on_fixture(cli, hosts):
    r = cli("--root", str(hosts / "aws-ena-c5n"), "show", "--iface", "eth9")
    assert r.exit_code == 2
    assert r.stderr == "lbtune: --iface eth9: no such interface\n"
