"""`lbtune diagnose` input and output rules: -o never replaces silently and never writes
through a non-regular file, --baseline refuses captures of another host, namespace or boot,
and reports name the capture the user gave, never its temporary unpack directory."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import tarfile

import pytest

from tests.conftest import KVM, copy_host, run_cli

HOSTNAME = "/proc/sys/kernel/hostname"
UPTIME = "/proc/uptime"


def kvm(tmp_path: pathlib.Path, dest: str, **files: str) -> pathlib.Path:
    return copy_host(tmp_path, KVM, {k.replace("__", "/"): v for k, v in files.items()}, dest)


def later(tree: pathlib.Path, seconds: float = 60.0) -> None:
    up = float((tree / "proc/uptime").read_text().split()[0])
    (tree / "proc/uptime").write_text(f"{up + seconds:.2f} {up:.2f}\n")


def manifest(tree: pathlib.Path, **fields: object) -> None:
    (tree / "lbtune-capture.json").write_text(json.dumps({"format": 1, **fields}))


def tarball(tree: pathlib.Path, path: pathlib.Path) -> pathlib.Path:
    with tarfile.open(path, "w:gz") as tar:
        tar.add(tree, arcname=".")
    return path


# ---------------------------------------------------------------------------- -o FILE


def test_output_is_not_replaced_without_force(tmp_path: pathlib.Path) -> None:
    root = str(kvm(tmp_path, "kvm"))
    out = tmp_path / "report.md"
    out.write_text("keep me\n")
    r = run_cli("--root", root, "diagnose", "--format", "md", "-o", str(out))
    assert r.exit_code == 2 and "exists; pass --force" in r.stderr, r.stderr
    assert out.read_text() == "keep me\n"
    r = run_cli("--root", root, "diagnose", "--format", "md", "-o", str(out), "--force")
    assert r.exit_code == 1, r.stderr
    assert out.read_text().startswith("# lbtune diagnose")
    assert [p.name for p in tmp_path.iterdir() if "lbtune-tmp" in p.name] == []


@pytest.mark.parametrize("kind", ["fifo", "device", "symlink", "directory"])
def test_output_never_goes_through_a_non_regular_file(tmp_path: pathlib.Path, kind: str) -> None:
    """All below tmp_path: the device node is a private copy of /dev/null's numbers."""
    root = str(kvm(tmp_path, "kvm"))
    target = tmp_path / "out"
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("mknod needs root")
        os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    elif kind == "symlink":
        target.symlink_to(victim)
    else:
        target.mkdir()
    before = os.lstat(target)
    r = run_cli("--root", root, "diagnose", "-o", str(target), "--force")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    after = os.lstat(target)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode)
    assert victim.read_text() == "untouched\n"


def test_force_needs_output(tmp_path: pathlib.Path) -> None:
    r = run_cli("--root", str(kvm(tmp_path, "kvm")), "diagnose", "--force")
    assert r.exit_code == 2 and "--force needs -o" in r.stderr


# ---------------------------------------------------------------------------- --baseline


def test_baseline_from_another_host_is_refused(tmp_path: pathlib.Path) -> None:
    before = kvm(tmp_path, "before", **{"proc__sys__kernel__hostname": "web-1\n"})
    after = kvm(tmp_path, "after", **{"proc__sys__kernel__hostname": "web-2\n"})
    later(after)
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(before))
    assert r.exit_code == 2, r.stderr
    assert "two hosts (web-1 and web-2)" in r.stderr and r.stderr.count("\n") == 1


def test_baseline_from_another_machine_is_refused(tmp_path: pathlib.Path) -> None:
    before, after = kvm(tmp_path, "before"), kvm(tmp_path, "after")
    later(after)
    manifest(before, machine="1111111111111111", netns=None)
    manifest(after, machine="2222222222222222", netns=None)
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(before))
    assert r.exit_code == 2 and "two machines" in r.stderr, r.stderr


