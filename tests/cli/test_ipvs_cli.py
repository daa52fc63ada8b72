"""`lbtune ipvs` on the command line: bad input is one line and exit 2, reads stay reads.

Nothing here changes the host: read-only commands run against this kernel (which may or
may not have IPVS), and the read paths never load the ip_vs module. Changes are tested in
throwaway namespaces (tests/netns/) and in the lab kernel (tests/lab/).
"""

from __future__ import annotations

import os

import pytest

from lbtune.host.fs import HostFS
from lbtune.host.ipvs.table import ipvs_loaded
from tests.conftest import HOSTS, TINY, run_cli

GOOD = '[[service]]\naddress = "127.0.0.1"\nport = 80\nscheduler = "rr"\n' \
       '[[service.real_server]]\naddress = "127.0.0.11"\n'


def one_line_error(r, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert r.exit_code == code, (r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err.startswith("lbtune: ") and "\n" not in err and "Traceback" not in err
    return err  # type: ignore[no-any-return]


@pytest.mark.parametrize("cmd", ["plan", "apply", "teardown", "selftest", "status", "export"])
def test_missing_config_file(cmd, tmp_path):
    err = one_line_error(run_cli("ipvs", cmd, str(tmp_path / "nope.toml")))
    assert "nope.toml: cannot read" in err


@pytest.mark.parametrize("kind", ["fifo", "device", "link-to-fifo"])
def test_a_config_that_is_not_a_regular_file_is_refused_without_blocking(kind, tmp_path):
    """A FIFO would block the read forever and /dev/zero never ends: refused at once."""
    fifo = tmp_path / "dr.fifo"
    os.mkfifo(fifo)
    path = {"fifo": fifo, "device": "/dev/zero", "link-to-fifo": tmp_path / "dr.toml"}[kind]
    if kind == "link-to-fifo":
        (tmp_path / "dr.toml").symlink_to(fifo)
    err = one_line_error(run_cli("ipvs", "plan", str(path)))
    assert "cannot read config: not a regular file" in err


@pytest.mark.parametrize("cmd", ["plan", "apply", "export"])
def test_invalid_config_is_refused_before_anything_happens(cmd, tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(GOOD.replace('address = "127.0.0.11"', 'address = "127.0.0.11"\nport = 8080'))
    err = one_line_error(run_cli("ipvs", cmd, str(cfg)))
    assert "DR cannot change the port" in err


def test_invalid_toml_names_the_line(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text("[[service]]\naddress = 10.0.0.1\n")
    assert f"{cfg}:2: invalid TOML" in one_line_error(run_cli("ipvs", "plan", str(cfg)))


def test_ipvs_refuses_a_host_tree(tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(GOOD)
    err = one_line_error(run_cli("--root", str(HOSTS / TINY), "ipvs", "plan", str(cfg)))
    assert "running kernel" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["realserver", "verify"], "Missing option '--vip'"),
        (["realserver", "apply", "--vip", "not-an-ip", "--iface", "lo", "--dev", "dummy0"],
         "--vip 'not-an-ip': not an IP address"),
        (["realserver", "apply", "--vip", "127.0.0.1", "--iface", "lo"], "not a usable VIP"),
        (["realserver", "apply", "--vip", "10.1.1.1", "--iface", "eth0", "--dev", "eth0"],
         "must not be on the facing interface"),
        (["realserver", "verify", "--vip", "10.1.1.1", "--iface", "nosuch0"],
         "--iface nosuch0: no such interface"),
        (["selftest", "CFG", "-n", "0"], "-n"),
        (["export", "--format", "yaml"], "'yaml' is not one of"),
    ],
)
def test_bad_arguments(args, message, tmp_path):
    cfg = tmp_path / "dr.toml"
    cfg.write_text(GOOD)
    argv = [str(cfg) if a == "CFG" else a for a in args]
    r = run_cli("ipvs", *argv)
    assert r.exit_code == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_reads_never_load_ipvs(tmp_path):
    """plan, status and export only read: on a kernel without ip_vs loaded, they say so and
    leave it unloaded (looking up IPVS's netlink family would load the module)."""
    if ipvs_loaded(HostFS("/")):
        pytest.skip("capability: a kernel without ip_vs loaded (ip_vs is loaded or built in here)")
    cfg = tmp_path / "dr.toml"
    cfg.write_text(GOOD)
    status = run_cli("ipvs", "status", "--json")
    assert status.exit_code == 0, status.stderr
    assert status.json["loaded"] is False and status.json["services"] == []
    export = run_cli("ipvs", "export")
    # nothing printed; since issue 16 item 10 it says why (exit 3) instead of an empty line
    assert export.exit_code == 3 and export.stdout.strip() == "", export.stderr
    assert "IPVS" in export.stderr and len(export.stderr.splitlines()) == 1
    plan = run_cli("ipvs", "plan", str(cfg), "--json")
    if plan.exit_code == 2:  # this kernel has no IPVS schedulers at all: said before anything
        assert "scheduler rr is not available in this kernel" in plan.stderr
    else:
        assert plan.exit_code == 0, plan.stderr
        ops = [(c["op"], c["object"]) for c in plan.json["changes"] if c["action"] == "change"]
        assert ops == [("add", "tcp:127.0.0.1:80"), ("add", "tcp:127.0.0.1:80/127.0.0.11:80")]
    assert not ipvs_loaded(HostFS("/"))
    assert not os.path.exists("/proc/net/ip_vs")
