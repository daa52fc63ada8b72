"""`ipvs export --format bird`: a complete BIRD 2 config per cluster director that the real
`bird -p` parse check accepts, and a [cluster] section whose every hostile value is refused
with one line before anything is written."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lbtune.ipvs.bird import announced_vips, bird_config
from lbtune.ipvs.config import parse_config_text
from tests.cli.test_ipvs_cli import one_line_error
from tests.conftest import run_cli

SERVICES = """
[sysctl]
sloppy_tcp = 1

[[vip]]
address = "10.0.0.100"
dev = "lo"

[[vip]]
address = "10.0.0.101"
dev = "lo"

[[service]]
address = "10.0.0.100"
port = 80
scheduler = "mh"
flags = ["mh-fallback", "mh-port"]
  [[service.real_server]]
  address = "10.0.0.11"
  [[service.real_server]]
  address = "10.0.0.12"

[[service]]
address = "10.0.0.101"
port = 443
scheduler = "mh"
flags = ["mh-fallback"]
  [[service.real_server]]
  address = "10.0.0.11"
"""
CLUSTER = """
[cluster]
asn = 65001

[[cluster.director]]
name = "dir1"
address = "10.0.1.11"

[[cluster.director]]
name = "dir2"
address = "10.0.1.12"

[[cluster.director]]
name = "dir3"
address = "10.0.1.13"

[[cluster.router]]
address = "10.0.1.1"
asn = 65000
"""
ROUTER2 = '\n[[cluster.router]]\naddress = "10.0.2.1"\nasn = 65002\n'
BFD_OFF = "\n[cluster.bfd]\nenabled = false\n"
BFD_FAST = "\n[cluster.bfd]\ninterval = 50\nmultiplier = 4\n"
V6 = """
[sysctl]
sloppy_tcp = 1

[[service]]
address = "2001:db8::100"
port = 80
scheduler = "mh"
flags = ["mh-fallback"]
  [[service.real_server]]
  address = "2001:db8::11"

[cluster]
asn = 4200000001
hold_time = 9

[[cluster.director]]
name = "d6-a"
address = "2001:db8:1::11"
router_id = "192.0.2.11"

[[cluster.director]]
name = "d6-b"
address = "2001:db8:1::12"
router_id = "192.0.2.12"

