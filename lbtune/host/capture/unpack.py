"""Unpacking a capture or sosreport tarball safely into a private directory (`--root x.tar.gz`).

A tarball is hostile input until proven otherwise: absolute names, `..`, links that point or
resolve outside the tree, members below a symlink or below a regular file, a name given
twice, hard links to anything but an earlier regular file, devices, FIFOs and other special
files are refused with one line (BadInput, exit 2), on any Python >= 3.9, and nothing is left
half-done. So is anything bigger than the limits below: bytes unpacked (hard links counted at
their target's size: each is a copy), decompressed stream, members, name depth, one header,
and wall time. The compression is recognised by its magic bytes (gzip, bzip2, xz, or none),
so a file that is not a tarball is refused at once, never decompressed by every method in turn.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import posixpath
import shutil
import stat
import tarfile
import time
import zlib
from typing import IO, Any, Callable

from lbtune.errors import BadInput
from lbtune.host.capture.manifest import MANIFEST

# Limits. A capture is a few MB (no file over 64 MiB, host/capture/tree.py); a sosreport unpacks
# to some hundreds of MB in tens of thousands of files; sysfs paths are some 15 levels deep.
MAX_UNPACKED = 2 << 30  # bytes written, hard-link copies included
MAX_MEMBERS = 200_000
MAX_DEPTH = 64  # components of a member name
MAX_NAME = 1024  # bytes of a member name or link target
MAX_READ = 8 << 20  # one read from the archive: a PAX or GNU long-name header larger is refused
MAX_STREAM = MAX_UNPACKED + MAX_MEMBERS * 1536  # decompressed bytes: data, headers, padding
MAX_SECONDS = 120.0  # wall time of the whole unpack
# What a damaged archive raises from tarfile and the decompressors.
_CORRUPT = (tarfile.TarError, OSError, EOFError, ValueError, lzma.LZMAError, zlib.error)

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)


def _decompressed(kind: str, raw: IO[bytes]) -> IO[bytes]:
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.BZ2File(raw, "rb")
    return lzma.LZMAFile(raw, "rb")


class _Bounded:
    """The decompressed archive as tarfile reads it, with every limit checked as it goes:
    stream size, the size of one read, the deadline."""

    def __init__(self, raw: IO[bytes], inner: IO[bytes], tarball: str, deadline: float,
                 clock: Callable[[], float]) -> None:  # fmt: skip
        self.raw = raw
        self.inner = inner
        self.tarball = tarball
        self.deadline = deadline
        self.clock = clock

    def check_time(self) -> None:
        if self.clock() > self.deadline:
            raise BadInput(f"{self.tarball}: unpacking took more than {MAX_SECONDS:.0f} s")

    def read(self, size: int = -1) -> bytes:
        self.check_time()
        if size is None or size < 0 or size > MAX_READ:
            raise BadInput(f"{self.tarball}: a header or read larger than {MAX_READ >> 20} MiB")
        if self.inner.tell() + size > MAX_STREAM:
            raise BadInput(f"{self.tarball}: more than {MAX_STREAM >> 20} MiB decompressed")
        return self.inner.read(size)

    def seek(self, pos: int, whence: int = 0) -> int:
        self.check_time()
        if whence == 0 and pos > MAX_STREAM:  # a forward seek decompresses what it skips
            raise BadInput(f"{self.tarball}: more than {MAX_STREAM >> 20} MiB decompressed")
        return self.inner.seek(pos, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.inner.close()
        self.raw.close()


def _open_tar(tarball: str, deadline: float, clock: Callable[[], float]) -> tarfile.TarFile:
    """The archive, its compression found by magic bytes; BadInput (one line) otherwise."""
    try:
        fd = os.open(tarball, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"{tarball}: no such file") from None
    except OSError as e:
        raise BadInput(f"{tarball}: cannot read ({e.strerror or e})") from None
    raw = os.fdopen(fd, "rb")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{tarball}: not a regular file")
        head = raw.read(512)
        raw.seek(0)
        kind = next((k for magic, k in _MAGIC if head.startswith(magic)), None)
        if kind is None and head[257:262] != b"ustar":
            if head.startswith(b"\x28\xb5\x2f\xfd"):
                raise BadInput(f"{tarball}: zstd-compressed; unpack it first (zstd -d)")
            raise BadInput(f"{tarball}: not a tar archive (plain, gzip, bzip2 or xz)")
        inner = raw if kind is None else _decompressed(kind, raw)
        stream: Any = _Bounded(raw, inner, tarball, deadline, clock)
        try:
            return tarfile.open(fileobj=stream, mode="r:")
        except _CORRUPT as e:
            what = f"{kind}-compressed " if kind else ""
            raise BadInput(
                f"{tarball}: not a readable {what}tar archive ({_first_line(e)})"
            ) from None
    except BaseException:
        raw.close()
        raise


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _member_name(member: tarfile.TarInfo, tarball: str) -> str:
    """The member's relative name ("" for the archive's own `./`); BadInput when unsafe."""
    raw = member.name
    parts = [p for p in raw.rstrip("/").split("/") if p != "."]
    if raw.startswith("/") or "\x00" in raw or any(p in ("", "..") for p in parts):
        raise BadInput(f"{tarball}: unsafe member name {raw[:80]!r}")
    if len(parts) > MAX_DEPTH or len(raw.encode(errors="surrogateescape")) > MAX_NAME:
        raise BadInput(
            f"{tarball}: member name {raw[:80]!r}... deeper than {MAX_DEPTH} levels or longer "
            f"than {MAX_NAME} bytes"
        )
    return "/".join(parts)


def link_inside(name: str, target: str) -> bool:
    """Whether a link at `name` pointing to `target` (relative) stays inside the tree."""
    if target.startswith("/") or "\x00" in target:
        return False
    dest = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return dest != ".." and not dest.startswith("../")


def unpack_capture(tarball: str, dest: str, clock: Callable[[], float] = time.monotonic) -> str:
    """Extract a capture (or sosreport) tarball into `dest` safely; returns the host root.

    `dest` must not exist or be an empty directory. Refused (BadInput, nothing left half-done
    outside `dest`): absolute names, `..`, symlinks or hard links pointing outside the tree,
    members below a symlink, devices, FIFOs and other special files, and more than the limits
    (MAX_UNPACKED bytes with hard links counted, MAX_STREAM decompressed, MAX_MEMBERS,
    MAX_DEPTH, MAX_READ in one header, MAX_SECONDS by `clock`). Links are created last, so no
    file is ever written through one. The returned root is `dest`, or its single top-level
    directory when the archive has one (sosreport-HOST-DATE/).
    """
    if os.path.isdir(dest) and os.listdir(dest):
        raise BadInput(f"{dest}: not empty")
    deadline = clock() + MAX_SECONDS
    tar = _open_tar(tarball, deadline, clock)
    with tar, contextlib.closing(tar.fileobj):  # a tarfile leaves a given file open
        try:
            plan = _check_members(tar, tarball)
        except _CORRUPT as e:
            raise BadInput(f"{tarball}: corrupt archive ({_first_line(e)})") from None
        if not plan:
            raise BadInput(f"{tarball}: an empty tar archive")
        created = not os.path.exists(dest)
        os.makedirs(dest, exist_ok=True)
        root = os.path.realpath(dest)
        try:
            _extract(tar, plan, root, tarball)
        except _CORRUPT as e:
            # whatever the checks above did not foresee is still bad input
            _remove_contents(root, also_root=created)
            what = e.strerror if isinstance(e, OSError) and e.strerror else _first_line(e)
            raise BadInput(f"{tarball}: cannot unpack ({what})") from None
        except BaseException:
            _remove_contents(root, also_root=created)  # never leave half a host tree
            raise
    tops = {name.split("/", 1)[0] for _, name in plan}
    if len(tops) == 1:
        (top,) = tops
        candidate = os.path.join(root, top)
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            entries = set(os.listdir(candidate))
            if entries & {"proc", "sys", MANIFEST}:
                return candidate
    return root


def _remove_contents(root: str, also_root: bool) -> None:
    for entry in os.listdir(root):
        path = os.path.join(root, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)  # unlinks symlinks, never follows them
        else:
            os.unlink(path)
    if also_root:
        os.rmdir(root)


def _check_members(tar: tarfile.TarFile, tarball: str) -> list[tuple[tarfile.TarInfo, str]]:
    """Read the members one at a time, each checked before the archive is read further."""
    plan: list[tuple[tarfile.TarInfo, str]] = []
    links: set[str] = set()
    kinds: dict[str, str] = {}  # name -> "dir" | "file" | "link": each name once
    sizes: dict[str, int] = {}  # regular files so far: a hard link copies one
    total = 0
    while True:
        m = tar.next()
        if m is None:
            break
        if len(plan) >= MAX_MEMBERS:
            raise BadInput(f"{tarball}: more than {MAX_MEMBERS} members")
        if len(m.linkname.encode(errors="surrogateescape")) > MAX_NAME:
            raise BadInput(
                f"{tarball}: link target of {m.name[:80]!r} longer than {MAX_NAME} bytes"
            )
        name = _member_name(m, tarball)
        if not name:
            if not m.isdir():
                raise BadInput(f"{tarball}: unsafe member name {m.name!r}")
            continue  # "./", the archive's root
        kind = "dir" if m.isdir() else "link" if m.issym() else "file"
        seen = kinds.get(name)
        if seen is not None and not (seen == kind == "dir"):
            raise BadInput(f"{tarball}: {m.name} appears twice (as {seen} and {kind})")
        kinds[name] = kind
        if m.issym():
            if not link_inside(name, m.linkname):
                raise BadInput(f"{tarball}: link {m.name} -> {m.linkname} points outside")
            links.add(name)
        elif m.islnk():
            target = _member_name(tarfile.TarInfo(m.linkname), tarball)
            if kinds.get(target) != "file" or target not in sizes:
                raise BadInput(f"{tarball}: hard link {m.name} -> {m.linkname} is not to a file")
            total += sizes[target]  # unpacked as a copy
        elif m.isreg():
            total += m.size
            sizes[name] = m.size
        elif not m.isdir():
            raise BadInput(f"{tarball}: {m.name} is a device or special file")
        if total > MAX_UNPACKED:
            raise BadInput(
                f"{tarball}: more than {MAX_UNPACKED >> 30} GiB unpacked (hard links are copies)"
            )
        plan.append((m, name))
    for m, name in plan:
        parent = posixpath.dirname(name)
        while parent:
            if parent in links:
                raise BadInput(f"{tarball}: {m.name} lies below the symlink {parent}")
            if kinds.get(parent, "dir") != "dir":
                raise BadInput(f"{tarball}: {m.name} lies below the file {parent}")
            parent = posixpath.dirname(parent)
    return plan


def _extract(
    tar: tarfile.TarFile, plan: list[tuple[tarfile.TarInfo, str]], root: str, tarball: str
) -> None:
    def target(name: str) -> str:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        return path

    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    for m, name in plan:
        if m.isdir():
            path = os.path.join(root, name)
            os.makedirs(path, mode=0o755, exist_ok=True)
        elif m.isreg():
            src = tar.extractfile(m)
            if src is None:
                raise BadInput(f"{tarball}: cannot read {m.name}")
            path = target(name)
            if os.path.isdir(path) and not os.path.islink(path):
                raise BadInput(f"{tarball}: {m.name} is both a directory and a file")
            fd = os.open(path, flags, 0o600)
            with os.fdopen(fd, "wb") as f:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
            # Permission bits only (no set-id); 0444 sysctls stay read-only: lbtune reads
            # "global even inside a namespace" from that.
            os.chmod(path, m.mode & 0o777 | 0o400)
    for m, name in plan:
        if m.islnk():
            src_path = os.path.join(root, _member_name(tarfile.TarInfo(m.linkname), tarball))
            path = target(name)
            with open(src_path, "rb") as s, os.fdopen(os.open(path, flags, 0o600), "wb") as d:
                shutil.copyfileobj(s, d, 1 << 20)  # never the whole file in memory
        elif m.issym():
            path = target(name)
            if os.path.lexists(path):
                raise BadInput(f"{tarball}: {m.name} exists twice")
            os.symlink(m.linkname, path)
    for m, name in plan:  # resolves chains of links too
        if m.issym():
            real = os.path.realpath(os.path.join(root, name))
            if real != root and not real.startswith(root + os.sep):
                raise BadInput(f"{tarball}: link {m.name} -> {m.linkname} resolves outside")
