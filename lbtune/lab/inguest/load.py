"""The lab's load: wrk (Debian) from the client namespace, ab (apache2-utils) as a fallback.

`load_argv` builds the command line, `parse_wrk` / `parse_ab` turn the tool's report into a
`LoadResult`: completed requests, requests per second, latency percentiles in milliseconds
and every kind of error the tool counts. Parsing is strict about the lines it needs (a report
without a request count or rate is an error, not a zero) and tolerant of the lines tools print
only when non-zero (wrk's "Socket errors", "Non-2xx or 3xx responses").
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from typing import Mapping, Optional

from lbtune.lab.inguest.shell import LabStepFailed

TOOLS = ("wrk", "ab")
PERCENTILES = (50, 90, 99)
AB_MAX_RPS = 50000
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


@dataclass(frozen=True)
class LoadResult:
    """What one load run measured, from the load tool's own report."""

    tool: str
    argv: tuple[str, ...]
    seconds: float  # the measured duration the tool reports
    requests: int  # completed requests (responses received)
    rps: float  # requests per second, as the tool computed it
    latency_ms: Mapping[str, float]  # "p50", "p90", "p99" (what the tool reported)
    errors: Mapping[str, int] = field(default_factory=dict)  # connect/read/write/timeout/...

    @property
    def failures(self) -> int:
        """Every request that failed or got a non-2xx/3xx answer."""
        return sum(self.errors.values())


def pick_tool(requested: str = "auto") -> str:
    """wrk when installed (or requested), else ab; LabStepFailed when neither is there."""
    if requested not in ("auto", *TOOLS):
        raise LabStepFailed(f"--tool {requested!r}: one of auto, {', '.join(TOOLS)}")
    wanted = TOOLS if requested == "auto" else (requested,)
    for tool in wanted:
        if shutil.which(tool):
            return tool
    raise LabStepFailed(
        f"no load tool: {' or '.join(wanted)} not installed (make setup installs wrk and ab)"
    )


def load_argv(
    tool: str, url: str, duration: float, threads: int, connections: int, keepalive: bool = True
) -> list[str]:
    """The load command: HTTP/1.1 GETs of url for duration seconds.

    keepalive False: one request per connection, so a balancer schedules every request (with
    keep-alive it schedules connections, and requests follow each connection's speed).
    """
    secs = max(1, round(duration))
    if tool == "wrk":
        close = [] if keepalive else ["-H", "Connection: close"]
        return ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{secs}s",
                *close, "--latency", "--timeout", "5s", url]  # fmt: skip
    if tool == "ab":
        # ab stops at -t seconds or -n requests, whichever comes first, and allocates its
        # statistics for all -n up front (32 bytes each): 50,000 req/s is far above the lab's
        return ["ab", *(["-k"] if keepalive else []), "-q", "-c", str(connections),
                "-t", str(secs), "-n", str(secs * AB_MAX_RPS), "-s", "5", url]  # fmt: skip
    raise LabStepFailed(f"unknown load tool {tool!r}")


def _ms(number: str, unit: str) -> float:
    return float(number) * _UNIT_MS[unit]


_WRK_TOTAL = re.compile(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),")
_WRK_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)")
_WRK_PCT = re.compile(r"^\s+(\d+(?:\.\d+)?)%\s+([\d.]+)(us|ms|s|m|h)\s*$")
_WRK_SOCKET = re.compile(
    r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"
)
_WRK_NON2XX = re.compile(r"Non-2xx or 3xx responses: (\d+)")


def parse_wrk(text: str, argv: tuple[str, ...] = ()) -> LoadResult:
    """wrk's report (with --latency) as a LoadResult; LabStepFailed when it is not one."""
    requests: Optional[int] = None
    seconds = 0.0
    rps: Optional[float] = None
    pct: dict[str, float] = {}
    errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0, "non_2xx_3xx": 0}
    in_distribution = False
    for line in text.splitlines():
        if "Latency Distribution" in line:
            in_distribution = True
            continue
        m = _WRK_PCT.match(line)
        if in_distribution and m:
            p = float(m.group(1))
            if p.is_integer() and int(p) in PERCENTILES:
                pct[f"p{int(p)}"] = _ms(m.group(2), m.group(3))
            continue
        in_distribution = False
        if (m := _WRK_TOTAL.match(line)) is not None:
            requests = int(m.group(1))
            seconds = _ms(m.group(2), m.group(3)) / 1000.0
        elif (m := _WRK_RPS.match(line)) is not None:
            rps = float(m.group(1))
        elif (m := _WRK_SOCKET.search(line)) is not None:
            for key, value in zip(("connect", "read", "write", "timeout"), m.groups()):
                errors[key] = int(value)
        elif (m := _WRK_NON2XX.search(line)) is not None:
            errors["non_2xx_3xx"] = int(m.group(1))
    if requests is None or rps is None:
        raise LabStepFailed(f"wrk printed no result: {_tail(text)}")
    return LoadResult("wrk", argv, seconds, requests, rps, pct, errors)


def _field(text: str, label: str) -> Optional[str]:
    m = re.search(rf"^{re.escape(label)}:\s+(\S+)", text, re.MULTILINE)
    return m.group(1) if m else None


def parse_ab(text: str, argv: tuple[str, ...] = ()) -> LoadResult:
    """ab's report as a LoadResult (ab rounds latencies to whole milliseconds)."""
    complete = _field(text, "Complete requests")
    rps = _field(text, "Requests per second")
    seconds = _field(text, "Time taken for tests")
    if complete is None or rps is None:
        raise LabStepFailed(f"ab printed no result: {_tail(text)}")
    pct: dict[str, float] = {}
    for m in re.finditer(r"^\s+(\d+)%\s+(\d+)", text, re.MULTILINE):
        if int(m.group(1)) in PERCENTILES:
            pct[f"p{m.group(1)}"] = float(m.group(2))
    failed = int(_field(text, "Failed requests") or 0)
    non2xx = int(_field(text, "Non-2xx responses") or 0)
    return LoadResult(
        "ab", argv, float(seconds or 0), int(complete), float(rps), pct,
        {"failed": failed, "non_2xx": non2xx},
    )  # fmt: skip


def parse_load(tool: str, text: str, argv: tuple[str, ...] = ()) -> LoadResult:
    return parse_wrk(text, argv) if tool == "wrk" else parse_ab(text, argv)


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
