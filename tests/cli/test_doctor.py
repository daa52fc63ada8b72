"""`lbtune doctor` on this machine, checked against independent evidence."""

from __future__ import annotations

import os
import shutil

import pytest


def _caps(cli):
    r = cli("doctor", "--json", "--no-compile")
    assert r.exit_code == 0, r.stderr
    return {c["name"]: c for c in r.json["capabilities"]}


def test_doctor_reports_every_group(cli):
    caps = _caps(cli)
    for name in ("root", "BTF", "kprobes", "IPVS", "bcc python module", "kernel headers",
                 "tracefs mounted", "skb:kfree_skb", "UML lab kernel"):  # fmt: skip
        assert name in caps
    for c in caps.values():
        assert set(c) == {"name", "available", "detail", "fix", "group"}
        if not c["available"]:
            assert c["fix"] or c["group"] in ("tracepoints",) or c["name"].startswith("ethtool")


def test_ipvs_matches_proc(cli):
    caps = _caps(cli)
    assert caps["IPVS"]["available"] == os.path.exists("/proc/net/ip_vs")


def test_kprobes_matches_kallsyms(cli):
    with open("/proc/kallsyms") as f:
        has = any(line.rstrip().endswith(" register_kprobe") for line in f)
    assert _caps(cli)["kprobes"]["available"] == has


def test_btf_matches_sysfs(cli):
    assert _caps(cli)["BTF"]["available"] == os.path.exists("/sys/kernel/btf/vmlinux")


def test_root_matches_euid(cli):
    assert _caps(cli)["root"]["available"] == (os.geteuid() == 0)


def test_lab_matches_installed_uml(cli):
    assert _caps(cli)["UML lab kernel"]["available"] == bool(shutil.which("linux.uml"))


def test_bcc_usable_after_setup(cli):
    pytest.importorskip("bcc")
    if os.geteuid() != 0:
        pytest.skip("loading a BPF program needs root")
    r = cli("doctor", "--json")
    caps = {c["name"]: c for c in r.json["capabilities"]}
    assert caps["bcc python module"]["available"]
    assert caps["bcc compiles and loads"]["available"], caps["bcc compiles and loads"]["detail"]


def test_doctor_refuses_root_tree(cli, tmp_path):
    r = cli("--root", str(tmp_path), "doctor")
    assert r.exit_code == 2
    assert "does not take --root" in r.stderr


def test_doctor_text(cli):
    r = cli("doctor", "--no-compile")
    assert r.exit_code == 0
    assert "kprobes" in r.stdout and "tracepoints" in r.stdout


def test_doctor_text_has_no_trailing_spaces(cli):
    """Every line used to be padded to 120 columns with spaces (the table's width)."""
    r = cli("doctor", "--no-compile")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert len(lines) > 10
    assert [line for line in lines if line != line.rstrip()] == []
