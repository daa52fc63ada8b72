"""`--netns` reads that namespace's sysfs, netlink and ethtool, and leaves the host alone."""

from __future__ import annotations

import os


def test_show_sees_veth_queues_in_namespace(cli, veth4):
    r = cli("--netns", veth4, "show", "--json")
    assert r.exit_code == 0, r.stderr
    data = r.json
    assert data["netns"] == veth4
    nics = {n["name"]: n for n in data["nics"]}
    assert {"lo", "v0", "v1"} <= set(nics)
    v0 = nics["v0"]
    assert [q["index"] for q in v0["rx_queues"]] == [0, 1, 2, 3]
    assert [q["index"] for q in v0["tx_queues"]] == [0, 1, 2, 3]
    assert v0["driver"] == "veth"
    assert v0["kind"] == "veth"
    assert v0["irqs"] == []  # veth has no queue interrupts
    assert v0["rings"] is None
    ch = v0["channels"]
    assert (ch["rx"], ch["tx"], ch["rx_max"], ch["tx_max"]) == (4, 4, 4, 4)
    # The host's own interfaces are not visible from inside.
    host_nics = set(os.listdir("/sys/class/net"))
    assert not (host_nics - {"lo"}) & set(nics)


def test_namespace_devices_do_not_leak_into_host_view(cli, veth4):
    r = cli("show", "--json")
    assert r.exit_code == 0, r.stderr
    assert "v0" not in {n["name"] for n in r.json["nics"]}
    # and the test process itself was not moved into the namespace
    assert "v0" not in os.listdir("/sys/class/net")


def test_show_text_in_namespace(cli, veth4):
    r = cli("--netns", veth4, "show", "--iface", "v0")
    assert r.exit_code == 0, r.stderr
    assert f"netns {veth4}" in r.stdout
    assert "queues rx 4 tx 4" in r.stdout
    assert "no per-queue IRQs" in r.stdout


def test_unknown_namespace_is_a_usage_error(cli):
    r = cli("--netns", "lbtune-no-such-ns", "show")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "no such network namespace" in r.stderr
    assert "Traceback" not in r.stderr


def test_hostile_namespace_name_is_rejected(cli):
    r = cli("--netns", "../../etc", "show")
    assert r.exit_code == 2
    assert "not a valid namespace name" in r.stderr


def test_namespace_name_with_newline_is_rejected(cli):
    r = cli("--netns", "ns\n", "show")
    assert r.exit_code == 2
    assert "not a valid namespace name" in r.stderr
