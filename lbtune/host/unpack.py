"""Unpacking a capture or sosreport tarball safely into a private directory (`--root x.tar.gz`).

A tarball is hostile input until proven otherwise: absolute names, `..`, links that point or
resolve outside the tree, members below a symlink or below a regular file, a name given
twice, hard links to anything but an earlier regular file, devices, FIFOs and other special
files, and more than 4 GiB are refused with one line (BadInput, exit 2), on any Python >= 3.9,
and nothing is left half-done.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile

from lbtune.errors import BadInput

MANIFEST = "lbtune-capture.json"
MAX_UNPACKED = 4 << 30  # bytes; a bigger archive is refused (sosreports are far smaller)


def _member_name(member: tarfile.TarInfo, tarball: str) -> str:
    """The member's relative name ("" for the archive's own `./`); BadInput when unsafe."""
    raw = member.name
    parts = [p for p in raw.rstrip("/").split("/") if p != "."]
    if raw.startswith("/") or "\x00" in raw or any(p in ("", "..") for p in parts):
        raise BadInput(f"{tarball}: unsafe member name {raw!r}")
    return "/".join(parts)


def link_inside(name: str, target: str) -> bool:
    """Whether a link at `name` pointing to `target` (relative) stays inside the tree."""
    if target.startswith("/") or "\x00" in target:
        return False
    dest = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return dest != ".." and not dest.startswith("../")


def unpack_capture(tarball: str, dest: str) -> str:
    """Extract a capture (or sosreport) tarball into `dest` safely; returns the host root.

    `dest` must not exist or be an empty directory. Refused (BadInput, nothing left half-done
    outside `dest`): absolute names, `..`, symlinks or hard links pointing outside the tree,
    members below a symlink, devices, FIFOs and other special files, more than 4 GiB. Links
    are created last, so no file is ever written through one. The returned root is `dest`, or
    its single top-level directory when the archive has one (sosreport-HOST-DATE/).
    """
    if os.path.isdir(dest) and os.listdir(dest):
        raise BadInput(f"{dest}: not empty")
    try:
        tar = tarfile.open(tarball, "r:*")  # noqa: SIM115 (closed by the `with` below)
    except FileNotFoundError:
        raise BadInput(f"{tarball}: no such file") from None
    except (tarfile.TarError, OSError) as e:
        raise BadInput(f"{tarball}: not a readable tar archive ({e})") from None
    with tar:
        try:
            members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise BadInput(f"{tarball}: corrupt archive ({e})") from None
        plan = _check_members(members, tarball)
        created = not os.path.exists(dest)
        os.makedirs(dest, exist_ok=True)
        root = os.path.realpath(dest)
        try:
            _extract(tar, plan, root, tarball)
        except OSError as e:  # whatever the checks above did not foresee is still bad input
            _remove_contents(root, also_root=created)
            raise BadInput(f"{tarball}: cannot unpack ({e.strerror or e})") from None
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


def _check_members(
    members: list[tarfile.TarInfo], tarball: str
) -> list[tuple[tarfile.TarInfo, str]]:
    plan: list[tuple[tarfile.TarInfo, str]] = []
    links: set[str] = set()
    kinds: dict[str, str] = {}  # name -> "dir" | "file" | "link": each name once
    total = 0
    for m in members:
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
            if kinds.get(target) != "file" or target not in {n for mm, n in plan if mm.isreg()}:
                raise BadInput(f"{tarball}: hard link {m.name} -> {m.linkname} is not to a file")
        elif m.isreg():
            total += m.size
        elif not m.isdir():
            raise BadInput(f"{tarball}: {m.name} is a device or special file")
        if total > MAX_UNPACKED:
            raise BadInput(f"{tarball}: more than {MAX_UNPACKED >> 30} GiB unpacked")
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
                d.write(s.read())
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
