"""The kernel's name of the calling thread (`top -H`, `ps -L`, /proc/PID/task/TID/comm).

Threads of a Python process all carry the program's name; naming the ones lbtune starts lets
an operator (and bench/watch_profile.py) tell their CPU time apart. Best effort: a kernel
that refuses leaves the name as it was.
"""

from __future__ import annotations

COMM_MAX = 15  # TASK_COMM_LEN - 1


def name_this_thread(name: str) -> str:
    """Name the calling thread; returns its name before (to put back on a pool's thread)."""
    try:
        with open("/proc/thread-self/comm", encoding="ascii", errors="replace") as fh:
            old = fh.read().rstrip("\n")
        with open("/proc/thread-self/comm", "w", encoding="ascii", errors="replace") as fh:
            fh.write(name[:COMM_MAX])
    except OSError:
        return ""
    return old
