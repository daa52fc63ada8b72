"""CPU cost of `lbtune monitor` at a 1 s refresh against netutils-linux `network-top`.

All monitors run at the same time, each in its own tmux terminal (both are full-screen
programs), over the same minute of the same load: a bounded UDP stream to a closed port on
the host's loopback (every datagram is a drop, "UDP no port"), which every monitor sees.
Each program's CPU time (user + system, its
children included) is read from /proc before and after the measured minute, after a
warm-up that leaves out start-up (and the probes' compile). Result: CPU seconds per
minute of each, and lbtune's as a ratio of network-top's (issue 33's goals: without probes
at most 0.36 CPU s per minute, 0.6 % of a core, and no more than network-top; with probes at
most 0.6 CPU s per minute).

network-top is installed with pip in the bench's own venv (bench/.venv-netutils), never in
the project's. Run: `.venv/bin/python bench/monitor.py` (root, tmux; `make bench`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tui",
    "lbtune/observe",
    "lbtune/diagnose",
    "probes",
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NETUTILS_VENV = HERE / ".venv-netutils"
OUT = HERE / "results" / "monitor.json"
SOCK = f"lbtune-bench-{os.getpid()}"


@dataclass
class Result:
    case: str
    cpu_seconds: float  # over the measured window
    window_seconds: float
    cpu_per_minute: float
    ratio_to_network_top: float


def network_top() -> Path:
    exe = NETUTILS_VENV / "bin" / "network-top"
    if not exe.exists():
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(NETUTILS_VENV)], check=True)
        subprocess.run([str(NETUTILS_VENV / "bin" / "pip"), "install", "-q", "netutils-linux"],
                       check=True)  # fmt: skip
    return exe


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCK, *args], capture_output=True, text=True,
                          check=False).stdout  # fmt: skip


def quit_sessions(*names: str, wait: float = 2.0) -> None:
    """Press q in each tmux session (the monitor quits as a user makes it), give them `wait`
    seconds, then end the tmux server with whatever is left."""
    for name in names:
        tmux("send-keys", "-t", name, "q")
    time.sleep(wait)
    tmux("kill-server")


def pane_pid(name: str) -> int:
    return int(tmux("display", "-p", "-t", name, "#{pane_pid}").strip())


def cpu_of(pid: int) -> dict[int, float]:
    """CPU seconds per process of the tree under `pid` (itself and its living descendants):
    its own user + system and its reaped children's. Empty when `pid` is gone."""
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    out: dict[int, float] = {}
    for q in procs:
        try:
            t = q.cpu_times()
            out[q.pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return out


def used_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the tree used between two `cpu_of` readings, per process that is still there (a
    process that ended in between is in its parent's reaped children's time once waited
    for: short-lived helpers are counted, whole, through their parent)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def udp_load(stop: threading.Event, rate: int) -> None:
    """Datagrams to a closed loopback port at about `rate` per second until `stop`."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    period = 0.01
    per_tick = max(1, rate // 100)
    while not stop.is_set():
        t = time.monotonic()
        for _ in range(per_tick):
            s.sendto(b"x" * 32, ("127.0.0.1", 9))
        time.sleep(max(0.0, period - (time.monotonic() - t)))
    s.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--rate", type=int, default=5000, help="UDP datagrams per second of load")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("bench/monitor.py needs tmux (make setup installs it)", file=sys.stderr)
        return 3
    nt = network_top()
    lbtune = str(ROOT / ".venv" / "bin" / "lbtune")
    cases = {
        "lbtune monitor --no-probes": f"{lbtune} monitor --interval 1 --no-probes",
        "network-top": f"{nt} -i 1 -n -1",  # its default stops after 60 renews
    }
    if os.geteuid() == 0:
        cases["lbtune monitor (probes)"] = f"{lbtune} monitor --interval 1"
    stop = threading.Event()
    load = threading.Thread(target=udp_load, args=(stop, args.rate), daemon=True)
    load.start()
    try:
        for i, (_case, cmd) in enumerate(cases.items()):
            tmux("new-session", "-d", "-s", f"m{i}", "-x", "160", "-y", "50", cmd)
        pids = {case: pane_pid(f"m{i}") for i, case in enumerate(cases)}
        time.sleep(args.warmup)
        before = {case: cpu_of(pid) for case, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)
        window = time.monotonic() - t0
        after = {case: cpu_of(pid) for case, pid in pids.items()}
    finally:
        stop.set()
        quit_sessions(*(f"m{i}" for i in range(len(cases))))
    gone = [case for case in cases if pids[case] not in after[case]]
    if gone:
        print(f"bench/monitor.py: {', '.join(gone)} exited during the window; nothing written",
              file=sys.stderr)
        return 1
    used = {case: used_between(before[case], after[case]) for case in cases}
    base = used["network-top"] or float("nan")
    results = [
        Result(case, round(u, 3), round(window, 1), round(u * 60 / window, 3), round(u / base, 3))
        for case, u in used.items()
    ]
    write_json(OUT, run_meta(1, seconds=args.seconds, warmup=args.warmup, udp_rate=args.rate),
               results)  # fmt: skip
    write_markdown(
        OUT,
        [
            "# lbtune monitor vs network-top: CPU over the same minute",
            "",
            f"All at a 1 s refresh in tmux terminals at once, {window:.0f} s measured after "
            f"{args.warmup:.0f} s of warm-up, under {args.rate} UDP datagrams/s to a closed "
            "loopback port. Goals (issue 33): without probes at most 0.36 CPU s per minute (0.6 % "
            "of a core) and no more than network-top; with probes at most 0.6.",
        ],
        [("case", "l"), ("CPU s", "r"), ("CPU s per minute", "r"), ("ratio to network-top", "r")],
        [[r.case, f"{r.cpu_seconds:.2f}", f"{r.cpu_per_minute:.2f}",
          f"{r.ratio_to_network_top:.2f}"] for r in results],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
