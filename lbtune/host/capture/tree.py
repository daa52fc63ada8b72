"""The set of files a capture holds while it is being read: kernel paths mapped to bytes and
modes, symlinks kept as the kernel has them, and what was skipped and why.

Reading is restricted to ALLOWED prefixes; a symlink that leads out of the captured set is
recorded, never followed; files bigger than MAX_FILE are skipped, never truncated.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from typing import Iterable, Optional

from lbtune.host.fs import HostFS

# Where a symlink may lead: a link to anywhere else (/etc/shadow, /proc/self/environ, a file in
# /root) is listed as skipped and not followed. `/lib/systemd/system` is there because systemd's
# `*.wants/` links are absolute and /lib is itself a link to usr/lib on merged-/usr systems.
# (/proc is read only at the paths below, never through a link.)
ALLOWED = (
    "/sys", "/etc/default/grub", "/etc/default/irqbalance", "/etc/sysconfig/irqbalance",
    "/etc/sysctl.conf", "/etc/sysctl.d", "/etc/lbtune", "/etc/systemd/system",
    "/etc/os-release", "/usr/lib/os-release", "/usr/lib/systemd/system", "/lib/systemd/system",
)  # fmt: skip
SECRET_SYSCTLS = frozenset({"tcp_fastopen_key", "stable_secret"})
MAX_FILE = 64 << 20  # bytes; a bigger kernel file is skipped, never truncated
UNSAFE = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN_REL = re.compile(r"^(\.\./)*([^./][^/]*/)*[^./][^/]*$")


def _allowed(kpath: str) -> bool:
    return any(kpath == a or kpath.startswith(a + "/") for a in ALLOWED)


def safe_member(kpath: str) -> Optional[str]:
    """Tar member name of a kernel path; None when it cannot be a safe relative name."""
    name = posixpath.normpath(kpath).lstrip("/")
    parts = name.split("/")
    if not name or any(p in ("", ".", "..") for p in parts) or UNSAFE.search(name):
        return None
    return name


def _read_all(path: str) -> Optional[bytes]:
    """A file's whole content; None when larger than MAX_FILE.

    sysfs and procfs report sizes of 4096 or 0, so files are read to EOF, never copied by
    size; in modest chunks, because sysctl handlers allocate a buffer of the requested size
    and fail a large read with ENOMEM.
    """
    chunks: list[bytes] = []
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            chunk = f.read(1 << 16)
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > MAX_FILE:
                return None
            chunks.append(chunk)


class CaptureTree:
    """The files, links and directories collected so far, keyed by kernel path."""

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs
        self.files: dict[str, tuple[bytes, int]] = {}  # kernel path -> (content, mode)
        self.links: dict[str, str] = {}  # kernel path -> relative target
        self.dirs: set[str] = set()
        self.skipped: dict[str, str] = {}

    # ---------------------------------------------------------------- resolution
    def resolve(self, kpath: str) -> Optional[str]:
        """The link-free kernel path of `kpath`, recording every symlink met on the way.

        /proc is taken as it is (its links, `net -> self/net`, are the reader's own view and
        are stored as plain directories). None when absent or when a link leaves the set.
        """
        kpath = posixpath.normpath(kpath)
        if kpath == "/proc" or kpath.startswith("/proc/"):
            return kpath if os.path.lexists(self.fs.path(kpath)) else None
        parts = [p for p in kpath.split("/") if p]
        cur, i, hops = "", 0, 0
        pending: dict[str, str] = {}  # links met; kept only when the path resolves
        while i < len(parts):
            nxt = f"{cur}/{parts[i]}"
            try:
                st = os.lstat(self.fs.path(nxt))
            except OSError:
                return None  # absent: not captured, not worth a note
            if not stat.S_ISLNK(st.st_mode):
                cur, i = nxt, i + 1
                continue
            hops += 1
            if hops > 40:
                self.skip(kpath, "too many levels of symbolic links")
                return None
            try:
                full = self._link_dest(nxt, cur or "/", parts[i + 1 :], pending)
            except OSError:  # removed meanwhile
                return None
            if full is None:
                return None
            parts, cur, i = [p for p in full.split("/") if p], "", 0
        self.links.update(pending)
        return cur or "/"

    def _link_dest(
        self, link: str, parent: str, rest: list[str], into: dict[str, str]
    ) -> Optional[str]:
        """Put `link` (as a relative link) in `into`; return the path `link/REST` leads to.

        None, and nothing recorded, when that path is outside the captured set.
        """
        target = os.readlink(self.fs.path(link))
        dest = posixpath.normpath(posixpath.join(parent, target))
        full = posixpath.join(dest, *rest)
        if not _allowed(full):
            self.skip(link, f"symlink to {target} leads out of the capture")
            return None
        # Keep the kernel's own text (`../../../virtio2`) when it is plain ups then downs.
        into[link] = target if _PLAIN_REL.match(target) else posixpath.relpath(dest, parent)
        return full

    def record_link(self, kpath: str, make_target_dir: bool = False) -> None:
        """Keep a symlink whose target is not itself captured (`driver`, `lower_eth0`)."""
        try:
            if not os.path.islink(self.fs.path(kpath)):
                return
            dest = self._link_dest(kpath, posixpath.dirname(kpath), [], self.links)
        except OSError as e:
            self.skip(kpath, e.strerror or str(e))
            return
        if dest is not None and make_target_dir and dest.startswith("/sys/"):
            self.dirs.add(dest)

    def skip(self, kpath: str, reason: str) -> None:
        self.skipped.setdefault(kpath, reason)

    # ---------------------------------------------------------------- adding files
    def add_file(self, kpath: str) -> None:
        """Capture one file (following allowed links); absent files are silently left out."""
        real = self.resolve(kpath)
        if real is not None:
            self._read_into(real)

    def _read_into(self, real: str) -> None:
        path = self.fs.path(real)
        try:
            st = os.stat(path)
        except OSError:
            return
        if stat.S_ISDIR(st.st_mode):
            return
        if not stat.S_ISREG(st.st_mode):
            self.skip(real, "not a regular file")
            return
        if not st.st_mode & 0o444:
            self.skip(real, "write-only")
            return
        if posixpath.basename(real) in SECRET_SYSCTLS and real.startswith("/proc/sys/"):
            self.skip(real, "secret (not captured)")
            return
        try:
            data = _read_all(path)
        except OSError as e:
            self.skip(real, f"read: {e.strerror or e}")
            return
        if data is None:
            self.skip(real, f"larger than {MAX_FILE >> 20} MiB")
            return
        self.files[real] = (data, st.st_mode & 0o777)

    def add_files(self, kdir: str, names: Iterable[str]) -> Optional[str]:
        """Capture `kdir/NAME` for each name; returns the link-free directory (None: absent)."""
        real = self.resolve(kdir)
        if real is None or not os.path.isdir(self.fs.path(real)):
            return None
        for name in names:
            self.add_file(f"{real}/{name}")
        return real

    def _entries(self, real: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(self.fs.path(real)) as it:
                return sorted(it, key=lambda e: e.name)
        except OSError as e:
            if not isinstance(e, (FileNotFoundError, NotADirectoryError)):
                self.skip(real, e.strerror or str(e))
            return []

    def add_flat(self, kdir: str) -> Optional[str]:
        """Capture the regular files directly in `kdir` (no links, no subdirectories)."""
        real = self.resolve(kdir)
        if real is None:
            return None
        for e in self._entries(real):
            if e.is_file(follow_symlinks=False):
                self._read_into(f"{real}/{e.name}")
        return real

    def add_tree(self, kdir: str) -> None:
        """Capture a directory recursively; links inside are kept and followed if allowed."""
        real = self.resolve(kdir)
        if real is None or not os.path.isdir(self.fs.path(real)):
            return
        self.dirs.add(real)
        for e in self._entries(real):
            child = f"{real}/{e.name}"
            if e.is_symlink():
                self.add_file(child)
            elif e.is_dir(follow_symlinks=False):
                self.add_tree(child)
            else:
                self._read_into(child)

    def add_text(self, kpath: str, text: str) -> None:
        self.files[kpath] = (text.encode(), 0o644)

    def listdir(self, kdir: str) -> list[str]:
        real = self.resolve(kdir)
        return [e.name for e in self._entries(real)] if real else []
