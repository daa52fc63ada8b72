"""Run the real lbtune command line with a pause point: the fault hook lives here, in the
tests, never in the shipped CLI (issue 20 item 19).

    python tests/lbtune_paused.py POINT FIFO LBTUNE-ARGS...

POINT is where `lbtune apply` stops: `N` just before change N of the plan (N = the number of
changes: before the --persist files are written, N + 1: after them), `committed` once the
apply is committed (the journal says applied), `write:K` just before the K-th atomic file
replace (journal saves and persistence files: the temp file is written, not yet renamed).
At the pause the process writes POINT to the FIFO (the test reads it, then sends a signal)
and waits for the signal, 60 s at most. A run that never reaches the point writes `end`.

The engine's own test seam (`apply_plan(fault=...)`, `persist=`) is used through a wrapper of
`lbtune.tune.service.apply_plan`; then the real `lbtune.cli.main.main` runs.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from typing import Any, Optional


def main() -> None:
    point, fifo, *args = sys.argv[1:]
    paused = False

    def pause() -> None:
        nonlocal paused
        from lbtune.host.signals import late_signals

        paused = True
        seen = len(late_signals())
        with open(fifo, "w") as f:  # the test reads this, then sends its signal
            f.write(f"{point}\n")
        for _ in range(600):  # a signal raises out of sleep; a held one is seen here
            if len(late_signals()) > seen:
                return
            time.sleep(0.1)

    import lbtune.tune.service as service

    real_apply = service.apply_plan

    def apply_plan(host: Any, plan: Any, state: Any, fault: Any = None,
                   persist: Optional[Any] = None) -> Any:  # fmt: skip
        n = len(plan.to_apply)
        if point.isdigit():
            index = int(point)

            def fault(i: int, knob: Any) -> None:
                if i == index:
                    pause()

            if persist is not None:
                real_persist = persist

                def persist(txn: Any, p: Any) -> None:
                    if index == n:
                        pause()
                    real_persist(txn, p)
                    if index == n + 1:
                        pause()

        journal = real_apply(host, plan, state, fault=fault, persist=persist)
        if point == "committed":
            pause()
        return journal

    service.apply_plan = apply_plan  # type: ignore[assignment]

    if point.startswith("write:"):
        from lbtune.host.fs import TMP_INFIX

        target, count, real_replace = int(point[len("write:"):]), [0], os.replace

        def replace(src: Any, dst: Any, **kw: Any) -> None:
            if TMP_INFIX in str(src):
                if count[0] == target:
                    pause()
                count[0] += 1
            real_replace(src, dst, **kw)

        os.replace = replace  # type: ignore[assignment]

    def end() -> None:
        if not paused:  # never reached the point: say so, the test is waiting on the FIFO
            with open(fifo, "w") as f:
                f.write("end\n")

    atexit.register(end)
    from lbtune.cli.main import main as lbtune_main

    lbtune_main(args)

if __name__ == "__main__":
    main()
