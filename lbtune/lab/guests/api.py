"""One interface to a lab guest, whichever kernel runs it: ``Guest``, and what its backends share.

Three guests stand behind it, and every host-side caller goes through it:

* ``UmlGuest`` (lbtune.lab.guests.uml): Debian's User-Mode-Linux kernel, 1 CPU, IPVS built in,
  a boot in 2-3 s. Every ``call``/``run`` boots a fresh kernel (run_in_lab), so nothing one
  call does is seen by the next.
* ``VmGuest`` (lbtune.lab.guests.vm): Debian's own kernel under qemu, 4 CPUs on 2 NUMA nodes,
  a 4-queue virtio NIC and an e1000e; one boot serves every call until ``close`` (tens of
  seconds per boot under TCG), and ``reboot`` restarts the guest keeping what it wrote.
* ``SessionGuest`` (lbtune.lab.guests.session): the guest of either backend that
  ``lbtune lab up`` keeps up, reached from any process through its work directory.

All three speak one request protocol (lbtune.lab.protocol) to one guest agent
(lbtune.lab.inguest.agent): Python targets the same way (``"pkg.mod:func"``, JSON arguments and
value, LabError with the guest traceback), argv the same way, and progress the same way: the
target's lbtune.lab.progress.ProgressWriter writes into ``$LBTUNE_LAB_WORKDIR`` (the call's
directory), and ``watch(directory)`` is called with that directory while the call runs
(ProgressReader.poll fits). `AgentClient` is the host's half of that protocol.
``lbtune.lab.guests.boot.boot_guest`` boots a guest of either backend;
``lbtune.lab.launch.run`` uses the lab that is up, else boots one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from lbtune.host.deadline import wait_until
from lbtune.lab.protocol import Workdir, new_request_id, read_json, write_json

BACKENDS = ("uml", "vm")
WATCH_INTERVAL = 0.25  # seconds between calls of a run's watch callback
ANSWER_POLL = 0.05  # seconds between looks for an answer

# Called with the call's directory while the guest runs (progress files the guest writes).
Watch = Callable[[Path], None]


def completed(argv: Sequence[str], answer: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """The guest agent's answer to an argv request (lab/inguest/agent.py) as a CompletedProcess."""
    return subprocess.CompletedProcess(
        list(argv), int(answer["returncode"]), str(answer["stdout"]), str(answer["stderr"])
    )


def guest_pythonpath() -> list[str]:
    """This interpreter's sys.path as the guest's PYTHONPATH: absolute, existing, no colons
    (the guest sees the host's files at the same paths, so it imports what the caller does)."""
    entries: list[str] = []
    for entry in sys.path:
        if not entry:
            continue
        absolute = os.path.abspath(entry)
        if ":" in absolute or absolute in entries or not os.path.exists(absolute):
            continue
        entries.append(absolute)
    return entries


class AgentClient:
    """The host's half of the request protocol: requests into a guest agent's work directory,
    answers out. `check` is called while an answer is awaited (raise to stop waiting: the
    guest died, wedged)."""

    def __init__(self, workdir: Path) -> None:
        self.dir = Workdir(workdir)

    def send(self, req: Mapping[str, Any], rid: Optional[str] = None) -> str:
        """Write request `req` (under id `rid`, else a new one); its id."""
        rid = rid or new_request_id()
        self.dir.make()
        write_json(self.dir.request(rid), dict(req), durable=False)
        return rid

    def claimed(self, rid: str) -> bool:
        """The agent took request `rid` (its request file is gone)."""
        return not self.dir.request(rid).exists()

    def wait(
        self,
        rid: str,
        timeout: float,
        watch: Optional[Watch] = None,
        check: Optional[Callable[[], None]] = None,
    ) -> Optional[dict[str, Any]]:
        """The answer to `rid` (its files removed), or None after `timeout` seconds; `watch`
        is called with the call's directory every WATCH_INTERVAL and once at the end."""
        path = self.dir.answer(rid)
        calldir = self.dir.calldir(rid)
        last_watch = [0.0]

        def answered() -> bool:
            if path.exists():
                return True
            if check is not None:
                check()
            now = time.monotonic()
            if watch is not None and now - last_watch[0] >= WATCH_INTERVAL:
                watch(calldir)
                last_watch[0] = time.monotonic()
            return False

        if not wait_until(answered, timeout, ANSWER_POLL):
            return None
        if watch is not None:
            watch(calldir)  # the last lines the target wrote
        out = read_json(path) or {}
        path.unlink(missing_ok=True)
        shutil.rmtree(calldir, ignore_errors=True)
        return out


class Guest(ABC):
    """A lab guest: run argv or Python targets in it, learn what it is, close it."""

    backend: str = ""

    @abstractmethod
    def call(
        self,
        target: str,
        args: Sequence[Any] = (),
        timeout: float = 300,
        netns: Optional[str] = None,
        watch: Optional[Watch] = None,
    ) -> Any:
        """``target(*args)`` in a guest Python process (in network namespace netns there):
        its JSON value; LabError carrying the guest traceback when it raised."""

    @abstractmethod
    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run argv in the guest; its exit status and text output (never raises for a non-zero
        exit; returncode -9 when killed at the timeout)."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What runs the guest: backend, kernel, accelerator, CPUs, NUMA nodes, NICs."""

    def close(self) -> None:  # noqa: B027 - a guest with nothing running needs no close
        """Stop the guest and remove what it left on the host (idempotent)."""

    def __enter__(self) -> Guest:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()
