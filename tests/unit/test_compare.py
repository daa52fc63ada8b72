"""`lbtune compare`: fixture trees and a real /proc/net/ip_vs, through the CLI helper."""

from __future__ import annotations

import pathlib

from lbtune.host.ipvs.procfs import parse_proc_ip_vs
from tests.conftest import DELL, HOSTS, KVM, copy_host, run_cli

IP_VS = pathlib.Path(__file__).resolve().parents[1] / "data" / "ipvs" / "proc_net_ip_vs.txt"


def test_proc_ip_vs_parses_the_lab_kernels_table() -> None:
    table = parse_proc_ip_vs(IP_VS.read_text())
    assert table is not None
    by_key = {s.key: s for s in table}
    assert set(by_key) == {"TCP 10.0.0.100:80", "TCP [2001:db8::1]:443", "UDP 10.0.0.100:53",
                           "FWM 7"}
    tcp = by_key["TCP 10.0.0.100:80"]
    assert tcp.scheduler == "rr"
    assert [(r.address, r.forward, r.weight) for r in tcp.real_servers] == [
        ("10.0.0.12:80", "Route", 3), ("10.0.0.11:80", "Route", 1)]
    assert by_key["UDP 10.0.0.100:53"].flags.startswith("persistent")
    assert by_key["TCP [2001:db8::1]:443"].real_servers[0].address == "[2001:db8::11]:443"
    assert by_key["FWM 7"].real_servers[0].weight == 5
    assert parse_proc_ip_vs(None) is None


def test_proc_ip_vs_rejects_what_is_not_the_kernels_format() -> None:
    import pytest

    with pytest.raises(ValueError):
        parse_proc_ip_vs("TCP  zz:0050 rr\n")
    with pytest.raises(ValueError):
        parse_proc_ip_vs("  -> 0A00000C:0050      Route   3      0          0\n")


def test_same_tree_is_in_sync_and_exit_0(tmp_path) -> None:
    a = copy_host(tmp_path, DELL, dest="a")
    b = copy_host(tmp_path, DELL, dest="b")
    r = run_cli("compare", str(a), str(b), "--json")
    assert r.exit_code == 0, r.stderr
    doc = r.json
    assert doc["in_sync"] is True
    assert doc["hosts"][0]["compared"] > 50  # sysctls, NICs, IRQ shapes really compared


def test_a_changed_knob_of_each_area_is_named(tmp_path) -> None:
    a = copy_host(tmp_path, DELL, dest="a")
    ip_vs = IP_VS.read_text()
    b = copy_host(tmp_path, DELL, dest="b", files={
        "/proc/sys/net/core/somaxconn": "1024\n",
        "/proc/net/ip_vs": ip_vs.replace("Route   3", "Route   9"),
        "/sys/class/net/eno1/tx_queue_len": "10000\n",
    })
    (a / "proc/net/ip_vs").write_text(ip_vs)
    r = run_cli("compare", str(a), str(b), "--json")
    assert r.exit_code == 1, r.stderr
    diffs = {(d["area"], d["object"]): (d["template"], d["value"])
             for d in r.json["hosts"][0]["differences"]}
    assert diffs == {
        ("sysctl", "net.core.somaxconn"): ("4096", "1024"),
        ("ipvs", "TCP 10.0.0.100:80 -> 10.0.0.12:80"): ("Route weight 3", "Route weight 9"),
        ("txqueuelen", "eno1"): ("1000", "10000"),
    }


def test_irq_placement_is_compared_by_shape_not_cpu_numbers(tmp_path) -> None:
    """Two hosts whose queue IRQs each sit on their own CPU compare equal even when the
    CPU numbers differ; one queue moved onto another's CPU is a different shape."""
    a = copy_host(tmp_path, KVM, dest="a")
    irqs = sorted(p.parent.name for p in (a / "proc/irq").glob("*/effective_affinity_list"))
    r = run_cli("--json", "show", "--root", str(a))
    nic = next(n for n in r.json["nics"] if n["irqs"])
    mine = [q["irq"] for q in nic["irqs"]]
    assert mine and all(str(i) in irqs for i in mine)
    base = run_cli("compare", str(a), str(a), "--json")
    assert base.exit_code == 0
    # rotate the single-CPU effective affinities: same shape, other numbers
    cpus = [(a / f"proc/irq/{i}/effective_affinity_list").read_text().strip() for i in mine]
    assert all("," not in c and "-" not in c for c in cpus), cpus
    rotated = cpus[1:] + cpus[:1]
    b = copy_host(tmp_path, KVM, dest="b", files={
        f"/proc/irq/{i}/effective_affinity_list": f"{c}\n" for i, c in zip(mine, rotated)})
    same = run_cli("compare", str(a), str(b), "--json")
    assert same.exit_code == 0, same.json
    c = copy_host(tmp_path, KVM, dest="c", files={
        f"/proc/irq/{mine[1]}/effective_affinity_list": f"{cpus[0]}\n"})
    moved = run_cli("compare", str(a), str(c), "--json")
    assert moved.exit_code == 1
    [d] = moved.json["hosts"][0]["differences"]
    assert d["area"] == "irq" and d["object"].endswith(" placement")
    assert d["template"] != d["value"] and "per CPU" in d["value"]


