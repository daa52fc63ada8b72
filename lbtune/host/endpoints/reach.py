"""Which of many TCP endpoints accept a connection now: all connects started at once, one
shared deadline (a health check of 100 real servers takes one timeout, not 100).

A connection that completes is closed at once (no data sent: the peer sees a connect and a
close, as keepalived's TCP_CHECK does).
"""

from __future__ import annotations

import errno
import os
import select
import socket
import time
from collections.abc import Iterable


def tcp_reachable(endpoints: Iterable[tuple[str, int]],
                  timeout: float) -> dict[tuple[str, int], str]:
    """(address, port) -> "" when it accepted a connection within `timeout` seconds, else
    why not ("connection refused", "timed out", ...)."""
    out: dict[tuple[str, int], str] = {}
    pending: dict[int, tuple[socket.socket, tuple[str, int]]] = {}
    poller = select.poll()
    try:
        for ep in dict.fromkeys(endpoints):
            family = socket.AF_INET6 if ":" in ep[0] else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
            code = s.connect_ex(ep)
            if code == 0:
                out[ep] = ""
                s.close()
            elif code in (errno.EINPROGRESS, errno.EAGAIN):
                pending[s.fileno()] = (s, ep)
                poller.register(s.fileno(), select.POLLOUT)
            else:
                out[ep] = os.strerror(code).lower()
                s.close()
        deadline = time.monotonic() + timeout
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ev in poller.poll(left * 1000):
                s, ep = pending.pop(fd)
                poller.unregister(fd)
                code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                out[ep] = "" if code == 0 else os.strerror(code).lower()
                s.close()
    finally:
        for s, ep in pending.values():
            out[ep] = "timed out"
            s.close()
    return out
