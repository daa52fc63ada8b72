"""A text file the user named (a profile, a director config): read whole, bounded, and only
when it is a regular file.

Opened non-blocking and checked with fstat on the descriptor it reads from, so a FIFO
(which would block forever), a device (`/dev/zero` never ends) or a file swapped between a
check and the open is refused with one line instead of hanging or reading garbage.
"""

from __future__ import annotations

import os
import stat

from lbtune.errors import BadInput


def read_user_text(path: str, limit: int, what: str) -> str:
    """The UTF-8 text of `path`; BadInput (one line) when it cannot be read, is not a
    regular file, is larger than `limit` bytes or is not UTF-8."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise BadInput(f"{path}: cannot read {what}: {e.strerror or e}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path}: cannot read {what}: not a regular file")
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
