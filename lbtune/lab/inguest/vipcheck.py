"""The lab's pre-load self-test, run inside the client namespace: who answers on the VIP?

``python -m lbtune.lab.inguest.vipcheck VIP PORT COUNT`` (under ``ip netns exec lab-client``) makes
COUNT
HTTP requests to VIP:PORT, each on a new connection (so the balancer schedules each one),
and prints JSON: how many each real server answered (its name from the X-Lab-Server header)
and the failures with their first error. Stays in the standard library: it is a separate
process in the guest and starts in a fraction of a second.
"""

from __future__ import annotations

import http.client
import json
import sys
from typing import Any, Optional, Sequence

SERVER_HEADER = "X-Lab-Server"


def vip_check(vip: str, port: int, count: int, timeout: float = 2.0) -> dict[str, Any]:
    """COUNT requests to vip:port on fresh connections; answers per server and failures."""
    answers: dict[str, int] = {}
    failures = 0
    errors: list[str] = []
    for _ in range(count):
        conn = http.client.HTTPConnection(vip, port, timeout=timeout)
        try:
            conn.request("GET", "/", headers={"Connection": "close"})
            resp = conn.getresponse()
            resp.read()
            name = resp.getheader(SERVER_HEADER) or "?"
            if resp.status != 200:
                failures += 1
                errors.append(f"HTTP {resp.status} from {name}")
            else:
                answers[name] = answers.get(name, 0) + 1
        except (OSError, http.client.HTTPException) as e:
            failures += 1
            errors.append(f"{type(e).__name__}: {e}")
        finally:
            conn.close()
    return {"requests": count, "answers": answers, "failures": failures, "errors": errors[:3]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or not args[1].isdigit() or not args[2].isdigit():
        sys.stderr.write("usage: python -m lbtune.lab.inguest.vipcheck VIP PORT COUNT\n")
        return 2
    print(json.dumps(vip_check(args[0], int(args[1]), int(args[2]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
