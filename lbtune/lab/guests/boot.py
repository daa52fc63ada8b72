"""Booting a lab guest of either backend: ``boot_guest("uml")`` or ``boot_guest("vm")``.

The one place that picks the backend's class (lbtune.lab.guests.uml.UmlGuest,
lbtune.lab.guests.vm.VmGuest), so the interface (lbtune.lab.guests.api) needs neither.
"""

from __future__ import annotations

from typing import Optional, Sequence

from lbtune.lab.guests.api import BACKENDS, Guest
from lbtune.lab.guests.uml import UmlGuest
from lbtune.lab.guests.vm import BOOT_TIMEOUT, VmGuest


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
        return VmGuest.boot(cmdline_extra, timeout or BOOT_TIMEOUT)
    raise ValueError(f"lab backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
