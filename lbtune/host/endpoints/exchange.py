"""One request/response exchange with a network service, as a client would make it.

TCP: connect, send the request, read until the server closes (or `limit` bytes, or the
timeout). UDP: send one datagram, wait for one. Used by the DR self-test to see which real
server answers a VIP; run it on a `NetnsThread` to act from another namespace.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import select
import socket
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Exchange:
    """What one attempt got: the reply bytes, or the error that stopped it."""

    ok: bool
    reply: bytes
    error: str  # "" when ok
    local: str  # the client's own address:port (which connection this was)
    seconds: float
    errno: int = 0  # why it failed: ECONNREFUSED, ETIMEDOUT, ... (0: ok, or no errno)


def exchange(
    protocol: str, addr: str, port: int, request: bytes, timeout: float = 2.0,
    limit: int = 4096,
) -> Exchange:  # fmt: skip
    """One exchange with `protocol` ("tcp" or "udp") service addr:port."""
    family = socket.AF_INET6 if ipaddress.ip_address(addr).version == 6 else socket.AF_INET
    kind = socket.SOCK_STREAM if protocol == "tcp" else socket.SOCK_DGRAM
    start = time.monotonic()
    local = ""
    sock = socket.socket(family, kind | socket.SOCK_CLOEXEC)
    try:
        if kind == socket.SOCK_STREAM:
            local, pending = _start_connect(sock, addr, port)
            if pending:
                _finish_connect(sock, timeout)
        else:
            sock.connect((addr, port))
            name = sock.getsockname()
            local = f"{name[0]}:{name[1]}"
        sock.settimeout(timeout)
        if request:
            sock.sendall(request)
        chunks: list[bytes] = []
        size = 0
        while size < limit:
            try:
                data = sock.recv(limit - size)
            except socket.timeout:
                if chunks:  # a server that keeps the connection open has answered
                    break
                raise
            if not data:
                break
            chunks.append(data)
            size += len(data)
            if kind == socket.SOCK_DGRAM:
                break
        reply = b"".join(chunks)
        if not reply:
            return Exchange(False, b"", "connection closed without a reply", local,
                            time.monotonic() - start)  # fmt: skip
        return Exchange(True, reply, "", local, time.monotonic() - start)
    except socket.timeout:
        return Exchange(False, b"", f"no reply within {timeout:g} s", local,
                        time.monotonic() - start, errno.ETIMEDOUT)  # fmt: skip
    except OSError as e:
        return Exchange(False, b"", e.strerror or str(e), local, time.monotonic() - start,
                        e.errno or 0)  # fmt: skip
    finally:
        sock.close()


def _start_connect(sock: socket.socket, addr: str, port: int) -> tuple[str, bool]:
    """Send the SYN without waiting: (local address:port, still in progress). The local
    port is known from here on, so a connection that then fails can still be found (in the
    director's IPVS connection table)."""
    sock.setblocking(False)
    err = sock.connect_ex((addr, port))
    if err not in (0, errno.EINPROGRESS):
        raise OSError(err, os.strerror(err))
    name = sock.getsockname()
    return f"{name[0]}:{name[1]}", bool(err)


def _finish_connect(sock: socket.socket, timeout: float) -> None:
    poll = select.poll()
    poll.register(sock, select.POLLOUT)
    if not poll.poll(timeout * 1000):
        raise socket.timeout("timed out")
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))
