"""Entering a named network namespace the way `ip netns exec` does.

Joining a net namespace changes netlink and /proc/sys/net, but an already-mounted /sys keeps
showing the namespace it was mounted in. So, like `ip netns exec`, the process first moves to a
private mount namespace (nothing it mounts is visible to the host), joins the net namespace, and
mounts a fresh sysfs on /sys, which then shows that namespace's devices. tracefs is mounted
again when asked (probes need it). This changes the calling process for good: the CLI does it
once at start-up; tests do it in a forked child. `namespace_names` and `interface_names` list
what there is, for shell completion, without entering anything for good.
"""

from __future__ import annotations

import ctypes
import os
import re
from typing import Any, Callable, Optional, Sequence, TypeVar

from lbtune.errors import BadInput, NeedsPrivilege

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
T = TypeVar("T")
# The namespace this process started in, kept open by enter_netns: the host's own view of the
# host-global net.* sysctls that a namespace does not show (read_in_origin).
_origin_fd: Optional[int] = None
ORIGIN_READ_LIMIT = 65536
_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,254}")


def _libc() -> ctypes.CDLL:
    # glibc's soname first: find_library runs `ldconfig -p` in a subprocess (milliseconds
    # on every --netns run); it is only the fallback for other C libraries.
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        from ctypes.util import find_library

        return ctypes.CDLL(find_library("c") or "libc.so.6", use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def netns_path(name: str) -> str:
    """Path of a named namespace; BadInput when the name is invalid or unknown."""
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise BadInput(f"--netns {name!r}: not a valid namespace name")
    path = os.path.join(NETNS_RUN_DIR, name)
    if not os.path.exists(path):
        raise BadInput(f"--netns {name}: no such network namespace (see `ip netns list`)")
    return path


def netns_argv(netns: Optional[str], argv: Sequence[str]) -> list[str]:
    """`argv` as run in network namespace `netns` by `ip netns exec` (which also mounts the
    namespace's /sys for it), or as is for None: the one way lbtune runs a command in a
    namespace (a client inside this process uses `NetnsThread`; a user says `--netns`)."""
    if isinstance(argv, str):  # a string would be one program name with spaces
        raise TypeError("argv must be a sequence of arguments, not a string")
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


def _unshare_mounts(libc: ctypes.CDLL) -> None:
    """A new mount namespace for the calling thread whose mounts never reach the host's."""
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Keep our mounts from propagating back to the host's mount namespace.
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")


def mount_private(fstype: str, target: str) -> None:
    """Mount a pseudo filesystem (`tracefs`) on `target` in a private mount namespace.

    Only the calling thread (the whole process when it has one thread) sees the mount; the
    host's mount table is untouched. Raises OSError with the kernel's errno.
    """
    libc = _libc()
    _unshare_mounts(libc)
    _check(
        libc.mount(b"nodev", target.encode(), fstype.encode(), 0, None),
        f"mount {fstype} on {target}",
    )


def enter_netns(name: str, mount_tracefs: bool = False) -> None:
    """Move this process into network namespace `name` with a matching /sys."""
    path = netns_path(name)
    if os.geteuid() != 0:
        raise NeedsPrivilege(f"--netns {name}: entering a network namespace needs root")
    global _origin_fd
    libc = _libc()
    _unshare_mounts(libc)
    origin = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(libc.setns(fd, CLONE_NEWNET), f"setns({path})")
    except OSError:
        os.close(origin)
        raise
    finally:
        os.close(fd)
    if _origin_fd is not None:
        os.close(_origin_fd)
    _origin_fd = origin
    libc.umount2(b"/sys", MNT_DETACH)  # may fail if /sys is not a mount point; fine
    _check(libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "mount sysfs on /sys")
    if mount_tracefs:
        _check(
            libc.mount(b"nodev", b"/sys/kernel/tracing", b"tracefs", 0, None),
            "mount tracefs on /sys/kernel/tracing",
        )


def read_in_origin(path: str) -> Optional[str]:
    """File `path` (a `/proc/sys` entry) read as the namespace this process started in shows
    it, after `enter_netns` moved the process: /proc/sys/net follows the reading thread's
    namespace, so a short-lived thread joins the original one and reads there. None when
    the process never entered a namespace or the file cannot be read there."""
    import threading

    origin = _origin_fd
    if origin is None:
        return None
    out: list[Optional[str]] = [None]

    def read() -> None:
        try:
            _check(_libc().setns(origin, CLONE_NEWNET), "setns(origin)")
            with open(path, encoding="utf-8", errors="replace") as fh:
                out[0] = fh.read(ORIGIN_READ_LIMIT).rstrip("\n")  # as HostFS.read
        except OSError:
            out[0] = None

    worker = threading.Thread(target=read, name="netns-origin", daemon=True)
    worker.start()
    worker.join()
    return out[0]


class NetnsThread:
    """A worker thread inside another network namespace, for sockets opened from there.

    setns(CLONE_NEWNET) moves only the calling thread, so this process can act as a client
    in namespace A (sockets created by the worker live in A) while it reads the director's
    IPVS counters in its own namespace. `call(fn, *args)` runs fn on the worker and returns
    its result (or raises its exception). `name=None` is a worker in the current namespace.
    Use as a context manager; the thread ends (and with it the namespace membership) on exit.
    """

    def __init__(self, name: Optional[str]) -> None:
        import queue
        import threading

        self.name = name
        self._path = netns_path(name) if name is not None else None
        if name is not None and os.geteuid() != 0:
            raise NeedsPrivilege(f"--from-netns {name}: entering a network namespace needs root")
        self._jobs: queue.Queue[Optional[tuple[Callable[..., Any], tuple[Any, ...]]]] = (
            queue.Queue()
        )
        self._results: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name=f"netns-{name}", daemon=True)
        self._started = False

    def _run(self) -> None:
        try:
            if self._path is not None:
                fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _check(_libc().setns(fd, CLONE_NEWNET), f"setns({self._path})")
                finally:
                    os.close(fd)
        except OSError as e:
            self._results.put((False, e))
            return
        self._results.put((True, None))
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args = job
            try:
                self._results.put((True, fn(*args)))
            except BaseException as e:  # handed to the caller's thread
                self._results.put((False, e))

    def __enter__(self) -> NetnsThread:
        self._thread.start()
        self._started = True
        ok, err = self._results.get()
        if not ok:
            self._jobs.put(None)
            raise err
        return self

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        self._jobs.put((fn, args))
        ok, value = self._results.get()
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        if self._started:
            self._jobs.put(None)
            self._thread.join()


def namespace_names() -> list[str]:
    """The named network namespaces (`ip netns list`: the entries of /run/netns)."""
    try:
        names = os.listdir(NETNS_RUN_DIR)
    except OSError:
        return []
    return sorted(n for n in names if _NAME.fullmatch(n) and n not in (".", ".."))


def interface_names(netns: Optional[str] = None, root: str = "/") -> list[str]:
    """The network interfaces of namespace `netns` (a short-lived thread joins it and asks
    the kernel, `if_nameindex`; needs root), else those ROOT/sys/class/net lists (this
    host's, or a fixture's or capture's). Raises OSError, BadInput or NeedsPrivilege."""
    if netns is None:
        return sorted(os.listdir(os.path.join(root, "sys", "class", "net")))
    import socket

    def names() -> list[str]:
        return sorted(name for _, name in socket.if_nameindex())

    with NetnsThread(netns) as worker:
        return worker.call(names)
