"""RSS hash fields, indirection table, hash key and ntuple rules: the parsers of recorded
`ethtool -x` / `-n` text (real layouts from the fixture trees, hostile text), the formatters
`lbtune capture` uses, the table arithmetic, the ioctl structures, and the recorded source's
setters behaving as the kernel does."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net import rss
from lbtune.host.net.ethtool import EthtoolIoctlError, RecordedEthtool
from lbtune.host.net.rss import NtupleRule, Rxfh

HOSTS = Path(__file__).resolve().parents[1] / "data" / "hosts"
RECORDS = sorted(HOSTS.glob("*/sos_commands/networking/ethtool_-[xn]_*"))


def _dell(tmp_path: Path) -> RecordedEthtool:
    shutil.copytree(HOSTS / "dell-r750-mlx5-ixgbe", tmp_path / "t", symlinks=True)
    return RecordedEthtool(HostFS(str(tmp_path / "t")))


def test_struct_layouts_match_the_uapi():
    # include/uapi/linux/ethtool.h: ethtool_rx_flow_spec is 168 bytes on every 64-bit ABI
    # (ring_cookie 8-aligned at 152), rule_locs starts at 188, ethtool_rxfh's header is 24
    assert rss._FLOW_SPEC.size == 168
    assert rss.RXNFC_SIZE == 188
    assert rss._RXFH.size == 24


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: f"{p.parts[-4]}/{p.name}")
def test_recorded_fixture_text_round_trips(path: Path):
    """Every recording in the fixture trees (written by generate.py, not by lbtune) parses,
    and formatting the values gives the same bytes: what a setter rewrites and a rollback
    puts back is ethtool's own layout."""
    text = path.read_text()
    dev_part = path.name.split("_", 2)[2]
    if "Operation not supported" in text:
        return  # unsupported: the sources read None (test_unsupported_reads_none)
    if path.name.startswith("ethtool_-x_"):
        r = rss.parse_ethtool_x(text, str(path))
        assert rss.format_ethtool_x(dev_part, r) == text
    elif "_rx-flow-hash_" in dev_part:
        flow = dev_part.rsplit("_", 1)[1]
        letters = rss.parse_rx_flow_hash(text, flow, str(path))
        assert rss.format_rx_flow_hash(flow, letters) == text
    else:
        rings, rules = rss.parse_ethtool_n(text, str(path))
        assert rss.format_ethtool_n(rings, rules) == text


def test_fixture_values():
    dell = RecordedEthtool(HostFS(str(HOSTS / "dell-r750-mlx5-ixgbe")))
    x = dell.rxfh("eno1")
    assert x is not None and len(x.indir) == 512 and x.rings == 16
    assert x.indir[:18] == (*range(16), 0, 1)
    assert x.key is not None and len(x.key) == 40 and x.hfunc == "toeplitz"
    assert x.hfuncs == ("toeplitz", "xor", "crc32")
    assert dell.rx_flow_hash("eno1", "udp4") == "sd"  # ixgbe: UDP RSS off by default
    assert dell.rx_flow_hash("ens1f0np0", "udp4") == "sdfn"
    assert dell.ntuple_rules("eno1") == ()
    assert dell.ntuple_rules("ens1f0np0") == (NtupleRule(1023, "udp4", (("dst-port", "4789"),), 3),)
    ena = RecordedEthtool(HostFS(str(HOSTS / "aws-ena-c5n")))
    e = ena.rxfh("ens5")
    assert e is not None and e.key is not None
    assert e.key.hex(":") == (
        "07:59:95:5a:3f:e0:cf:f0:b5:2f:cd:66:9f:3d:e5:11:8b:a6:c4:54:"
        "08:d3:48:49:73:cb:e2:56:43:fa:4c:ad:f1:6e:9d:d2:df:6d:d1:5e"
    )
    assert ena.ntuple_rules("ens5") is None  # ENA: no rule table
    kvm = RecordedEthtool(HostFS(str(HOSTS / "kvm-virtio-4vcpu")))
    v = kvm.rxfh("ens3")
    assert v is not None and v.indir == () and v.key is None and v.rings == 4
    assert kvm.rx_flow_hash("ens3", "tcp4") == ""


