"""Entering a named network namespace the way `ip netns exec` does.

Joining a net namespace changes netlink and /proc/sys/net, but an already-mounted /sys keeps
showing the namespace it was mounted in. So, like `ip netns exec`, the process first moves to a
private mount namespace (nothing it mounts is visible to the host), joins the net namespace, and
mounts a fresh sysfs on /sys, which then shows that namespace's devices. tracefs is mounted
again when asked (probes need it). This changes the calling process for good: the CLI does it
once at start-up; tests do it in a forked child.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re

from lbtune.errors import BadInput, NeedsPrivilege

NETNS_RUN_DIR = "/run/netns"
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,254}")


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


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


def enter_netns(name: str, mount_tracefs: bool = False) -> None:
    """Move this process into network namespace `name` with a matching /sys."""
    path = netns_path(name)
    if os.geteuid() != 0:
        raise NeedsPrivilege(f"--netns {name}: entering a network namespace needs root")
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    # Keep our mounts from propagating back to the host's mount namespace.
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(libc.setns(fd, CLONE_NEWNET), f"setns({path})")
    finally:
        os.close(fd)
    libc.umount2(b"/sys", MNT_DETACH)  # may fail if /sys is not a mount point; fine
    _check(libc.mount(b"sysfs", b"/sys", b"sysfs", 0, None), "mount sysfs on /sys")
    if mount_tracefs:
        _check(
            libc.mount(b"nodev", b"/sys/kernel/tracing", b"tracefs", 0, None),
            "mount tracefs on /sys/kernel/tracing",
        )
