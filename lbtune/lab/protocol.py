"""The lab's one host-to-guest request protocol: work directory, requests, answers, errors.

Both backends (lbtune.lab.guests.uml, lbtune.lab.guests.vm) share a *work directory* with their
guest at the same path (hostfs for UML, virtio-9p for the VM), and the guest agent
(lbtune.lab.inguest.agent) serves requests through it, whether the guest was booted for one
call or is kept up by `lbtune lab up` (either backend):

* the host writes a request as ``req/<id>.json`` (atomically: readers never see half a file);
* the agent claims it (removes it), runs it, and writes the answer as ``res/<id>.json``;
* a call's own directory is ``calls/<id>/``: its target finds it in ``$LBTUNE_LAB_WORKDIR``
  and writes its progress there (lbtune.lab.progress), which the host reads while it runs;
* the agent writes ``ready.json`` (what the guest is) when it starts, and ``reboot`` ("1" or
  "0") when a stop request ends it; ``fork-calls`` present asks it to fork calls.

Requests are JSON objects made by `call_request`, `argv_request` and `stop_request`; the
answers are documented in lbtune.lab.inguest.agent. Everything here is imported by both
sides; the errors are how a failed lab run reaches its caller, on either side.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from lbtune.errors import ExitCode, LbtuneError, NeedsPrivilege
from lbtune.host.atomic import write_json_atomic

ENV_WORKDIR = "LBTUNE_LAB_WORKDIR"  # in the guest: the work directory (a call's: calls/<id>)
IN_LAB_ENV = "LBTUNE_IN_LAB"  # set in the UML guest (its init script)
IN_VM_ENV = "LBTUNE_IN_VM"  # set in the VM guest (its boot script)
VM_CMDLINE_MARK = "lbtune.vm=1"  # on the VM guest kernel's command line

REQUESTS = "req"
ANSWERS = "res"
CALLS = "calls"
READY = "ready.json"
REBOOT = "reboot"
FORK_CALLS = "fork-calls"
AGENT_LOG = "agent.log"


class LabUnavailable(NeedsPrivilege):
    """The lab kernel is missing or cannot run on this host."""


@dataclass(frozen=True)
class LabResult:
    """What one lab run produced."""

    target: str  # "pkg.mod:func" or the guest argv
    value: Any  # the function's JSON-decoded return value (None for pytest runs)
    exit_status: int  # exit status of the guest program (-1: it never finished)
    output: str  # the guest program's stdout and stderr
    console: str  # the UML console: boot log, kernel messages, init script messages
    duration: float  # seconds from starting linux.uml to its exit
    fpu_mode: str
    uml_returncode: Optional[int] = None  # linux.uml exit status (-9: killed by lbtune)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


class LabError(LbtuneError):
    """A lab run failed: the guest function raised, or the guest did not finish.

    ``guest_traceback`` holds the traceback text from inside the guest (empty when the guest
    never got that far); ``result`` the partial LabResult, whose ``console`` and ``output``
    explain boot failures; ``workdir`` the kept work directory (LBTUNE_LAB_KEEP=1) or None.
    """

    exit_code = ExitCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        guest_traceback: str = "",
        exc_type: str = "",
        result: Optional[LabResult] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.guest_traceback = guest_traceback
        self.exc_type = exc_type
        self.result = result
        self.workdir: Optional[str] = None

    def __str__(self) -> str:
        if self.workdir:
            return f"{self.message} (work directory kept: {self.workdir})"
        return self.message


class LabTimeout(LabError):
    """The guest did not power off in time; its whole process group was killed."""

    def __init__(self, message: str, *, pgid: int, result: Optional[LabResult] = None) -> None:
        super().__init__(message, result=result)
        self.pgid = pgid


class Workdir:
    """The paths of one work directory (see the module doc)."""

    def __init__(self, root: Union[str, Path]) -> None:
        self.root = Path(root)

    @property
    def requests(self) -> Path:
        return self.root / REQUESTS

    @property
    def answers(self) -> Path:
        return self.root / ANSWERS

    def request(self, rid: str) -> Path:
        return self.requests / f"{rid}.json"

    def answer(self, rid: str) -> Path:
        return self.answers / f"{rid}.json"

    def calldir(self, rid: str) -> Path:
        return self.root / CALLS / rid

    def make(self) -> None:
        """The request and answer directories (either side may come first)."""
        self.requests.mkdir(exist_ok=True)
        self.answers.mkdir(exist_ok=True)


def new_request_id() -> str:
    """A request id no other client of the same guest picks (sorted after numbered ones)."""
    return f"x{secrets.token_hex(6)}"


def call_request(
    target: str,
    args: Sequence[Any] = (),
    timeout: float = 300,
    netns: Optional[str] = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """Call ``target(*args)`` ("pkg.mod:func") in a guest Python process."""
    return {"kind": "call", "target": target, "args": list(args), "timeout": timeout,
            "netns": netns, "fresh": fresh}  # fmt: skip


def argv_request(argv: Sequence[str], netns: Optional[str] = None,
                 timeout: float = 120) -> dict[str, Any]:  # fmt: skip
    """Run argv in the guest (in network namespace netns there)."""
    return {"kind": "argv", "argv": list(argv), "netns": netns, "timeout": timeout}


def stop_request(reboot: bool = False) -> dict[str, Any]:
    """End the agent: the guest then powers off (or reboots, the VM)."""
    return {"kind": "stop", "reboot": reboot}


def write_json(path: Union[str, Path], doc: Any, *, durable: bool = True) -> None:
    """`doc` as JSON at `path`, atomically; `durable` fsyncs first (a guest about to power
    off, a state file), unneeded for files a live reader polls."""
    write_json_atomic(path, doc, fsync=durable)


def read_json(path: Union[str, Path]) -> Optional[dict[str, Any]]:
    """The JSON object at `path`; None when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