def test_unsupported_reads_none():
    tiny = RecordedEthtool(HostFS(str(HOSTS / "tiny-veth-bond")))
    assert tiny.rxfh("eth0") is None
    assert tiny.ntuple_rules("eth0") is None
    assert tiny.rx_flow_hash("eth0", "udp4") is None
    assert tiny.rx_flow_hash("eth0", "nonsense") is None
    assert tiny.rxfh("absent0") is None and tiny.ntuple_rules("absent0") is None


X_HEAD = "RX flow hash indirection table for eth0 with 2 RX ring(s):\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("RX flow hash indirection table for eth0 with x RX ring(s):\n", "first line"),
        (X_HEAD + "    8:      0     1\n", "row 8 after 0"),
        (X_HEAD + "    0:      0     1\n    0:      0     1\n", "row 0 after 2"),
        (X_HEAD + "    0:      0    one\n", "table row"),
        (X_HEAD + "    0:      0     1\nOperation not supported\n", "table rows and"),
        (X_HEAD + "    0:      0\nRSS hash key:\nzz:01\n", "hash key"),
        (X_HEAD + "    0:      0\nRSS hash key:\n1:2:3\n", "hash key"),
        (X_HEAD + "    0:      0\nRSS hash key:\n01:02\n03:04\n", "two hash keys"),
        (X_HEAD + "    0:      0\nRSS hash function:\n    toeplitz: maybe\n", "hash function"),
        (X_HEAD + "    0: " + " 1" * 70000 + "\n", "more than"),
    ],
)
def test_malformed_x(text, problem):
    with pytest.raises(MalformedHostFile, match=problem):
        rss.parse_ethtool_x(text, "/cap/ethtool_-x_eth0")


@pytest.mark.parametrize(
    ("text", "flow", "problem"),
    [
        ("", "udp4", "empty"),
        ("UDP over IPV4 flows use these fields for computing Hash flow key:\nIP SA\n", "tcp4",
         "expected 'TCP over IPV4"),
        ("UDP over IPV4 flows use these fields for computing Hash flow key:\nIP XA\n", "udp4",
         "unknown hash field"),
        ("UDP over IPV4 flows use these fields for computing Hash flow key:\n", "udp4",
         "no hash field"),
        ("UDP over IPV4 flows use these fields for computing Hash flow key:\nIP SA\n", "udp9",
         "not a flow type"),
    ],
)  # fmt: skip
def test_malformed_flow_hash(text, flow, problem):
    with pytest.raises(MalformedHostFile, match=problem):
        rss.parse_rx_flow_hash(text, flow, "/cap/f")


def test_flow_hash_discard_and_none():
    text = "UDP over IPV6 flows - All matching flows discarded on RX\n"
    assert rss.parse_rx_flow_hash(text, "udp6") == "r"
    assert rss.format_rx_flow_hash("udp6", "r") == text
    assert rss.format_rx_flow_hash("tcp4", "") == (
        "TCP over IPV4 flows use these fields for computing Hash flow key:\nNone\n"
    )


RULE = (
    "Filter: 5\n\tRule Type: TCP over IPv4\n"
    "\tSrc IP addr: 0.0.0.0 mask: 255.255.255.255\n"
    "\tDest IP addr: 10.0.0.1 mask: 0.0.0.0\n\tTOS: 0x0 mask: 0xff\n"
    "\tSrc port: 0 mask: 0xffff\n\tDest port: 179 mask: 0x0\n"
    "\tAction: Direct to queue 1\n\n"
)


