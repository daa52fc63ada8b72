"""Regenerating the bootloader configuration after the configured command line changed."""

from __future__ import annotations

from typing import Optional

from lbtune.host.host import Host


class BootloaderError(Exception):
    """The bootloader tool is missing or failed (the caller rolls back)."""


def bootloader_tool(host: Host) -> Optional[str]:
    """The tool that regenerates the bootloader configuration here: update-grub (Debian,
    Ubuntu), else grubby (RHEL family), else None."""
    for tool in ("update-grub", "grubby"):
        if host.runner.which(tool):
            return tool
    return None


def update_bootloader(host: Host, params: dict[str, str]) -> None:
    """Regenerate the bootloader configuration on a LIVE host after /etc/default/grub changed.

    Debian/Ubuntu: `update-grub`. RHEL family: `grubby --update-kernel=ALL --args=k=v` (and
    `--remove-args=k` for parameters set to ""). Never runs anything on a host tree.
    """
    if not host.is_live or not params:
        return
    tool = bootloader_tool(host)
    if tool == "update-grub":
        argvs = [["update-grub"]]
    elif tool == "grubby":
        add = " ".join(f"{k}={v}" for k, v in params.items() if v)
        remove = " ".join(k for k, v in params.items() if not v)
        argvs = []
        if add:
            argvs.append(["grubby", "--update-kernel=ALL", f"--args={add}"])
        if remove:
            argvs.append(["grubby", "--update-kernel=ALL", f"--remove-args={remove}"])
    else:
        raise BootloaderError("kernel command line: neither update-grub nor grubby is installed")
    for argv in argvs:
        res = host.runner.run(argv, timeout=300)
        if not res.ok:
            detail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            raise BootloaderError(f"{' '.join(argv)} failed ({res.returncode}): {detail[0]}")
