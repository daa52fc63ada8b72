"""Hostile sizes (issue 20 item 12): a huge file in a host tree, a huge journal, a tarball
that unpacks to more than it says. Each fails with one line (exit 2) in bounded memory: the
commands run in a child process under an address-space limit (RLIMIT_AS) far below the size
of the hostile file, so reading it whole fails the test (MemoryError, exit 70).

Big files are sparse: they cost no disk and no time to make.
"""

from __future__ import annotations

import os
import pathlib
import resource
import subprocess
import sys

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import READ_LIMIT, HostFS, read_limit
from tests.conftest import KVM, copy_host

GIB = 1 << 30
# An lbtune command needs well under this (measured: `show` runs in 300 MiB); reading any of
# the sparse files below whole does not fit.
MEMORY = 640 << 20
REPO = pathlib.Path(__file__).resolve().parents[2]

PROFILE = """[profile]
name = "t"
[sysctl]
"net.core.somaxconn" = { value = 8192, reason = "accept queue" }
"""


def run_bounded(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    return subprocess.run(
        [sys.executable, "-m", "lbtune", *args],
        capture_output=True, text=True, preexec_fn=limit, cwd=REPO,
        env={**os.environ, **(env or {})}, timeout=600,
    )  # fmt: skip


def sparse(path: pathlib.Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    with open(path, "wb") as f:
        f.truncate(size)


def one_line(r: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


def test_a_1gib_proc_interrupts_fails_show_with_one_line(tmp_path):
    root = copy_host(tmp_path, KVM)
    sparse(root / "proc/interrupts", GIB)
    msg = one_line(run_bounded("--root", str(root), "show"))
    assert "proc/interrupts: larger than 16 MiB" in msg


@pytest.mark.parametrize("kpath", ["/etc/machine-id", "/proc/sys/kernel/hostname"])
def test_a_1gib_identity_file_fails_apply_and_changes_nothing(tmp_path, kpath):
    root = copy_host(tmp_path, KVM)
    sparse(root / kpath.lstrip("/"), GIB)
    prof = tmp_path / "t.toml"
    prof.write_text(PROFILE)
    before = (root / "proc/sys/net/core/somaxconn").read_text()
    env = {"LBTUNE_STATE_DIR": str(tmp_path / "state")}
    msg = one_line(run_bounded("--root", str(root), "apply", str(prof), env=env))
    assert f"{kpath}: larger than 4 MiB" in msg
    assert (root / "proc/sys/net/core/somaxconn").read_text() == before


def test_a_200mb_journal_is_refused_not_read_whole(tmp_path):
    root = copy_host(tmp_path, KVM)
    # the tree's own state directory (a shared LBTUNE_STATE_DIR keeps each root's apart)
    sparse(root / "var" / "lib" / "lbtune" / "journal" / "20260101T000000-001.json", 200 << 20)
    msg = one_line(run_bounded("--root", str(root), "history", env={}))
    assert "20260101T000000-001.json" in msg and "larger than" in msg


def test_reads_stop_one_byte_past_the_limit(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ten").write_bytes(b"0123456789")
    fs = HostFS(str(tmp_path))
    assert fs.read("/etc/ten", limit=10) == "0123456789"
    assert fs.read_bytes("/etc/ten", limit=10) == b"0123456789"
    with pytest.raises(MalformedHostFile, match="etc/ten: larger than 9 bytes"):
        fs.read("/etc/ten", limit=9)
    with pytest.raises(MalformedHostFile, match="larger than 9 bytes"):
        fs.read_bytes("/etc/ten", limit=9)


def test_read_limits_by_path():
    assert read_limit("/etc/machine-id") == READ_LIMIT == 4 << 20
    assert read_limit("/proc/interrupts") == 16 << 20
    assert read_limit("/sys/kernel/btf/vmlinux") == 32 << 20
    assert read_limit("/sos_commands/networking/ss_-tlnpi") == 64 << 20
    assert read_limit("/proc/interrupts2") == READ_LIMIT


def test_the_live_kernel_files_lbtune_reads_fit_their_caps():
    fs = HostFS("/")
    for kpath in ("/proc/interrupts", "/proc/kallsyms", "/proc/sys/net/core/somaxconn"):
        assert fs.read(kpath), kpath  # read in chunks: sysctl handlers refuse huge reads
    if os.path.exists("/sys/kernel/btf/vmlinux"):
        blob = fs.read_bytes("/sys/kernel/btf/vmlinux")
        assert blob is not None and blob[:2] == b"\x9f\xeb"  # BTF magic, read to its end
        assert len(blob) == os.path.getsize("/sys/kernel/btf/vmlinux")


def test_a_1gib_capture_manifest_is_refused_in_bounded_memory(tmp_path):
    root = copy_host(tmp_path, KVM)
    sparse(root / "lbtune-capture.json", GIB)
    code = (
        "import sys\n"
        "from lbtune.errors import MalformedHostFile\n"
        "from lbtune.host.fs import HostFS\n"
        "from lbtune.host.identity import tree_identity\n"
        "try:\n"
        "    tree_identity(HostFS(sys.argv[1]))\n"
        "except MalformedHostFile as e:\n"
        "    sys.exit(str(e))\n"
    )

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    r = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                       preexec_fn=limit, cwd=REPO, timeout=600)  # fmt: skip
    assert r.returncode == 1 and "lbtune-capture.json: larger than 4 MiB" in r.stderr, r.stderr