def test_rule_listing_parses_masks_the_ethtool_way():
    rings, rules = rss.parse_ethtool_n("4 RX rings available\nTotal 1 rules\n\n" + RULE)
    assert rings == 4
    assert rules == (NtupleRule(5, "tcp4", (("dst-ip", "10.0.0.1"), ("dst-port", "179")), 1),)
    partial = RULE.replace("10.0.0.1 mask: 0.0.0.0", "10.0.0.0 mask: 0.0.0.255")
    _, (r,) = rss.parse_ethtool_n("Total 1 rules\n\n" + partial.replace("queue 1", "queue 0"))
    assert dict(r.match)["dst-ip"] == "10.0.0.0 m 0.0.0.255"
    drop = RULE.replace("Action: Direct to queue 1", "Action: Drop")
    _, (d,) = rss.parse_ethtool_n("Total 1 rules\n\n" + drop)
    assert d.action == -1
    assert rss.format_ethtool_n(None, (d,)) == "Total 1 rules\n\n" + drop


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("4 RX rings available\n", "no 'Total N rules'"),
        ("Total 2 rules\n\n" + RULE, "'Total 2 rules' but 1 listed"),
        ("Total 2 rules\n\n" + RULE + RULE, "two rules at one location"),
        ("Total 1 rules\n\n" + RULE.replace("TCP over IPv4", "Raw Ethernet"), "unsupported"),
        ("Total 1 rules\n\n" + RULE.replace("\tAction: Direct to queue 1\n", ""), "no rule type"),
        ("Total 1 rules\n\n" + RULE.replace("queue 1", "VF 2 queue 1"), "unexpected"),
        ("Total 1 rules\n\n" + RULE.replace("179", "99999"), "out of range"),
        ("Total 1 rules\n\n" + RULE.replace("10.0.0.1", "10.0.0.999"), "rule 5"),
        ("Total 1 rules\n\n" + RULE + "\tVLAN EtherType: 0x0 mask: 0xffff\n", "unexpected"),
        ("Total 0 rules\nstray text\n", "unexpected line"),
    ],
)
def test_malformed_rule_listing(text, problem):
    with pytest.raises(MalformedHostFile, match=problem):
        rss.parse_ethtool_n(text, "/cap/ethtool_-n_eth0")


def test_rule_text_round_trip_and_refusals():
    flow, match, action = rss.parse_rule_text(
        "flow-type tcp4 dst-port 0xb3 src-ip 10.0.0.0 m 0.0.0.255 action 2"
    )
    assert rss.rule_text(flow, match, action) == (
        "flow-type tcp4 src-ip 10.0.0.0 m 0.0.0.255 dst-port 179 action 2"
    )
    assert rss.parse_rule_text("flow-type ip4 l4proto 112 action -1")[2] == -1
    for bad, problem in (
        ("tcp4 dst-port 1 action 1", "expected"),
        ("flow-type ether proto 0x800 action 1", "flow-type"),
        ("flow-type tcp4 l4proto 6 action 1", "not a field of tcp4"),
        ("flow-type tcp4 dst-port 1 dst-port 2 action 1", "given twice"),
        ("flow-type tcp4 dst-port 70000 action 1", "out of range"),
        ("flow-type tcp4 dst-ip ::1 action 1", "not an IPv4"),
        ("flow-type tcp4 dst-port 1 action q", "queue index"),
        ("flow-type tcp4 dst-port 1 action -2", "queue index"),
        ("flow-type tcp4 dst-port 1", "no action"),
        ("flow-type tcp4 dst-port 1 m 0xffff action 1", "matches every"),
        ("flow-type tcp4 dst-port 1 tos", "without a value"),
    ):
        with pytest.raises(ValueError, match=problem):
            rss.parse_rule_text(bad)


