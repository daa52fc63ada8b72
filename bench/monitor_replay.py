"""CPU cost of `lbtune monitor --replay` of a 48-CPU, 2-NIC host with probe counts.

Issue 33 asks the monitor with probes to stay within 1 % of a core (0.6 CPU s per minute) "on
the 48-CPU replay too": the panels of a big host (48 CPU rows, 96 queues, their IRQs) drawn
every second. This script makes that replay and measures it.

The recording is built here, from the fixture tree tests/data/hosts/dell-r750-mlx5-ixgbe
(48 CPUs; mlx5 with 48 channels and ixgbe): lbtune's own sample of the tree, then one tick a
second in which every counter a panel shows moves by a random amount around a busy LB
host's rates (a seeded generator: the same file on every run) -- each CPU's softnet
processed, drops and squeezes, its NET_RX softirqs and the interrupts of the NIC queue IRQs
that fire on it, every queue's packets and bytes, UDP no-port and listen overflows, each
listener's queue, conntrack's count -- with the probes' counts of that second: drop
reasons, closed ports, and each rx queue's packets and NAPI polls. The same is done with a
sample of this 2-CPU host: its replay, in the same minute, is the baseline (the same program
on a small host).

Both replays play at 1 s in tmux terminals of 160x50 at once; each program's CPU time
(user + system) is read from /proc before and after the measured minute, after a warm-up
that leaves out start-up. That is one round; `--rounds` (3) rounds, each with both replays
started afresh, and the result is the median round's CPU s per minute of each (every
round's kept beside it: one round's figure has moved by a tenth of the goal between runs of
the same code), and the 48-CPU replay's as a ratio of the small host's. Each thread's CPU
over the same minute (/proc/PID/task) splits it
between the `lbtune-feed` thread (reading the recording, rules, the panels' lines) and the
main thread (Textual); and the feed's parts are timed in this process over the 48-CPU
recording (thread time per tick, the fastest of three rounds, with the collector set as
the monitor sets it): reading a tick (the recording's reader: the JSON line parsed, its
change applied to the tick before), of that the JSON alone, and the frame (rules and the
panels' lines). The recording's size per tick is reported beside each case.

The rounds are the monitor's first minute and a quarter; it keeps ten minutes of samples
(the `w` report's). Last, the 48-CPU replay runs alone for `--long-minutes` (10) minutes
after the same warm-up, its CPU s and resident memory read at each minute's end, while
that history fills.

Run: `.venv/bin/python bench/monitor_replay.py` (tmux; `make bench`); writes
bench/results/monitor_replay.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from monitor import cpu_of, pane_pid, quit_sessions, tmux, used_between  # noqa: E402
from results_io import run_meta, write_json, write_markdown  # noqa: E402
from watch_profile import threads_of  # noqa: E402

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tui",
    "lbtune/observe",
    "lbtune/diagnose",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

OUT = HERE / "results" / "monitor_replay.json"
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
GOAL = 0.6  # CPU s per minute: 1 % of a core (issue 33)
SNMP_RATES = {  # per second, on a busy LB host
    "Ip.InReceives": 400_000,
    "Tcp.InSegs": 300_000,
    "Tcp.OutSegs": 280_000,
    "Udp.InDatagrams": 90_000,
    "Udp.NoPorts": 5_000,
    "TcpExt.ListenOverflows": 40,
    "TcpExt.ListenDrops": 40,
}


@dataclass
class Result:
    case: str
    cpus: int
    queues: int
    cpu_seconds: float  # over the measured window
    window_seconds: float
    cpu_per_minute: float
    ratio_to_small_host: float
    kb_per_tick: float  # the recording's size / its ticks
    kb_per_tick_whole: float  # the same ticks written whole (format /1) / its ticks
    rounds_cpu_per_minute: list[float]  # each round's; cpu_per_minute is their median


def _jitter(rng: random.Random, rate: float) -> int:
    return int(rate * (0.6 + 0.8 * rng.random()))


def make_recording(
    root: Optional[Path], path: Path, ticks: int, seed: int
) -> tuple[int, int, int]:
    """Write a recording of `ticks` seconds of the host at `root` (None: this host) busy;
    (CPUs, NIC queues, the bytes its ticks would take written whole) of it."""
    from lbtune.diagnose.rules import sample_spec
    from lbtune.host.host import Host
    from lbtune.observe.model import ConntrackStats, SnmpCounters, Softirqs
    from lbtune.observe.probes import DropCount, NapiCount, PortCount, ProbeSample, QueueCount
    from lbtune.observe.recording import RecordingHeader, RecordingWriter, encode
    from lbtune.observe.sampler import Sampler
    from lbtune.tui.feed import describe_host, monitor_rules

    rng = random.Random(seed)  # noqa: S311 (a load's shape, not a secret)
    host = Host.open(str(root) if root is not None else "/")
    described = describe_host(host, None, "bench")
    s = Sampler(host, None, sample_spec(monitor_rules())).take()
    s = dataclasses.replace(s, monotonic=1000.0, wallclock=1_767_225_600.0)
    ncpu = max(1, len(s.softnet))
    # which CPU each NIC queue IRQ fires on: where it fired most in the sample, else spread
    irq_cpu: dict[int, int] = {}
    for nic in described.nics.values():
        for n, qi in enumerate(nic.irqs):
            line = s.interrupts.get(qi.irq)
            if line is not None and any(line.counts.values()):
                irq_cpu[qi.irq] = max(line.counts, key=lambda c: line.counts[c])
            else:
                irq_cpu[qi.irq] = [c.cpu for c in s.softnet][n % ncpu] if s.softnet else 0
    rx_queues = [(d, q.queue) for d, nc in s.nics.items() for q in nc.queues
                 if q.direction == "rx"]  # fmt: skip
    header = RecordingHeader(described.hostname, described.kernel, described.netns, 1.0,
                             described.topology, dict(described.nics))  # fmt: skip
    with open(path, "w", encoding="utf-8") as out:
        w = RecordingWriter(out, header)
        w.write(s, None)
        whole = len(json.dumps({"sample": encode(s), "probes": None}, separators=(",", ":"))) + 1
        for _ in range(ticks):
            per_cpu = {c.cpu: _jitter(rng, 20_000) for c in s.softnet}
            softnet = tuple(dataclasses.replace(
                c, processed=c.processed + per_cpu[c.cpu],
                dropped=c.dropped + (_jitter(rng, 30) if c.cpu % 11 == 3 else 0),
                time_squeeze=c.time_squeeze + (_jitter(rng, 8) if c.cpu % 5 == 0 else 0),
                received_rps=c.received_rps + _jitter(rng, 500),
            ) for c in s.softnet)  # fmt: skip
            softirqs = s.softirqs
            if softirqs is not None:
                counts = {k: dict(v) for k, v in softirqs.counts.items()}
                rx = counts.setdefault("NET_RX", {})
                for cpu, n in per_cpu.items():
                    rx[cpu] = rx.get(cpu, 0) + n // 40
                softirqs = Softirqs(softirqs.cpus, counts)
            interrupts = dict(s.interrupts)
            for irq, cpu in irq_cpu.items():
                line = interrupts.get(irq)
                if line is not None:
                    c = dict(line.counts)
                    c[cpu] = c.get(cpu, 0) + _jitter(rng, 600)
                    interrupts[irq] = dataclasses.replace(line, counts=c)
            nics = {}
            rx_now: dict[tuple[str, int], int] = {}
            for name, nc in s.nics.items():
                queues = []
                for q in nc.queues:
                    more = _jitter(rng, 18_000)
                    if q.direction == "rx":
                        rx_now[(name, q.queue)] = more
                    queues.append(dataclasses.replace(
                        q, packets=None if q.packets is None else q.packets + more,
                        bytes=None if q.bytes is None else q.bytes + more * 700,
                        drops=None if q.drops is None else q.drops + (rng.random() < 0.05),
                    ))  # fmt: skip
                total = sum(rx_now.get((name, q.queue), 0) for q in nc.queues)
                stats = dict(nc.stats)
                moved = {
                    "rx_packets": total,
                    "tx_packets": total,
                    "rx_bytes": total * 700,
                    "tx_bytes": total * 700,
                }
                for key, more in moved.items():
                    if key in stats:
                        stats[key] += more
                nics[name] = dataclasses.replace(nc, queues=tuple(queues), stats=stats)
            snmp = dict(s.snmp.values)
            for key, rate in SNMP_RATES.items():
                if key in snmp:
                    snmp[key] += _jitter(rng, rate)
            listen = tuple(dataclasses.replace(
                ls, queue=rng.randrange(0, max(1, ls.backlog or 1) + 1),
                drops=(ls.drops or 0) + _jitter(rng, 5),
            ) for ls in s.listen)  # fmt: skip
            ct: Optional[ConntrackStats] = s.conntrack
            if ct is not None:
                ct = dataclasses.replace(ct, count=max(0, ct.count + rng.randrange(-500, 600)))
            s = dataclasses.replace(
                s, monotonic=s.monotonic + 1.0, wallclock=s.wallclock + 1.0,
                uptime=None if s.uptime is None else s.uptime + 1.0,
                snmp=SnmpCounters(snmp), softnet=softnet, softirqs=softirqs,
                interrupts=interrupts, nics=nics, listen=listen, conntrack=ct,
            )  # fmt: skip
            probes = ProbeSample(
                probes=("drops", "queues", "napi"),
                seconds=1.0,
                drops=tuple(
                    sorted(
                        (
                            DropCount(
                                "NO_SOCKET",
                                2,
                                "__udp4_lib_rcv+0x5b4",
                                "__udp4_lib_rcv",
                                "IPv4",
                                _jitter(rng, 5_000),
                            ),
                            DropCount(
                                "TCP_LISTEN_OVERFLOW",
                                38,
                                "tcp_v4_syn_recv_sock+0x3ad",
                                "tcp_v4_syn_recv_sock",
                                "IPv4",
                                _jitter(rng, 40),
                            ),
                            DropCount(
                                "SOCKET_BACKLOG",
                                9,
                                "tcp_add_backlog+0x2a8",
                                "tcp_add_backlog",
                                "IPv4",
                                _jitter(rng, 12),
                            ),
                            DropCount(
                                "NETFILTER_DROP",
                                5,
                                "nf_hook_slow+0x98",
                                "nf_hook_slow",
                                "IPv4",
                                _jitter(rng, 30),
                            ),
                        ),
                        key=lambda d: -d.count,
                    )
                ),
                drops_lost=0,
                drops_scope="host",
                queues=tuple(
                    QueueCount(d, "rx", q, n, n * 700, None, "probe")
                    for (d, q), n in rx_now.items()
                ),
                napi=tuple(
                    NapiCount(
                        d,
                        i,
                        f"0xffff8881{i:08x}",
                        q,
                        irq_cpu.get(i, i % ncpu) % ncpu,
                        polls := max(1, n // 40),
                        n,
                        polls // 50,
                        0,
                        64,
                    )
                    for i, ((d, q), n) in enumerate(rx_now.items())
                ),
                napi_lost=0,
                costs=(),
                ports=(
                    PortCount("udp", 4, "10.0.0.10", 53, _jitter(rng, 3_000)),
                    PortCount("udp", 4, "10.0.0.10", 123, _jitter(rng, 2_000)),
                ),
            )
            w.write(s, probes)
            whole += len(json.dumps({"sample": encode(s), "probes": encode(probes)},
                                    separators=(",", ":"))) + 1  # fmt: skip
    return ncpu, len(rx_queues), whole


def feed_parts(path: Path, rounds: int = 3, skip: int = 15, n: int = 40) -> dict[str, float]:
    """CPU ms per tick of the replay's feed, by part, over ticks `skip`..`skip+n`: reading a
    tick (the recording's reader: its JSON line parsed, what changed applied to the tick
    before), of that the JSON alone (the same lines parsed again), and the frame; with the
    collector as the monitor runs it (`few_collections`)."""
    from lbtune.observe.recording import read_recording
    from lbtune.observe.window import Window
    from lbtune.tui.app import few_collections
    from lbtune.tui.feed import PROBES_RECORDED, ReplayFeed, Tick
    from lbtune.tui.frame import FrameBuilder

    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    with open(path, encoding="utf-8") as f:
        host = ReplayFeed(f, str(path), interval=0.001).host
    read, json_part, frame = ("read (a tick's line: JSON, then its change applied)",
                              "of which JSON (json.loads of the line)",
                              "frame (rules and the panels' lines)")  # fmt: skip
    best: dict[str, float] = {}
    for _ in range(rounds):
        spent = dict.fromkeys((read, json_part, frame), 0.0)
        builder = FrameBuilder(host)
        previous = None
        with open(path, encoding="utf-8") as f, few_collections():
            ticks = read_recording(f, str(path))[1]
            for i in range(skip + n):
                t = time.thread_time()
                tick = next(ticks)
                t1 = time.thread_time()
                if previous is not None:
                    window = Window(previous, tick.sample)
                    builder.frame(Tick(window, tick.probes, PROBES_RECORDED, "", 1.0))
                t2 = time.thread_time()
                previous = tick.sample
                if i >= skip:
                    spent[read] += t1 - t
                    spent[frame] += t2 - t1
            for i in range(skip, skip + n):
                t = time.thread_time()
                json.loads(lines[i])
                spent[json_part] += time.thread_time() - t
        for part, used in spent.items():
            best[part] = min(best.get(part, float("inf")), used / n * 1000)
    return {part: round(ms, 2) for part, ms in best.items()}


def one_round(cases: dict[str, str], warmup: float, seconds: float
              ) -> Optional[tuple[dict[str, float], dict[str, dict[str, float]], float]]:
    """Both replays started at once in tmux, `warmup` s left out, then `seconds` measured:
    each case's CPU s and its threads' CPU ms per tick over the measured window, and the
    window's length (None, with a message, when a replay exited during it)."""
    try:
        for i, cmd in enumerate(cases.values()):
            tmux("new-session", "-d", "-s", f"r{i}", "-x", "160", "-y", "50", cmd)
        pids = {case: pane_pid(f"r{i}") for i, case in enumerate(cases)}
        time.sleep(warmup)
        before = {case: cpu_of(pid) for case, pid in pids.items()}
        threads0 = {case: threads_of(pid) for case, pid in pids.items()}
        t0 = time.monotonic()
        time.sleep(seconds)
        window = time.monotonic() - t0
        threads1 = {case: threads_of(pid) for case, pid in pids.items()}
        after = {case: cpu_of(pid) for case, pid in pids.items()}
    finally:
        quit_sessions(*(f"r{i}" for i in range(len(cases))))
    gone = [case for case in cases if pids[case] not in after[case]]
    if gone:
        print(f"bench/monitor_replay.py: {', '.join(gone)} exited during the window; "
              "nothing written", file=sys.stderr)  # fmt: skip
        return None
    used = {case: used_between(before[case], after[case]) for case in cases}
    threads: dict[str, dict[str, float]] = {}
    for case in cases:
        split = {"lbtune-feed": 0.0, "main": 0.0, "other": 0.0}
        for tid, (name, cpu) in threads1[case].items():
            part = (
                "main" if tid == pids[case] else "lbtune-feed" if name == "lbtune-feed" else "other"
            )
            split[part] += cpu - threads0[case].get(tid, (name, 0.0))[1]
        threads[case] = {k: v / window * 1000 for k, v in split.items()}
    return used, threads, window


