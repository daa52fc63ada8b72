"""Issue 20 item 9: every interface name a user gives passes the one check (host/ifname)
before it reaches a file (keepalived.conf, a sysfs path, a sysctl key) or the kernel.

Hostile names: a shell/config separator, a newline that would start a new keepalived.conf
line, a name longer than the kernel's 15 bytes, and a path component. Each command says so
in one line and exits 2; nothing runs (the names exist on no host, so even a missing check
could not change anything here).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HOSTS, TINY, run_cli
from tests.unit.ipvs.test_keepalived_pair import LAB

BAD = ["eth0;reboot", "eth0\n}\nvrrp_script x {", "averyverylongname", "../../x"]


def _commands(tmp: Path, name: str) -> list[list[str]]:
    cfg = tmp / "dr.toml"
    cfg.write_text(LAB)
    vip_cfg = tmp / "vip.toml"
    vip_cfg.write_text(f'[[vip]]\naddress = "10.77.0.100"\ndev = {name!r}\n' + LAB)
    return [
        ["ipvs", "export", str(cfg), "--format", "keepalived", "--peer", "10.77.0.3",
         "--interface", name],
        ["ipvs", "realserver", "verify", "--vip", "10.77.0.100", "--iface", name],
        ["ipvs", "realserver", "verify", "--vip", "10.77.0.100", "--iface", "lo0", "--dev", name],
        ["ipvs", "realserver", "apply", "--vip", "10.77.0.100", "--iface", name],
        ["ipvs", "realserver", "teardown", "--vip", "10.77.0.100", "--iface", name],
        ["ipvs", "agent", "--once", "--port", "80", "--egress", name],
        ["ipvs", "export", str(vip_cfg)],
        ["--root", str(HOSTS / TINY), "checklist", "--role", "lb-dr", "--iface", name],
        ["--root", str(HOSTS / TINY), "diagnose", "--iface", name],
        ["--root", str(HOSTS / TINY), "plan", "lb-dr", "--iface", name],
    ]


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("which", range(10))
def test_a_hostile_interface_name_is_refused_in_one_line(tmp_path, name, which):
    argv = _commands(tmp_path, name)[which]
    r = run_cli(*argv)
    assert r.exit_code == 2, (argv, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert "not an interface name" in err, err
    assert r.stdout.strip() == "" or r.stdout.lstrip().startswith("{\"error\"")
