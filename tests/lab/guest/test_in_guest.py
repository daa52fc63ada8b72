"""Runs inside the lab guest: the kernel is UML and its network stack is ours to change."""

from __future__ import annotations

import os

from pyroute2 import IPRoute

from lbtune.lab.inguest.entry import IN_LAB_ENV, running_on_uml


def test_runs_under_uml() -> None:
    assert running_on_uml()
    assert os.environ[IN_LAB_ENV] == "1"
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        assert "User Mode Linux" in fh.read()


def test_veth_pair_on_a_bridge() -> None:
    with IPRoute() as ipr:
        ipr.link("add", ifname="lbbr0", kind="bridge")
        ipr.link("add", ifname="lbv0", kind="veth", peer="lbv1")
        (br,) = ipr.link_lookup(ifname="lbbr0")
        (v0,) = ipr.link_lookup(ifname="lbv0")
        (v1,) = ipr.link_lookup(ifname="lbv1")
        ipr.link("set", index=v0, master=br)
        for index in (br, v0, v1):
            ipr.link("set", index=index, state="up")

        (link,) = ipr.get_links(v0)
        assert link.get_attr("IFLA_MASTER") == br
        assert link.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "veth"
        (bridge,) = ipr.get_links(br)
        assert bridge.get_attr("IFLA_LINKINFO").get_attr("IFLA_INFO_KIND") == "bridge"
        assert os.path.isdir("/sys/class/net/lbbr0/brif/lbv0")

        ipr.link("del", index=v0)  # removes the peer too
        ipr.link("del", index=br)
        assert not ipr.link_lookup(ifname="lbv1")
