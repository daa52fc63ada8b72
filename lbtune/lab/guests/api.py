"""One interface to a lab guest, whichever kernel runs it: ``Guest``, and ``boot_guest()``.

Two backends sit behind it:

* ``uml`` (UmlGuest, lbtune.lab.guests.uml): Debian's User-Mode-Linux kernel, 1 CPU, IPVS built in,
  a boot in 2-3 s. There is no long-lived UML guest here: every ``call``/``run`` boots a fresh
  kernel (run_in_lab), so nothing one call does is seen by the next.
* ``vm`` (VmGuest, lbtune.lab.guests.vm): Debian's own kernel under qemu, 4 CPUs on 2 NUMA nodes,
  a 4-queue virtio NIC and an e1000e; one boot serves every call until ``close`` (tens of
  seconds per boot under TCG), and ``reboot`` restarts the guest keeping what it wrote.

Both run Python targets the same way (lbtune.lab.inguest.entry: ``"pkg.mod:func"``, JSON arguments
and value, LabError with the guest traceback), argv the same way (lbtune.lab.inguest.agent.run_argv)
and report progress the same way: the target's lbtune.lab.progress.ProgressWriter writes into
``$LBTUNE_LAB_WORKDIR``, and ``watch(directory)`` is called with that directory while the
call runs (ProgressReader.poll fits).
"""

from __future__ import annotations

import subprocess
from abc import ABC, abstractmethod
from typing import Any, Mapping, Optional, Sequence

from lbtune.lab.guests.uml import LabKernel, Watch, find_lab_kernel, run_in_lab

BACKENDS = ("uml", "vm")


def completed(argv: Sequence[str], answer: Mapping[str, Any]) -> subprocess.CompletedProcess[str]:
    """The guest agent's answer to an argv request (lab/inguest/agent.py) as a CompletedProcess."""
    return subprocess.CompletedProcess(
        list(argv), int(answer["returncode"]), str(answer["stdout"]), str(answer["stderr"])
    )


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


class UmlGuest(Guest):
    """The UML backend: each call or run boots the lab kernel afresh (see the module doc)."""

    backend = "uml"

    def __init__(self, kernel: Optional[LabKernel] = None) -> None:
        self.kernel = kernel or find_lab_kernel()

    def call(
        self,
        target: str,
        args: Sequence[Any] = (),
        timeout: float = 300,
        netns: Optional[str] = None,
        watch: Optional[Watch] = None,
    ) -> Any:
        _no_netns(netns)
        return run_in_lab(target, *args, timeout=timeout, kernel=self.kernel, watch=watch).value

    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        _no_netns(netns)
        req = {"argv": list(argv), "netns": None, "timeout": timeout}
        out = run_in_lab(
            "lbtune.lab.inguest.agent:run_argv", req, timeout=timeout + 60, kernel=self.kernel
        ).value
        return completed(argv, out)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "kernel": self.kernel.version,
            "accelerator": "uml",
            "cpus": 1,
            "fpu_mode": self.kernel.fpu_mode,
            "binary": self.kernel.binary,
        }


def _no_netns(netns: Optional[str]) -> None:
    if netns is not None:
        raise ValueError(
            "a UML guest lives for one call, so no namespace survives from one call to the next: "
            "create and use it inside the target"
        )


def boot_guest(
    backend: str = "uml", cmdline_extra: Sequence[str] = (), timeout: Optional[float] = None
) -> Guest:
    """Boot a lab guest of backend "uml" or "vm" (LabUnavailable when it cannot run here);
    use it as a context manager. ``cmdline_extra`` is for the VM's kernel command line."""
    if backend == "uml":
        if cmdline_extra:
            raise ValueError("the UML backend takes no kernel command line")
        return UmlGuest()
    if backend == "vm":
        from lbtune.lab.guests.vm import BOOT_TIMEOUT, VmGuest

        return VmGuest.boot(cmdline_extra, timeout or BOOT_TIMEOUT)
    raise ValueError(f"lab backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
