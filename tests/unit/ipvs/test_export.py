"""Exports: `ipvsadm -R` lines carrying every setting, keepalived blocks keepalived accepts."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lbtune.host.ipvs import Timeouts
from lbtune.ipvs.config import parse_config_text
from lbtune.ipvs.export import ipvsadm_lines, keepalived_blocks, services_from_table
from tests.conftest import run_cli
from tests.unit.ipvs.test_config import FULL


def test_ipvsadm_lines_carry_thresholds_flags_persistence_and_timeouts():
    cfg = parse_config_text(FULL, "dr.toml")
    assert ipvsadm_lines(cfg.services, Timeouts(900, 30, 60)) == [
        "--set 900 30 60",
        "-A -t 10.0.0.100:80 -s wrr -p 300 -M 255.255.255.0",
        "-a -t 10.0.0.100:80 -r 10.0.0.11:80 -g -w 3 -x 1000 -y 800",
        "-a -t 10.0.0.100:80 -r 10.0.0.12:80 -g -w 1",
        "-A -u 10.0.0.100:53 -s sh -b sh-port -o",
        "-a -u 10.0.0.100:53 -r 10.0.0.11:53 -g -w 1",
        "-A -t [2001:db8::100]:443 -s mh -b mh-fallback",
        "-a -t [2001:db8::100]:443 -r [2001:db8::11]:443 -g -w 1",
        "-A -f 7 -6 -s wlc",
        "-a -f 7 -6 -r [2001:db8::12]:0 -g -w 1",
    ]


def test_export_of_the_kernel_table_round_trips_through_values():
    from lbtune.host.ipvs import Destination, Service

    cfg = parse_config_text(FULL, "dr.toml")
    kernel = {
        s.key: Service(s.key, s.settings, destinations=tuple(
            Destination(r.key, r.settings) for r in s.servers))
        for s in cfg.services
    }
    assert services_from_table(kernel) == cfg.services


def test_keepalived_blocks_use_dr_and_the_same_settings():
    text = "\n".join(keepalived_blocks(parse_config_text(FULL, "dr.toml").services, 80))
    assert text.count("virtual_server ") == 4
    assert text.count("lvs_method DR") == 4
    assert "virtual_server 10.0.0.100 80 {" in text
    assert "persistence_granularity 255.255.255.0" in text
    assert "uthreshold 1000" in text and "lthreshold 800" in text
    assert "virtual_server fwmark 7 {\n    ip_family inet6" in text
    assert "    ops\n    sh-port\n" in text


@pytest.mark.skipif(shutil.which("keepalived") is None, reason="keepalived not installed")
def test_keepalived_accepts_the_export(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(FULL)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--check-port", "80")
    assert r.exit_code == 0, r.stderr
    conf = tmp_path / "keepalived.conf"
    conf.write_text(r.stdout)
    check = subprocess.run(["keepalived", "-t", "-f", str(conf)], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    # and keepalived's config check is no rubber stamp: a mangled copy fails it
    bad = tmp_path / "bad.conf"
    bad.write_text(r.stdout.replace("lvs_method DR", "lvs_method DIRECT", 1))
    assert subprocess.run(["keepalived", "-t", "-f", str(bad)], capture_output=True,
                          check=False).returncode != 0