[[cluster.router]]
address = "2001:db8:1::1"
asn = 65000
multihop = true
"""

needs_bird = pytest.mark.skipif(shutil.which("bird") is None,
                                reason="bird not installed (make setup installs bird2)")


def _bird_p(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bird", "-p", "-c", str(path)], capture_output=True, text=True,
                          check=False, timeout=30)


def _export(tmp_path: Path, text: str, director: str) -> str:
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(text)
    r = run_cli("ipvs", "export", str(cfg), "--format", "bird", "--director", director)
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    return r.stdout


@needs_bird
@pytest.mark.parametrize("extra", ["", ROUTER2, BFD_OFF, ROUTER2 + BFD_FAST])
@pytest.mark.parametrize("director", ["dir1", "dir2", "dir3"])
def test_bird_accepts_every_directors_export(tmp_path, extra, director):
    out = _export(tmp_path, SERVICES + CLUSTER + extra, director)
    conf = tmp_path / "bird.conf"
    conf.write_text(out)
    check = _bird_p(conf)
    assert check.returncode == 0, check.stdout + check.stderr + out
    me = {"dir1": "10.0.1.11", "dir2": "10.0.1.12", "dir3": "10.0.1.13"}[director]
    assert f"router id {me};" in out
    assert out.count("protocol bgp ") == (2 if ROUTER2 in extra else 1)
    assert out.count(f"    local {me} as 65001;") == out.count("protocol bgp ")
    assert ("protocol bfd " in out) == (BFD_OFF not in extra)
    assert out.count("    bfd on;" if BFD_OFF not in extra else "    bfd off;") == \
        out.count("protocol bgp ")


@needs_bird
def test_bird_accepts_an_ipv6_cluster_with_multihop_and_hold_time(tmp_path):
    out = _export(tmp_path, V6, "d6-b")
    conf = tmp_path / "bird.conf"
    conf.write_text(out)
    check = _bird_p(conf)
    assert check.returncode == 0, check.stdout + check.stderr + out
    assert "router id 192.0.2.12;" in out
    assert "    local 2001:db8:1::12 as 4200000001;" in out
    assert "    multihop;\n    hold time 9;" in out
    assert "    multihop {" in out  # BFD for the multihop session
    assert "route 2001:db8::100/128 blackhole;" in out


@needs_bird
def test_the_bird_check_is_no_rubber_stamp(tmp_path):
    out = _export(tmp_path, SERVICES + CLUSTER, "dir1")
    for bad in (out.replace("blackhole;", "blackhol;", 1),
                out.replace("as 65000;", "as 65000", 1),
                out.replace("    disabled;\n", "    disabled;\n    disabled maybe;\n", 1)):
        conf = tmp_path / "bad.conf"
        conf.write_text(bad)
        assert _bird_p(conf).returncode != 0, bad


def test_the_export_announces_each_vip_as_a_host_route_only_through_its_gate(tmp_path):
    cfg = parse_config_text(SERVICES + CLUSTER, "c.toml")
    text = "\n".join(bird_config(cfg, "dir2"))
    assert [v.protocol for v in announced_vips(cfg)] == ["lbtune_vip_10_0_0_100",
                                                        "lbtune_vip_10_0_0_101"]
    for vip in ("10_0_0_100", "10_0_0_101"):
        block = text[text.index(f"protocol static lbtune_vip_{vip} {{"):]
        block = block[:block.index("\n}")]
        assert "    disabled;" in block  # withdrawn until the gate enables it
    assert "if source = RTS_STATIC && net ~ [ 10.0.0.100/32, 10.0.0.101/32 ] then accept;" \
        in text
    assert "        import none;\n        export filter lbtune_vips4;" in text
    # the names follow the addresses, not the order of the config
    swapped = SERVICES.replace('"10.0.0.101"', '"10.0.0.XX"').replace(
        '"10.0.0.100"', '"10.0.0.101"').replace('"10.0.0.XX"', '"10.0.0.100"')
    cfg2 = parse_config_text(swapped + CLUSTER, "c.toml")
    assert {v.protocol for v in announced_vips(cfg2)} == {v.protocol for v in
                                                          announced_vips(cfg)}


HOSTILE = [
    ('name = "dir1"', 'name = "dir1;\\n}"', "name = 'dir1;\\n}': one word"),
    ('name = "dir1"', 'name = "a b"', "name = 'a b': one word"),
    ('name = "dir1"', 'name = "d{1}"', "name = 'd{1}': one word"),
    ('name = "dir1"', 'name = "d\\"1"', "one word"),
    ('address = "10.0.1.11"', 'address = "10.0.1.11; }"', "is not an IP address"),
    ('address = "10.0.1.11"', 'address = "fe80::1%eth0"', "is not an IP address"),
    ("asn = 65001", 'asn = "65001; protocol"', "expected a whole number"),
    ("asn = 65001", "asn = 0", "expected a whole number from 1 to 4294967294"),
    ("asn = 65000", "asn = 4294967295", "expected a whole number from 1 to 4294967294"),
    ("asn = 65001", "asn = 65001\nhold_time = 2", "hold_time = 2"),
    ('address = "10.0.1.1"', 'address = "10.0.1.1\\nprotocol kernel {}"', "not an IP address"),
    ('name = "dir1"', 'name = "dir1"\nrouter_id = "1.2.3.4#"', "router_id = '1.2.3.4#'"),
    ("asn = 65001", "asn = 65001\nlocal = 1", "unknown key 'local'"),
]


@pytest.mark.parametrize("old,new,expect", HOSTILE)
def test_hostile_cluster_values_are_refused_with_one_line_and_nothing_written(
        tmp_path, old, new, expect):
    cfg = tmp_path / "cluster.toml"
    text = SERVICES + CLUSTER
    assert old in text
    cfg.write_text(text.replace(old, new, 1))
    r = run_cli("ipvs", "export", str(cfg), "--format", "bird", "--director", "dir2")
    err = one_line_error(r)
    assert expect in err
    assert r.stdout == ""


@pytest.mark.parametrize("extra,expect", [
    ('\n[cluster.bfd]\ninterval = 0\n', "interval = 0: expected a whole number from 1"),
    ('\n[cluster.bfd]\nenabled = "yes"\n', "enabled = 'yes': expected true or false"),
    ('\n[cluster.gate]\nrise = 0\n', "rise = 0"),
    ('\n[cluster.gate]\ninterval = 1\ntimeout = 2\n', "timeout = 2 is longer than interval"),
    ('\n[cluster.gate]\nmin_real_servers = 2\n',
     "service tcp:10.0.0.101:443: 1 real server(s) with a weight, [cluster.gate] "
     "min_real_servers = 2"),
    ('\n[[cluster.director]]\nname = "dir1"\naddress = "10.0.1.99"\n', "listed twice"),
    ('\n[[cluster.director]]\nname = "dir9"\naddress = "10.0.1.11"\n',
     "address 10.0.1.11 is another director's"),
    ('\n[[cluster.router]]\naddress = "10.0.1.12"\nasn = 1\n', "is also a director's address"),
    ('\n[[cluster.director]]\nname = "v6"\naddress = "2001:db8::1"\n',
     "router_id is required for an IPv6 director"),
    ('\n[[cluster.director]]\nname = "v6"\naddress = "2001:db8::1"\nrouter_id = "10.9.9.9"\n',
     "director v6 (2001:db8::1) has no router of its address family"),
])
def test_inconsistent_clusters_are_refused(tmp_path, extra, expect):
    cfg = tmp_path / "cluster.toml"
    cfg.write_text(SERVICES + CLUSTER + extra)
    err = one_line_error(run_cli("ipvs", "export", str(cfg), "--format", "bird",
                                 "--director", "dir1"))
    assert expect in err


def test_a_cluster_needs_directors_and_routers(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVICES + "\n[cluster]\nasn = 65001\n")
    assert "no [[cluster.director]]" in one_line_error(run_cli("ipvs", "plan", str(cfg)))
    cfg.write_text(SERVICES + CLUSTER.split("[[cluster.router]]")[0])
    assert "no [[cluster.router]]" in one_line_error(run_cli("ipvs", "plan", str(cfg)))


@pytest.mark.parametrize("args,expect", [
    (("--format", "bird"), "--format bird needs --director NAME"),
    (("--format", "bird", "--director", "dir9"),
     "no director 'dir9' in [cluster] (directors: dir1, dir2, dir3)"),
    (("--format", "bird", "--director", "x\ny"), "no director 'x\\ny'"),
    (("--director", "dir1"), "--director writes a BIRD config: add --format bird"),
    (("--format", "bird", "--director", "dir1", "--peer", "10.0.1.12"),
     "--peer and --check-port are keepalived options"),
])
def test_export_options_are_checked(tmp_path, args, expect):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVICES + CLUSTER)
    r = run_cli("ipvs", "export", str(cfg), *args)
    assert expect in one_line_error(r)
    assert r.stdout == ""


def test_a_config_without_cluster_has_no_bird_export(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVICES)
    err = one_line_error(run_cli("ipvs", "export", str(cfg), "--format", "bird",
                                 "--director", "dir1"))
    assert "no [cluster] section" in err


def test_a_vip_of_the_other_family_is_refused(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVICES + '\n[[vip]]\naddress = "2001:db8::7"\ndev = "lo"\n' + CLUSTER)
    err = one_line_error(run_cli("ipvs", "export", str(cfg), "--format", "bird",
                                 "--director", "dir1"))
    assert "VIP 2001:db8::7 is IPv6 but director dir1 peers over IPv4" in err


def test_json_export_carries_the_lines(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(SERVICES + CLUSTER)
    r = run_cli("ipvs", "export", str(cfg), "--format", "bird", "--director", "dir3", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json["director"] == "dir3" and "router id 10.0.1.13;" in r.json["lines"]


def test_the_docs_show_what_the_export_of_their_config_writes(tmp_path):
    """docs/ipvs.md's [cluster] example and the bird.conf it shows for dir1 stay true."""
    docs = (Path(__file__).resolve().parents[3] / "docs" / "ipvs.md").read_text()
    sec = docs[docs.index("### The `[cluster]` section"):]
    toml = sec[sec.index("```toml\n") + 8:]
    toml = toml[:toml.index("```")]
    out = _export(tmp_path, toml, "dir1")
    shown = sec[sec.index("```\n# lbtune ipvs export --format bird") + 4:]
    assert out == shown[:shown.index("```")]


def test_the_export_warns_about_what_breaks_failover(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text((SERVICES + CLUSTER).replace("sloppy_tcp = 1", "sloppy_tcp = 0"))
    r = run_cli("ipvs", "export", str(cfg), "--format", "bird", "--director", "dir1")
    assert r.exit_code == 0
    assert r.stderr.startswith("warning: stateless failover breaks: net.ipv4.vs.sloppy_tcp: ")
    assert r.stderr.count("\n") == 1 and r.stdout.startswith("# lbtune ipvs export")
    j = run_cli("ipvs", "export", str(cfg), "--format", "bird", "--director", "dir1", "--json")
    assert j.json["warnings"] == [r.stderr.strip().removeprefix("warning: ")]