def test_against_a_profile_verifies_each_host(tmp_path) -> None:
    r = run_cli("compare", str(HOSTS / DELL), str(HOSTS / KVM), "--against", "web", "--json")
    assert r.exit_code == 1
    assert r.json["against"] == "profile" and r.json["template"] == "web"
    for h in r.json["hosts"]:
        objs = {d["object"] for d in h["differences"]}
        assert "net.ipv4.tcp_slow_start_after_idle" in objs


def test_text_and_markdown_name_the_knob(tmp_path) -> None:
    a = copy_host(tmp_path, DELL, dest="a")
    b = copy_host(tmp_path, DELL, dest="b", files={"/proc/sys/net/core/somaxconn": "1024\n"})
    t = run_cli("compare", str(a), str(b))
    assert t.exit_code == 1
    assert "1 of" in t.stdout and "net.core.somaxconn" in t.stdout and "1024" in t.stdout
    m = run_cli("compare", str(a), str(b), "--format", "md")
    assert "| sysctl | net.core.somaxconn | 4096 | 1024 |" in m.stdout


def test_bad_input_is_one_line_exit_2(tmp_path) -> None:
    for args in (["compare", str(tmp_path / "nope"), str(tmp_path / "nope2")],
                 ["compare", str(HOSTS / DELL)],
                 ["compare", str(HOSTS / DELL), "--against", str(tmp_path / "x.toml")]):
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_rss_hash_table_and_rules_are_compared(tmp_path) -> None:
    """Hash fields, the table's shares and the flow rules, as two hosts' ethtool shows them."""
    from lbtune.host.fs import HostFS
    from lbtune.host.net.ethtool import RecordedEthtool
    from lbtune.host.net.rss import NtupleRule, weight_table

    a = copy_host(tmp_path, DELL, dest="a")
    b = copy_host(tmp_path, DELL, dest="b")
    eth = RecordedEthtool(HostFS(str(b)))
    eth.set_rx_flow_hash("eno1", "udp4", "sdfn")
    eth.set_rxfh("eno1", weight_table(512, [0, 1, 1, 1]))
    eth.add_ntuple_rule("ens1f0np0", NtupleRule(5, "tcp4", (("dst-port", "22"),), 1))
    r = run_cli("compare", str(a), str(b), "--json")
    assert r.exit_code == 1, r.stderr
    diffs = {(d["area"], d["object"]): (d["template"], d["value"])
             for d in r.json["hosts"][0]["differences"]}  # fmt: skip
    assert diffs == {
        ("rss hash", "eno1 udp4"): ("sd", "sdfn"),
        ("rss table", "eno1"): (
            "16 queues, 32 of 512 entries each",
            "queue:entries 0:0 1-3:170-171 4-15:0 of 512",
        ),
        ("flow rules", "ens1f0np0"): (
            "flow-type udp4 dst-port 4789 action 3",
            "flow-type tcp4 dst-port 22 action 1; flow-type udp4 dst-port 4789 action 3",
        ),
    }


MH = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  0A000064:0050 mh
  -> 0A00000C:0050      Route   1      0          0
  -> 0A00000B:0050      Route   1      0          0
"""


def test_directors_whose_maglev_tables_are_built_from_different_inputs_are_flagged(
        tmp_path) -> None:
    """Cluster directors: the same real servers and weights in the same kernel order build
    the same mh table; another set, weight or order is named under `ipvs hashing`."""
    a = copy_host(tmp_path, DELL, dest="a", files={"/proc/net/ip_vs": MH})
    same = copy_host(tmp_path, DELL, dest="same", files={"/proc/net/ip_vs": MH})
    lines = MH.splitlines()
    order = copy_host(tmp_path, DELL, dest="order", files={
        "/proc/net/ip_vs": "\n".join([*lines[:4], lines[5], lines[4]]) + "\n"})
    extra = copy_host(tmp_path, DELL, dest="extra", files={
        "/proc/net/ip_vs": MH + "  -> 0A00000D:0050      Route   1      0          0\n"})
    r = run_cli("compare", str(a), str(same), str(order), str(extra), "--json")
    assert r.exit_code == 1, r.stderr
    hosts = {pathlib.Path(h["source"]).name: h for h in r.json["hosts"]}
    assert hosts["same"]["in_sync"] is True
    diffs = {(d["area"], d["object"]): (d["template"], d["value"])
             for d in hosts["order"]["differences"]}
    assert diffs == {("ipvs hashing", "TCP 10.0.0.100:80"): (
        "mh over 10.0.0.12:80 w1, 10.0.0.11:80 w1", "mh over 10.0.0.11:80 w1, 10.0.0.12:80 w1")}
    diffs = {(d["area"], d["object"]): d["value"] for d in hosts["extra"]["differences"]}
    assert diffs == {
        ("ipvs", "TCP 10.0.0.100:80 -> 10.0.0.13:80"): "Route weight 1",
        ("ipvs hashing", "TCP 10.0.0.100:80"):
            "mh over 10.0.0.12:80 w1, 10.0.0.11:80 w1, 10.0.0.13:80 w1",
    }
    text = run_cli("compare", str(a), str(order))
    assert "ipvs hashing" in text.stdout
