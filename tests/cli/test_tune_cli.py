"""plan/apply/verify/rollback/history/profile through the CLI, on fixture copies."""

from __future__ import annotations

import pathlib

import pytest

from tests.conftest import DELL, copy_host

DATA_CPUS = [*range(12, 24), *range(36, 48)]  # ens1f0np0's NUMA node 1 minus housekeeping


def files(root: pathlib.Path) -> dict[str, bytes]:
    """Every file of the host tree except lbtune's own state (journals, the lock)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "var/lib/lbtune" not in str(p)
    }


def test_plan_lb_dr_on_48_cpu_fixture_is_the_full_correct_diff(cli, hosts):
    root = hosts / DELL
    r = cli("--root", str(root), "plan", "lb-dr", "--iface", "ens1f0np0", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json["changes"]
    by = {(c["kind"], c["object"]): c for c in rows}
    # rings to the driver maximum; 25 channels = the 24 data cores (already 24) and the
    # control queue flow_rules steers BGP and SSH to (mlx5 has ntuple rules)
    assert by[("ring", "ens1f0np0:rx")]["current"] == "1024"
    assert by[("ring", "ens1f0np0:rx")]["desired"] == "8192"
    assert by[("ring", "ens1f0np0:rx")]["note"] == "link reset"
    ch = by[("channels", "ens1f0np0:combined")]
    assert (ch["current"], ch["desired"], ch["action"]) == ("24", "25", "change")
    # RSS over the data queues 0-23 only, the rules to queue 24 at free locations
    assert by[("rss_indir", "ens1f0np0")]["desired"] == "weight" + " 1" * 24
    assert {o: c["desired"] for (k, o), c in by.items() if k == "ntuple"} == {
        "ens1f0np0:1022": "flow-type tcp4 dst-port 179 action 24",
        "ens1f0np0:1021": "flow-type tcp4 src-port 179 action 24",
        "ens1f0np0:1020": "flow-type tcp4 dst-port 22 action 24",
    }
    # every completion vector (48 on this 48-CPU host) goes round-robin over the data cores,
    # but the control queue's (queue 24, IRQ 120) to housekeeping CPU 0
    for i in range(48):
        irq = 96 + i
        row = by[("irq_affinity", str(irq))]
        want = "0" if i == 24 else str(DATA_CPUS[i % 24])
        raw = (root / f"proc/irq/{irq}/smp_affinity_list").read_text().strip()
        assert row["desired"] == want, irq
        assert row["action"] == ("ok" if raw == want else "change"), irq
    # XPS follows the IRQ placement for the 24 tx queues; RPS off
    for q in range(24):
        assert by[("xps_cpus", f"ens1f0np0:tx-{q}")]["desired"] == str(DATA_CPUS[q])
        assert by[("rps_cpus", f"ens1f0np0:rx-{q}")]["desired"] == ""
    # sysctl rows carry current values from the fixture and a reason
    tm = by[("sysctl", "kernel.timer_migration")]
    assert (tm["current"], tm["desired"], tm["action"]) == ("1", "0", "change")
    assert all(c["reason"] for c in rows)
    assert by[("irqbalance_ban", "banned_cpus")]["desired"] == "2-23,26-47"
    # the eno1 (ixgbe) NIC is not the data interface: untouched
    assert not any("eno1" in c["object"] for c in rows)


def test_plan_needs_iface_for_data_sections(cli, hosts):
    r = cli("--root", str(hosts / DELL), "plan", "lb-dr")
    assert r.exit_code == 2
    assert "--iface" in r.stderr and r.stderr.count("\n") == 1


def test_plan_unknown_profile_and_interface(cli, hosts):
    r = cli("--root", str(hosts / DELL), "plan", "no-such-profile")
    assert r.exit_code == 2 and "no-such-profile" in r.stderr
    r = cli("--root", str(hosts / DELL), "plan", "lb-dr", "--iface", "eth99")
    assert r.exit_code == 2 and "eth99" in r.stderr


def test_root_round_trip_writes_only_inside_the_root(cli, hosts, tmp_path):
    root = copy_host(tmp_path, DELL)
    outside_before = {p.name for p in tmp_path.iterdir()}
    before = files(root)
    r = cli("--root", str(root), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes", "--json")
    assert r.exit_code == 0, r.stderr
    assert r.json["journal"] and r.json["changed"] > 0
    assert (root / "proc/sys/kernel/timer_migration").read_text().strip() == "0"
    assert (root / "proc/irq/101/smp_affinity_list").read_text().strip() == "17"
    assert (
        "Current hardware settings:\nRX:\t\t8192"
        in (root / "sos_commands/networking/ethtool_-g_ens1f0np0").read_text()
    )
    v = cli("--root", str(root), "verify", "lb-dr", "--iface", "ens1f0np0")
    assert v.exit_code == 0, v.stdout + v.stderr
    again = cli("--root", str(root), "plan", "lb-dr", "--iface", "ens1f0np0", "--json")
    assert [c for c in again.json["changes"] if c["action"] == "change"] == []
    h = cli("--root", str(root), "history", "--json")
    assert [j["state"] for j in h.json["journals"]] == ["applied"]
    rb = cli("--root", str(root), "rollback")
    assert rb.exit_code == 0, rb.stderr
    assert list((root / "var/lib/lbtune/journal").glob("*.json")), "the journal is in the root"
    assert files(root) == before  # byte for byte, line endings included
    assert {p.name for p in tmp_path.iterdir()} == outside_before
    d = cli("--root", str(root), "verify", "lb-dr", "--iface", "ens1f0np0")
    assert d.exit_code == 1  # back to the original values: drift against the profile


def test_persist_round_trip_on_root(cli, hosts, tmp_path):
    root = copy_host(tmp_path, DELL)
    r = cli("--root", str(root), "apply", "web", "--persist", "--json")
    assert r.exit_code == 0, r.stderr
    conf = root / "etc/sysctl.d/60-lbtune.conf"
    assert "net.core.somaxconn" in conf.read_text()
    assert cli("--root", str(root), "rollback").exit_code == 0
    assert not conf.exists()


@pytest.mark.parametrize("kind", ["masked-unit", "fifo-conf"])
def test_persist_never_writes_through_a_link_or_over_a_non_file(cli, hosts, tmp_path, kind):
    """`systemctl mask` links the unit to /dev/null (a FIFO stands in for the device here):
    --persist must not replace what the link points to, nor any non-regular file, and the
    apply is restored whole."""
    import os

    root = copy_host(tmp_path, DELL)
    null = root / "dev" / "null-standin"
    null.parent.mkdir(exist_ok=True)
    os.mkfifo(null)
    if kind == "masked-unit":
        unit = root / "etc/systemd/system/lbtune-boot.service"
        unit.parent.mkdir(parents=True, exist_ok=True)
        unit.symlink_to("/dev/null-standin")
        argv = ["lb-dr", "--iface", "ens1f0np0", "--yes"]
    else:
        conf = root / "etc/sysctl.d/60-lbtune.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(conf)
        argv = ["web"]
    before = files(root)
    r = cli("--root", str(root), "apply", *argv, "--persist")
    assert r.exit_code == 4, (r.stdout, r.stderr)
    assert "symlink" in r.stderr or "not a regular file" in r.stderr
    assert null.is_fifo()
    assert files(root) == before


def test_profile_list_show_lint(cli):
    r = cli("profile", "list", "--json")
    names = {p["name"] for p in r.json["profiles"]}
    assert {"base", "web", "lb-dr", "lb-proxy", "realserver-dr", "loadgen",
            "l2dsr-bmt-runbook"} <= names  # fmt: skip
    s = cli("profile", "show", "web")
    assert s.exit_code == 0 and "somaxconn" in s.stdout
    lint = cli("profile", "lint", "l2dsr-bmt-runbook", "--json")
    assert lint.exit_code == 1
    keys = {f["key"] for f in lint.json["findings"]}
    assert any("somaxconn" in k for k in keys)
    assert any("swappiness" in k for k in keys)
    assert any("netdev_budget" in k for k in keys)
    assert cli("profile", "lint", "lb-dr").exit_code == 0


def test_non_root_live_apply_needs_root(cli, monkeypatch):
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    r = cli("apply", "web")
    assert r.exit_code == 3
    assert "root" in r.stderr


def test_hostile_profile_file_is_refused_without_writes(cli, hosts, tmp_path):
    root = copy_host(tmp_path, DELL)
    before = files(root)
    prof = tmp_path / "evil.toml"
    prof.write_text(
        '[profile]\nname = "evil"\ndescription = "x"\n'
        '[sysctl]\n"../../../etc/passwd" = { value = 1, reason = "x" }\n'
    )
    r = cli("--root", str(root), "apply", str(prof), "--yes")
    assert r.exit_code == 2
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert files(root) == before


@pytest.mark.parametrize(
    "bad",
    [
        "garbage [[[",
        "[profile]\nname = 1\n",
        '[sysctl]\n"net.core.somaxconn" = 5\n',  # no reason
        '[sysctl]\n"net.core.somaxconn" = { value = 5, reason = "x", mode = "up" }\n',
        "[frobnicate]\nx = 1\n",
    ],
)
def test_malformed_profile_is_one_line_exit_2(cli, tmp_path, bad):
    prof = tmp_path / "bad.toml"
    prof.write_text(bad)
    r = cli("profile", "show", str(prof))
    assert r.exit_code == 2, r.stdout
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_ring_change_on_the_default_route_interface_needs_yes(cli, hosts, tmp_path):
    root = copy_host(tmp_path, DELL)
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    (root / "proc/net/route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "ens1f0np0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    before = files(root)
    r = cli("--root", str(root), "apply", "lb-dr", "--iface", "ens1f0np0")
    assert r.exit_code == 2
    assert "management link ens1f0np0" in r.stderr and "--yes" in r.stderr
    assert files(root) == before  # refused before anything changed
    ok = cli("--root", str(root), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes")
    assert ok.exit_code == 0, ok.stderr


def _signed(text: str) -> bytes:
    """A hand-edited journal with its digest made to match again (docs/tuning.md#safety), as
    if lbtune had written it: here, an apply interrupted by a crash."""
    import hashlib

    head = '{"digest":"sha256:'
    body = ("{" + text[len(head) + 66 :]).encode()
    return head.encode() + hashlib.sha256(body).hexdigest().encode() + b'",' + body[1:]


def test_undo_hints_name_the_root_they_apply_to(cli, hosts, tmp_path):
    """Journals are per root (and per namespace): a hint to run plain `lbtune rollback` would
    look in the running machine's state directory instead."""
    root = copy_host(tmp_path, DELL)
    r = cli("--root", str(root), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes")
    assert r.exit_code == 0, r.stderr
    assert f"undo with `lbtune --root {root} rollback`" in r.stdout
    journal = next((root / "var/lib/lbtune/journal").glob("*.json"))
    journal.write_bytes(_signed(journal.read_text().replace('"state":"applied"',
                                                            '"state":"applying"')))  # fmt: skip
    again = cli("--root", str(root), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes")
    assert again.exit_code == 2
    assert f"run `lbtune --root {root} rollback` first" in again.stderr
