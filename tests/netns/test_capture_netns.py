"""`lbtune --netns NS capture`: the tarball holds that namespace's devices, sockets, qdiscs."""

from __future__ import annotations

import os
import pathlib
import stat
import subprocess
import sys
from typing import Iterator

import pytest

from lbtune.host.capture.manifest import read_manifest
from lbtune.host.capture.write import unpack_capture
from lbtune.host.host import Host
from tests.netns.conftest import in_netns

LISTENER = (
    "import socket, time\n"
    "s = socket.socket()\n"
    "s.bind(('0.0.0.0', 8123))\n"
    "s.listen(7)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def listener(veth4: str) -> Iterator[str]:
    """A TCP listener on port 8123 (backlog 7) inside the namespace."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", veth4, sys.executable, "-c", LISTENER],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield veth4
    finally:
        proc.kill()
        proc.wait()


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_capture_holds_the_namespace_view(cli, listener: str, tmp_path: pathlib.Path) -> None:
    ns = listener
    out = tmp_path / "ns.tar.gz"
    r = cli("--netns", ns, "capture", "-o", str(out), "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json["netns"] == ns
    root = unpack_capture(str(out), str(tmp_path / "u"))

    # Devices: the namespace's, as kernel-style relative links, not the host's.
    assert sorted(os.listdir(f"{root}/sys/class/net")) == ["lo", "v0", "v1"]
    assert os.readlink(f"{root}/sys/class/net/v0") == "../../devices/virtual/net/v0"
    for dev in ("v0", "v1"):
        queues = sorted(os.listdir(f"{root}/sys/class/net/{dev}/queues"))
        assert queues == [f"rx-{i}" for i in range(4)] + [f"tx-{i}" for i in range(4)]

    # `--root` on the capture shows what `--netns` shows live (the namespace name aside).
    offline = cli("--root", root, "show", "--json")
    live = cli("--netns", ns, "show", "--json")
    assert offline.exit_code == live.exit_code == 0, offline.stderr
    nics = {n["name"]: n for n in offline.json["nics"]}
    assert len(nics["v0"]["rx_queues"]) == 4
    assert nics["v0"]["channels"]["rx"] == 4
    assert offline.json["nics"] == live.json["nics"]

    # ss and tc recordings read back through the recorded-host path.
    host = Host.open(root)
    listen = host.listen_sockets()
    assert listen is not None
    ours = [s for s in listen if s.port == 8123]
    assert len(ours) == 1 and ours[0].backlog == 7 and ours[0].queue == 0
    qdiscs = host.qdiscs()
    assert qdiscs is not None and {q.dev for q in qdiscs} == {"v0", "v1"}
    assert os.path.isfile(f"{root}/sos_commands/networking/ip_-o_addr")
    for flag in ("i", "l", "S"):
        assert os.path.isfile(f"{root}/sos_commands/networking/ethtool_-{flag}_v0")
    assert not os.path.exists(f"{root}/sos_commands/networking/ethtool_-g_v0")  # veth: no rings

    manifest = read_manifest(host.fs)
    assert manifest is not None and manifest["netns"] == ns
    assert manifest["interfaces"] == ["lo", "v0", "v1"]
    skipped = {s["path"]: s["reason"] for s in manifest["skipped"]}
    assert "not supported" in skipped["/sos_commands/networking/ethtool_-g_v0"]


def test_capture_keeps_sysctl_modes_of_the_namespace(cli, veth4: str, tmp_path: pathlib.Path):
    """Inside a namespace host-global net sysctls are 0444: the capture keeps that."""
    out = tmp_path / "ns.tgz"
    r = cli("--netns", veth4, "capture", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    root = unpack_capture(str(out), str(tmp_path / "u"))
    for key in ("net/core/somaxconn", "net/core/rmem_max", "net/ipv4/tcp_syncookies"):
        live = in_netns(veth4, _mode, f"/proc/sys/{key}")
        assert _mode(f"{root}/proc/sys/{key}") == live, key
    sysctl = f"{root}/proc/sys/net/core"
    assert _mode(f"{sysctl}/somaxconn") == 0o644 and _mode(f"{sysctl}/rmem_max") == 0o444
