"""Resource limits of the running lbtune process (what a shell started from here inherits)."""

from __future__ import annotations

import resource


def nofile_limit() -> tuple[int, int]:
    """RLIMIT_NOFILE as (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard
