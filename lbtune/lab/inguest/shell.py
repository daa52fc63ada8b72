"""Running programs for the lab: argument lists only, optionally inside a named namespace.

Every lab piece (topology, DR configuration, web servers, load) runs `ip`, `ipvsadm`,
`nginx`, `haproxy` or `wrk`; this module is the one door they go through. A failed command
raises `LabStepFailed` with the program's first error line, so a scenario step can say what
broke in one line. Never a shell and never a string command line. A command for a namespace
is built by lbtune.host.net.netns.netns_argv (`ip netns exec`), the one namespace door of the
tree, re-exported here for the lab's callers.

lbtune itself goes through the same door: `lbtune_argv(NS, ARGS)` is `lbtune --netns NS ARGS`
run by this interpreter (the guest's lbtune is the host's, over the read-only root), and
`Shell.lbtune` / `Shell.check_lbtune` / `Shell.spawn_lbtune` run it with the lab's state
directory (`LBTUNE_STATE_DIR`: journals on the guest's tmpfs, never the host's). Every
in-guest run - the scenario, failover, the adaptive experiment, tests running inside a
guest - uses these, whichever backend booted the guest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

from lbtune.errors import ExitCode, LbtuneError
from lbtune.host.net.netns import netns_argv as netns_argv
from lbtune.host.runner import CommandResult, CommandRunner

RUN_DIR = "/run/lbtune-lab"  # a tmpfs inside the guest
STATE_DIR = f"{RUN_DIR}/state"  # journals of the lab's lbtune runs (LBTUNE_STATE_DIR)
LBTUNE_TIMEOUT = 120.0


class LabStepFailed(LbtuneError):
    """A lab step failed (a command exited non-zero, a server did not start)."""

    exit_code = ExitCode.INTERNAL


def lbtune_argv(netns: Optional[str], *args: str) -> list[str]:
    """`lbtune [--netns NETNS] ARGS` run by this interpreter (the lab's own lbtune)."""
    return [sys.executable, "-m", "lbtune", *(["--netns", netns] if netns else []), *args]


def lbtune_env() -> dict[str, str]:
    """The environment of an lbtune run in the lab: its journals in the lab's state dir."""
    os.makedirs(STATE_DIR, exist_ok=True)
    return dict(os.environ, LBTUNE_STATE_DIR=STATE_DIR)


def _one_line(netns: Optional[str], args: Sequence[str], detail: str) -> str:
    where = f" in {netns}" if netns else ""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    return f"lbtune {' '.join(args)}{where}: {lines[-1] if lines else 'no output'}"


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

    def lbtune(
        self, netns: Optional[str], *args: str, timeout: float = LBTUNE_TIMEOUT
    ) -> CommandResult:
        """`lbtune [--netns NETNS] ARGS` to its end: the result, whatever the exit status
        (124 and a one-line stderr when it timed out)."""
        argv = lbtune_argv(netns, *args)
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=lbtune_env(),
                stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            said = f"lbtune {' '.join(args)} timed out after {timeout:g} s"
            return CommandResult(tuple(argv), 124, "", said)
        return CommandResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def check_lbtune(
        self, netns: Optional[str], *args: str, timeout: float = LBTUNE_TIMEOUT
    ) -> str:
        """`lbtune [--netns NETNS] ARGS`: its stdout, or LabStepFailed with its one-line error."""
        res = self.lbtune(netns, *args, timeout=timeout)
        if not res.ok:
            raise LabStepFailed(
                _one_line(netns, args, res.stderr or res.stdout or f"exit {res.returncode}")
            )
        return res.stdout

    def spawn_lbtune(
        self, netns: Optional[str], *args: str, stdout: Optional[int] = subprocess.PIPE
    ) -> subprocess.Popen[str]:
        """Start `lbtune [--netns NETNS] ARGS` in the background; the caller waits for it."""
        return subprocess.Popen(
            lbtune_argv(netns, *args), stdin=subprocess.DEVNULL, stdout=stdout,
            stderr=subprocess.PIPE, text=True, env=lbtune_env(),
        )  # fmt: skip

    def sysctl(self, netns: Optional[str], key: str, value: object) -> None:
        """Write one sysctl inside netns (per-namespace keys only in a lab namespace)."""
        self.check(["sysctl", "-q", "-w", f"{key}={value}"], netns)

    def read_sysctl(self, netns: Optional[str], key: str) -> str:
        return self.check(["sysctl", "-n", key], netns).strip()
