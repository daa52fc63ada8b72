"""The agent's per-interval cost at 100,000 established connections (issue 18).

A throwaway network namespace (lo up); tests/conns_helper.py makes COUNT established
connections over loopback to the served port and holds both ends (forked workers, each
within its own RLIMIT_NOFILE; nothing is raised beyond the hard limit), so the namespace
holds 2 x COUNT established TCP sockets: COUNT on the served port, COUNT client ends on
ephemeral ports that must not be counted. `ss -Htn state established '( sport = :PORT )'`
gives the truth. Then, inside the namespace, in one process, each way of counting runs
ROUNDS times after two warm-up calls; its CPU time (user + system of the process:
time.process_time; getrusage splits it, so the kernel's work for the dump or the /proc
text shows) and
wall time per call are taken, and the count is checked against the truth:

- the agent before this change: /proc/net/tcp{,6} read whole through HostFS and split per
  line (as committed it refuses past HostFS's 4 MiB read cap, which 100,000 connections
  exceed: that error is recorded; it is timed with the cap lifted);
- the /proc fallback now: the same files streamed in 1 MiB chunks, matched by one regex;
- sock_diag without filters: every established TCP socket dumped and decoded, the port
  compared in Python;
- sock_diag now: state mask + port filter program, answers counted, not decoded;
- one whole agent sample (`Sampler.sample()`: CPU, memory, listeners, link stats and the
  connections through sock_diag), called back to back: the count is spaced out by time
  (`agent.COUNT_BUDGET`), so most of these calls reuse the last count;
- the agent as it runs: a sample every default interval (1 s) for WINDOW seconds; CPU over
  the window / its wall time: the agent's real share of one core.

% of one core = CPU seconds per call / the agent's default interval (1 s) x 100 (the
last case: CPU over the window / the window).
Run: `.venv/bin/python bench/agent_scale.py` (root; `make bench`); writes
bench/results/agent_scale.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from resource import RUSAGE_SELF, getrusage
from typing import Any, Callable

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/ipvs",
    "lbtune/host",
    "tests/conns_helper.py",
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "agent_scale.json"
HELPER = ROOT / "tests" / "conns_helper.py"
PORT = 18080


@dataclass
class Result:
    case: str
    count: int
    correct: bool
    cpu_ms_median: float
    cpu_ms_p90: float
    user_ms_median: float  # of which in the process itself
    system_ms_median: float  # of which in the kernel (the dump, the /proc text)
    wall_ms_median: float
    core_percent_at_1s: float  # CPU per call / 1 s interval


def _old_established(fs: Any, port: int, limit: int) -> int:
    """lbtune/ipvs/nodeagent.py `established` before this change, with HostFS's cap as given."""
    want = f":{port:04X}"
    n = 0
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        text = fs.read(path, limit=limit)
        for line in ([] if text is None else text.splitlines())[1:]:
            f = line.split(None, 4)
            if len(f) >= 4 and f[3] == "01" and f[1].endswith(want):
                n += 1
    return n


