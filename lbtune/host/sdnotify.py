"""Readiness for systemd: `READY=1` to `$NOTIFY_SOCKET`, the datagram sd_notify(3) sends.

The units of packaging/systemd/ are `Type=notify`: systemd counts a daemon as started only
once it says so, after it listens (the exporter, the agent, `ipvs serve`) or has its config
and IPVS open (`ipvs adapt`), so `systemctl start` returns when the port answers and a bad
option fails the start instead of a later request. Without `$NOTIFY_SOCKET` (a shell, a
test, a unit of another type) nothing is sent. A socket name starting with `@` is in the
abstract namespace, as systemd writes it.
"""

from __future__ import annotations

import os
import socket
from typing import Mapping, Optional

ENV = "NOTIFY_SOCKET"


def notify(state: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Send `state` (e.g. "READY=1\\nSTATUS=...") to the service manager; True when sent.
    Errors are swallowed: a daemon must not stop because its supervisor went away."""
    env = os.environ if environ is None else environ
    address = env.get(ENV, "")
    if not address or address[0] not in "/@":
        return False
    target = "\0" + address[1:] if address[0] == "@" else address
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(target)
            sock.sendall(state.encode("utf-8", "replace"))
    except OSError:
        return False
    return True


def ready(status: str = "", environ: Optional[Mapping[str, str]] = None) -> bool:
    """The daemon serves: `READY=1`, with `STATUS=` (what `systemctl status` shows) when given."""
    lines = ["READY=1"]
    if status:
        lines.append("STATUS=" + status.replace("\n", " "))
    return notify("\n".join(lines), environ)


def stderr_is_journal(environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when stderr is the journal's stream: `$JOURNAL_STREAM` (DEV:INODE, set by
    systemd for a unit whose output goes to the journal) names the file on fd 2, as
    systemd.exec(5) says to check (a child with its stderr elsewhere inherits the variable)."""
    env = os.environ if environ is None else environ
    dev, _, ino = env.get("JOURNAL_STREAM", "").partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))
