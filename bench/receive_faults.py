"""Receive-buffer faults under three tcp_rmem settings: what each counter does (the numbers
docs/diagnose.md quotes for the rcvbuf-prune and socket-backlog-drop fixes).

Usage: python bench/receive_faults.py [--rounds N] [--out FILE]

Each round runs the fix-loop faults of tests/netns/faults.py in a throwaway network namespace
(removed afterwards; nothing on the host changes): `TcpRmemPrune` (300 one-byte segments into
an autotuned receiver that does not read) and `SocketBacklogFull` (150 one-byte segments
while the receiver is held inside recv() by a userfaultfd page), each with the namespace's
net.ipv4.tcp_rmem at
* "4096 4096 4096" (the fault),
* "4096 4096 16777216" (the maximum raised alone),
* "4096 131072 16777216" (the default raised too).
Reported per fault and setting: the kernel counters' movement over the trigger, median and
range over the rounds. Results go to bench/results/receive_faults.json and .md; nothing here
asserts a number.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
from dataclasses import dataclass

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "tests/netns/faults.py",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from tests.netns import faults as F  # noqa: E402

SETTINGS = ("4096 4096 4096", "4096 4096 16777216", "4096 131072 16777216")
KEYS = ("TcpExt.PruneCalled", "TcpExt.TCPRcvCollapsed", "TcpExt.RcvPruned",
        "TcpExt.TCPBacklogDrop")  # fmt: skip


@dataclass(frozen=True)
class Row:
    fault: str
    tcp_rmem: str
    moved: dict[str, list[int]]  # counter -> movement per round
    attempted: int
    arrived: list[int]


def one(fault: F.Fault) -> F.Truth:
    name = f"lbtune-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        return F.run_in_netns(name, fault)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "receive_faults.json"))
    a = ap.parse_args()
    rows: list[Row] = []
    for label, make in (
        ("TcpRmemPrune (300 segments)", lambda r: F.TcpRmemPrune(rmem=r)),
        ("SocketBacklogFull (150 segments)", lambda r: F.SocketBacklogFull(rmem=r)),
    ):
        for rmem in SETTINGS:
            moved: dict[str, list[int]] = {k: [] for k in KEYS}
            arrived: list[int] = []
            attempted = 0
            for _ in range(a.rounds):
                t = one(make(rmem))
                for k in KEYS:
                    moved[k].append(t.after.get(k, 0) - t.before.get(k, 0))
                arrived.append(t.delta("bytes arrived"))
                attempted = t.attempted
            rows.append(Row(label, rmem, moved, attempted, arrived))
    out = pathlib.Path(a.out)
    meta = run_meta(a.rounds, what="receive faults x tcp_rmem, one namespace per round")
    write_json(out, meta, rows)

    def cell(v: list[int]) -> str:
        return f"{statistics.median(v):g} ({min(v)}-{max(v)})"

    heading = [
        f"# receive faults x tcp_rmem ({meta['date']}, kernel {meta['kernel']}, "
        f"{meta['cpus']} CPUs, {a.rounds} rounds)",
        "",
        "Counter movement over one trigger: median (min-max) over the rounds. Arrived: "
        "bytes that reached the receiver (of the segments sent).",
    ]
    columns = [("fault", "l"), ("tcp_rmem", "l"), *[(k.split(".")[1], "r") for k in KEYS]]
    columns.append(("arrived", "r"))
    table = [
        [r.fault, f"`{r.tcp_rmem}`", *[cell(r.moved[k]) for k in KEYS],
         f"{cell(r.arrived)} of {r.attempted}"]
        for r in rows
    ]  # fmt: skip
    write_markdown(out, heading, columns, table)

if __name__ == "__main__":
    main()
