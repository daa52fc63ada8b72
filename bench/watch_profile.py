"""Where the watchers' CPU goes: the monitor's threads, and the stages of a sample, a frame
and an exporter scrape (issue 33; docs/monitor.md and docs/fleet.md quote it).

1. **The monitor's threads.** `lbtune monitor --interval 1 --no-probes` in a 160x50 tmux
   terminal under the load of bench/monitor.py (UDP datagrams to a closed loopback port);
   after a warm-up, each thread's CPU time over the measured window, from
   /proc/PID/task/TID/stat: the main thread (Textual: messages, layout, compositor), the
   `lbtune-feed` thread (sampling, rules, the panels' lines), and Textual's own threads
   (the terminal writer and the input reader).
2. **Stages, in this process.** CPU time per call (thread time; the fastest of a few rounds,
   so that other load on the machine counts least) of each reader one sample runs
   (`Sampler.take`) on this host, of the whole sample, of a frame of the monitor
   (`FrameBuilder.frame`), and of an exporter scrape cut into its stages (sample, rules,
   counter deltas, series, text) on this host and on the 48-CPU fixture
   (tests/data/hosts/dell-r750-mlx5-ixgbe) that bench/exporter.py reads.

A profile says where the time goes, not how fast anything is against a baseline: the
ratios are in bench/monitor.py and bench/exporter.py. Run: `.venv/bin/python
bench/watch_profile.py` (root for the live readers, tmux; `make bench`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",
    "lbtune/tui",
    "lbtune/observe",
    "lbtune/diagnose",
    "lbtune/exporter",
    "lbtune/host",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "watch_profile.json"
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
SOCK = f"lbtune-profile-{os.getpid()}"
PACE = 0.5  # seconds between the paced scrapes (bench/exporter.py's pause between scrapes)
sys.path.insert(0, str(ROOT))


@dataclass
class Row:
    part: str  # "monitor threads" | "sample (live)" | "frame (live)" | "scrape (live)" ...
    what: str
    ms: float  # CPU ms per tick / call
    share: float  # of the part's total (0..1)


# ------------------------------------------------------------------ 1. the monitor's threads


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", "-L", SOCK, *args], capture_output=True, text=True,
                          check=False).stdout  # fmt: skip


def udp_load(stop: threading.Event, rate: int) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    per_tick = max(1, rate // 100)
    while not stop.is_set():
        t = time.monotonic()
        for _ in range(per_tick):
            s.sendto(b"x" * 32, ("127.0.0.1", 9))
        time.sleep(max(0.0, 0.01 - (time.monotonic() - t)))
    s.close()


def threads_of(pid: int) -> dict[int, tuple[str, float]]:
    """TID: (kernel name, CPU seconds) of every thread of `pid`."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended in between
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def monitor_threads(seconds: float, warmup: float, rate: int) -> tuple[list[Row], float]:
    lbtune = str(ROOT / ".venv" / "bin" / "lbtune")
    stop = threading.Event()
    load = threading.Thread(target=udp_load, args=(stop, rate), daemon=True)
    load.start()
    try:
        tmux("new-session", "-d", "-s", "m", "-x", "160", "-y", "50",
             f"{lbtune} monitor --interval 1 --no-probes")  # fmt: skip
        pid = int(tmux("display", "-p", "-t", "m", "#{pane_pid}").strip())
        time.sleep(warmup)
        before = threads_of(pid)
        t0 = time.monotonic()
        time.sleep(seconds)
        window = time.monotonic() - t0
        after = threads_of(pid)
    finally:
        stop.set()
        tmux("send-keys", "-t", "m", "q")
        time.sleep(1)
        tmux("kill-server")
    groups: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        used = cpu - before.get(tid, (name, 0.0))[1]
        if tid == pid:
            what = "main thread (Textual: messages, layout, compositor)"
        elif name == "lbtune-feed":
            what = "lbtune-feed (sampling, rules, panel lines)"
        else:
            what = "Textual's other threads (terminal writer, input reader)"
        groups[what] = groups.get(what, 0.0) + used
    if not any(w.startswith("lbtune-feed") for w in groups):
        raise SystemExit("bench/watch_profile.py: no lbtune-feed thread in the monitor")
    total = sum(groups.values())
    ticks = window  # one tick per second
    rows = [Row("monitor threads", w, round(c / ticks * 1000, 2), round(c / total, 3))
            for w, c in sorted(groups.items(), key=lambda kv: -kv[1])]  # fmt: skip
    rows.append(Row("monitor threads", "total", round(total / ticks * 1000, 2), 1.0))
    return rows, total * 60 / window


