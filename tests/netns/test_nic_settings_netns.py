"""The NIC-settings rules and checks on a real veth in a throwaway namespace: what a veth
has (features, no coalescing, pause or RSS) is read live through ethtool, and what it cannot
have stays quiet rather than guessed.

veth's LRO is fixed off (`ethtool -K v0 lro on` fails: "Could not change any device
features"), so the fault of `lro-on-forwarding-host` cannot be made here: this namespace
forwards (ip_forward = 1) with traffic on v0, and the rule reads v0's features live and
stays quiet. Its fault, and those of `coalescing`, `pause-frames` and the RSS rules, are made
on fixture trees (tests/unit/diagnose/test_fix_profiles.py) and belong to the VM guest's
emulated NICs. veth's GRO is off by default and can be turned on: the checklist's
`nic-offloads` check warns about it for a host where connections end, and passes once it is
on."""

from __future__ import annotations

import subprocess
import sys
import threading

from tests.netns.conftest import ip

NIC_RULES = (
    "rss-hash-l3-only",
    "rss-indirection-gap",
    "lro-on-forwarding-host",
    "coalescing",
    "pause-frames",
)

# UDP datagrams from the peer namespace to v0's address for `seconds`.
SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    s.sendto(b"x" * 64, ("10.29.0.1", 9))
    n += 1
print(n)
"""


def _sysctl(netns: str, key: str, value: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw", f"{key}={value}"], check=True)


def test_forwarding_namespace_with_fixed_off_lro_is_quiet_and_settings_read_live(cli, veth4):
    peer = f"{veth4}-peer"
    ip("netns", "add", peer)
    try:
        ip("-n", veth4, "link", "set", "v1", "netns", peer)
        ip("-n", veth4, "addr", "add", "10.29.0.1/24", "dev", "v0")
        ip("-n", peer, "addr", "add", "10.29.0.2/24", "dev", "v1")
        ip("-n", peer, "link", "set", "v1", "up")
        ip("-n", peer, "neigh", "replace", "10.29.0.1", "lladdr", "02:00:00:00:00:01",
           "dev", "v1", "nud", "permanent")  # fmt: skip
        ip("-n", veth4, "link", "set", "v0", "address", "02:00:00:00:00:01")
        _sysctl(veth4, "net.ipv4.ip_forward", "1")
        sent: dict[str, str] = {}

        def send() -> None:
            r = subprocess.run(["ip", "netns", "exec", peer, sys.executable, "-c", SENDER, "3"],
                               capture_output=True, text=True, check=True)  # fmt: skip
            sent["n"] = r.stdout.strip()

        t = threading.Thread(target=send)
        t.start()
        rules = [a for r in NIC_RULES for a in ("--rule", r)]
        r = cli("--netns", veth4, "diagnose", "--duration", "2", "--no-probes", "--json",
                "--iface", "v0", *rules)  # fmt: skip
        t.join(30)
        assert int(sent["n"]) > 1000, sent  # the traffic ran
        assert r.exit_code == 0, r.stdout + r.stderr
        assert r.json["findings"] == []
        # nothing unreadable: what veth lacks is unsupported (None), not an error
        assert not [k for k in r.json.get("missing", {}) if k.startswith("ethtool")], r.json
    finally:
        subprocess.run(["ip", "netns", "del", peer], check=False, capture_output=True)


def test_live_settings_of_a_veth(veth4):
    from lbtune.diagnose.nicsettings import read_nic_settings
    from lbtune.host.net.ethtool import LiveEthtool
    from tests.netns.conftest import in_netns

    def read() -> tuple[object, ...]:
        s, missing = read_nic_settings(LiveEthtool(), ["v0"])
        v0 = s["v0"]
        assert v0.features is not None
        lro = v0.features.get("rx-lro")
        return (lro.active, lro.fixed) if lro else None, v0.coalesce, v0.rxfh, missing

    lro, coalesce, rxfh, missing = in_netns(veth4, read)
    assert lro == (False, True)  # veth: LRO off [fixed]
    assert coalesce is None and rxfh is None and missing == {}


def _offloads(cli, netns: str) -> dict[str, str]:
    r = cli("--netns", netns, "checklist", "--role", "web", "--iface", "v0", "--json")
    (c,) = [c for c in r.json["checks"] if c["name"] == "nic-offloads"]
    return c


def test_checklist_warns_about_gro_off_where_connections_end(cli, veth4):
    ip("netns", "exec", veth4, "ethtool", "-K", "v0", "gro", "off")
    c = _offloads(cli, veth4)
    assert c["level"] == "warn" and "GRO off on v0" in c["reason"], c
    assert c["fix"].endswith(", or ethtool -K v0 gro on")
    ip("netns", "exec", veth4, "ethtool", "-K", "v0", "gro", "on")
    c = _offloads(cli, veth4)
    assert c["level"] == "pass", c
