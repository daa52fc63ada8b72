"""The exclusive lock that keeps two lbtune runs from changing one host at the same time.

An `flock(2)` on a state file opened through `HostFS.open_state` (below the host root, never
through a symlink). Non-blocking: a second run is refused with `Busy` (exit 6) naming the
holder's PID instead of waiting behind it.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Optional

from lbtune.errors import Busy
from lbtune.host.fs import HostFS


class HostLock:
    """`with HostLock(fs, "/var/lib/lbtune/lock"):` holds the lock for the block."""

    def __init__(self, fs: HostFS, kpath: str) -> None:
        self.fs = fs
        self.kpath = kpath
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        fd = self.fs.open_state(self.kpath)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                where = self.fs.path(self.kpath)
                raise Busy(
                    f"another lbtune run holds {where}" + (f" (pid {holder})" if holder else "")
                ) from None
            raise
        # Only the holder writes its PID, and only after it holds the lock.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
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
