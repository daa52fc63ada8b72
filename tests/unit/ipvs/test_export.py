"""Exports: `ipvsadm -R` lines carrying every setting, keepalived blocks keepalived accepts."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lbtune.host.ipvs.table import Timeouts
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
    from lbtune.host.ipvs.table import Destination, Service

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


def _keepalived_t(path) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(["keepalived", "-t", "-f", str(path)], capture_output=True, text=True,
                          check=False)


def _block_of(text: str, head: str) -> str:
    start = text.index(head + " {")
    return text[start:text.index("\n}", start)]


def test_keepalived_export_keeps_the_timeouts_and_checks_udp_real_servers(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(FULL)
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--check-port", "80")
    assert r.exit_code == 0, r.stderr
    # [timeouts] tcp 900, tcpfin 30, udp 60: keepalived's lvs_timeouts in global_defs
    assert r.stdout.startswith("global_defs {\n    lvs_timeouts tcp 900 tcpfin 30 udp 60\n}\n")
    udp = _block_of(r.stdout, "virtual_server 10.0.0.100 53")
    assert "protocol UDP" in udp
    assert "UDP_CHECK {\n            connect_port 53\n            connect_timeout 5" in udp
    assert "TCP_CHECK" not in udp
    fwmark = _block_of(r.stdout, "virtual_server fwmark 7")
    assert "TCP_CHECK {\n            connect_port 80" in fwmark
    assert r.stderr == ""  # every real server has a check: nothing to warn about
    conf = tmp_path / "keepalived.conf"
    conf.write_text(r.stdout)
    check = _keepalived_t(conf)
    assert check.returncode == 0, check.stdout + check.stderr
    # keepalived reads lvs_timeouts: a mangled one fails its check
    bad = tmp_path / "bad.conf"
    bad.write_text(r.stdout.replace("lvs_timeouts tcp 900", "lvs_timeouts tcp x9", 1))
    assert _keepalived_t(bad).returncode != 0


def test_keepalived_export_warns_about_real_servers_it_cannot_check(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(FULL + '\n[[service]]\nprotocol = "sctp"\naddress = "10.0.0.100"\n'
                   'port = 3868\nscheduler = "rr"\n  [[service.real_server]]\n'
                   '  address = "10.0.0.13"\n')
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived")
    assert r.exit_code == 0, r.stderr
    warnings = r.stderr.splitlines()
    assert len(warnings) == 2, r.stderr
    assert warnings[0].startswith("warning: fwmark 7: no health check for its real servers")
    assert "--check-port PORT" in warnings[0]
    assert warnings[1].startswith("warning: sctp:10.0.0.100:3868: keepalived has no SCTP")
    fwmark = _block_of(r.stdout, "virtual_server fwmark 7")
    assert "# fwmark 7: no health check" in fwmark and "_CHECK" not in fwmark
    j = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--json")
    assert j.json["warnings"] == [w.removeprefix("warning: ") for w in warnings]
    conf = tmp_path / "keepalived.conf"
    conf.write_text(r.stdout)
    check = _keepalived_t(conf)
    assert check.returncode == 0, check.stdout + check.stderr
    # with a check port only the SCTP service is left without a check
    r = run_cli("ipvs", "export", str(cfg), "--format", "keepalived", "--check-port", "80",
                "--json")
    assert [w.split(":")[0] for w in r.json["warnings"]] == ["sctp"]


def test_ipvsadm_export_has_no_keepalived_warnings(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(FULL)
    r = run_cli("ipvs", "export", str(cfg), "--json")
    assert r.exit_code == 0 and r.json["warnings"] == []


def test_export_of_the_kernel_table_without_ipvs_says_so():
    """Without CONFIG the export reads the kernel: no IPVS there is a missing capability
    (exit 3, one line), not an empty export."""
    import os

    from lbtune.host.fs import HostFS
    from lbtune.host.ipvs.table import ipvs_loaded

    r = run_cli("ipvs", "export")
    if ipvs_loaded(HostFS("/")) and os.geteuid() == 0:
        assert r.exit_code == 0, r.stderr  # a kernel with IPVS exports its table
        return
    assert r.exit_code == 3, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1
    assert "IPVS" in r.stderr and "give CONFIG" in r.stderr


@pytest.mark.parametrize("word", ["wrr", "sh-port", "10.0.0.1", "2001:db8::1", "eth0.100",
                                  "vlan@bond0"])
def test_conf_word_accepts_plain_words(word):
    from lbtune.ipvs.export import conf_word

    assert conf_word(word, "x") == word


@pytest.mark.parametrize("word", ["eth0;x", "a b", "x\n}", "}", "{", '"q"', "'q'", "#c", "!c",
                                  "", "$(id)", "a\tb", "x\x00"])
def test_conf_word_refuses_what_could_inject(word):
    from lbtune.errors import BadInput
    from lbtune.ipvs.export import conf_word

    with pytest.raises(BadInput, match=r"not a word keepalived\.conf can carry"):
        conf_word(word, "x")
