"""A read view of a host's /proc, /sys and /etc rooted anywhere.

In production the root is `/`; in tests it is a fixture tree; offline it is an unpacked
capture or sosreport. Paths are always given as absolute kernel paths (`/proc/cmdline`) and
mapped below the root, and symlinks are resolved inside the root so that a fixture's relative
links (`/sys/class/net/eth0/device -> ../../../0000:81:00.0`) behave like the kernel's.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import stat
from typing import Callable, Optional

from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.atomic import TMP_INFIX, fsync_dir, write_atomic
from lbtune.host.kernel.cpulist import CpuListError, parse_cpulist, parse_cpumask


class _NotRegular(OSError):
    """A path that exists but is not a regular file (FIFO, device, socket)."""


# Per-file read caps (bytes). A host tree is hostile input: a 1 GiB /proc/interrupts or
# /etc/machine-id must fail with one line, not take the memory of the machine. Kernel
# attributes are at most a page and /proc text files a few hundred KB on the largest hosts
# (/proc/interrupts: ~11 bytes per CPU per IRQ row, so 5 MB with 448 CPUs and 1,000 rows);
# the exceptions are listed by prefix. A capture never holds a file over 64 MiB
# (host/capture/tree.py MAX_FILE), so the largest cap is that.
READ_LIMIT = 4 << 20
READ_LIMITS: tuple[tuple[str, int], ...] = (
    ("/proc/interrupts", 16 << 20),
    ("/proc/kallsyms", 32 << 20),  # ~5 MB on Debian 12 with its modules
    ("/sys/kernel/btf/", 32 << 20),  # vmlinux BTF ~6 MB
    ("/sos_commands/", 64 << 20),  # recorded command output (ss, tc, ethtool)
)
_CHUNK = 1 << 16  # sysctl handlers allocate the requested size: no read of MBs at once


def read_limit(kpath: str) -> int:
    """The most bytes lbtune reads from the kernel path `kpath` (READ_LIMITS, else READ_LIMIT)."""
    for prefix, limit in READ_LIMITS:
        if kpath == prefix or (prefix.endswith("/") and kpath.startswith(prefix)):
            return limit
    return READ_LIMIT


class HostFS:
    """Read-only access to kernel files of one host, rooted at `root`."""

    def __init__(self, root: str = "/") -> None:
        if not os.path.isdir(root):
            raise BadInput(f"--root {root}: not a directory")
        # Resolved once: every path is compared against the root's real path, so a root
        # given as a symlink (`current -> tree-2`) must be that real path, or everything
        # below it would read as outside the root.
        self.root = os.path.realpath(root)
        # Real paths of directories and links already resolved, for host trees only: a tree
        # is a record that only lbtune changes (and then clears this), while the live /sys
        # changes under a long-running monitor. Resolving every component of every path again
        # was most of the time of a plan on a 48-CPU fixture.
        self._real_dirs: Optional[dict[str, str]] = None if self.root == "/" else {}

    @classmethod
    def create(cls, directory: str) -> HostFS:
        """A view rooted at `directory`, created (mode 0700) when missing: the state
        directory `$LBTUNE_STATE_DIR` names, whose files are then confined to it."""
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError as e:
            raise BadInput(f"{directory}: cannot create state directory ({e.strerror})") from None
        return cls(directory)

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

    def _realpath(self, full: str) -> str:
        cache = self._real_dirs
        if cache is None:
            return os.path.realpath(full)
        known = cache.get(full)  # a directory resolved before, or a link
        if known is not None:
            return known
        parent, leaf = os.path.split(full)
        if not leaf:
            return os.path.realpath(full)
        real_parent = cache.get(parent)
        if real_parent is None:
            real_parent = cache[parent] = os.path.realpath(parent)
        candidate = os.path.join(real_parent, leaf)
        if not os.path.islink(candidate):
            return candidate
        # A link resolved once too (/sys/class/net/DEV, read every tick on a tree)
        real = cache[full] = os.path.realpath(candidate)
        return real

    def _changed_links(self) -> None:
        if self._real_dirs is not None:
            self._real_dirs.clear()

    def _inside(self, kpath: str) -> str:
        """Resolve symlinks of a kernel path and return it as a kernel path again."""
        real = self._realpath(self.path(kpath))
        if self.root == "/":
            return real
        if real == self.root:
            return "/"
        if not real.startswith(self.root + os.sep):
            # A link in a host tree pointing outside it: treat the target as missing.
            return "/.lbtune-outside-root"
        return real[len(self.root) :]

    def _read_path(self, kpath: str) -> str:
        """The real path to open for reading a kernel path.

        On the live root nothing can lead outside the root, and open(2) resolves links just
        as realpath would (the path is normalized first either way), so the component-by-
        component resolution is skipped: it was a third of a monitor tick's CPU. Writes
        resolve every time (`_write_target`).
        """
        if self.root == "/":
            return self.path(kpath)
        return self.path(self._inside(kpath))

    def realpath(self, kpath: str) -> str:
        """The kernel path a (possibly symlinked) kernel path resolves to."""
        return self._inside(kpath)

    def exists(self, kpath: str) -> bool:
        return os.path.exists(self._read_path(kpath))

    def isdir(self, kpath: str) -> bool:
        return os.path.isdir(self._read_path(kpath))

    def islink(self, kpath: str) -> bool:
        return os.path.islink(self.path(kpath))

    def readlink_name(self, kpath: str) -> Optional[str]:
        """Basename of a symlink's target (`device/driver` -> `mlx5_core`), None if absent."""
        p = self.path(kpath)
        if not os.path.islink(p):
            return None
        return posixpath.basename(os.readlink(p).rstrip("/"))

    def listdir(self, kpath: str) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist; BadInput when it
        exists but cannot be listed (no permission, a symlink loop): an unreadable
        directory is not an empty one."""
        try:
            return sorted(os.listdir(self._read_path(kpath)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise BadInput(f"{self.path(kpath)}: cannot list ({e.strerror or e})") from None

    def read(self, kpath: str, limit: Optional[int] = None) -> Optional[str]:
        """File text without the trailing newline, or None when absent or unreadable.

        Kernel attributes that exist but cannot be read in the current state (a down link's
        `speed` gives EINVAL) also read as None. A file larger than `limit` bytes (default:
        `read_limit(kpath)`) is MalformedHostFile, never read whole.
        """
        try:
            raw = self._read_regular(kpath, limit)
        except OSError:  # absent, unreadable, or not a regular file
            return None
        return raw.decode("utf-8", errors="replace").rstrip("\n")

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
        directory = self._read_path(kpath)
        try:
            # (files opened relative to the directory: no path walk again for each)
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return {}
        try:
            return self._read_ints(directory, dir_fd)
        finally:
            os.close(dir_fd)

    @staticmethod
    def _read_ints(directory: str, dir_fd: int) -> dict[str, int]:
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError:
            return {}
        out: dict[str, int] = {}
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        for name in names:
            try:
                fd = os.open(name, flags, dir_fd=dir_fd)
            except OSError:
                continue  # a symlink (ELOOP), a directory, no permission
            try:
                raw = os.read(fd, 64)
            except OSError:
                continue
            finally:
                os.close(fd)
            if not raw:  # a FIFO (non-blocking: no data) is no counter
                continue
            try:
                out[name] = int(raw)
            except ValueError:
                path = os.path.join(directory, name)
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
    # State files (journals, the lock) go further: their last component is never followed
    # (`follow=False`), so a planted link cannot redirect them even inside the root.

    def _write_target(self, kpath: str, follow: bool = True) -> str:
        if follow:
            real = self._inside(kpath)
        else:
            parent = self._inside(posixpath.dirname(posixpath.normpath(kpath)))
            real = (
                "/.lbtune-outside-root"
                if parent == "/.lbtune-outside-root"
                else (posixpath.join(parent, posixpath.basename(posixpath.normpath(kpath))))
            )
        if real == "/.lbtune-outside-root":
            raise BadInput(f"{kpath}: resolves outside the host root; refusing to write")
        return self.path(real)

    def write_attr(self, kpath: str, text: str) -> None:
        """Write a kernel attribute (/proc/sys, /sys) in one write(2); never creates files.

        Raises OSError with the kernel's errno (EINVAL for a value it rejects). In a host
        tree (not the live kernel) the file keeps its own line ending: the kernel prints
        attributes with a newline, so a value written there and restored later leaves the
        tree byte for byte as it was.
        """
        target = self._write_target(kpath)
        data = text.encode()
        if self.is_live:
            fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            return
        fd = os.open(target, os.O_RDWR | os.O_CLOEXEC)  # one open: read the ending, rewrite
        try:
            st = os.fstat(fd)
            newline = st.st_size == 0 or os.pread(fd, 1, st.st_size - 1) == b"\n"
            if data and newline and not data.endswith(b"\n"):
                data += b"\n"
            if st.st_nlink > 1:
                # Another name shares this inode, maybe outside the root (a hard link in
                # the tree): writing in place would change that file too. Give the tree's
                # name its own inode instead, with the same mode and owner.
                self._replace(target, data, stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid))
                return
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)

    def read_bytes(self, kpath: str, limit: Optional[int] = None) -> Optional[bytes]:
        """A file's bytes; None when absent; BadInput when it is not a regular file (a FIFO
        would block, a device never ends: nothing lbtune reads or journals is either);
        MalformedHostFile when larger than `limit` bytes (default: `read_limit(kpath)`)."""
        try:
            return self._read_regular(kpath, limit)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        except _NotRegular:
            raise BadInput(f"{kpath}: not a regular file; refusing to read it") from None

    def _read_regular(self, kpath: str, limit: Optional[int]) -> bytes:
        """The bytes of a regular file, opened without blocking on a FIFO; _NotRegular unless
        a regular file (procfs and sysfs attributes are); MalformedHostFile past `limit`.

        Read in chunks to EOF (procfs reports size 0, sysfs 4096), stopping one byte past the
        limit: memory stays bounded whatever the file holds.
        """
        cap = read_limit(kpath) if limit is None else limit
        fd = os.open(self._read_path(kpath), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _NotRegular(kpath)
            # A host tree's file says its size; the kernel's say 0 or 4096.
            first = min(cap + 1, max(st.st_size + 1, 8192))
            chunks = [os.read(fd, first)]
            total = len(chunks[0])
            while chunks[-1] and total <= cap:
                chunk = os.read(fd, min(_CHUNK, cap + 1 - total))
                total += len(chunk)
                chunks.append(chunk)
        finally:
            os.close(fd)
        if total > cap:
            raise MalformedHostFile(
                self.path(kpath), f"larger than {_size(cap)}; refusing to read it"
            )
        return b"".join(chunks)

    def missing_dirs(self, kdir: str) -> list[str]:
        """The ancestors of `kdir` (itself included) that do not exist, outermost first:
        what `makedirs(kdir)` would create (journaled so that rollback removes them)."""
        out: list[str] = []
        d = posixpath.normpath(kdir)
        while d != "/" and not os.path.lexists(self.path(self._inside(d))):
            out.append(d)
            d = posixpath.dirname(d)
        return out[::-1]

    def makedirs(self, kdir: str, mode: int = 0o755) -> None:
        """Create a directory and its parents below the root, never through a link out."""
        for d in self.missing_dirs(kdir):
            target = self._write_target(d)
            with contextlib.suppress(FileExistsError):  # made meanwhile by another run
                os.mkdir(target, mode)
        if not self.isdir(kdir):
            raise BadInput(f"{kdir}: not a directory below the host root")

    def check_parents(self, kpath: str) -> None:
        """BadInput naming the reason when a directory above `kpath` resolves outside the
        root or exists but is not a directory (`/etc` a file): `write_file(kpath)` would then
        fail, and so would removing what it created. For checking a plan before anything
        changes (the file itself is checked when it is written)."""
        parts = [p for p in posixpath.normpath(kpath).split("/") if p][:-1]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            real = self._inside(d)
            if real == "/.lbtune-outside-root":
                raise BadInput(f"{kpath}: {d} resolves outside the host root; refusing to write")
            try:
                st = os.stat(self.path(real))
            except FileNotFoundError:
                return  # created below the last existing directory
            except NotADirectoryError:
                raise BadInput(f"{kpath}: a parent of {d} is not a directory") from None
            if not stat.S_ISDIR(st.st_mode):
                raise BadInput(f"{kpath}: {d} is not a directory")

    def write_file(
        self, kpath: str, content: bytes, mode: int = 0o644, follow: bool = True
    ) -> None:
        """Create or replace a regular file atomically and durably (temp, fsync, rename).

        `follow=False` replaces a symlink at `kpath` itself instead of writing where it
        points (state files).
        """
        target = self._write_target(kpath, follow)
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            pass
        else:  # a device, FIFO or directory is never replaced by a file (/dev/null!)
            if not (stat.S_ISREG(st.st_mode) or (not follow and stat.S_ISLNK(st.st_mode))):
                raise BadInput(f"{kpath}: not a regular file; refusing to replace it")
        self.makedirs(posixpath.dirname(posixpath.normpath(kpath)))
        if not follow:
            self._changed_links()  # a link replaced by a file
        self._replace(target, content, mode)

    def _replace(
        self, target: str, content: bytes, mode: int, owner: Optional[tuple[int, int]] = None
    ) -> None:
        """Replace the file at the real path `target` by a new inode holding `content`:
        `<target>.lbtune-tmp-<pid>`, fsync, rename over `target`, fsync the directory."""
        write_atomic(target, content, mode, owner=owner, exact_mode=True)
        directory, base = os.path.split(target)
        _remove_dead_temps(directory, base)  # of an earlier writer of this file, killed
        fsync_dir(directory)

    def remove_stale_temps(self, kpath: str) -> None:
        """Remove `<file>.lbtune-tmp-<pid>` left next to `kpath` by a killed write (of a
        writer no longer alive: see `remove_dead_temps`)."""
        target = self._write_target(kpath, follow=False)
        directory, base = os.path.split(target)
        _remove_dead_temps(directory, base)

    def remove_dead_temps(self, kdir: str) -> None:
        """Remove every `*.lbtune-tmp-<pid>` in directory `kdir` whose writer is gone: a run
        killed (kill -9, power loss) between writing the temp file and renaming it. A temp
        of a live process is left alone, unless that PID was reused by a process started
        after the temp was written. Call it holding the lock: every lbtune writer does."""
        target = self._write_target(kdir, follow=False)
        _remove_dead_temps(target, "")

    def file_mode(self, kpath: str) -> Optional[int]:
        """Permission bits of a file, None when absent."""
        try:
            return os.stat(self._read_path(kpath)).st_mode & 0o7777
        except OSError:
            return None

    def remove_file(self, kpath: str) -> None:
        """Remove a file if it exists (durably); a symlink there is removed, not followed."""
        self._remove(kpath, os.unlink, FileNotFoundError)

    def remove_dir(self, kdir: str) -> None:
        """Remove an empty directory (one lbtune created); absent or not empty: left alone."""
        self._remove(kdir, os.rmdir, OSError)

    def _remove(self, kpath: str, remove: Callable[[str], None], absent: type[OSError]) -> None:
        target = self._write_target(kpath, follow=False)
        self._changed_links()
        try:
            remove(target)
        except absent:
            return
        fsync_dir(os.path.dirname(target))

    def symlink(self, link_target: str, kpath: str) -> None:
        """Create the symlink `kpath` -> `link_target` (a relative target stays inside the
        tree; an absolute one is read below the root like every kernel path)."""
        target = self._write_target(kpath, follow=False)
        self.makedirs(posixpath.dirname(posixpath.normpath(kpath)))
        self._changed_links()
        os.symlink(link_target, target)
        fsync_dir(os.path.dirname(target))

    def open_state(self, kpath: str) -> int:
        """Open (creating, mode 0600) a state file for reading and writing, never through a
        symlink: a planted link makes this fail with ELOOP instead of truncating its target."""
        target = self._write_target(kpath, follow=False)
        self.makedirs(posixpath.dirname(posixpath.normpath(kpath)), 0o700)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(target, flags, 0o600)
        except OSError as e:
            raise BadInput(f"{kpath}: cannot open state file ({e.strerror})") from None
        if os.fstat(fd).st_nlink > 1:  # the holder truncates it: never another name's file
            os.close(fd)
            raise BadInput(f"{kpath}: state file has other hard links; refusing to write it")
        return fd




def _remove_dead_temps(directory: str, base: str) -> None:
    """Unlink `<base>*.lbtune-tmp-<pid>` in `directory` (any name when `base` is "") whose
    writer process is gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        head, infix, pid = name.rpartition(TMP_INFIX)
        if not infix or not pid.isdigit() or not head or (base and head != base):
            continue
        path = os.path.join(directory, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and not _writer_alive(int(pid), st.st_mtime):
                os.unlink(path)
        except OSError:  # removed meanwhile, or not ours to remove
            continue


def _writer_alive(pid: int, written: float) -> bool:
    """Is process `pid` (on this machine) the live writer of a temp file written at
    `written`? This process is not: it never leaves a temp behind between two calls."""
    if pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    except OverflowError:
        return False
    started = _process_start(pid)
    # A PID reused after the writer died belongs to a process started after the temp.
    return started is None or started <= written + 1.0


def _process_start(pid: int) -> Optional[float]:
    """When process `pid` started (seconds since the epoch), from the live /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


