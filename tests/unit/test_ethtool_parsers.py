"""Parsers for recorded `ethtool -i/-g/-l/-S` output, and the sosreport-style recorded source."""

from __future__ import annotations

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.net.ethtool import (
    Channels,
    DriverInfo,
    RecordedEthtool,
    RingSizes,
    parse_ethtool_g,
    parse_ethtool_i,
    parse_ethtool_l,
    parse_ethtool_S,
)

# ethtool 6.1 on a 6.x virtio_net guest (recorded on this project's build machine).
G_61_VIRTIO = (
    "Ring parameters for eth0:\n"
    "Pre-set maximums:\n"
    "RX:\t\t256\n"
    "RX Mini:\tn/a\n"
    "RX Jumbo:\tn/a\n"
    "TX:\t\t256\n"
    "Current hardware settings:\n"
    "RX:\t\t256\n"
    "RX Mini:\tn/a\n"
    "RX Jumbo:\tn/a\n"
    "TX:\t\t256\n"
    "RX Buf Len:\t\tn/a\n"
    "CQE Size:\t\tn/a\n"
    "TX Push:\toff\n"
    "TCP data split:\tn/a\n"
)

# ethtool 6.7 (wider labels, push lines) on ENA.
G_67_ENA = (
    "Ring parameters for ens5:\n"
    "Pre-set maximums:\n"
    "RX:\t\t\t16384\n"
    "RX Mini:\t\tn/a\n"
    "RX Jumbo:\t\tn/a\n"
    "TX:\t\t\t1024\n"
    "TX push buff len:\t224\n"
    "Current hardware settings:\n"
    "RX:\t\t\t2048\n"
    "RX Mini:\t\tn/a\n"
    "RX Jumbo:\t\tn/a\n"
    "TX:\t\t\t1024\n"
    "RX Buf Len:\t\tn/a\n"
    "CQE Size:\t\tn/a\n"
    "TX Push:\t\ton\n"
    "RX Push:\t\toff\n"
    "TX push buff len:\t96\n"
    "TCP data split:\t\tn/a\n"
)

# ethtool 3.x/4.x (ioctl era) on ixgbe: unsupported kinds printed as 0.
G_IOCTL_IXGBE = (
    "Ring parameters for eth2:\n"
    "Pre-set maximums:\n"
    "RX:\t\t4096\n"
    "RX Mini:\t0\n"
    "RX Jumbo:\t0\n"
    "TX:\t\t4096\n"
    "Current hardware settings:\n"
    "RX:\t\t512\n"
    "RX Mini:\t0\n"
    "RX Jumbo:\t0\n"
    "TX:\t\t512\n"
    "\n"
)

L_61_IXGBE = (
    "Channel parameters for eno1:\n"
    "Pre-set maximums:\n"
    "RX:\t\tn/a\n"
    "TX:\t\tn/a\n"
    "Other:\t\t1\n"
    "Combined:\t63\n"
    "Current hardware settings:\n"
    "RX:\t\tn/a\n"
    "TX:\t\tn/a\n"
    "Other:\t\t1\n"
    "Combined:\t16\n"
)

# veth created with numrxqueues/numtxqueues 4 (recorded on a 6.x kernel).
L_61_VETH = (
    "Channel parameters for veth0:\n"
    "Pre-set maximums:\n"
    "RX:\t\t4\n"
    "TX:\t\t4\n"
    "Other:\t\tn/a\n"
    "Combined:\tn/a\n"
    "Current hardware settings:\n"
    "RX:\t\t4\n"
    "TX:\t\t4\n"
    "Other:\t\tn/a\n"
    "Combined:\tn/a\n"
)

I_61_VIRTIO = (
    "driver: virtio_net\n"
    "version: 1.0.0\n"
    "firmware-version: \n"
    "expansion-rom-version: \n"
    "bus-info: 0000:00:03.0\n"
    "supports-statistics: yes\n"
    "supports-test: no\n"
    "supports-eeprom-access: no\n"
    "supports-register-dump: no\n"
    "supports-priv-flags: no\n"
)

I_MLX5 = (
    "driver: mlx5_core\n"
    "version: 5.15.0-105-generic\n"
    "firmware-version: 22.36.1010 (DEL0000000027)\n"
    "expansion-rom-version: \n"
    "bus-info: 0000:98:00.0\n"
    "supports-statistics: yes\n"
    "supports-test: yes\n"
    "supports-eeprom-access: no\n"
    "supports-register-dump: no\n"
    "supports-priv-flags: yes\n"
)

