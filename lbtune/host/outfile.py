"""Writing a report or capture to a path the user named (`-o FILE`), safely.

The path is the user's, on the machine lbtune runs on (not below `--root`). Rules: an
existing file is replaced only with `force`; anything that is not a regular file (a device
node such as /dev/null, a FIFO, a socket, a directory, or a symlink, which would be
replaced rather than followed) is refused even with `force`; the data goes to a temporary
file in the same directory (created exclusively, never through a link), is fsynced and then
renamed over the target, so a failed write leaves nothing half-written behind.
"""

from __future__ import annotations

import os
import stat
from typing import IO

from lbtune.errors import BadInput
from lbtune.host.atomic import commit, write_temp


def check_output(path: str, force: bool, option: str = "-o") -> str:
    """The absolute path to write; BadInput when it may not be written (see module doc).

    Call it before long work (a sampling window), then `write_output` afterwards.
    """
    out = os.path.abspath(path)
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise BadInput(f"{option} {path}: {e.strerror or e}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{option} {path}: is a directory")
        if not stat.S_ISREG(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise BadInput(f"{option} {path}: {kind}; refusing to replace it")
        if not force:
            raise BadInput(f"{option} {path}: exists; pass --force to replace it")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise BadInput(f"{option} {path}: directory {parent} does not exist")
    return out


def write_output(path: str, data: bytes, force: bool, option: str = "-o") -> str:
    """Write `data` to `path` (see module doc); returns the absolute path written."""
    out = check_output(path, force, option)
    try:
        tmp = write_temp(out, data, 0o644, exclusive=True)
    except OSError as e:
        raise BadInput(f"{option} {path}: {e.strerror or e}") from None
    try:
        check_output(path, force, option)  # nothing slipped in meanwhile
        commit(tmp, out)
    except BaseException as e:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise BadInput(f"{option} {path}: {e.strerror or e}") from None
        raise
    return out


def open_output(path: str, force: bool, option: str = "-o") -> IO[str]:
    """A text file opened for writing as it goes (a recording), under the same rules as
    `write_output` except atomicity: never through a symlink, a device or a FIFO, an
    existing file only with `force`."""
    out = check_output(path, force, option)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_TRUNC if force else os.O_EXCL
    try:
        fd = os.open(out, flags, 0o644)
    except OSError as e:
        raise BadInput(f"{option} {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # raced into something else
        os.close(fd)
        raise BadInput(f"{option} {path}: not a regular file; refusing to write it")
    return os.fdopen(fd, "w", encoding="utf-8")