def measure(rounds: int, truth: int, window: float) -> dict[str, Any]:
    """Inside the namespace: every way of counting, timed (JSON on stdout)."""
    sys.path.insert(0, str(ROOT))
    from lbtune.errors import MalformedHostFile
    from lbtune.host.fs import read_limit
    from lbtune.host.host import Host
    from lbtune.host.net import sockdiag
    from lbtune.ipvs import nodeagent as ag

    host = Host.open("/")
    try:
        _old_established(host.fs, PORT, read_limit("/proc/net/tcp"))
        as_committed = "read"
    except MalformedHostFile as e:
        as_committed = f"refused: {e}"
    sampler = ag.Sampler(host, ag.AgentOptions(port=PORT, egress="lo"))

    def unfiltered() -> int:
        est = sockdiag._diag_dump(socket.IPPROTO_TCP, 1 << sockdiag.TCP_ESTABLISHED,
                                  with_mem=False)  # fmt: skip
        return sum(1 for e in est if e.port == PORT)

    cases: list[tuple[str, Callable[[], int]]] = [
        ("before: /proc/net/tcp{,6} read whole, split per line (cap lifted)",
         lambda: _old_established(host.fs, PORT, 1 << 30)),
        ("fallback now: /proc/net/tcp{,6} streamed, one regex",
         lambda: sockdiag.count_established_proc(sockdiag.PROC_TCP, PORT)),
        ("sock_diag, no filter: every established socket decoded",
         unfiltered),
        ("sock_diag now: state mask + port filter, counted",
         lambda: sockdiag.count_established(PORT)),
        ("whole agent sample (Sampler.sample, sock_diag)",
         lambda: sampler.sample().connections),
    ]  # fmt: skip
    out = []
    for name, fn in cases:
        for _ in range(2):
            fn()
        cpu, user, system, wall, counts = [], [], [], [], set()
        for _ in range(rounds):
            r0, c0, w0 = getrusage(RUSAGE_SELF), time.process_time(), time.perf_counter()
            counts.add(fn())
            c1, r1 = time.process_time(), getrusage(RUSAGE_SELF)
            wall.append(time.perf_counter() - w0)
            cpu.append(c1 - c0)
            user.append(r1.ru_utime - r0.ru_utime)
            system.append(r1.ru_stime - r0.ru_stime)
        cpu.sort()
        got = counts.pop() if len(counts) == 1 else -1  # -1: the calls disagreed
        out.append(Result(
            case=name, count=got, correct=got == truth,
            cpu_ms_median=round(statistics.median(cpu) * 1000, 2),
            cpu_ms_p90=round(cpu[int(0.9 * (len(cpu) - 1))] * 1000, 2),
            user_ms_median=round(statistics.median(user) * 1000, 2),
            system_ms_median=round(statistics.median(system) * 1000, 2),
            wall_ms_median=round(statistics.median(wall) * 1000, 2),
            core_percent_at_1s=round(statistics.median(cpu) / ag.DEFAULT_INTERVAL * 100, 2),
        ).__dict__)  # fmt: skip
    out.append(running(ag, host, truth, window))
    return {"as_committed": as_committed, "results": out}


def running(ag: Any, host: Any, truth: int, window: float) -> dict[str, Any]:
    """The agent as it runs: one sample every default interval for `window` seconds (the
    count spaced out by COUNT_BUDGET); CPU over the window / the window's wall time."""
    sampler = ag.Sampler(host, ag.AgentOptions(port=PORT, egress="lo"))
    sampler.sample()
    cpu, wall, counts = [], [], set()
    r0, c0, w0 = getrusage(RUSAGE_SELF), time.process_time(), time.monotonic()
    while time.monotonic() - w0 < window:
        time.sleep(ag.DEFAULT_INTERVAL)
        s0, t0 = time.process_time(), time.perf_counter()
        counts.add(sampler.sample().connections)
        cpu.append(time.process_time() - s0)
        wall.append(time.perf_counter() - t0)
    spent, r1 = time.process_time() - c0, getrusage(RUSAGE_SELF)
    elapsed, n = time.monotonic() - w0, len(cpu)
    got = counts.pop() if len(counts) == 1 else -1
    return Result(
        case=f"the agent running: a sample every {ag.DEFAULT_INTERVAL:g} s for {window:g} s "
             f"(count spaced out to {ag.COUNT_BUDGET:.0%} of a core); CPU per sample",
        count=got, correct=got == truth,
        cpu_ms_median=round(spent / n * 1000, 2), cpu_ms_p90=round(max(cpu) * 1000, 2),
        user_ms_median=round((r1.ru_utime - r0.ru_utime) / n * 1000, 2),
        system_ms_median=round((r1.ru_stime - r0.ru_stime) / n * 1000, 2),
        wall_ms_median=round(statistics.median(wall) * 1000, 2),
        core_percent_at_1s=round(spent / elapsed * 100, 2),
    ).__dict__  # fmt: skip


