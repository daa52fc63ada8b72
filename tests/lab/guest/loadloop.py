"""Continuous client load for the DR tests: new connection per request, until told to stop.

`python loadloop.py ADDR PORT THREADS STOPFILE OUTFILE`: each thread connects, sends an
HTTP/1.0 GET, reads the reply (`server ADDRESS`) and records who answered and when, until
STOPFILE exists; then the totals, failures and a timeline go to OUTFILE as JSON. Every
PROGRESS requests the count so far goes to OUTFILE.count (the controller waits on it).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

ADDR, PORT, THREADS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
STOP, OUT = sys.argv[4], sys.argv[5]
FAMILY = socket.AF_INET6 if ":" in ADDR else socket.AF_INET
PROGRESS = 25
lock = threading.Lock()
# (start time, server or "error: ...", client port, seconds it took)
events: list[tuple[float, str, int, float]] = []
start = time.monotonic()
# The controller times its steps on this clock (CLOCK_MONOTONIC is the guest kernel's, shared
# by every process): this process can start seconds after it was spawned on a loaded guest.
with open(OUT + ".start.tmp", "w") as f:  # renamed whole: the controller polls for the name
    f.write(repr(start))
os.replace(OUT + ".start.tmp", OUT + ".start")


def one() -> tuple[str, int]:
    s = socket.socket(FAMILY, socket.SOCK_STREAM)
    s.settimeout(3)
    port = 0
    stage = "connect"
    try:
        s.connect((ADDR, PORT))
        port = s.getsockname()[1]
        stage = "reply"
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        text = data.decode("latin-1")
        if "server " not in text:
            return f"error: bad reply {text[:60]!r}", port
        return text.rsplit("server ", 1)[1].strip(), port
    except OSError as e:
        return f"error: {stage}: {type(e).__name__} {e}", port
    finally:
        s.close()


def worker() -> None:
    while not os.path.exists(STOP):
        t = time.monotonic() - start
        who, port = one()
        with lock:
            events.append((t, who, port, time.monotonic() - start - t))
            if len(events) % PROGRESS == 0:
                with open(OUT + ".count.tmp", "w") as f:
                    f.write(str(len(events)))
                os.replace(OUT + ".count.tmp", OUT + ".count")


threads = [threading.Thread(target=worker) for _ in range(THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
errors = [e for e in events if e[1].startswith("error")]
with open(OUT + ".tmp", "w") as f:
    json.dump({"total": len(events), "errors": errors, "events": events}, f)
os.replace(OUT + ".tmp", OUT)
