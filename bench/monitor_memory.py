"""What the monitor's kept samples cost in memory, a sample a second, and where it goes.

Usage: python bench/monitor_memory.py [--samples N] [--seed N]

`lbtune monitor` keeps its samples for ten minutes (KEEP_SECONDS, for the `w` report of the
last N seconds): at a 1 s refresh, 600 of them. This takes N samples the way each source
gives them and keeps them as the monitor does (a deque, each sample held whole), then
measures what they hold:

- `held`: the bytes the kept samples hold (tracemalloc, after a full collection: what
  was allocated while taking them and is still alive), in all and per sample; 600 samples
  (the default) are the ten minutes the monitor keeps.
- by part: every object reachable from the kept samples (sys.getsizeof, each object
  counted once, for the first part and sample that reaches it: what a sample shares with
  the one before is counted there), per sample, by the Sample field it hangs from (the
  NICs split into their raw `ethtool -S` maps and the rest).

Cases:
- this host (2 CPUs), live: `Sampler` on / as the monitor makes it (lbtune.tui.feed),
  the real sources (netlink, ethtool ioctls, /proc).
- 48-CPU host (fixture tree), read: the same `Sampler` on
  tests/data/hosts/dell-r750-mlx5-ixgbe; every take reads the tree's files and recorded
  command output afresh, as a live read makes every object afresh (the tree does not
  change, so nothing is read faster for having moved less).
- 48-CPU host (fixture), replay: the recording bench/monitor_replay.py replays (its
  `make_recording`, every counter a panel shows moving), read back as `--replay` reads it:
  each tick patches the one before, so what did not change is the object before.

The result is a comparison of the three, measured in the same run; there is no goal.
Results go to bench/results/monitor_memory.json and .md.
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, Any, Callable, Iterator

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(HERE))

from results_io import run_meta, write_json, write_markdown  # noqa: E402

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "lbtune/observe",
    "lbtune/host",
    "lbtune/tui/feed.py",
    "lbtune/tui/frame.py",
    "lbtune/diagnose/rules",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
OUT = HERE / "results" / "monitor_memory.json"
PARTS = ("interrupts", "ethtool", "nics", "softirqs", "softnet", "qdiscs", "conntrack", "snmp",
         "sockets", "config", "other")  # fmt: skip
_PART_OF = {"interrupts": "interrupts", "nics": "nics", "softirqs": "softirqs",
            "softnet": "softnet", "qdiscs": "qdiscs", "conntrack": "conntrack", "snmp": "snmp",
            "listen": "sockets", "udp": "sockets", "tcp_receivers": "sockets",
            "config": "config", "config_readonly": "config"}  # fmt: skip


@dataclass
class Result:
    name: str
    samples: int
    held_kb_per_sample: float  # tracemalloc
    held_mb: float  # all the kept samples
    walked_kb_per_sample: float  # the parts' sum
    parts_kb_per_sample: dict[str, float]
    take_ms: float  # wall ms a sample while traced (tracemalloc slows it: not a cost figure)
    irq_rows: int  # /proc/interrupts rows of a sample
    irq_counts_bytes: int  # one row's per-CPU counts: its own containers, not the numbers
    cpus: int  # CPUs of a row
    snmp_counters: int  # SNMP counters of a sample


def _sampler(root: str) -> Callable[[], Any]:
    """The monitor's sampler (lbtune.tui.feed.LiveFeed's settings) on `root`."""
    from lbtune.diagnose.rules import sample_spec
    from lbtune.host.host import Host
    from lbtune.observe.sampler import Sampler
    from lbtune.tui.feed import CONFIG_EVERY, SYN_WALK_HOLD, monitor_rules

    sampler = Sampler(Host.open(root), None, sample_spec(monitor_rules()),
                      config_every=CONFIG_EVERY, syn_walk_hold=SYN_WALK_HOLD,
                      keep_files=True)  # fmt: skip
    sampler.take()  # warm: imports, sockets, the configuration read once
    return sampler.take


def _replayed(stream: IO[str], name: str) -> Callable[[], Any]:
    from lbtune.observe.recording import read_recording

    ticks: Iterator[Any] = read_recording(stream, name)[1]
    next(ticks)
    return lambda: next(ticks).sample


def _size_walk(kept: list[Any]) -> dict[str, int]:
    """Bytes reachable from the kept samples by part, each object counted once."""
    seen: set[int] = set()
    out = dict.fromkeys(PARTS, 0)
    skip = (type, type(sys), type(_size_walk))

    def walk(root: Any, part: str) -> None:
        stack = [root]
        total = 0
        while stack:
            obj = stack.pop()
            if id(obj) in seen or isinstance(obj, skip):
                continue
            seen.add(id(obj))
            total += sys.getsizeof(obj)
            stack.extend(gc.get_referents(obj))
        out[part] += total

    for s in kept:
        seen.add(id(s))
        out["other"] += sys.getsizeof(s)
        for f in fields(s):
            value = getattr(s, f.name)
            if f.name == "nics":
                seen_before = id(value) in seen
                if not seen_before:
                    seen.add(id(value))
                    out["nics"] += sys.getsizeof(value)
                    for nic in value.values():
                        walk(nic.ethtool, "ethtool")
                        walk(nic, "nics")
                continue
            walk(value, _PART_OF.get(f.name, "other"))
    return out


def _counts_bytes(counts: Any) -> int:
    """The bytes of a row's per-CPU counts of its own: the mapping, and an array of numbers
    it holds (not the CPU ids every row of a read shares, nor int objects)."""
    own = getattr(counts, "numbers", None)
    return sys.getsizeof(counts) + (sys.getsizeof(own) if own is not None else 0)


def measure(name: str, take: Callable[[], Any], n: int) -> Result:
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    kept: collections.deque[Any] = collections.deque()
    t = time.perf_counter()
    for _ in range(n):
        kept.append(take())
    spent = time.perf_counter() - t
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    held -= base
    parts = _size_walk(list(kept))
    last = kept[-1]
    row = next(iter(last.interrupts.values()), None)
    per = {p: round(v / n / 1000, 1) for p, v in parts.items()}
    print(f"{name}: {held / n / 1000:.1f} KB a sample held", file=sys.stderr)
    return Result(name, n, round(held / n / 1000, 1), round(held / 1e6, 1),
                  round(sum(parts.values()) / n / 1000, 1), per,
                  round(spent / n * 1000, 2), len(last.interrupts),
                  _counts_bytes(row.counts) if row else 0, len(row.counts) if row else 0,
                  len(last.snmp.values))  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=600,
                    help="samples kept (600: the ten minutes the monitor keeps at a 1 s refresh)")
    ap.add_argument("--seed", type=int, default=33)
    args = ap.parse_args()
    if args.samples < 2:
        print("--samples: at least 2", file=sys.stderr)
        return 2
    from monitor_replay import make_recording

    from lbtune.tui.frame import KEEP_SECONDS

    results = [measure("this host (2 CPUs), live", _sampler("/"), args.samples),
               measure("48-CPU host (fixture tree), read", _sampler(str(FIXTURE)),
                       args.samples)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="lbtune-memory-bench-") as tmp:
        rec = Path(tmp) / "big.rec"
        make_recording(FIXTURE, rec, args.samples + 2, args.seed)
        with open(rec) as stream:
            results.append(measure("48-CPU host (fixture), replay",
                                   _replayed(stream, str(rec)), args.samples))  # fmt: skip
    write_json(OUT, run_meta(1, samples=args.samples, seed=args.seed, keep_seconds=KEEP_SECONDS),
               results)  # fmt: skip
    write_markdown(
        OUT,
        ["# lbtune monitor: the memory of its kept samples",
         "",
         f"{args.samples} samples of each case, kept whole as the monitor keeps them "
         f"({KEEP_SECONDS:.0f} s of them at a 1 s refresh). KB a sample (held): what the kept "
         "samples hold (tracemalloc, after a full collection) / samples; MB held: all "
         f"{args.samples} of them. The part columns: KB a sample of the objects reachable "
         "from each Sample field (sys.getsizeof, each object counted once, where it is "
         "first reached; `ethtool` is the NICs' raw `ethtool -S` maps, `nics` the rest of "
         "them). The 48-CPU read takes the fixture tree's files afresh every time, as a "
         "live read makes every object afresh; the replay patches each tick onto the one before "
         f"(bench/monitor_replay.py's recording, seed {args.seed}). `bench/monitor_memory.py`."],
        [("case", "l"), ("KB a sample (held)", "r"), ("MB held", "r"),
         *((p, "r") for p in PARTS)],
        [[r.name, f"{r.held_kb_per_sample:,.1f}", f"{r.held_mb:,.1f}",
          *(f"{r.parts_kb_per_sample[p]:,.1f}" for p in PARTS)] for r in results],
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
