"""The exclusive lock that keeps two lbtune runs from changing one host at the same time.

An `flock(2)` on a state file opened through `HostFS.open_state` (below the host root, never
through a symlink). Non-blocking: a second run is refused with `Busy` (exit 6) naming the
holder's PID instead of waiting behind it. `take` holds the same lock for the answer of a
repeated no-op (lbtune.host.ipvs.memo), which runs before the rest of lbtune is imported:
this module imports only the interpreter's own modules until a run is refused.
"""

from __future__ import annotations

import errno
import fcntl
import os

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    from lbtune.host.fs import HostFS

LOCK = "lock"  # its name in the state directory (lbtune.tune.journal.StateDir)


def hold(fd: int) -> None:
    """Take the lock on an open lock file without waiting (BlockingIOError: another run
    holds it), then write this process's PID into it."""
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    # Only the holder writes its PID, and only after it holds the lock.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def take(dir_fd: int, name: str = LOCK) -> int:
    """The lock of an opened state directory, held (close the fd to release it). The file
    must exist and have no other name; OSError when it does not, or when the lock is held
    (never waits: a held lock is the full run's to report)."""
    fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_nlink != 1:
            raise OSError(errno.EMLINK, "a lock file with other names")
        hold(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


class HostLock:
    """`with HostLock(fs, "/var/lib/lbtune/lock"):` holds the lock for the block."""

    def __init__(self, fs: HostFS, kpath: str) -> None:
        self.fs = fs
        self.kpath = kpath
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = self.fs.open_state(self.kpath)
        try:
            hold(fd)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                # imported here: the no-op's answer takes the lock through `take` before
                # lbtune's errors (and enum) are imported, and only a refusal needs them
                from lbtune.errors import Busy

                where = self.fs.path(self.kpath)
                raise Busy(
                    f"another lbtune run holds {where}" + (f" (pid {holder})" if holder else "")
                ) from None
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> HostLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