# ------------------------------------------------------------------ 2. stages in-process


def per_call(fn: Callable[[], Any], n: int, rounds: int) -> float:
    """CPU ms per call: the fastest of `rounds` rounds of `n` calls."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for _ in range(n):
            fn()
        best = min(best, (time.thread_time() - t) / n)
    return best * 1000


def sample_stages(n: int, rounds: int) -> list[Row]:
    from lbtune.host.host import Host
    from lbtune.host.kernel.interrupts import read_interrupts
    from lbtune.observe.conntrack import read_conntrack
    from lbtune.observe.ipvs_stats import read_ipvs_stats
    from lbtune.observe.nicstats import read_all_nics
    from lbtune.observe.procnet import read_snmp, read_sockstat
    from lbtune.observe.softirqs import read_softirqs
    from lbtune.observe.softnet import read_softnet
    from lbtune.tui.feed import LiveFeed

    host = Host.open("/")
    fs = host.fs
    links = host.link_stats()
    readers: dict[str, Callable[[], Any]] = {
        "SNMP counters (/proc/net/netstat, snmp, snmp6)": lambda: read_snmp(fs),
        "softnet_stat": lambda: read_softnet(fs),
        "softirqs": lambda: read_softirqs(fs),
        "interrupts": lambda: read_interrupts(fs),
        "link counters (one RTM_GETLINK dump)": host.link_stats,
        "NICs: ethtool statistics per queue": lambda: read_all_nics(fs, host.ethtool, None,
                                                                    links),
        "listeners with their SYN queues (walks the connection table)": host.listen_sockets,
        "listeners alone (the walk left out)": lambda: host.listen_sockets(syn_recv=False),
        "UDP sockets": host.udp_sockets,
        "qdiscs": host.qdiscs,
        "sockstat": lambda: read_sockstat(fs),
        "conntrack": lambda: read_conntrack(fs),
        "IPVS counters": lambda: read_ipvs_stats(fs),
    }  # fmt: skip
    rows = []
    for what, fn in readers.items():
        # a source this host lacks (IPVS not loaded) is not in its sample either
        with contextlib.suppress(OSError):
            rows.append(Row("sample (live)", what, round(per_call(fn, n, rounds), 3), 0.0))
    sampler = LiveFeed(host, interval=1.0, want_probes=False).sampler  # the monitor's own
    take = per_call(sampler.take, n, rounds)
    rows.append(Row("sample (live)", "the monitor's whole sample (its limits read every 10 s)",
                    round(take, 3), 1.0))  # fmt: skip
    for r in rows:
        r.share = round(r.ms / take, 3) if r.ms != take else 1.0
    return rows


def frame_stage(n: int, rounds: int) -> list[Row]:
    from lbtune.host.host import Host
    from lbtune.tui.feed import LiveFeed
    from lbtune.tui.frame import FrameBuilder

    feed = LiveFeed(Host.open("/"), interval=0.02, want_probes=False)
    builder = FrameBuilder(feed.host)
    ticks = feed.ticks(threading.Event())
    kept = [next(ticks) for _ in range(3)]
    ms = per_call(lambda: builder.frame(kept[-1]), n, rounds)
    feed.close()
    return [Row("frame (live)", "FrameBuilder.frame: rules and the panels' lines", round(ms, 3),
                1.0)]  # fmt: skip


def scrape_stages(where: str, root: str, n: int, rounds: int, paced: int) -> list[Row]:
    from lbtune.exporter import collect
    from lbtune.host.runtime import Runtime

    ex = collect.Exporter(Runtime(root=root), min_interval=0)
    spent: dict[str, float] = {}

    def timed(owner: Any, name: str, label: str) -> Callable[[], None]:
        real = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return real(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.thread_time() - t

        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, real)

    undo = [
        timed(collect.Sampler, "take", "sample (Sampler.take)"),
        timed(collect.Exporter, "_findings", "rules (findings)"),
        timed(collect.Exporter, "_add", "counter deltas (totals)"),
        timed(collect, "families", "series (families)"),
        timed(collect, "render", "text exposition"),
    ]  # fmt: skip
    try:
        ex.scrape()
        best: dict[str, float] = {}
        best_total = float("inf")
        for _ in range(rounds):
            spent.clear()
            t = time.thread_time()
            for _ in range(n):
                ex.scrape()
            total = (time.thread_time() - t) / n
            if total < best_total:
                best_total, best = total, {k: v / n for k, v in spent.items()}
        # A scraper's come seconds apart, each finding the CPU's caches cold (other work
        # ran between): the same scrape timed one every PACE seconds.
        used = 0.0
        for _ in range(paced):
            time.sleep(PACE)
            t = time.thread_time()
            ex.scrape()
            used += time.thread_time() - t
        paced_ms = used / paced
    finally:
        for u in undo:
            u()
        ex.close()
    part = f"scrape ({where})"
    rows = [Row(part, k, round(v * 1000, 3), round(v / best_total, 3)) for k, v in best.items()]
    other = best_total - sum(best.values())
    rows.append(Row(part, "the rest (windows, IPVS, profile checks, bookkeeping)",
                    round(other * 1000, 3), round(other / best_total, 3)))  # fmt: skip
    rows.append(Row(part, "the whole scrape", round(best_total * 1000, 3), 1.0))
    rows.append(Row(part, f"the whole scrape, one every {PACE:g} s (the mean of {paced}; "
                    "share: of the one above)", round(paced_ms * 1000, 3),
                    round(paced_ms / best_total, 3)))  # fmt: skip
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--rate", type=int, default=5000, help="UDP datagrams per second of load")
    ap.add_argument("--calls", type=int, default=100, help="calls per round, in-process")
    ap.add_argument("--rounds", type=int, default=5, help="rounds in-process (the fastest)")
    ap.add_argument("--paced", type=int, default=40,
                    help=f"scrapes one every {PACE:g} s, in-process (their mean)")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("bench/watch_profile.py needs tmux (make setup installs it)", file=sys.stderr)
        return 3
    rows, per_minute = monitor_threads(args.seconds, args.warmup, args.rate)
    rows += sample_stages(args.calls, args.rounds)
    rows += frame_stage(args.calls, args.rounds)
    rows += scrape_stages("live", "/", args.calls, args.rounds, args.paced)
    rows += scrape_stages("48-CPU fixture", str(FIXTURE), max(10, args.calls // 4), args.rounds,
                          args.paced)  # fmt: skip
    write_json(OUT, run_meta(args.rounds, seconds=args.seconds, warmup=args.warmup,
                             udp_rate=args.rate, calls=args.calls, paced=args.paced, pace=PACE,
                             monitor_cpu_per_minute=round(per_minute, 3)), rows)  # fmt: skip
    write_markdown(
        OUT,
        [
            "# Where the watchers' CPU goes",
            "",
            f"Monitor threads: `lbtune monitor --interval 1 --no-probes` in a 160x50 tmux "
            f"terminal under {args.rate} UDP datagrams/s to a closed loopback port, "
            f"{args.seconds:.0f} s measured after {args.warmup:.0f} s of warm-up, CPU ms per "
            f"1 s tick per thread ({per_minute:.2f} CPU s per minute in all). Stages: CPU ms "
            f"per call in one process (thread time), the fastest of {args.rounds} rounds of "
            f"{args.calls} calls (the fixture: {max(10, args.calls // 4)}); a reader's share is "
            "of the whole sample, a stage's of the whole scrape. The paced scrape is the "
            f"same scrape timed one every {PACE:g} s (the mean of {args.paced}), as a "
            "scraper's come: its share is against the back-to-back one.",
        ],
        [("part", "l"), ("what", "l"), ("CPU ms", "r"), ("share", "r")],
        [[r.part, r.what, f"{r.ms:.2f}", f"{r.share * 100:.0f}%"] for r in rows],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
