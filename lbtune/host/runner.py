"""The few things without a kernel API (systemctl, bootloader tools) run as argument lists.

Never a shell, never a string: every call is `argv` as a list. Tests inject a runner that
records calls instead of running them.
"""

from __future__ import annotations

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
