"""Targets for tests/unit/lab/test_agent_calls.py: run by the VM agent's call paths (a forked
child of its fork server, or a fresh `python -m lbtune.lab.inguest.entry`) on the host."""

from __future__ import annotations

import os
import sys
import time

from lbtune.lab.protocol import ENV_WORKDIR


def echo(*args: object) -> list[object]:
    return list(args)


def noisy(text: str) -> str:
    sys.stdout.write(f"out:{text}\n")
    sys.stderr.write(f"err:{text}\n")
    return text


def where() -> dict[str, object]:
    """What the call's process sees: its work directory, stdin, and whether it is a child
    of the process that asked (the agent) or not."""
    return {"workdir": os.environ.get(ENV_WORKDIR), "stdin": os.readlink("/proc/self/fd/0"),
            "pid": os.getpid(), "ppid": os.getppid()}


def fails() -> None:
    raise KeyError("no such thing")


def dies(code: int) -> None:
    sys.stderr.write("dying\n")
    sys.stderr.flush()
    os._exit(code)


def sleeps(seconds: float) -> None:
    time.sleep(seconds)
