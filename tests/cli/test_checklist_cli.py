"""`lbtune checklist` through the CLI: exit codes, JSON shape, table, one-line errors."""

from __future__ import annotations

import pathlib

import pytest

from tests.conftest import DELL, KVM, copy_host

LEVELS = {"pass", "warn", "fail", "skip"}


def ready_kvm(hosts: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A copy of the kvm VM with the web profile's values in place (nothing fails as web)."""
    root = copy_host(tmp_path, KVM)
    sysctls = {
        "net/core/somaxconn": "8192",
        "net/ipv4/tcp_max_syn_backlog": "8192",
        "net/core/netdev_max_backlog": "8192",
        "net/core/rmem_max": "16777216",
        "net/core/wmem_max": "16777216",
        "net/ipv4/tcp_rmem": "4096\t131072\t16777216",
        "net/ipv4/tcp_wmem": "4096\t16384\t16777216",
        "net/ipv4/tcp_slow_start_after_idle": "0",
        "net/ipv4/ip_local_port_range": "10000\t65535",
        "net/ipv4/tcp_syncookies": "1",
    }
    for key, value in sysctls.items():
        (root / "proc/sys" / key).write_text(value + "\n")
    ss = root / "sos_commands/networking/ss_-peaonmi"
    if ss.exists():
        ss.unlink()  # no listener data: the backlog check is skipped
    for name in ("sockstat", "sockstat6"):
        p = root / "proc/net" / name
        if p.exists():
            p.unlink()
    return root


def test_json_shape_and_exit_1_on_fail(cli, hosts):
    r = cli("--root", str(hosts / DELL), "checklist", "--role", "lb-dr", "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json
    assert set(doc) == {"role", "profile", "iface", "checks", "summary"}
    assert (doc["role"], doc["profile"], doc["iface"]) == ("lb-dr", "lb-dr", "ens1f0np0")
    assert doc["checks"], doc
    for c in doc["checks"]:
        assert set(c) == {"name", "level", "reason", "fix"}
        assert c["level"] in LEVELS and c["reason"]
    assert set(doc["summary"]) == LEVELS
    assert sum(doc["summary"].values()) == len(doc["checks"])
    by = {c["name"]: c for c in doc["checks"]}
    assert by["irqbalance"]["level"] == "fail"
    assert doc["summary"]["fail"] >= 2


def test_exit_0_when_nothing_fails(cli, hosts, tmp_path):
    root = ready_kvm(hosts, tmp_path)
    r = cli("--root", str(root), "checklist", "--role", "web", "--json")
    fails = [c for c in r.json["checks"] if c["level"] == "fail"]
    assert r.exit_code == 0, fails
    assert r.json["summary"]["fail"] == 0
    # and the same host with a bad load command fails on the lint
    r = cli("--root", str(root), "checklist", "--role", "web", "--load", "ab -n 100 http://x/")
    assert r.exit_code == 1
    assert "load:ab-no-concurrency" in r.stdout


def test_table_output(cli, hosts):
    r = cli("--root", str(hosts / DELL), "checklist", "--role", "lb-dr")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    assert lines[0].startswith(
        "checklist role lb-dr (profile lb-dr, data interface ens1f0np0: the fastest"
    )
    assert any(line.startswith("FAIL") and "irqbalance" in line for line in lines)
    assert any(line.startswith("WARN") and "nic-rings" in line for line in lines)
    assert any(line.startswith("SKIP") and "listen-backlog" in line for line in lines)
    assert lines[-1].startswith("NOT READY: ")


def test_options_after_the_command(cli, hosts):
    r = cli("checklist", "--role", "client", "--root", str(hosts / KVM), "--json",
            "--load", "wrk -t4 -c100 -d10s http://10.0.0.1/")  # fmt: skip
    failed = any(c["level"] == "fail" for c in r.json["checks"])
    assert r.exit_code == (1 if failed else 0), r.stderr
    names = [c["name"] for c in r.json["checks"]]
    assert "load-command" in names and "ephemeral-ports" in names


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["checklist"], "--role is required"),
        (["checklist", "--role", "db"], "unknown role"),
        (["checklist", "--role", "realserver"], "needs --vip"),
        (["checklist", "--role", "realserver", "--vip", "not-an-ip"], "not an IP address"),
        (["checklist", "--role", "client", "--load", "wrk -H 'unterminated"], "cannot split"),
        (["checklist", "--role", "client", "--load", "iperf3 -c x"], "no load generator"),
        (["checklist", "--role", "web", "--iface", "nope0"], "no such interface"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, hosts, args, message):
    r = cli("--root", str(hosts / KVM), *args)
    assert r.exit_code == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("lbtune: ")
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_help_lists_the_command(cli):
    r = cli("--help")
    assert "checklist" in r.stdout
    r = cli("checklist", "--help")
    assert r.exit_code == 0 and "--load" in r.stdout and "--vip" in r.stdout