@pytest.mark.parametrize(
    "text",
    [
        "flow-type tcp4 dst-port 179 action 1",
        "flow-type udp6 src-ip 2001:db8::1 dst-port 53 action 0",
        "flow-type ip4 l4proto 112 action 3",
        "flow-type ip6 dst-ip 2001:db8::/ m ::ffff action -1".replace("/", ""),
        "flow-type sctp4 src-ip 10.1.0.0 m 0.0.255.255 tos 0x10 action 7",
    ],
)
def test_flow_spec_bytes_round_trip(text):
    """The h_u/m_u unions lbtune packs read back to the same rule (the kernel stores what it
    is given; the driver echoes it through ETHTOOL_GRXCLSRULE)."""
    flow, match, action = rss.parse_rule_text(text)
    h, m = rss._spec_bytes(flow, match)
    cookie = rss.RX_CLS_FLOW_DISC if action < 0 else action
    spec = rss._FLOW_SPEC.pack(rss.FLOW_IDS[flow], h, bytes(20), m, bytes(20), cookie, 9)
    assert rss._rule_of_spec(spec) == NtupleRule(9, flow, match, action)


def test_flow_spec_refuses_what_lbtune_does_not_model():
    spec = rss._FLOW_SPEC.pack(0x12, bytes(52), bytes(20), bytes(52), bytes(20), 0, 3)
    with pytest.raises(ValueError, match="flow type 0x12"):
        rss._rule_of_spec(spec)
    spec = rss._FLOW_SPEC.pack(0x01, bytes(52), bytes(20), bytes(52), bytes(20), 1 << 32, 3)
    with pytest.raises(ValueError, match="VF"):
        rss._rule_of_spec(spec)


def test_tables_as_ethtool_fills_them():
    assert rss.equal_table(8, 3) == (0, 1, 2, 0, 1, 2, 0, 1)
    # ethtool 6.1 fill_indir_table(): weight 1 2 1 over 8 -> 0 0 1 1 1 1 2 2
    assert rss.weight_table(8, [1, 2, 1]) == (0, 0, 1, 1, 1, 1, 2, 2)
    assert rss.weight_table(8, [0, 1, 1]) == (1, 1, 1, 1, 2, 2, 2, 2)
    assert rss.table_text(rss.equal_table(128, 4)) == "equal 4"
    assert rss.table_text(rss.weight_table(256, [0, 1, 1, 1])) == "weight 0 1 1 1"
    assert rss.table_text((3, 0, 0, 1)) == "table 3 0 0 1"
    assert rss.table_text(()) == "none"
    for text in ("equal 4", "weight 0 1 1 1", "table 3 0 0 1 2 2 2 2"):
        assert rss.table_text(rss.table_of(text, 8)) == rss.table_text(
            rss.table_of(rss.table_text(rss.table_of(text, 8)), 8)
        )
    for bad in ("equal 0", "equal", "weight 0 0", "table 1 2", "spread 4", "equal -1", "equal x"):
        with pytest.raises(ValueError):
            rss.table_of(bad, 8)
    assert rss.queue_shares((0, 1, 1, 3)) == {0: 1, 1: 2, 3: 1}


def test_hash_fields_fit():
    assert rss.hash_fields_fit("udp4", "sdfn")
    assert rss.hash_fields_fit("ah4", "sd")
    assert not rss.hash_fields_fit("esp6", "sdfn")  # no ports
    assert not rss.hash_fields_fit("udp4", "")
    assert not rss.hash_fields_fit("udp4", "sdr")
    assert rss.canonical_letters("nfds") == "sdfn"
    with pytest.raises(ValueError):
        rss.canonical_letters("sdx")


