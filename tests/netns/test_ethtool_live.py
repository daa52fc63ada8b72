"""lbtune's ethtool ioctl client against the real `ethtool` binary, on veth in a namespace."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lbtune.host.net.ethtool import parse_ethtool_i, parse_ethtool_l, parse_ethtool_S

pytestmark = pytest.mark.skipif(shutil.which("ethtool") is None, reason="needs ethtool")


def ethtool(ns: str, *args: str) -> str:
    return subprocess.run(
        ["ip", "netns", "exec", ns, "ethtool", *args], capture_output=True, text=True, check=True
    ).stdout


def test_channels_info_and_stats_match_ethtool_binary(cli, veth4):
    r = cli("--netns", veth4, "show", "--json", "--iface", "v0")
    assert r.exit_code == 0, r.stderr
    v0 = r.json["nics"][0]
    assert v0["channels"] == {
        k: v for k, v in vars(parse_ethtool_l(ethtool(veth4, "-l", "v0"))).items()
    }
    assert v0["driver"] == parse_ethtool_i(ethtool(veth4, "-i", "v0")).driver


def test_stats_match_ethtool_binary(veth4):
    code = (
        "import json, sys\n"
        "from lbtune.host.net.netns import enter_netns\n"
        "from lbtune.host.net.ethtool import LiveEthtool\n"
        f"enter_netns({veth4!r})\n"
        "print(json.dumps(LiveEthtool().stats('v0')))\n"
    )
    import json
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ours = json.loads(out.stdout)
    theirs = parse_ethtool_S(ethtool(veth4, "-S", "v0"))
    assert ours.keys() == theirs.keys()
    assert "rx_queue_3_drops" in ours
    # packet counters may move between the two reads; names and non-traffic values must agree
    assert ours["peer_ifindex"] == theirs["peer_ifindex"]


def test_device_without_ethtool_ops(veth4):
    from lbtune.host.net.ethtool import LiveEthtool

    e = LiveEthtool()
    assert e.rings("no-such-dev0") is None
    assert e.channels("no-such-dev0") is None
    assert e.stats("no-such-dev0") is None
    assert e.driver_info("x" * 20) is None


def _stats_across_a_channel_change(ns: str) -> tuple[list[str], list[str], list[str]]:
    from lbtune.host.net.ethtool import LiveEthtool

    e = LiveEthtool()  # one instance: it keeps the statistics names between reads
    first = list(e.stats("v0") or {})
    subprocess.run(["ethtool", "-L", "v0", "rx", "2", "tx", "2"], check=True)
    after = list(e.stats("v0") or {})
    return first, after, list(LiveEthtool().stats("v0") or {})


def test_stats_names_follow_a_channel_change(veth4):
    """The names an ethtool source remembers between ticks are read again when the driver's
    statistics change shape (fewer queues: fewer per-queue counters)."""
    from tests.netns.conftest import in_netns

    first, after, fresh = in_netns(veth4, _stats_across_a_channel_change, veth4)
    assert "rx_queue_3_drops" in first and "rx_queue_3_drops" not in after
    assert after == fresh and after == list(parse_ethtool_S(ethtool(veth4, "-S", "v0")))


def test_rss_and_rules_on_a_device_without_them(veth4):
    """veth has neither an indirection table, hash fields nor a rule table: the live source
    reads None (unsupported) and refuses a write with the driver's EOPNOTSUPP."""
    import errno
    import json
    import sys

    code = (
        "import json, errno\n"
        "from lbtune.host.net.netns import enter_netns\n"
        "from lbtune.host.net.ethtool import LiveEthtool\n"
        "from lbtune.host.net.rss import NtupleRule\n"
        f"enter_netns({veth4!r})\n"
        "e = LiveEthtool()\n"
        "out = [e.rxfh('v0'), e.rx_flow_hash('v0', 'udp4'), e.ntuple_rules('v0'),\n"
        "       e.ntuple_table_size('v0')]\n"
        "codes = []\n"
        "rule = NtupleRule(-1, 'tcp4', (('dst-port', '22'),), 0)\n"
        "for f in (lambda: e.set_rxfh('v0', [0] * 128),\n"
        "          lambda: e.set_rx_flow_hash('v0', 'udp4', 'sd'),\n"
        "          lambda: e.add_ntuple_rule('v0', rule)):\n"
        "    try:\n"
        "        f()\n"
        "        codes.append(0)\n"
        "    except OSError as x:\n"
        "        codes.append(x.errno)\n"
        "print(json.dumps([out, codes]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    values, codes = json.loads(out.stdout)
    assert values == [None, None, None, None]
    assert codes == [errno.EOPNOTSUPP] * 3
