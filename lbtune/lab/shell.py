"""Running programs for the lab: argument lists only, optionally inside a named namespace.

Every lab piece (topology, DR configuration, web servers, load) runs `ip`, `ipvsadm`,
`nginx`, `haproxy` or `wrk`; this module is the one door they go through. A failed command
raises `LabStepFailed` with the program's first error line, so a scenario step can say what
broke in one line. Never a shell and never a string command line.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from typing import Optional, Sequence

from lbtune.errors import ExitCode, LbtuneError
from lbtune.host.runner import CommandResult, CommandRunner


class LabStepFailed(LbtuneError):
    """A lab step failed (a command exited non-zero, a server did not start)."""

    exit_code = ExitCode.INTERNAL


def netns_argv(netns: Optional[str], argv: Sequence[str]) -> list[str]:
    """argv as run inside network namespace netns (`ip netns exec`), or as is for None."""
    if isinstance(argv, str):  # a string would be one program name with spaces
        raise TypeError("argv must be a sequence of arguments, not a string")
    return ["ip", "netns", "exec", netns, *argv] if netns else list(argv)


class Shell:
    """Runs commands for the lab, in the guest's init namespace or in a lab namespace."""

    def __init__(self, runner: Optional[CommandRunner] = None) -> None:
        self.runner = runner or CommandRunner(timeout=60.0)

    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: Optional[float] = None
    ) -> CommandResult:
        """Run argv (inside netns when given); the result, whatever the exit status."""
        return self.runner.run(netns_argv(netns, argv), timeout=timeout)

    def check(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: Optional[float] = None
    ) -> str:
        """Run argv and return its stdout; LabStepFailed when it exits non-zero."""
        res = self.run(argv, netns, timeout)
        if not res.ok:
            where = f" in {netns}" if netns else ""
            detail = (res.stderr.strip() or res.stdout.strip() or f"exit {res.returncode}")
            raise LabStepFailed(
                f"`{' '.join(argv)}`{where} failed: {detail.splitlines()[-1]}"
            )
        return res.stdout

    def ip_batch(
        self, lines: Sequence[Sequence[str]], netns: Optional[str] = None, force: bool = False
    ) -> None:
        """Several `ip` commands in one process (`ip [-n NS] -batch FILE`).

        Each line is an argument list without the leading `ip`; a word with a space, quote or
        newline is refused (the batch file is split on blanks). force: go on past errors (for
        teardown); otherwise the first failing line raises LabStepFailed.
        """
        for words in lines:
            for w in words:
                if not w or any(ch in w for ch in " \t\n\"'\\#"):
                    raise ValueError(f"ip batch word {w!r}: empty or contains a blank or quote")
        fd, path = tempfile.mkstemp(prefix="lbtune-lab-ip-", suffix=".batch")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(" ".join(words) + "\n" for words in lines))
            argv = ["ip", *(["-n", netns] if netns else []), *(["-force"] if force else []),
                    "-batch", path]  # fmt: skip
            res = self.runner.run(argv)
            if not res.ok and not force:
                detail = res.stderr.strip() or f"exit {res.returncode}"
                where = f" in {netns}" if netns else ""
                raise LabStepFailed(f"ip -batch{where} failed: {detail.splitlines()[-1]}")
        finally:
            os.unlink(path)

    def spawn(
        self,
        argv: Sequence[str],
        netns: Optional[str] = None,
        stdout: Optional[int] = subprocess.PIPE,
    ) -> subprocess.Popen[str]:
        """Start argv in the background (inside netns when given); the caller waits for it."""
        return subprocess.Popen(
            netns_argv(netns, argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )

    def sysctl(self, netns: Optional[str], key: str, value: object) -> None:
        """Write one sysctl inside netns (per-namespace keys only in a lab namespace)."""
        self.check(["sysctl", "-q", "-w", f"{key}={value}"], netns)

    def read_sysctl(self, netns: Optional[str], key: str) -> str:
        return self.check(["sysctl", "-n", key], netns).strip()
