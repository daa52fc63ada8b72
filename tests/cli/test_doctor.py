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


def _fake_lab(tmp_path, monkeypatch, dep: str, builtin: str = ""):  # type: ignore[no-untyped-def]
    """A stand-in lab kernel (a script answering --version) and its modules directory."""
    kernel = tmp_path / "linux.uml"
    kernel.write_text("#!/bin/sh\necho 9.9.9-test\n")
    kernel.chmod(0o755)
    mods = tmp_path / "modules" / "9.9.9-test"
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text(dep)
    (mods / "modules.builtin").write_text(builtin)
    monkeypatch.setenv("LBTUNE_LAB_KERNEL", str(kernel))
    monkeypatch.setenv("LBTUNE_LAB_MODULES", str(tmp_path / "modules"))
    return mods


def test_lab_kernel_without_ipvs_is_not_claimed_to_have_it(cli, tmp_path, monkeypatch):
    """The lab line is read from the lab kernel's modules, not asserted: no ip_vs, no IPVS."""
    _fake_lab(tmp_path, monkeypatch, "kernel/drivers/net/veth.ko:\n"
              "kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko\n")  # fmt: skip
    lab = _caps(cli)["UML lab kernel"]
    assert lab["available"] is False, lab
    assert "IPVS: missing" in lab["detail"] and "veth: module" in lab["detail"], lab
    assert "bridge: module" in lab["detail"] and "IPVS" in lab["fix"], lab


def test_lab_kernel_with_built_in_ipvs(cli, tmp_path, monkeypatch):
    _fake_lab(tmp_path, monkeypatch, "kernel/drivers/net/veth.ko:\nkernel/net/bridge/bridge.ko:\n",
              builtin="kernel/net/netfilter/ipvs/ip_vs.ko\n")  # fmt: skip
    lab = _caps(cli)["UML lab kernel"]
    assert lab["available"] is True and "IPVS: built-in" in lab["detail"], lab


def test_lab_features_unknown_when_modules_dep_cannot_be_read(tmp_path):
    from lbtune.lab.guests.uml import kernel_features

    assert kernel_features(str(tmp_path)) == {"IPVS": "unknown", "veth": "unknown",
                                              "bridge": "unknown"}  # fmt: skip


def test_lab_features_match_the_installed_modules(cli):
    """Independent evidence: the .ko files under the real lab kernel's modules directory."""
    from lbtune.lab.guests.uml import LabUnavailable, find_lab_kernel

    try:
        kernel = find_lab_kernel()
    except LabUnavailable as e:
        pytest.skip(f"lab kernel unavailable: {e}")
    lab = _caps(cli)["UML lab kernel"]
    for feature, module in (("IPVS", "ip_vs"), ("veth", "veth"), ("bridge", "bridge")):
        found = any(f.startswith(f"{module}.ko") for _, _, files in os.walk(kernel.modules_dir)
                    for f in files)  # fmt: skip
        assert (f"{feature}: module" in lab["detail"]) == found, (feature, lab)
def test_doctor_text_has_no_trailing_spaces(cli):
    """Every line used to be padded to 120 columns with spaces (the table's width)."""
    r = cli("doctor", "--no-compile")
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert len(lines) > 10
    assert [line for line in lines if line != line.rstrip()] == []


def _fake_vm_cache(tmp_path, monkeypatch, version="6.1.0-99-amd64"):  # type: ignore[no-untyped-def]
    d = tmp_path / "vm" / version
    d.mkdir(parents=True)
    for name in ("vmlinuz", "initrd.img", "ready"):
        (d / name).write_text("x")
    (tmp_path / "vm" / "current").write_text(version + "\n")
    monkeypatch.setenv("LBTUNE_VM_CACHE", str(tmp_path / "vm"))
    return tmp_path / "vm"


def test_vm_lab_without_a_prepared_image_says_how_to_get_one(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_VM_CACHE", str(tmp_path / "empty"))
    vm = _caps(cli)["VM lab (qemu)"]
    assert not vm["available"]
    assert "scripts/vm-image.sh" in vm["detail"] and "make setup" in vm["fix"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the VM lab needs root")
@pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None, reason="qemu not installed")
def test_vm_lab_reports_kernel_accelerator_and_what_the_last_boot_saw(cli, tmp_path, monkeypatch):
    import json

    cache = _fake_vm_cache(tmp_path, monkeypatch)
    vm = _caps(cli)["VM lab (qemu)"]
    assert vm["available"], vm
    assert "kernel 6.1.0-99-amd64" in vm["detail"]
    assert "never booted here" in vm["detail"] and "not checked: a boot" in vm["detail"]
    (cache / "kvm-probe.json").write_text(json.dumps(
        {"key": "k", "accel": "tcg", "reason": "a KVM probe boot failed (hang)"}))
    nics = {"eth0": {"driver": "virtio_net", "rx_queues": 4, "tx_queues": 4}}
    (cache / "last-boot.json").write_text(json.dumps(
        {"when": "2026-11-27T04:00:00Z", "cpus": 4, "nodes": {"0": "0-1", "1": "2-3"},
         "nics": nics, "accelerator": "tcg", "boot_seconds": 55.2}))  # fmt: skip
    detail = _caps(cli)["VM lab (qemu)"]["detail"]
    assert "accelerator: tcg (a KVM probe boot failed (hang))" in detail
    assert "4 CPUs on 2 nodes, eth0 virtio_net 4 queues" in detail
