"""A text file the user named (a profile, a director config): read whole, bounded, and only
when it is a regular file.

Opened non-blocking and checked with fstat on the descriptor it reads from, so a FIFO
(which would block forever), a device (`/dev/zero` never ends) or a file swapped between a
check and the open is refused with one line instead of hanging or reading garbage.
"""

from __future__ import annotations

import io
import os
import stat
from typing import IO

from lbtune.errors import BadInput


def read_user_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of `path`; BadInput (one line) when it cannot be read, is not a
    regular file, is larger than `limit` bytes or is not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{path}: cannot read {what}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a directory
        os.close(fd)
        raise BadInput(f"{path}: cannot read {what}: not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise BadInput(f"{path}: cannot read {what}: {e.strerror or e}") from None
    if len(raw) > limit:
        raise BadInput(f"{path}: {what} larger than {limit} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{path}: {what} is not UTF-8 text") from None


def open_user_text(path: str, what: str) -> IO[str]:
    """A user's file to read line by line (a recording), opened like `read_user_text`; BadInput
    unless a regular file. Bytes that are not UTF-8 come through as surrogates (the reader
    checks each line, so an error names the right line, not the read-ahead block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{what} {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BadInput(f"{what} {path}: not a regular file")
    return io.TextIOWrapper(os.fdopen(fd, "rb"), encoding="utf-8", errors="surrogateescape")
