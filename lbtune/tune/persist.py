"""Make an applied plan survive a reboot, through the transaction so rollback undoes it.

- `/etc/sysctl.d/60-lbtune.conf`: every sysctl target of the plan (also the ones already
  right), so the values hold whatever else changes them at boot.
- `/etc/systemd/system/lbtune-boot.service`: a oneshot re-applying the profile at boot
  (`lbtune apply PROFILE --boot --yes`) for what has no configuration file: rings, channels,
  txqueuelen, RSS (hash fields, indirection table, key), flow rules (the table is empty at
  boot: the profile resolves its locations again), IRQ affinity, RPS/XPS, governors. It is
  pulled in by the drop-in
  `/etc/systemd/system/multi-user.target.d/60-lbtune.conf` (`Wants=`), a regular file,
  rather than a `multi-user.target.wants/` symlink: the journal restores regular files, and
  restoring a symlink through HostFS.remove_file would follow the link.
- Kernel command line: the cmdline knobs already edited `/etc/default/grub`; on a LIVE host
  the bootloader configuration is regenerated (`update-grub`, or `grubby` on RHEL). On a host
  tree nothing is ever run.

Every file is written with `txn.replace_file`/`txn.remove_file`, which journal the original
(or its absence) first; files lbtune owns are removed when the plan no longer needs them.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.bootloader import BootloaderError, bootloader_tool, update_bootloader
from lbtune.tune.engine import Transaction
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.boot import GRUB_DEFAULT
from lbtune.tune.plan import Action, Plan

SYSCTL_CONF = "/etc/sysctl.d/60-lbtune.conf"
BOOT_UNIT = "/etc/systemd/system/lbtune-boot.service"
BOOT_WANTS = "/etc/systemd/system/multi-user.target.d/60-lbtune.conf"
# Kinds the boot service re-applies (sysctl has sysctl.d, irqbalance its own unit state and
# config file, cmdline the bootloader).
BOOT_KINDS = frozenset(
    {
        "ring",
        "channels",
        "txqueuelen",
        "feature",
        "coalesce",
        "pause",
        "irq_affinity",
        "rps_cpus",
        "rps_flow_cnt",
        "xps_cpus",
        "rss_indir",
        "rss_key",
        "rss_hash",
        "ntuple",
        "governor",
    }
)


def _systemd_arg(arg: str) -> str:
    """One ExecStart= argument, quoted for systemd when needed (specifiers and $ escaped)."""
    if "\n" in arg or "\0" in arg:
        raise ValueError(f"{arg!r}: cannot be a systemd argument")
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_./@:+=,-]+", escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lbtune_command() -> list[str]:
    """How the boot service starts lbtune: this `lbtune` script, else `python -m lbtune`."""
    prog = sys.argv[0] if sys.argv else ""
    if os.path.basename(prog) == "lbtune" and os.path.isfile(prog):
        return [os.path.abspath(prog)]
    return [os.path.abspath(sys.executable), "-m", "lbtune"]


def sysctl_conf(plan: Plan) -> bytes:
    lines = [
        f"# Written by lbtune for profile {plan.profile}.",
        "# `lbtune rollback` restores what was here; edit the profile, not this file.",
    ]
    for c in plan.changes:
        if c.knob.kind == "sysctl" and c.action is not Action.MISSING:
            lines.append(f"{c.knob.obj} = {c.desired}")
    return ("\n".join(lines) + "\n").encode()


def boot_argv(
    plan: Plan, iface: Optional[str] = None, profile_ref: Optional[str] = None
) -> list[str]:
    """The boot service's command: the profile as the apply named it (a path made absolute,
    so the unit finds it from any directory) and the same data interface (`--iface`), without
    which a profile with a `[nic."data"]` section does not resolve at boot."""
    ref = profile_ref or plan.profile
    if "/" in ref or ref.endswith(".toml"):
        ref = os.path.abspath(ref)
    argv = [*lbtune_command(), "apply", ref]
    if iface:
        argv += ["--iface", iface]
    return [*argv, "--boot", "--yes"]


def boot_unit(plan: Plan, iface: Optional[str] = None, profile_ref: Optional[str] = None) -> bytes:
    argv = boot_argv(plan, iface, profile_ref)
    text = f"""# Written by lbtune for profile {plan.profile}.
[Unit]
Description=lbtune: re-apply profile {plan.profile.replace("%", "%%")} at boot
After=systemd-udevd.service systemd-modules-load.service irqbalance.service
Wants=network-pre.target
Before=network-pre.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={" ".join(_systemd_arg(a) for a in argv)}
"""
    return text.encode()


BOOT_WANTS_TEXT = b"""# Written by lbtune: start lbtune-boot.service at boot.
[Unit]
Wants=lbtune-boot.service
"""


def check_persist_paths(host: Host, plan: Plan) -> None:
    """BadInput when a directory of a file `persist_plan` may write or remove (or of the grub
    defaults a cmdline change edits) resolves outside the root or is not a directory, or when
    a live host has no tool to regenerate the bootloader configuration for a cmdline change.
    Called while planning, so such a refusal changes nothing (exit 2) instead of failing after
    the knobs were applied and again when rollback removes what it created."""
    paths = [SYSCTL_CONF, BOOT_UNIT, BOOT_WANTS]
    cmdline = [c.knob.obj for c in plan.to_apply if c.knob.kind == "cmdline"]
    if cmdline:
        paths.append(GRUB_DEFAULT)
    for kpath in paths:
        host.fs.check_parents(kpath)
    if cmdline and host.is_live and not bootloader_tool(host):
        raise BadInput(
            f"--persist: the kernel command line ({', '.join(cmdline)}) takes effect through "
            "the bootloader, but neither update-grub nor grubby is installed to regenerate its "
            "configuration; nothing changed"
        )


def persist_plan(
    txn: Transaction, plan: Plan, iface: Optional[str] = None, profile_ref: Optional[str] = None
) -> None:
    """engine.PersistHook (with `iface` and `profile_ref` bound by the caller): write the
    boot-time files for `plan` (see module doc)."""
    present = [c for c in plan.changes if c.action is not Action.MISSING]
    kinds = {c.knob.kind for c in present}
    if "sysctl" in kinds:
        txn.replace_file(SYSCTL_CONF, sysctl_conf(plan))
    elif txn.host.fs.exists(SYSCTL_CONF):
        txn.remove_file(SYSCTL_CONF)
    if kinds & BOOT_KINDS:
        txn.replace_file(BOOT_UNIT, boot_unit(plan, iface, profile_ref))
        txn.replace_file(BOOT_WANTS, BOOT_WANTS_TEXT)
    else:
        for path in (BOOT_WANTS, BOOT_UNIT):
            if txn.host.fs.exists(path):
                txn.remove_file(path)
    cmdline = {c.knob.obj: c.desired.strip() for c in plan.to_apply if c.knob.kind == "cmdline"}
    try:
        update_bootloader(txn.host, cmdline)  # live hosts only
    except BootloaderError as e:
        raise KnobError(str(e)) from None  # rolls everything back
