"""A read view of a host's /proc, /sys and /etc rooted anywhere.

In production the root is `/`; in tests it is a fixture tree; offline it is an unpacked
capture or sosreport. Paths are always given as absolute kernel paths (`/proc/cmdline`) and
mapped below the root, and symlinks are resolved inside the root so that a fixture's relative
links (`/sys/class/net/eth0/device -> ../../../0000:81:00.0`) behave like the kernel's.
"""

from __future__ import annotations

import os
import posixpath
from typing import Optional

from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.cpulist import CpuListError, parse_cpulist, parse_cpumask


class HostFS:
    """Read-only access to kernel files of one host, rooted at `root`."""

    def __init__(self, root: str = "/") -> None:
        if not os.path.isdir(root):
            raise BadInput(f"--root {root}: not a directory")
        self.root = os.path.abspath(root)

    @property
    def is_live(self) -> bool:
        """True when this view is the running machine itself."""
        return self.root == "/"

    def path(self, kpath: str) -> str:
        """Map a kernel path (`/sys/...`) to the real path below the root."""
        if not kpath.startswith("/"):
            raise ValueError(f"kernel path must be absolute: {kpath}")
        norm = posixpath.normpath(kpath)
        if self.root == "/":
            return norm
        return self.root + norm

    def _inside(self, kpath: str) -> str:
        """Resolve symlinks of a kernel path and return it as a kernel path again."""
        real = os.path.realpath(self.path(kpath))
        if self.root == "/":
            return real
        if real == self.root:
            return "/"
        if not real.startswith(self.root + os.sep):
            # A link in a host tree pointing outside it: treat the target as missing.
            return "/.lbtune-outside-root"
        return real[len(self.root) :]

    def realpath(self, kpath: str) -> str:
        """The kernel path a (possibly symlinked) kernel path resolves to."""
        return self._inside(kpath)

    def exists(self, kpath: str) -> bool:
        return os.path.exists(self.path(self._inside(kpath)))

    def isdir(self, kpath: str) -> bool:
        return os.path.isdir(self.path(self._inside(kpath)))

    def islink(self, kpath: str) -> bool:
        return os.path.islink(self.path(kpath))

    def readlink_name(self, kpath: str) -> Optional[str]:
        """Basename of a symlink's target (`device/driver` -> `mlx5_core`), None if absent."""
        p = self.path(kpath)
        if not os.path.islink(p):
            return None
        return posixpath.basename(os.readlink(p).rstrip("/"))

    def listdir(self, kpath: str) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist."""
        try:
            return sorted(os.listdir(self.path(self._inside(kpath))))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, kpath: str) -> Optional[str]:
        """File text without the trailing newline, or None when absent or unreadable.

        Kernel attributes that exist but cannot be read in the current state (a down link's
        `speed` gives EINVAL) also read as None.
        """
        try:
            with open(self.path(self._inside(kpath)), encoding="utf-8", errors="replace") as f:
                return f.read().rstrip("\n")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except OSError:
            return None

    def read_lines(self, kpath: str) -> list[str]:
        text = self.read(kpath)
        return [] if text is None else text.splitlines()

    def read_int(self, kpath: str) -> Optional[int]:
        """An integer attribute; None when absent; MalformedHostFile when not an integer."""
        text = self.read(kpath)
        if text is None:
            return None
        text = text.strip()
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            problem = f"expected an integer, got {text!r}"
            raise MalformedHostFile(self.path(kpath), problem) from None

    def read_int_dir(self, kpath: str) -> dict[str, int]:
        """Every integer file of a directory (`/sys/class/net/eth0/statistics`), by name.

        The directory is resolved once inside the root; its files are then opened directly
        and symlinks among them refused, because resolving each file's path again costs more
        than reading it (this runs every sampling tick). Files the kernel refuses to read
        (some drivers fail a counter with EOPNOTSUPP) are left out; a non-integer is
        MalformedHostFile. Empty when the directory does not exist.
        """
        directory = self.path(self._inside(kpath))
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return {}
        out: dict[str, int] = {}
        for name in names:
            path = os.path.join(directory, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue  # a symlink (ELOOP), a directory, no permission
            try:
                raw = os.read(fd, 64)
            except OSError:
                continue
            finally:
                os.close(fd)
            try:
                out[name] = int(raw)
            except ValueError:
                raise MalformedHostFile(path, f"expected an integer, got {raw[:20]!r}") from None
        return out

    def read_cpulist(self, kpath: str) -> Optional[frozenset[int]]:
        """A CPU list attribute (`0-3,8`); None when absent."""
        text = self.read(kpath)
        if text is None:
            return None
        try:
            return parse_cpulist(text)
        except CpuListError as e:
            raise MalformedHostFile(self.path(kpath), str(e)) from None

    def read_cpumask(self, kpath: str) -> Optional[frozenset[int]]:
        """A hex CPU mask attribute (`ff,ffffffff`); None when absent."""
        text = self.read(kpath)
        if text is None:
            return None
        try:
            return parse_cpumask(text)
        except CpuListError as e:
            raise MalformedHostFile(self.path(kpath), str(e)) from None

    # ------------------------------------------------------------------ writing
    # Writes resolve symlinks inside the root like reads do, and refuse anything that would
    # land outside it, so a hostile host tree or profile cannot make lbtune write elsewhere.

    def _write_target(self, kpath: str) -> str:
        real = self._inside(kpath)
        if real == "/.lbtune-outside-root":
            raise BadInput(f"{kpath}: resolves outside the host root; refusing to write")
        return self.path(real)

    def write_attr(self, kpath: str, text: str) -> None:
        """Write a kernel attribute (/proc/sys, /sys) in one write(2); never creates files.

        Raises OSError with the kernel's errno (EINVAL for a value it rejects).
        """
        target = self._write_target(kpath)
        fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def read_bytes(self, kpath: str) -> Optional[bytes]:
        try:
            with open(self.path(self._inside(kpath)), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def write_file(self, kpath: str, content: bytes, mode: int = 0o644) -> None:
        """Create or replace a regular file atomically and durably (temp, fsync, rename)."""
        target = self._write_target(kpath)
        directory = os.path.dirname(target)
        os.makedirs(directory, exist_ok=True)
        tmp = f"{target}.lbtune-tmp-{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            os.write(fd, content)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        fsync_dir(directory)

    def file_mode(self, kpath: str) -> Optional[int]:
        """Permission bits of a file, None when absent."""
        try:
            return os.stat(self.path(self._inside(kpath))).st_mode & 0o7777
        except OSError:
            return None

    def remove_file(self, kpath: str) -> None:
        """Remove a regular file if it exists (durably)."""
        target = self._write_target(kpath)
        try:
            os.unlink(target)
        except FileNotFoundError:
            return
        fsync_dir(os.path.dirname(target))


def fsync_dir(directory: str) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
