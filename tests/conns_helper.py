"""Many established TCP connections on loopback, held open until stdin closes.

`python conns_helper.py PORT COUNT [OTHER_PORT OTHER_COUNT] [--v6 N]` (run it inside a
throwaway network namespace whose lo is up): listens on 127.0.0.1:PORT (and [::1]:PORT for
the N IPv6 ones of COUNT) and on 127.0.0.1:OTHER_PORT, makes COUNT connections to PORT and
OTHER_COUNT to OTHER_PORT, accepts them all, prints one JSON line with `"ready": true`,
then waits for stdin to close.

Bounded: a process holds at most its RLIMIT_NOFILE of descriptors (raised to its hard
limit, never beyond: that would need CAP_SYS_RESOURCE), so the connections are made by
forked workers, one after the other, each holding both ends of at most half its limit.
An IPv4 listener takes every loopback address (0.0.0.0) and the clients connect to
127.0.0.1, 127.0.0.2 ... in turn, PER_DEST each: the kernel picks a client's port per
destination, and a range far from full keeps that pick quick (binding source ports is
slower by far).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys

PER_DEST = 10_000  # of the default ip_local_port_range (32768-60999)
BATCH = 512  # below the namespace's somaxconn (4096): the accept queue never overflows


def listener(family: int, port: int) -> socket.socket:
    lst = socket.socket(family, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("::1" if family == socket.AF_INET6 else "0.0.0.0", port))
    lst.listen(4096)
    lst.settimeout(20)
    return lst


def connect(lst: socket.socket, first: int, count: int) -> list[socket.socket]:
    """`count` connections to `lst` and their accepted ends; client i (from `first`)
    connects to loopback address 127.0.x.y number i // PER_DEST (IPv4)."""
    family = lst.family
    port = lst.getsockname()[1]
    held: list[socket.socket] = []
    for start in range(first, first + count, BATCH):
        batch = min(BATCH, first + count - start)
        for i in range(start, start + batch):
            c = socket.socket(family, socket.SOCK_STREAM)
            d = i // PER_DEST
            dest = f"127.0.{d // 250}.{1 + d % 250}" if family == socket.AF_INET else "::1"
            c.setblocking(False)
            c.connect_ex((dest, port))
            held.append(c)
        held.extend(lst.accept()[0] for _ in range(batch))
    return held


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("count", type=int)
    ap.add_argument("other_port", type=int, nargs="?", default=0)
    ap.add_argument("other_count", type=int, nargs="?", default=0)
    ap.add_argument("--v6", type=int, default=0, help="of COUNT, how many over IPv6")
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per_worker = max(1, (hard - 64) // 2)
    lst4 = listener(socket.AF_INET, a.port)
    jobs: list[tuple[socket.socket, int, int]] = []  # (listener, first index, count)
    for lst, total, offset in ((lst4, a.count - a.v6, 0),
                               (listener(socket.AF_INET6, a.port) if a.v6 else None, a.v6, 0),
                               (listener(socket.AF_INET, a.other_port) if a.other_count
                                else None, a.other_count, a.count)):  # fmt: skip
        if lst is None:
            continue
        for first in range(0, total, per_worker):
            jobs.append((lst, offset + first, min(per_worker, total - first)))
    hold_r, hold_w = os.pipe()
    workers = []
    for lst, first, count in jobs:
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # worker: make its connections, say so, hold them until told
            os.close(hold_w)
            os.close(ready_r)
            try:
                held = connect(lst, first, count)
                os.write(ready_w, b"ok")
            except BaseException as e:
                os.write(ready_w, f"worker: {e}".encode())
                os._exit(1)
            os.read(hold_r, 1)
            del held
            os._exit(0)
        os.close(ready_w)
        said = os.read(ready_r, 200).decode()
        os.close(ready_r)
        workers.append(pid)
        if said != "ok":
            print(said or "worker died", file=sys.stderr)
            os.close(hold_w)
            for p in workers:
                os.waitpid(p, 0)
            return 1
    print(json.dumps({"ready": True, "port": a.port, "count": a.count, "v6": a.v6,
                      "other_port": a.other_port, "other_count": a.other_count,
                      "workers": len(workers)}), flush=True)  # fmt: skip
    sys.stdin.read()
    os.close(hold_w)
    for p in workers:
        os.waitpid(p, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
