"""BIRD's control socket (what `birdc` talks to): show the protocols, enable or disable one.

The protocol is line-based text: BIRD greets with `0001 BIRD 2.0.12 ready.`, and answers
each command with lines `CODE-text` (more follow), ` text` (continues the previous code)
and a last `CODE text`. Codes from 8000 are errors (8xxx run-time, 9xxx parse). Only
commands this module builds are sent: a fixed verb and a protocol name checked to be one
BIRD symbol, so no input can add a command.
"""

from __future__ import annotations

import re
import socket
from typing import Optional

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_LINE = re.compile(r"(\d{4})([ -])(.*)")
MAX_REPLY = 1 << 20  # a `show protocols` of thousands of protocols is well under this


class BirdError(Exception):
    """BIRD could not be reached, or it refused a command (the message says which)."""


class BirdControl:
    """One connection per command to the control socket at `path`."""

    def __init__(self, path: str, timeout: float = 2.0) -> None:
        self.path, self.timeout = path, timeout

    def command(self, text: str) -> list[tuple[int, str]]:
        """Send one command; the reply as (code, text) lines. BirdError on an error code."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                s.connect(self.path)
                reader = _Reader(s)
                reader.reply()  # the greeting
                s.sendall(text.encode() + b"\n")
                lines = reader.reply()
        except OSError as e:
            raise BirdError(f"BIRD control socket {self.path}: {e.strerror or e}") from None
        for code, line in lines:
            if code >= 8000:
                raise BirdError(f"BIRD refused {text!r}: {line.strip()}")
        return lines

    def protocol_states(self) -> dict[str, str]:
        """Every protocol's state (`up`, `down`, `start`, ...) by name."""
        out: dict[str, str] = {}
        for code, line in self.command("show protocols"):
            words = line.split()
            if code == 1002 and len(words) >= 4:
                out[words[0]] = words[3]
        return out

    def set_enabled(self, name: str, enabled: bool) -> None:
        if not _SYMBOL.fullmatch(name):
            raise BirdError(f"{name!r} is not a BIRD protocol name")
        self.command(("enable " if enabled else "disable ") + name)


class _Reader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf, self.read = sock, b"", 0

    def _line(self) -> str:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("BIRD closed the connection")
            self.read += len(chunk)
            if self.read > MAX_REPLY:
                raise OSError("reply too long")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line.decode(errors="replace")

    def reply(self) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        code: Optional[int] = None
        while True:
            line = self._line()
            m = _LINE.fullmatch(line)
            if m is None:  # ` text`: continues the previous code
                if code is None:
                    raise OSError(f"not a BIRD reply: {line[:80]!r}")
                out.append((code, line[1:]))
                continue
            code = int(m.group(1))
            out.append((code, m.group(3)))
            if m.group(2) == " ":
                return out
