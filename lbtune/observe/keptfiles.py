"""The live root's /proc files kept open between samples, for a sampler that runs every second.

Opening a /proc file costs more than reading it: `open` resolves the path, and /proc/net/*
looks up the namespace and sets up a seq_file each time; for the dozen files a monitor tick
reads (/proc/net/netstat, snmp, snmp6, softnet_stat, sockstat, /proc/interrupts, softirqs,
uptime, the conntrack counters) that was more than half of their cost. `KeptProcFS` reads a
/proc file it has read before from its open descriptor again, from offset 0 (`pread`): the
kernel produces /proc text (seq_file, sysctl handlers) afresh for every read from offset 0,
so the bytes are those a new `open` would read. A file read from a descriptor that no longer
works (a module unloaded with its /proc entry) is opened again, and fails as a first read
would; a file not read since the last `sweep()` is closed, so a path read once in a while
(the limits, every 10 s) or never again (an interface gone) holds no descriptor.

Only the live root (a host tree's files are read as they are: `HostFS`), only /proc, and
only for the samplers that ask for it (the monitor's and the exporter's:
`Sampler(keep_files=True)`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import weakref
from typing import Optional

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS, _NotRegular, _size, read_limit

_FIRST = 1 << 16  # bytes asked for first: the files read every tick fit (snmp6 is ~3 KB)
_CHUNK = 1 << 16


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class KeptProcFS(HostFS):
    """`HostFS` of the live root whose /proc files stay open between reads (module doc)."""

    def __init__(self) -> None:
        super().__init__("/")
        self._fds: dict[str, int] = {}
        self._read_since_sweep: set[str] = set()
        self._finalizer = weakref.finalize(self, _close_all, self._fds)

    def _read_regular(self, kpath: str, limit: Optional[int]) -> bytes:
        if not kpath.startswith("/proc/"):
            return super()._read_regular(kpath, limit)
        cap = read_limit(kpath) if limit is None else limit
        self._read_since_sweep.add(kpath)
        fd = self._fds.get(kpath)
        if fd is not None:
            try:
                return self._read_from(fd, kpath, cap)
            except MalformedHostFile:
                raise
            except OSError:
                self._forget(kpath)  # the entry went away: open it again, as a first read
        fd = os.open(self._read_path(kpath), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _NotRegular(kpath)
        except BaseException:
            os.close(fd)
            raise
        self._fds[kpath] = fd
        try:
            return self._read_from(fd, kpath, cap)
        except BaseException:
            self._forget(kpath)
            raise

    def _read_from(self, fd: int, kpath: str, cap: int) -> bytes:
        """The file's bytes from offset 0 to its end (at most `cap`)."""
        chunks = [os.pread(fd, min(cap + 1, _FIRST), 0)]
        total = len(chunks[0])
        while chunks[-1] and total <= cap:
            chunk = os.pread(fd, min(_CHUNK, cap + 1 - total), total)
            total += len(chunk)
            chunks.append(chunk)
        if total > cap:
            raise MalformedHostFile(
                self.path(kpath), f"larger than {_size(cap)}; refusing to read it"
            )
        return chunks[0] if len(chunks) <= 2 else b"".join(chunks)

    def _forget(self, kpath: str) -> None:
        fd = self._fds.pop(kpath, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def sweep(self) -> None:
        """Close the files not read since the last sweep (a sampler sweeps after each sample)."""
        for kpath in [p for p in self._fds if p not in self._read_since_sweep]:
            self._forget(kpath)
        self._read_since_sweep.clear()

    def close(self) -> None:
        self._finalizer()

    @property
    def kept(self) -> tuple[str, ...]:
        """The paths held open (for tests)."""
        return tuple(sorted(self._fds))