def long_run(cmd: str, warmup: float, minutes: int
             ) -> Optional[tuple[list[float], list[float]]]:
    """The 48-CPU replay alone for `minutes` after `warmup`, as its kept history (ten
    minutes of samples) fills: its CPU s in each minute and its resident memory (MB) at
    each minute's end (None, with a message, when it exited)."""
    try:
        tmux("new-session", "-d", "-s", "long", "-x", "160", "-y", "50", cmd)
        pid = pane_pid("long")
        time.sleep(warmup)
        before, t0 = cpu_of(pid), time.monotonic()
        cpu: list[float] = []
        rss: list[float] = []
        for minute in range(minutes):
            time.sleep(60)
            after, t1 = cpu_of(pid), time.monotonic()
            if pid not in after:
                print("bench/monitor_replay.py: the long replay exited; nothing written",
                      file=sys.stderr)  # fmt: skip
                return None
            cpu.append(round(used_between(before, after) * 60 / (t1 - t0), 3))
            rss.append(round(psutil.Process(pid).memory_info().rss / 1e6, 1))
            before, t0 = after, t1
            print(f"long run, minute {minute + 1} of {minutes}: {cpu[-1]:.2f} CPU s, "
                  f"{rss[-1]:.0f} MB", file=sys.stderr)  # fmt: skip
    finally:
        quit_sessions("long")
    return cpu, rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--rounds", type=int, default=3,
                    help="replays started afresh and measured; the median is the result")
    ap.add_argument("--long-minutes", type=int, default=10,
                    help="then the 48-CPU replay alone for this long, minute by minute")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("bench/monitor_replay.py needs tmux (make setup installs it)", file=sys.stderr)
        return 3
    lbtune = str(ROOT / ".venv" / "bin" / "lbtune")
    # the replay must outlast the window (and the long run's minutes), and feed_parts reads
    # its first 55 ticks
    ticks = max(int(args.warmup + max(args.seconds, 60 * args.long_minutes)) + 30, 60)
    with tempfile.TemporaryDirectory(prefix="lbtune-replay-bench-") as tmp:
        shapes = {}
        cases = {}
        sizes = {}
        for case, root in (("48-CPU host (fixture), probes", FIXTURE),
                           ("this host (2 CPUs), probes", None)):  # fmt: skip
            rec = Path(tmp) / (("big" if root else "small") + ".rec")
            t = time.monotonic()
            shapes[case] = make_recording(root, rec, ticks, args.seed)
            sizes[case] = (rec.stat().st_size / ticks / 1000, shapes[case][2] / ticks / 1000)
            print(f"{case}: {ticks} ticks, {rec.stat().st_size / 1e6:.1f} MB "
                  f"in {time.monotonic() - t:.1f} s", file=sys.stderr)  # fmt: skip
            cases[case] = f"{lbtune} monitor --replay {rec} --interval 1"
        rounds = []
        for n in range(args.rounds):
            print(f"round {n + 1} of {args.rounds}: {args.warmup:.0f} s of warm-up, then "
                  f"{args.seconds:.0f} s measured", file=sys.stderr)  # fmt: skip
            measured = one_round(cases, args.warmup, args.seconds)
            if measured is None:
                return 1
            rounds.append(measured)
        long = ([], []) if args.long_minutes <= 0 else long_run(
            cases["48-CPU host (fixture), probes"], args.warmup, args.long_minutes)
        if long is None:
            return 1
        parts = feed_parts(Path(tmp) / "big.rec")
    # Per case, the median round's CPU (and each thread's median), the rounds beside it.
    window = statistics.median(w for _, _, w in rounds)
    per_minute = {case: [u[case] * 60 / w for u, _, w in rounds] for case in cases}
    used = {case: statistics.median(u[case] for u, _, _ in rounds) for case in cases}
    threads = {
        case: {part: round(statistics.median(t[case][part] for _, t, _ in rounds), 2)
               for part in ("lbtune-feed", "main", "other")}
        for case in cases
    }  # fmt: skip
    minute = {case: statistics.median(m) for case, m in per_minute.items()}
    base = minute["this host (2 CPUs), probes"] or float("nan")
    results = [
        Result(case, shapes[case][0], shapes[case][1], round(used[case], 3), round(window, 1),
               round(m, 3), round(m / base, 3), round(sizes[case][0], 1),
               round(sizes[case][1], 1), [round(r, 3) for r in per_minute[case]])
        for case, m in minute.items()
    ]  # fmt: skip
    write_json(OUT, run_meta(args.rounds, seconds=args.seconds, warmup=args.warmup,
                             seed=args.seed,
                             goal_cpu_per_minute=GOAL, threads_ms_per_tick=threads,
                             long_minutes=args.long_minutes,
                             long_cpu_per_minute=long[0], long_rss_mb=long[1],
                             feed_parts_ms_per_tick=parts), results)  # fmt: skip
    write_markdown(
        OUT,
        ["# lbtune monitor: a 48-CPU host's replay with probe counts",
         "",
         f"{args.rounds} rounds; in each, both replays start afresh at a 1 s refresh in tmux "
         f"terminals of 160x50 at once, and {window:.0f} s are measured after "
         f"{args.warmup:.0f} s of warm-up. CPU s per minute is the median round's, each "
         "round's beside it; CPU s and the threads' split are medians too. Each recording is "
         "a sample of its host and then one tick a second with every counter a panel shows "
         "moving, and the probes' counts of that second (drop reasons, closed ports, each rx "
         "queue's packets "
         f"and NAPI polls); seed {args.seed}. Goal (issue 33): at most {GOAL} CPU s per "
         "minute (1 % of a core) on the 48-CPU replay. `bench/monitor_replay.py`."],
        [("case", "l"), ("CPUs", "r"), ("rx queues", "r"), ("CPU s", "r"),
         ("CPU s per minute", "r"), ("each round", "l"), ("ratio to the small host", "r"),
         ("recording KB per tick", "r"), ("KB per tick written whole (format /1)", "r")],
        [[r.case, str(r.cpus), str(r.queues), f"{r.cpu_seconds:.2f}",
          f"{r.cpu_per_minute:.2f}", ", ".join(f"{m:.2f}" for m in r.rounds_cpu_per_minute),
          f"{r.ratio_to_small_host:.2f}", f"{r.kb_per_tick:.1f}", f"{r.kb_per_tick_whole:.1f}"]
         for r in results],
    )  # fmt: skip
    with open(OUT.with_suffix(".md"), "a", encoding="utf-8") as md:
        md.write(
            "\nCPU ms per tick, by thread (the median of the rounds):\n\n| case | lbtune-feed "
            "| main (Textual) | other |\n|---|---:|---:|---:|\n"
        )
        for case, split in threads.items():
            md.write(
                f"| {case} | {split['lbtune-feed']:.2f} | {split['main']:.2f} | "
                f"{split['other']:.2f} |\n"
            )
        if long[0]:
            md.write(
                f"\nThe 48-CPU replay alone for {args.long_minutes} minutes after "
                f"{args.warmup:.0f} s, as the ten minutes of samples it keeps fill: CPU s "
                "in each minute and resident memory at its end:\n\n| minute | CPU s | RSS MB |"
                "\n|---:|---:|---:|\n"
            )
            for n, (cpu_s, mb) in enumerate(zip(*long), 1):
                md.write(f"| {n} | {cpu_s:.2f} | {mb:.0f} |\n")
        md.write(
            "\nThe 48-CPU replay's feed, by part, CPU ms per tick (in this process, the "
            "fastest of 3 rounds of 40 ticks):\n\n| part | CPU ms |\n|---|---:|\n"
        )
        for part, ms in parts.items():
            md.write(f"| {part} | {ms:.2f} |\n")
    print(json.dumps({"written": str(OUT)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
