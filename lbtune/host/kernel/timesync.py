"""The kernel clock's synchronisation state, read with adjtimex(2) (never set)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ClockState:
    synced: bool
    detail: str  # "synchronised, estimated error 1234 us", "STA_UNSYNC set"


STA_UNSYNC = 0x0040  # include/uapi/linux/timex.h
TIME_ERROR = 5


class _Timex(ctypes.Structure):
    # struct timex up to `status`; the rest (constant ... tai, padding) is opaque.
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("_rest", ctypes.c_char * 256),
    ]


def read_clock() -> ClockState:
    """Read (never set: modes = 0) the kernel clock discipline state via adjtimex(2)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    tx = _Timex()
    state = libc.adjtimex(ctypes.byref(tx))
    if state < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    if tx.status & STA_UNSYNC or state == TIME_ERROR:
        return ClockState(False, "the kernel clock is not synchronised (STA_UNSYNC)")
    return ClockState(True, f"synchronised, estimated error {tx.esterror} us")
