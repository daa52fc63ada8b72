"""lbtune's ethtool ioctl client against the real `ethtool` binary, on veth in a namespace."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lbtune.host.ethtool import parse_ethtool_i, parse_ethtool_l, parse_ethtool_S

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
        "from lbtune.host.netns import enter_netns\n"
        "from lbtune.host.ethtool import LiveEthtool\n"
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
    from lbtune.host.ethtool import LiveEthtool

    e = LiveEthtool()
    assert e.rings("no-such-dev0") is None
    assert e.channels("no-such-dev0") is None
    assert e.stats("no-such-dev0") is None
    assert e.driver_info("x" * 20) is None
