"""Host-side traffic into the VM guest's NICs: run in the guest's host network namespace
(``ip netns exec NS python -m tests.vm.host_traffic DST PORT FLOWS [RATE]``).

UDP datagrams to DST:PORT from FLOWS sockets, each bound to its own source port, round robin,
until SIGTERM; then prints a JSON line {"sent": N, "errors": M}. Distinct source ports are
distinct flows: the multi-queue tap hashes them over its queues, so the guest's rx queues all
receive. Paced to RATE datagrams/s (default 4000): the emulated NICs took ~9000/s here under
TCG, and an unpaced sender only burns the host CPU the guest needs.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import time
from typing import Any


def main(argv: list[str]) -> int:
    dst, port, flows = argv[0], int(argv[1]), int(argv[2])
    rate = float(argv[3]) if len(argv) > 3 else 4000.0
    stop = False

    def _stop(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    socks = []
    for _ in range(flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", 0))
        s.setblocking(False)
        socks.append(s)
    payload = b"x" * 64
    start = time.monotonic()
    sent = errors = 0
    print("ready", flush=True)
    while not stop:
        for s in socks:
            try:
                s.sendto(payload, (dst, port))
                sent += 1
            except OSError:
                errors += 1
        ahead = (sent + errors) / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    print(json.dumps({"sent": sent, "errors": errors}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