S_I40E = (
    "NIC statistics:\n"
    "     rx_packets: 5281935\n"
    "     tx_packets: 4018823\n"
    "     rx_bytes: 7311320212\n"
    "     tx-0.tx_packets: 2011882\n"
    "     rx-0.rx_packets: 2733110\n"
    "     port.rx_dropped: 0\n"
    "     port.rx_discards: 1766\n"
    "     veb.tc_0_tx_packets: 0\n"
)


def test_rings_netlink_61():
    assert parse_ethtool_g(G_61_VIRTIO) == RingSizes(rx=256, tx=256, rx_max=256, tx_max=256)


def test_rings_with_push_lines():
    assert parse_ethtool_g(G_67_ENA) == RingSizes(rx=2048, tx=1024, rx_max=16384, tx_max=1024)


def test_rings_ioctl_era_zeros():
    r = parse_ethtool_g(G_IOCTL_IXGBE)
    assert (r.rx, r.tx, r.rx_max, r.tx_max) == (512, 512, 4096, 4096)
    assert (r.rx_mini, r.rx_jumbo, r.rx_mini_max, r.rx_jumbo_max) == (0, 0, 0, 0)


def test_channels():
    assert parse_ethtool_l(L_61_IXGBE) == Channels(
        other=1, combined=16, other_max=1, combined_max=63
    )
    assert parse_ethtool_l(L_61_VETH) == Channels(rx=4, tx=4, rx_max=4, tx_max=4)


def test_driver_info():
    assert parse_ethtool_i(I_61_VIRTIO) == DriverInfo("virtio_net", "1.0.0", "", "0000:00:03.0")
    assert parse_ethtool_i(I_MLX5) == DriverInfo(
        "mlx5_core", "5.15.0-105-generic", "22.36.1010 (DEL0000000027)", "0000:98:00.0"
    )
    vlan = parse_ethtool_i(
        "driver: 802.1Q VLAN Support\nversion: 1.8\nfirmware-version: N/A\nbus-info: \n"
    )
    assert (vlan.driver, vlan.firmware, vlan.bus_info) == ("802.1Q VLAN Support", "N/A", "")


def test_stats():
    s = parse_ethtool_S(S_I40E)
    assert s["port.rx_discards"] == 1766
    assert s["tx-0.tx_packets"] == 2011882
    assert len(s) == 8


@pytest.mark.parametrize(
    ("parser", "text", "problem"),
    [
        (parse_ethtool_g, "Ring parameters for eth0:\nRX:\t\t256\n", "Pre-set maximums"),
        (parse_ethtool_g, "", "Pre-set maximums"),
        (
            parse_ethtool_g,
            G_61_VIRTIO.replace("RX:\t\t256\nRX Mini", "RX:\t\tlots\nRX Mini", 1),
            "not a number",
        ),
        (parse_ethtool_l, L_61_IXGBE.replace("Combined:\t16", "Combined:\t-1"), "not a number"),
        (parse_ethtool_l, "netlink error: no device matches name\n", "Pre-set maximums"),
        (parse_ethtool_i, "version: 1.0\nbus-info: 0000:00:03.0\n", "driver"),
        (parse_ethtool_i, "", "driver"),
        (parse_ethtool_S, "", "NIC statistics"),
        (
            parse_ethtool_S,
            "Cannot get stats strings information: No such device\n",
            "NIC statistics",
        ),
        (parse_ethtool_S, "NIC statistics:\n     rx_packets: 12x\n", "unexpected line"),
        (parse_ethtool_S, "NIC statistics:\nrx_packets: 12\n", "unexpected line"),
    ],
)
def test_malformed(parser, text, problem):
    with pytest.raises(MalformedHostFile, match=problem) as e:
        parser(text, "/cap/sos_commands/networking/ethtool_-x_eth0")
    assert e.value.path == "/cap/sos_commands/networking/ethtool_-x_eth0"


