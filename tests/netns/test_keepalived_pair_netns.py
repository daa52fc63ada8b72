"""keepalived's own config check (`keepalived -t`) accepts the pair export.

The check resolves the interfaces the config names, so it runs in a throwaway namespace that
has an eth0 (a veth end) with the director's address; it changes nothing outside it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.netns.conftest import ip
from tests.unit.ipvs.test_keepalived_pair import LAB

pytestmark = pytest.mark.skipif(shutil.which("keepalived") is None,
                                reason="keepalived not installed")


def _check(netns: str, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", netns, "keepalived", "-t", "-f", str(conf),
                           "-n", "-l"], capture_output=True, text=True, check=False)


@pytest.fixture
def director(netns: str) -> str:
    ip("-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
    ip("-n", netns, "addr", "add", "10.77.0.2/24", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")
    return netns


@pytest.mark.parametrize("extra", [
    ("--role", "master"),
    ("--role", "backup", "--advert-int", "0.1"),
    ("--advert-int", "0.05", "--no-sync", "--preempt-delay", "3"),
])
def test_keepalived_accepts_the_pair_export(director: str, tmp_path: Path, extra):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(LAB)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--src", "10.77.0.2", *extra)
    assert r.exit_code == 0, r.stderr
    conf = tmp_path / "keepalived.conf"
    conf.write_text(r.stdout)
    res = _check(director, conf)
    assert res.returncode == 0, res.stdout + res.stderr


def test_keepalived_check_catches_what_the_export_gets_right(director: str, tmp_path: Path):
    """The check is no rubber stamp: the same config without `version 3` (a sub-second advert
    in VRRPv2) or with an interface the director lacks fails it."""
    cfg = tmp_path / "dr.toml"
    cfg.write_text(LAB)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
                "--advert-int", "0.1")
    assert r.exit_code == 0, r.stderr
    for bad in (r.stdout.replace("    version 3\n", ""), r.stdout.replace("eth0", "eth9")):
        conf = tmp_path / "bad.conf"
        conf.write_text(bad)
        assert _check(director, conf).returncode != 0


def test_keepalived_accepts_the_pair_export_with_timeouts_and_a_udp_service(director: str,
                                                                            tmp_path: Path):
    from tests.unit.ipvs.test_config import FULL

    cfg = tmp_path / "dr.toml"
    cfg.write_text(FULL)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.0.0.3",
                "--check-port", "80")
    assert r.exit_code == 0, r.stderr
    global_defs = r.stdout[r.stdout.index("global_defs {"):r.stdout.index("\n}\n")]
    assert "    lvs_sync_daemon eth0 lbtune_51 id 51" in global_defs
    assert "    lvs_timeouts tcp 900 tcpfin 30 udp 60" in global_defs
    assert "UDP_CHECK {" in r.stdout
    conf = tmp_path / "keepalived.conf"
    conf.write_text(r.stdout)
    res = _check(director, conf)
    assert res.returncode == 0, res.stdout + res.stderr
