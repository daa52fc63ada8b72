"""The vm tier (tox `vm`): ``pytest -m vm``, then once more for modules whose guest kernel wedged.

Under TCG on a loaded 2-core machine the guest kernel has, rarely, stopped taking interrupts on
one vCPU for good (an RCU stall report on its console, then no answer to any request; seen once
in CI, in test_vm_persist.py, never here in 40 applies and 8 runs of that module under load).
Such a run says nothing about the code under test, so when **every** failed test is in a
module whose guest wedged (tests/vm/conftest.py records it, with the kernel's report and where
each vCPU was), those modules run once more, each on a fresh guest, and the tier's result is
that second run's. The first run's failures and the wedge reports stay in the output above the
banner. A second wedge fails the tier; so does any failure outside a wedged module, and a
wedge beside another failure is not run again.

    python -m tests.vm_tier [pytest args]    # what tox's vm environment runs

SIGTERM and SIGINT go to pytest (tests/sigterm.py tears down its guests) and no second run
starts after them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any, Optional

from tests.vm.conftest import ENV_ONLY, ENV_REPORT

FAILED = 1  # pytest's exit code when tests failed


class Runner:
    def __init__(self) -> None:
        self.child: Optional[subprocess.Popen[bytes]] = None
        self.stopped = False

    def forward(self, signum: int, _frame: Any) -> None:
        self.stopped = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)

    def pytest(self, args: list[str], env: dict[str, str]) -> int:
        # its own process group: a Ctrl-C or a group-wide SIGTERM reaches pytest once, through
        # forward(), not twice (a second one would cut its teardown short)
        self.child = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-m", "vm", *args], env=env, preexec_fn=os.setpgrp
        )
        while True:
            try:
                return self.child.wait()
            except KeyboardInterrupt:  # the handler forwarded it; keep waiting for teardown
                continue


def rerun_modules(report: dict[str, Any]) -> list[str]:
    """The modules to run again: the wedged ones, when every failed test is in one of them."""
    wedged = set(report.get("wedged", {}))
    failed = {nodeid.split("::", 1)[0] for nodeid in report.get("failed", [])}
    if not wedged or not failed <= wedged:
        return []
    return sorted(wedged)


def main(args: list[str]) -> int:
    runner = Runner()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, runner.forward)
    fd, path = tempfile.mkstemp(prefix="lbtune-vm-report.", suffix=".json")
    os.close(fd)
    try:
        env = {**os.environ, ENV_REPORT: path}
        env.pop(ENV_ONLY, None)
        code = runner.pytest(args, env)
        if code != FAILED or runner.stopped:
            return code
        try:
            with open(path, encoding="utf-8") as fh:
                report = json.load(fh)
        except (OSError, ValueError):
            return code
        modules = rerun_modules(report)
        if not modules:
            return code
        print(
            "\nvm tier: the guest kernel wedged in " + ", ".join(modules) + " (reports above) "
            "and every failure was there; running those modules once more, each on a fresh "
            "guest. The tier's result is this second run's.\n",
            flush=True,
        )
        return runner.pytest(args, {**env, ENV_ONLY: ",".join(modules)})
    finally:
        os.unlink(path)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
