"""Guest-side checks: small functions run inside a lab guest (a Guest call, e.g. run_in_lab).

Each returns JSON-serialisable data. They also work on any host that has the feature (so
``lbtune doctor`` can call them directly when the host kernel has IPVS), but they load kernel
modules: inside the lab that is harmless, on a real host it is a change to the machine.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Any

from lbtune.errors import NeedsPrivilege
from lbtune.host.ipvs.procfs import PROC_IP_VS
from lbtune.lab.inguest.entry import running_on_uml

_PROC_VERSION_RE = re.compile(r"IP Virtual Server version (\d+)\.(\d+)\.(\d+) \(size=(\d+)\)")


class KernelFeatureMissing(NeedsPrivilege):
    """A kernel module or feature the check needs is not available."""


def kernel_release() -> str:
    """``uname -r`` of the running kernel."""
    return os.uname().release


def kernel_info() -> dict[str, Any]:
    """Release, version string, machine and whether this is User-Mode Linux."""
    uts = os.uname()
    return {
        "release": uts.release,
        "version": uts.version,
        "machine": uts.machine,
        "uml": running_on_uml(),
    }


def load_module(name: str, timeout: float = 60.0) -> None:
    """``modprobe NAME`` (argument list, no shell); KernelFeatureMissing when it fails."""
    try:
        proc = subprocess.run(
            ["modprobe", name],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KernelFeatureMissing(f"modprobe {name}: {exc}") from exc
    if proc.returncode != 0:
        detail = proc.stderr.strip() or f"exit status {proc.returncode}"
        raise KernelFeatureMissing(f"modprobe {name} failed: {detail}")


def ipvs_info_netlink() -> dict[str, Any]:
    """IPVS version and connection table size via generic netlink (IPVS_CMD_GET_INFO)."""
    from lbtune.host.ipvs.table import IpvsSocket, IpvsUnavailable, read_info

    try:
        sock = IpvsSocket()
    except IpvsUnavailable as exc:
        raise KernelFeatureMissing(f"IPVS generic netlink family not available: {exc}") from exc
    try:
        info = read_info(sock)
    finally:
        sock.close()
    return {
        "version": info.version,
        "version_code": info.version_code,
        "conn_tab_size": info.conn_tab_size,
    }


def ipvs_version() -> dict[str, Any]:
    """Load ip_vs, then read its version over netlink.

    Returns e.g. ``{"version": "1.2.1", "version_code": 66049, "conn_tab_size": 4096}``.
    """
    load_module("ip_vs")
    return ipvs_info_netlink()


def ipvs_proc_version(path: str = PROC_IP_VS) -> dict[str, Any]:
    """Version and table size from the header of /proc/net/ip_vs."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
    except OSError as exc:
        raise KernelFeatureMissing(f"{path}: {exc.strerror or exc}") from exc
    match = _PROC_VERSION_RE.search(header)
    if match is None:
        raise KernelFeatureMissing(f"{path}: unexpected header {header.strip()!r}")
    major, minor, patch, size = (int(group) for group in match.groups())
    return {
        "version": f"{major}.{minor}.{patch}",
        "conn_tab_size": size,
        "header": header.strip(),
    }


def ipvs_version_report() -> dict[str, Any]:
    """ipvs_version() and ipvs_proc_version() read in the same kernel, for cross-checking."""
    netlink = ipvs_version()
    return {"netlink": netlink, "proc": ipvs_proc_version(), "kernel": kernel_release()}
