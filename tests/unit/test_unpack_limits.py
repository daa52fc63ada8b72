"""Unpacking a hostile tarball stays bounded (issue 20 items 12, 14): bytes with hard links
counted as the copies they become, members, name depth, one header, the decompressed stream,
wall time; and a file that is not a tarball is one line at once."""

from __future__ import annotations

import gzip
import io
import os
import pathlib
import tarfile

import pytest

from lbtune.errors import BadInput
from lbtune.host.capture import unpack
from lbtune.host.capture.unpack import unpack_capture
from tests.conftest import run_cli

MIB = 1 << 20


def _zeros_member(tar: tarfile.TarFile, name: str, size: int) -> None:
    info = tarfile.TarInfo(name)
    info.size = size

    class Zeros(io.RawIOBase):
        left = size

        def readable(self) -> bool:
            return True

        def readinto(self, b):  # type: ignore[no-untyped-def]
            n = min(len(b), self.left)
            b[:n] = bytes(n)
            self.left -= n
            return n

    tar.addfile(info, io.BufferedReader(Zeros()))


def _links(tar: tarfile.TarFile, target: str, n: int) -> None:
    for i in range(n):
        info = tarfile.TarInfo(f"proc/l{i}")
        info.type = tarfile.LNKTYPE
        info.linkname = target
        tar.addfile(info)


def _refused(tarball: pathlib.Path, dest: pathlib.Path, match: str) -> str:
    with pytest.raises(BadInput, match=match) as e:
        unpack_capture(str(tarball), str(dest))
    assert not dest.exists()  # nothing written, nothing left behind
    assert "\n" not in str(e.value)
    return str(e.value)


def test_hard_links_count_as_copies_50mb_and_100_links(tmp_path):
    tarball = tmp_path / "links.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        _zeros_member(tar, "proc/big", 50 * MIB)
        _links(tar, "proc/big", 100)  # 5 GB once unpacked: each link is a copy
    _refused(tarball, tmp_path / "d", "more than 2 GiB unpacked")


def test_hard_links_are_counted_against_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack, "MAX_UNPACKED", 10 * MIB)
    tarball = tmp_path / "links.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        _zeros_member(tar, "proc/big", MIB)
        _links(tar, "proc/big", 20)
    _refused(tarball, tmp_path / "d", "hard links are copies")


def test_a_hard_link_copy_is_streamed_and_equal(tmp_path):
    tarball = tmp_path / "ok.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        _zeros_member(tar, "proc/big", 3 * MIB)
        _links(tar, "proc/big", 2)
    root = pathlib.Path(unpack_capture(str(tarball), str(tmp_path / "d")))
    assert (root / "proc/l1").stat().st_size == 3 * MIB
    assert (root / "proc/l1").read_bytes() == (root / "proc/big").read_bytes()


def test_too_many_members(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack, "MAX_MEMBERS", 10)
    tarball = tmp_path / "many.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for i in range(11):
            _zeros_member(tar, f"proc/f{i}", 1)
    _refused(tarball, tmp_path / "d", "more than 10 members")


def test_a_3000_level_directory_tarball_is_one_line(tmp_path):
    tarball = tmp_path / "deep.tar"
    with tarfile.open(tarball, "w") as tar:
        name = "a"
        for _ in range(3000):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            name += "/a"
    _refused(tarball, tmp_path / "d", "deeper than 64 levels")
    r = run_cli("--root", str(tarball), "show")
    assert r.exit_code == 2 and "deeper than 64 levels" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_huge_pax_header_is_refused_before_it_is_read(tmp_path):
    tarball = tmp_path / "pax.tgz"
    with tarfile.open(tarball, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("proc/cmdline")
        info.pax_headers = {"comment": "x" * (9 * MIB)}
        tar.addfile(info, io.BytesIO(b""))
    _refused(tarball, tmp_path / "d", "header or read larger than 8 MiB")


def test_the_decompressed_stream_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(unpack, "MAX_STREAM", 4 * MIB)
    tarball = tmp_path / "bomb.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        for i in range(3):
            _zeros_member(tar, f"proc/z{i}", 2 * MIB)  # 6 MiB of zeros: a 6 KB file
    assert tarball.stat().st_size < 64 * 1024
    _refused(tarball, tmp_path / "d", "decompressed")


def test_unpacking_has_a_deadline(tmp_path):
    tarball = tmp_path / "slow.tgz"
    with tarfile.open(tarball, "w:gz") as tar:
        _zeros_member(tar, "proc/cmdline", 10)
    ticks = iter([0.0] + [unpack.MAX_SECONDS + 1.0] * 100)
    with pytest.raises(BadInput, match="took more than 120 s"):
        unpack_capture(str(tarball), str(tmp_path / "d"), clock=lambda: next(ticks))
    assert not (tmp_path / "d").exists()


NOT_TARBALLS = {
    "zeros": (b"\0" * MIB, "not a tar archive (plain, gzip, bzip2 or xz)"),
    "text": (b"hello world, not a tarball", "not a tar archive (plain, gzip, bzip2 or xz)"),
    "gzip of zeros": (gzip.compress(b"\0" * MIB), "an empty tar archive"),
    "gzip of text": (gzip.compress(b"hello" * 200), "not a readable gzip-compressed tar archive"),
    "cut gzip": (gzip.compress(bytes(range(256)) * 8)[:40], "gzip-compressed tar archive"),
    "zstd": (b"\x28\xb5\x2f\xfd" + bytes(100), "zstd-compressed"),
}


@pytest.mark.parametrize(("content", "message"), NOT_TARBALLS.values(), ids=list(NOT_TARBALLS))
def test_not_a_tarball_is_one_line(tmp_path, content, message):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(content)
    r = run_cli("--root", str(path), "show")
    assert r.exit_code == 2, r
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_1gib_file_of_zeros_is_refused_at_once(tmp_path):
    path = tmp_path / "zeros.tar"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse; read at most its first block
    with pytest.raises(BadInput, match="not a tar archive"):
        unpack_capture(str(path), str(tmp_path / "d"))


def test_a_fifo_is_not_a_tarball(tmp_path):
    fifo = tmp_path / "t.tgz"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file"):
        unpack_capture(str(fifo), str(tmp_path / "d"))
