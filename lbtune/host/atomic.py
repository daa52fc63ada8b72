"""Replacing a file in one step: lbtune's one atomic writer.

Every file another process may read while it is written (a state file, a lab request or
result, a report the user named, a file under --root) is written the same way: a temporary
``<path>.lbtune-tmp-<pid>`` beside it (never through a symlink), optionally fsynced, then
renamed over ``path``. A reader sees the old file or the new one, never half of either; a
writer killed half-way leaves only the temporary, whose name says whose it was.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Union

TMP_INFIX = ".lbtune-tmp-"  # <path><TMP_INFIX><pid>: a temporary of a writer, maybe dead

PathLike = Union[str, "os.PathLike[str]"]


def temp_path(path: PathLike) -> str:
    """The temporary this process writes `path` through."""
    return f"{os.fspath(path)}{TMP_INFIX}{os.getpid()}"


def write_temp(
    path: PathLike,
    data: bytes,
    mode: int = 0o644,
    *,
    fsync: bool = True,
    exclusive: bool = False,
    owner: Optional[tuple[int, int]] = None,
    exact_mode: bool = False,
) -> str:
    """Write `data` to the temporary beside `path` (see `temp_path`) and return its name;
    commit it with `commit`. `exclusive` refuses a temporary that already exists (O_EXCL)
    instead of truncating it; `owner` (uid, gid) is set when running as root; `exact_mode`
    sets the mode past the umask (a restored file's mode must not be narrowed). Nothing is
    left behind when it raises."""
    tmp = temp_path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    flags |= os.O_EXCL if exclusive else os.O_TRUNC
    fd = os.open(tmp, flags, mode)
    try:
        if owner is not None and os.geteuid() == 0:
            os.fchown(fd, *owner)
        if exact_mode:
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def commit(tmp: str, path: PathLike) -> None:
    """Rename the temporary `tmp` over `path` (the one step readers see)."""
    os.replace(tmp, path)


def write_atomic(
    path: PathLike,
    data: bytes,
    mode: int = 0o644,
    *,
    fsync: bool = True,
    owner: Optional[tuple[int, int]] = None,
    exact_mode: bool = False,
) -> None:
    """Replace the file at `path` by one holding `data`, in one step (see the module doc).
    `fsync` makes the content durable before the rename (a guest that powers off next, a
    state file); skip it for files only another live process reads. `owner` and
    `exact_mode` as for `write_temp`."""
    tmp = write_temp(path, data, mode, fsync=fsync, owner=owner, exact_mode=exact_mode)
    try:
        commit(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_json_atomic(path: PathLike, doc: Any, mode: int = 0o644, *, fsync: bool = True) -> None:
    """`doc` as JSON at `path`, written with `write_atomic`."""
    write_atomic(path, json.dumps(doc).encode("utf-8"), mode, fsync=fsync)


def fsync_dir(directory: str) -> None:
    """Make a rename or unlink in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