def _recorded(tmp_path, files: dict[str, str]) -> RecordedEthtool:
    d = tmp_path / "sos_commands/networking"
    d.mkdir(parents=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return RecordedEthtool(HostFS(str(tmp_path)))


def test_recorded_failures_read_as_unsupported(tmp_path):
    eth = _recorded(
        tmp_path,
        {
            "ethtool_-g_veth0": "netlink error: Operation not supported\n",
            "ethtool_-l_bond0": "netlink error: Operation not supported\n",
            "ethtool_-i_lo": "Cannot get driver information: Operation not supported\n",
            "ethtool_-S_lo": "no stats available\n",
            "ethtool_-S_bond0": "",
            "ethtool_-g_eth0": "Cannot get device ring settings: Operation not supported\n",
        },
    )
    assert eth.rings("veth0") is None
    assert eth.channels("bond0") is None
    assert eth.driver_info("lo") is None
    assert eth.stats("lo") is None
    assert eth.stats("bond0") is None
    assert eth.rings("eth0") is None
    assert eth.rings("missing") is None and eth.stats("missing") is None


def test_recorded_values_and_bad_file(tmp_path):
    eth = _recorded(
        tmp_path,
        {
            "ethtool_-g_eno1": G_IOCTL_IXGBE,
            "ethtool_-l_eno1": L_61_IXGBE,
            "ethtool_-i_eno1": I_MLX5,
            "ethtool_-S_eno1": S_I40E,
            "ethtool_-S_eth9": "NIC statistics:\n     rx_packets: lots\n",
        },
    )
    rings = eth.rings("eno1")
    assert rings is not None and rings.rx == 512
    assert eth.channels("eno1") == Channels(other=1, combined=16, other_max=1, combined_max=63)
    info = eth.driver_info("eno1")
    assert info is not None and info.driver == "mlx5_core"
    stats = eth.stats("eno1")
    assert stats is not None and stats["port.rx_discards"] == 1766
    with pytest.raises(MalformedHostFile) as e:
        eth.stats("eth9")
    assert e.value.path == str(tmp_path / "sos_commands/networking/ethtool_-S_eth9")


# ------------------------------------------------------- ethtool -S: the whole-text parser


def _recorded_stats() -> list[tuple[str, str]]:
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "data"
    files = sorted(root.glob("hosts/*/sos_commands/networking/ethtool_-S_*"))
    files += sorted(root.glob("ethtool/*-S.txt"))
    return [(str(p.relative_to(root)), p.read_text()) for p in files]


@pytest.mark.parametrize("name,text", _recorded_stats(), ids=lambda v: v if "/" in v else "")
def test_whole_text_parse_equals_the_line_parse_on_every_recording(name, text):
    from lbtune.host.net.ethtool import _parse_ethtool_S_lines

    try:
        want = _parse_ethtool_S_lines(text, name)
    except MalformedHostFile:
        with pytest.raises(MalformedHostFile):
            parse_ethtool_S(text, name)
        return
    assert parse_ethtool_S(text, name) == want


ODD_STATS = [
    "NIC statistics:\n     rx_packets: 12\n     tx_packets: 3\n",  # the plain case
    "NIC statistics:\r\n     rx_packets: 12\r\n     tx_packets: 3\r\n",  # CRLF: line by line
    "NIC statistics:\n\t rx_packets:\t12\t\n\n   \n     tx: -3",  # tabs, blanks, no final \n
    "NIC statistics:\n     Rx Queue#: 0\n       pkts rx OOB: 5\n     Rx Queue#: 1\n"
    "       pkts rx OOB: 7\n     rx: 1\n",  # vmxnet3 sections
    "NIC statistics:\n     a: b: 4\n     c:  5  \n",  # a colon in a name
    "NIC statistics:",  # the header alone
    "NIC statistics:\n     rx_packets: 12\n     garbage\n",  # a bad line: the same error
    "NIC statistics:\n     rx_packets 12\n",
    "NIC statistics:\nrx_packets: 12\n",  # not indented
    "statistics:\n     rx: 1\n",  # no header
    "",
    "NIC statistics:\n     rx\u2028x: 1\n",  # a break only splitlines() knows
]


@pytest.mark.parametrize("text", ODD_STATS)
def test_whole_text_parse_equals_the_line_parse_on_odd_texts(text):
    from lbtune.host.net.ethtool import _parse_ethtool_S_lines

    try:
        want = _parse_ethtool_S_lines(text, "t")
    except MalformedHostFile as e:
        with pytest.raises(MalformedHostFile) as got:
            parse_ethtool_S(text, "t")
        assert str(got.value) == str(e)
        return
    assert parse_ethtool_S(text, "t") == want


def _revalued(text: str, n: int) -> str:
    """`text` with every counter's value changed (some negative), and the blanks around
    values changed too: a later read of the same port."""
    import re

    def new(m: re.Match[str]) -> str:
        v = (int(m[2]) * 7 + n) * (-1 if (int(m[2]) + n) % 5 == 0 else 1)
        return f":{' ' if n % 2 else chr(9) + ' '}{v}{m[3] if n % 3 else ' '}{m[4]}"

    return re.sub(r":([ \t]+)(-?[0-9]+)([ \t]*)(\n|$)", new, text)


@pytest.mark.parametrize("name,text", _recorded_stats(), ids=lambda v: v if "/" in v else "")
def test_later_reads_of_a_known_layout_equal_the_line_parse(name, text):
    """The names of a text read once are taken for a later text that differs only in its
    values (ethtool._stats_layout): every later text parses as the line parser reads it."""
    from lbtune.host.net.ethtool import _parse_ethtool_S_lines

    for n in range(4):
        later = _revalued(text, n) if n else text
        try:
            want = _parse_ethtool_S_lines(later, name)
        except MalformedHostFile:
            with pytest.raises(MalformedHostFile):
                parse_ethtool_S(later, name)
            continue
        assert parse_ethtool_S(later, name) == want


@pytest.mark.parametrize("later", [
    "NIC statistics:\n     rx_packets: 12     tx_packets: 3\n\n",  # two on one line
    "NIC statistics:\n     rx_packets: 12\ntx_packets: 3\n",  # one not indented
    "NIC statistics:\n     rx_packets: 12\n     tx_packets: 3x\n",  # not a number
    "NIC statistics:\n     rx_packets: 12\n     tx_packets:3\n",  # no blank before it
    "NIC statistics:\n     rx_packets: 1_2\n     tx_packets: 3\n",
    "NIC statistics:\n     rx_packets: +12\n     tx_packets: 3\n",
    "NIC statistics:\n     rx_packets: 12\n     tx_packets: \u0663\n",  # a non-ASCII digit
])  # fmt: skip
def test_a_text_unlike_the_known_layout_is_read_afresh(later):
    from lbtune.host.net.ethtool import _parse_ethtool_S_lines

    parse_ethtool_S("NIC statistics:\n     rx_packets: 1\n     tx_packets: 2\n", "t")
    try:
        want = _parse_ethtool_S_lines(later, "t")
    except MalformedHostFile as e:
        with pytest.raises(MalformedHostFile) as got:
            parse_ethtool_S(later, "t")
        assert str(got.value) == str(e)
        return
    assert parse_ethtool_S(later, "t") == want


@pytest.mark.parametrize("name,text", _recorded_stats(), ids=lambda v: v if "/" in v else "")
def test_later_reads_split_into_words_equal_the_line_parse(name, text):
    """A later text of a known layout whose lines are one name word and one value word is
    read by splitting it into words (ethtool._stats_words): new values, negative ones
    among them, parse as the line parser reads them; a text unlike it is not read so."""
    import re

    from lbtune.host.net.ethtool import _parse_ethtool_S_lines, _stats_words

    try:
        _parse_ethtool_S_lines(text, name)
    except MalformedHostFile:
        return
    parse_ethtool_S(text, name)
    body = text.partition("\n")[2]
    lines = [line for line in body.split("\n") if line.strip()]
    as_words = "Queue#" not in body and all(len(line.split()) == 2 for line in lines)
    for sign in (1, -1, 1):
        later = re.sub(r"(?<=[ \t])-?[0-9]+(?=[ \t]*(?:\n|$))",
                       lambda m: str(sign * (len(m[0]) * 7919 + 3)), text)  # noqa: B023  # fmt: skip
        want = _parse_ethtool_S_lines(later, name)
        assert parse_ethtool_S(later, name) == want
        words = _stats_words(later.partition("\n")[2])
        assert words == want if as_words else words is None
    if as_words:
        assert _stats_words(body) == _parse_ethtool_S_lines(text, name)
        assert _stats_words(body.replace(":", ": x", 1)) is None
        assert _stats_words(body.replace(" ", "  ", 1)) is None


def test_layouts_kept_under_one_key_each_read_as_themselves():
    """Kept layouts are found by their count of words and three names (ethtool._words_key):
    two texts alike in those but not in another name each parse as the line parser reads
    them, read after each other again and again."""
    from lbtune.host.net.ethtool import _parse_ethtool_S_lines, _words_key

    names = [f"rx{q}_packets" for q in range(8)]
    other = [*names[:3], "rx3_dropped", *names[4:]]
    texts = ["NIC statistics:\n" + "".join(f"     {n}: {i * v}\n" for i, n in enumerate(ns))
             for ns in (names, other) for v in (1, 7)]  # fmt: skip
    split = [t.partition("\n")[2].split() for t in texts]
    assert _words_key(split[0]) == _words_key(split[2])  # one key, two layouts
    for text in texts * 3:
        assert parse_ethtool_S(text, "t") == _parse_ethtool_S_lines(text, "t")
