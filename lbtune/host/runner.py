"""The few things without a kernel API (systemctl, bootloader tools) run as argument lists.

Never a shell, never a string: every call is `argv` as a list. Tests inject a runner that
records calls instead of running them. `pid_alive` says whether a process started runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class CommandRunner:
    """Runs programs with argument lists, with a timeout, capturing output."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout

    def which(self, program: str) -> Optional[str]:
        return shutil.which(program)

    def run(self, argv: Sequence[str], timeout: Optional[float] = None) -> CommandResult:
        if isinstance(argv, str):  # a string would be one program name with spaces
            raise TypeError("argv must be a sequence of arguments, not a string")
        args = tuple(argv)
        try:
            proc = subprocess.run(
                list(args),
                capture_output=True,
                text=True,
                timeout=timeout or self.timeout,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except FileNotFoundError:
            return CommandResult(args, 127, "", f"{args[0]}: not found")
        except subprocess.TimeoutExpired:
            return CommandResult(args, 124, "", f"{args[0]}: timed out")
        return CommandResult(args, proc.returncode, proc.stdout, proc.stderr)


def pid_alive(pid: int) -> bool:
    """True while pid runs. A zombie (killed, not yet reaped by its parent) still answers
    kill(0), so its /proc state decides; a process we may not signal counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] not in ("Z", "X")
