"""`lbtune diagnose` on fixture trees and captures: findings, formats, exit codes, bad input."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from lbtune.cli.diagnose import parse_duration
from lbtune.errors import BadInput
from tests.conftest import AWS, DELL, HOSTS, copy_host, run_cli
from tests.conftest import KVM as KVM_NAME

R750 = str(HOSTS / DELL)
KVM = str(HOSTS / KVM_NAME)
ENA = str(HOSTS / AWS)


def findings(root: str, *extra: str) -> list[dict]:
    r = run_cli("--root", root, "diagnose", "--json", *extra)
    assert r.exit_code == 1, r.stderr
    doc = r.json
    assert doc["mode"] == "capture" and doc["window_seconds"] > 0
    return doc["findings"]


def by_rule(fs: list[dict], rule: str) -> list[dict]:
    return [f for f in fs if f["rule"] == rule]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10", 10.0), ("10s", 10.0), ("1m", 60.0), ("500ms", 0.5), ("1.5", 1.5), (" 2s ", 2.0)],
)
def test_duration_forms(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-1", "10x", "s", "1e3", "25h", "10 s s"])
def test_bad_duration(text: str) -> None:
    with pytest.raises(BadInput):
        parse_duration(text)


def test_bad_input_is_one_line_exit_2(tmp_path: pathlib.Path) -> None:
    cases = [
        ("diagnose", "--duration", "soon"),
        ("--root", KVM, "diagnose", "--iface", "nope0"),
        ("--root", KVM, "diagnose", "--rule", "no-such-rule"),
        ("--root", KVM, "diagnose", "-o", str(tmp_path)),
        ("--root", KVM, "diagnose", "-o", str(tmp_path / "missing" / "r.md")),
        ("diagnose", "--baseline", KVM),
        ("--root", str(tmp_path / "nothing"), "diagnose"),
    ]
    for args in cases:
        r = run_cli(*args)
        assert r.exit_code == 2, (args, r.stdout, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


def test_mlx5_and_ixgbe_device_drops(tmp_path: pathlib.Path) -> None:
    fs = findings(R750)
    nic = {(f["object"], f["evidence"][0]["counter"]): f for f in by_rule(fs, "nic-rx-drop")}
    mlx5 = nic[("ens1f0np0", "ethtool ens1f0np0 rx_out_of_buffer")]
    assert mlx5["level"] == "fail" and mlx5["count"] > 0
    assert "rx queue 5 carried" in mlx5["cause"]  # the hot RSS queue is named
    assert ("eno1", "ethtool eno1 rx_missed_errors") in nic
    # rings below the driver maximum (1024 of 8192 in the fixture's ethtool -g): the fix is
    # the ring, from current to max
    ring = [x for x in mlx5["fixes"] if x["knob"] == "ring ens1f0np0 rx"]
    assert len(ring) == 1, mlx5["fixes"]
    assert (ring[0]["current"], ring[0]["desired"]) == ("1024", "8192")
    assert ring[0]["key"] == "nic.ens1f0np0.rings"
    assert ring[0]["profile"][0].startswith('nic."ens1f0np0".rings = { value = "max", reason = ')


def test_virtio_per_queue_drops() -> None:
    fs = findings(KVM)
    q = by_rule(fs, "nic-rx-drop")
    assert q and all(f["object"].startswith("ens3 rx-queue ") for f in q)
    assert q[0]["evidence"][0]["source"] == "ethtool -S ens3"


def test_ena_allowance_is_a_policer_not_a_ring() -> None:
    fs = findings(ENA)
    pol = by_rule(fs, "nic-policer")
    assert {f["title"] for f in pol} >= {"ens5: pps_allowance_exceeded"}
    assert not by_rule(fs, "nic-rx-drop")


def test_softnet_blames_cpu_ids_from_the_file(tmp_path: pathlib.Path) -> None:
    """With CPU 1 offline, softnet_stat has no line for it: the second line is CPU 2. The
    finding must name the CPU from column 13, not the line number."""
    tree = copy_host(tmp_path, KVM_NAME)
    (tree / "sys/devices/system/cpu/online").write_text("0,2-3\n")
    (tree / "sys/devices/system/cpu/cpu1/online").write_text("0\n")
    lines = (tree / "proc/net/softnet_stat").read_text().splitlines()
    del lines[1]  # the kernel prints online CPUs only
    cols = lines[1].split()
    assert int(cols[12], 16) == 2
    cols[1] = f"{4321:08x}"  # dropped
    cols[2] = f"{9999:08x}"  # time_squeeze (>= 1 per 10,000 packets processed)
    lines[1] = " ".join(cols)
    (tree / "proc/net/softnet_stat").write_text("\n".join(lines) + "\n")
    fs = findings(str(tree), "--rule", "cpu-backlog-drop", "--rule", "time-squeeze")
    assert [(f["rule"], f["object"], f["count"]) for f in fs] == [
        ("cpu-backlog-drop", "cpu 2", 4321),
        ("time-squeeze", "cpu 2", 9999),
    ]
    fix = fs[0]["fixes"][0]
    assert fix["knob"] == "sysctl net.core.netdev_max_backlog"
    assert int(fix["desired"]) > int(fix["current"])


def test_softnet_on_the_r750() -> None:
    fs = findings(R750, "--rule", "cpu-backlog-drop")
    text = (HOSTS / DELL / "proc/net/softnet_stat").read_text().splitlines()
    expected = {
        f"cpu {int(line.split()[12], 16)}" for line in text if int(line.split()[1], 16) > 0
    }
    assert expected and {f["object"] for f in fs} == expected


def test_formats_and_output_file(tmp_path: pathlib.Path) -> None:
    for fmt, marker in (("md", "# lbtune diagnose"), ("html", "<!DOCTYPE html>")):
        out = tmp_path / f"r.{fmt}"
        r = run_cli("--root", KVM, "diagnose", "--format", fmt, "-o", str(out))
        assert r.exit_code == 1 and r.stdout == ""
        body = out.read_text()
        assert body.startswith(marker) and "udp-rcvbuf-errors" in body
    r = run_cli("--root", KVM, "diagnose")
    assert r.exit_code == 1
    assert "UDP receive buffer full on port 514" in r.stdout and "fix:" in r.stdout
    js = run_cli("--root", KVM, "diagnose", "--format", "json")
    assert json.loads(js.stdout)["summary"]["fail"] >= 1


SCRIPT = "<script>alert(1)</script>"


def hostile_kvm(tmp_path: pathlib.Path) -> pathlib.Path:
    """The kvm VM with markup in its hostname and a dropping UDP socket on an IPv6 address."""
    tree = copy_host(tmp_path, KVM_NAME, {"/proc/sys/kernel/hostname": f"{SCRIPT}[red]vm[/red]\n"})
    ss = tree / "sos_commands/networking/ss_-peaonmi"
    ss.write_text(
        ss.read_text()
        + "udp   UNCONN 0      0          [fd77::2]:9443            [::]:*     ino:29001 <->\n"
        + "\t skmem:(r0,rb8192,t0,tb212992,f0,w0,o0,bl0,d77)\n"
    )
    return tree


def test_html_escapes(tmp_path: pathlib.Path) -> None:
    tree = str(hostile_kvm(tmp_path))
    r = run_cli("--root", tree, "diagnose", "--format", "html")
    assert r.exit_code == 1, r.stderr
    assert "<script" not in r.stdout.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;[red]vm[/red]" in r.stdout
    assert "<code>udp [fd77::2]:9443</code>" in r.stdout


def test_ipv6_objects_and_markup_survive_text_and_markdown(tmp_path: pathlib.Path) -> None:
    """Rich markup is never applied to data: `[fd77::2]` is an address, not a style."""
    tree = str(hostile_kvm(tmp_path))
    r = run_cli("--root", tree, "diagnose")
    assert r.exit_code == 1, r.stderr
    assert "udp [fd77::2]:9443" in r.stdout and "UDP receive buffer full on port 9443" in r.stdout
    assert f"{SCRIPT}[red]vm[/red]" in r.stdout.splitlines()[0]
    md = run_cli("--root", tree, "diagnose", "--format", "md")
    assert "`udp [fd77::2]:9443`" in md.stdout and "\\<script\\>" in md.stdout
    assert not re.search(r"(?<!\\)<script", md.stdout)  # only escaped
    doc = run_cli("--root", tree, "diagnose", "--json").json
    assert "udp [fd77::2]:9443" in {f["object"] for f in doc["findings"]}


def test_rule_filter() -> None:
    fs = findings(R750, "--rule", "conntrack-full")
    assert fs and {f["rule"] for f in fs} == {"conntrack-full"}


def test_capture_tarball_as_root_and_baseline(tmp_path: pathlib.Path) -> None:
    """Two captures of one tree: the second with more UDP drops; --baseline gives the delta."""
    import tarfile

    before = copy_host(tmp_path, KVM_NAME, dest="before")
    after = copy_host(tmp_path, KVM_NAME, dest="after")
    up = float((before / "proc/uptime").read_text().split()[0])
    (after / "proc/uptime").write_text(f"{up + 60:.2f} {up * 3:.2f}\n")
    snmp = (after / "proc/net/snmp").read_text().splitlines()
    hdr = next(i for i, line in enumerate(snmp) if line.startswith("Udp:"))
    names, values = snmp[hdr].split(), snmp[hdr + 1].split()
    k = names.index("RcvbufErrors")
    values[k] = str(int(values[k]) + 120)
    snmp[hdr + 1] = " ".join(values)
    (after / "proc/net/snmp").write_text("\n".join(snmp) + "\n")
    tgz = tmp_path / "after.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(after, arcname=".")
    r = run_cli("--root", str(tgz), "diagnose", "--baseline", str(before), "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json
    assert doc["mode"] == "captures" and doc["window_seconds"] == pytest.approx(60, abs=0.01)
    udp = [f for f in doc["findings"] if f["rule"] == "udp-rcvbuf-errors"]
    assert udp and udp[0]["evidence"][0]["value"] == 120
    # the other way round is refused: the baseline must be older
    r = run_cli("--root", str(before), "diagnose", "--baseline", str(tgz))
    assert r.exit_code == 2 and "not older" in r.stderr