def test_recorded_setters_behave_like_the_kernel(tmp_path):
    eth = _dell(tmp_path)
    eth.set_rx_flow_hash("eno1", "udp4", "nfds")
    assert eth.rx_flow_hash("eno1", "udp4") == "sdfn"
    for dev, flow, fields, code in (
        ("eno1", "udp4", "sdq", errno.EINVAL),
        ("eno1", "udp4", "", errno.EINVAL),
        ("eno1", "sctp4", "sd", errno.EOPNOTSUPP),  # not recorded: not supported
        ("lo", "udp4", "sd", errno.EOPNOTSUPP),
    ):
        with pytest.raises(EthtoolIoctlError) as e:
            eth.set_rx_flow_hash(dev, flow, fields)
        assert e.value.errno == code
    # the table: a queue beyond the ring count, a wrong size, then a configured table that
    # a channel decrease would cut refuses the channel change (as the kernel does)
    with pytest.raises(EthtoolIoctlError) as e:
        eth.set_rxfh("ens1f0np0", [24] * 256)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(EthtoolIoctlError):
        eth.set_rxfh("ens1f0np0", [0] * 255)
    eth.set_rxfh("ens1f0np0", rss.weight_table(256, [0, 1, 1, 1]))
    assert rss.table_text(eth.rxfh("ens1f0np0").indir) == "weight 0 1 1 1"  # type: ignore[union-attr]
    with pytest.raises(EthtoolIoctlError):
        eth.set_channels("ens1f0np0", combined=2)
    assert eth.channels("ens1f0np0").combined == 24  # type: ignore[union-attr]
    eth.set_rxfh("ens1f0np0", default=True)
    eth.set_channels("ens1f0np0", combined=8)  # the default spread follows the count
    after = eth.rxfh("ens1f0np0")
    assert after is not None and after.rings == 8 and after.indir == rss.equal_table(256, 8)
    # the key: same length only
    with pytest.raises(EthtoolIoctlError):
        eth.set_rxfh("eno1", key=b"\x01" * 52)
    eth.set_rxfh("eno1", key=bytes(range(40)))
    assert eth.rxfh("eno1").key == bytes(range(40))  # type: ignore[union-attr]


def test_recorded_rules_add_and_delete_only_the_given_location(tmp_path):
    eth = _dell(tmp_path)
    admin = eth.ntuple_rules("ens1f0np0")
    loc = eth.add_ntuple_rule("ens1f0np0", NtupleRule(-1, "tcp4", (("dst-port", "179"),), 1))
    assert loc == 1022  # ethtool's choice: the last free slot (1023 is the admin's)
    assert eth.add_ntuple_rule("ens1f0np0", NtupleRule(7, "ip4", (("l4proto", "112"),), 0)) == 7
    rules = eth.ntuple_rules("ens1f0np0")
    assert rules is not None and {r.location for r in rules} == {7, 1022, 1023}
    with pytest.raises(EthtoolIoctlError) as e:
        eth.add_ntuple_rule("ens1f0np0", NtupleRule(-1, "tcp4", (("dst-port", "22"),), 24))
    assert e.value.errno == errno.EINVAL  # queue 24 of 24 rings
    with pytest.raises(EthtoolIoctlError) as e:
        eth.delete_ntuple_rule("ens1f0np0", 5)
    assert e.value.errno == errno.ENOENT
    eth.delete_ntuple_rule("ens1f0np0", 1022)
    eth.delete_ntuple_rule("ens1f0np0", 7)
    assert eth.ntuple_rules("ens1f0np0") == admin
    ena = RecordedEthtool(HostFS(str(HOSTS / "aws-ena-c5n")))
    with pytest.raises(EthtoolIoctlError) as e:
        ena.add_ntuple_rule("ens5", NtupleRule(-1, "tcp4", (("dst-port", "179"),), 1))
    assert e.value.errno == errno.EOPNOTSUPP


def test_format_x_without_table_or_functions():
    text = rss.format_ethtool_x("eth9", Rxfh((), None, "", 2, ()))
    assert text == (
        "RX flow hash indirection table for eth9 with 2 RX ring(s):\nOperation not supported\n"
        "RSS hash key:\nOperation not supported\nRSS hash function:\n    Operation not supported\n"
    )
    assert rss.parse_ethtool_x(text) == Rxfh((), None, "", 2, ())
