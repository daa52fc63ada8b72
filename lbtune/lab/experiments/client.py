"""The measuring client of the failover and cluster experiments, as a process the orchestrator
starts, watches and stops.

The client itself (`lbtune.lab.inguest.failoverclient`) runs in the client's netns in the
guest: fresh connections every interval plus keep-alive connections, until a stop file
appears; it then writes its JSON record. This module is the orchestrator's side of that
contract, shared by `lab failover` and `lab cluster`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Optional, Sequence

from lbtune.lab.inguest.shell import LabStepFailed, netns_argv


class ClientProcess:
    """One run of the failover client: start() it, check() it is alive, stop() it for its
    record; kill() is for teardown and never raises."""

    def __init__(self, what: str = "client") -> None:
        self.what = what  # how errors name it ("client", "prober")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self, netns: str, *, vip: str, port: int, interval: float, keepalive: int,
              stop: str, out: str, ports_file: str, extra: Sequence[str] = ()) -> None:
        # niced up: on the one-CPU guest the measuring client must not wait behind the
        # orchestrator's own `ip` processes, or fresh connections would be skipped during an
        # outage
        argv = netns_argv(netns, [
            "nice", "-n", "-10", sys.executable, "-m", "lbtune.lab.inguest.failoverclient",
            "--vip", vip, "--port", str(port), "--interval", f"{interval:g}",
            "--keepalive", str(keepalive), *extra,
            "--stop", stop, "--out", out, "--ports", ports_file])  # fmt: skip
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """LabStepFailed with the client's last stderr line when it has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            err = (self.proc.stderr.read() if self.proc.stderr else b"").decode(
                errors="replace").strip().splitlines()
            raise LabStepFailed(f"the {self.what} exited: {(err or ['no output'])[-1]}")

    def stop(self, stop: str, out: str) -> dict[str, Any]:
        """Ask the client to stop (the stop file), wait for it and return its JSON record."""
        with open(stop, "w", encoding="ascii") as fh:
            fh.write("stop\n")
        assert self.proc is not None
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            raise LabStepFailed(f"the {self.what} did not stop") from None
        self.proc = None
        try:
            with open(out, encoding="utf-8") as fh:
                doc: dict[str, Any] = json.load(fh)
                return doc
        except (OSError, ValueError) as e:
            detail = err.decode(errors="replace").strip().splitlines()
            raise LabStepFailed(f"no {self.what} result: {(detail or [str(e)])[-1]}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