def test_baseline_from_another_namespace_is_refused(tmp_path: pathlib.Path) -> None:
    before, after = kvm(tmp_path, "before"), kvm(tmp_path, "after")
    later(after)
    manifest(before, netns=None)
    manifest(after, netns="lb1")
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(before))
    assert r.exit_code == 2, r.stderr
    assert "two network namespaces (the host's own namespace and namespace lb1)" in r.stderr


def test_baseline_from_another_boot_is_refused(tmp_path: pathlib.Path) -> None:
    boot = "/proc/sys/kernel/random/boot_id"
    before = copy_host(tmp_path, KVM, {boot: "aaaa\n"}, "before")
    after = copy_host(tmp_path, KVM, {boot: "bbbb\n"}, "after")
    later(after)
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(before))
    assert r.exit_code == 2 and "two boots" in r.stderr, r.stderr


def test_same_host_namespace_and_boot_is_compared(tmp_path: pathlib.Path) -> None:
    before, after = kvm(tmp_path, "before"), kvm(tmp_path, "after")
    later(after, 30)
    manifest(before, machine="1111111111111111", netns="lb1")
    manifest(after, machine="1111111111111111", netns="lb1")
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(before), "--json")
    assert r.exit_code == 0, r.stderr  # nothing moved between two identical captures
    assert r.json["mode"] == "captures" and r.json["window_seconds"] == pytest.approx(30, abs=0.01)


# ---------------------------------------------------------------------------- capture names


def test_reports_name_the_capture_not_its_unpack_directory(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "500")  # one line per fact in the text header
    tree = kvm(tmp_path, "tree")
    (tree / "proc/softirqs").write_text("not a softirqs file\n")  # read as "not read"
    tgz = tarball(tree, tmp_path / "web-1.tar.gz")
    r = run_cli("--root", str(tgz), "diagnose", "--json")
    assert r.exit_code == 1, r.stderr
    doc = r.json
    assert doc["root"] == str(tgz)
    assert "lbtune-root-" not in r.stdout, r.stdout
    assert str(tgz) in doc["missing"]["softirqs"], doc["missing"]
    text = run_cli("--root", str(tgz), "diagnose")
    assert f"host tree: {tgz}" in text.stdout and "lbtune-root-" not in text.stdout


def test_errors_name_the_baseline_capture(tmp_path: pathlib.Path) -> None:
    before = kvm(tmp_path, "before")
    (before / "proc/uptime").write_text("garbage\n")
    tgz = tarball(before, tmp_path / "before.tar.gz")
    after = kvm(tmp_path, "after")
    r = run_cli("--root", str(after), "diagnose", "--baseline", str(tgz))
    assert r.exit_code == 2, r.stderr
    assert "the baseline capture has no readable /proc/uptime" in r.stderr
    assert "lbtune-root-" not in r.stderr and str(tgz) in r.stderr, r.stderr


# ---------------------------------------------------------------------------- the docs


DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "diagnose.md"


def test_documented_offline_command_lines_work_as_written(tmp_path: pathlib.Path) -> None:
    """Every `lbtune --root ...` line of docs/diagnose.md's synopsis runs as documented
    (options where the docs put them), on captures of the VM fixture."""
    import shlex

    block = DOCS.read_text().split("```")[1]
    lines = [ln.split("#")[0].strip() for ln in block.splitlines() if "--root" in ln]
    assert len(lines) == 2, lines  # a capture, and two captures with --baseline
    earlier, latest = kvm(tmp_path, "earlier"), kvm(tmp_path, "later")
    later(latest)
    files = {
        "./capture.tar.gz": tarball(earlier, tmp_path / "capture.tar.gz"),
        "./earlier.tar.gz": tarball(earlier, tmp_path / "earlier.tar.gz"),
        "./later.tar.gz": tarball(latest, tmp_path / "later.tar.gz"),
    }
    for line in lines:
        argv = [str(files.get(w, w)) for w in shlex.split(line)][1:]  # without "lbtune"
        r = run_cli(*argv, "--json")
        assert r.exit_code in (0, 1) and r.stderr == "", (line, r.stderr)
        assert r.exit_code == (1 if r.json["findings"] else 0), line
        assert r.json["mode"] == ("captures" if "--baseline" in argv else "capture"), line