def ss_count(ns: str) -> int:
    argv = ["ip", "netns", "exec", ns, "ss", "-Htn", "state", "established",
            f"( sport = :{PORT} )"]  # fmt: skip
    return len(subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000, help="connections to the port")
    ap.add_argument("--rounds", type=int, default=10, help="timed calls per case")
    ap.add_argument("--window", type=float, default=30.0,
                    help="seconds the agent runs at its interval (the last case)")
    ap.add_argument("--measure", type=int, metavar="TRUTH", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.rounds, args.measure, args.window)))
        return 0
    if os.geteuid() != 0:
        print("bench/agent_scale.py: needs root (a network namespace)", file=sys.stderr)
        return 3
    sys.path.insert(0, str(HERE))
    from results_io import run_meta, write_json, write_markdown

    ns = f"lbtune-bench-agent-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    helper = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        t0 = time.monotonic()
        argv = ["ip", "netns", "exec", ns, sys.executable, str(HELPER), str(PORT), str(args.count)]
        helper = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert helper.stdout is not None
        ready = json.loads(helper.stdout.readline() or "{}")
        if not ready.get("ready"):
            print("bench/agent_scale.py: the connections could not be made", file=sys.stderr)
            return 1
        built = round(time.monotonic() - t0, 1)
        truth = ss_count(ns)
        load_before = os.getloadavg()[0]
        got = subprocess.run(["ip", "netns", "exec", ns, sys.executable, __file__,
                              "--rounds", str(args.rounds), "--window", str(args.window),
                              "--measure", str(truth)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        load = (round(load_before, 2), round(os.getloadavg()[0], 2))
    finally:
        if helper is not None:
            if helper.stdin:
                helper.stdin.close()
            try:
                helper.wait(timeout=120)
            except subprocess.TimeoutExpired:
                helper.kill()
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
    doc = json.loads(got.stdout)

    rows = [Result(**r) for r in doc["results"]]
    meta = run_meta(args.rounds, connections=args.count, truth_ss=truth, helper=ready,
                    build_seconds=built, established_sockets_in_namespace=2 * args.count,
                    old_reader_as_committed=doc["as_committed"],
                    loadavg_1min_before_after=load)  # fmt: skip
    write_json(OUT, meta, rows)
    write_markdown(
        OUT,
        ["# The agent at 100,000 established connections: CPU per interval",
         "",
         f"{args.count:,} established connections to port {PORT} over loopback in a throwaway "
         f"namespace ({2 * args.count:,} established sockets: the client ends too), "
         f"`ss` counts {truth:,}; made in {built} s by tests/conns_helper.py. Each case "
         f"{args.rounds} calls after 2 warm-ups in one process inside the namespace; CPU = "
         "user + system of the process per call (the kernel's dump or /proc text included); "
         "% of one core at the agent's default 1 s interval. The agent before this change, "
         f"as committed, on this namespace: {doc['as_committed']}. 1-minute load average "
         f"{load[0]} before, {load[1]} after (2 CPUs shared). `bench/agent_scale.py`."],
        [("case", "l"), ("count", "r"), ("= ss", "l"), ("CPU ms (median)", "r"),
         ("p90", "r"), ("user ms", "r"), ("kernel ms", "r"), ("wall ms", "r"),
         ("% of one core at 1 s", "r")],
        [[r.case, f"{r.count:,}", "yes" if r.correct else "NO", f"{r.cpu_ms_median:.1f}",
          f"{r.cpu_ms_p90:.1f}", f"{r.user_ms_median:.1f}", f"{r.system_ms_median:.1f}",
          f"{r.wall_ms_median:.1f}", f"{r.core_percent_at_1s:.1f}"]
         for r in rows],
    )  # fmt: skip
    print(json.dumps({"written": str(OUT)}))
    return 0 if all(r.correct for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
