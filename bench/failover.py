"""Failover benchmark: client-visible loss when the master director dies, per VRRP advert interval.

Usage: python bench/failover.py [--kills N] [--out FILE]

One lab guest is brought up once (`lbtune lab up`); every case is a `lab failover` in it: two
directors running Debian's keepalived with the config `lbtune ipvs export --format keepalived
--peer` writes, two nginx DR real servers, a client opening a fresh connection every 20 ms
plus 4 keep-alive connections with a request every 100 ms. Each kill is a dead host (SIGKILL
to keepalived, cable pulled); the master then comes back and preempts (failback). Cases:

* keepalived's default advert_int 1 s, sync on: the baseline (3 x advert + skew ~ 3.6 s);
* advert_int 0.1 s (VRRPv3), sync on: the issue's goal is a loss window under 1 s and no
  established connection lost;
* advert_int 0.1 s, sync off: what the sync daemon is for.

Reported per case: loss window median and max (first failed to first good probe), failed
requests per kill, established keep-alive connections kept, and the sub-second case's loss
as a ratio to the baseline's (same run). The guest has ONE CPU shared by both directors, the
client and the servers. Results go to bench/results/failover.json and .md; nothing here
asserts a number.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from dataclasses import dataclass

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/ipvs",
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from lbtune.lab.experiments.failover import FailoverConfig  # noqa: E402
from lbtune.lab.guests import session  # noqa: E402
from lbtune.lab.launch import run_failover_lab  # noqa: E402

CASES = (("default", 1.0, True), ("fast", 0.1, True), ("fast-nosync", 0.1, False))
# Not measured here: the seed's figure for MetalLB layer-2 leader loss, quoted as a reference.
METALLB_L2_S = 7.0
GOAL_S = 1.0


@dataclass(frozen=True)
class Case:
    name: str
    advert_int: float
    sync: bool
    kills: int
    ok: bool
    reason: str
    master_down_s: float  # 3 x advert + skew at the backup's priority 100 (theory)
    vip_moved_median_s: float  # orchestrator: kill -> VIP on the backup
    failover_loss_s: list[float]  # per kill
    failback_loss_s: list[float]
    failover_failed: list[int]
    failback_failed: list[int]
    established: int  # keep-alive connections open at the switches (failover + failback)
    lost: int
    max_gap_s: float  # longest pause between probe starts in a failover window


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "failover.json"))
    args = ap.parse_args()

    if session.current() is not None:
        print("a lab is already up: run `lbtune lab down` first", file=sys.stderr)
        return 2
    cases: list[Case] = []
    kernel = ""
    session.up()
    try:
        for name, advert, sync in CASES:
            cfg = FailoverConfig(kills=args.kills, advert_int=advert, sync=sync)
            res = run_failover_lab(cfg)
            kernel = res.kernel
            fo = [w for w in res.windows if w.kind == "failover"]
            fb = [w for w in res.windows if w.kind == "failback"]
            moved = [w.took_s for w in fo if w.took_s is not None]
            cases.append(Case(
                name, advert, sync, args.kills, res.ok, res.reason,
                round(cfg.master_down(), 3), round(statistics.median(moved), 3) if moved else -1,
                [w.loss_s for w in fo], [w.loss_s for w in fb], [w.failed for w in fo],
                [w.failed for w in fb], sum(w.established for w in res.windows),
                sum(w.lost for w in res.windows), max((w.max_gap_s for w in fo), default=0.0),
            ))  # fmt: skip
            print(f"{name}: ok={res.ok} {res.reason} failover loss {cases[-1].failover_loss_s}",
                  file=sys.stderr)  # fmt: skip
    finally:
        session.down()

    meta = run_meta(1, kills=args.kills, lab_kernel=kernel, guest_cpus=1, probe_interval_ms=20,
                    keepalive_connections=4, preempt_delay_s=3.0)  # fmt: skip
    out = pathlib.Path(args.out)
    write_json(out, meta, cases)
    base = statistics.median(cases[0].failover_loss_s) if cases[0].failover_loss_s else 0.0

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "-"

    lines = [
        f"# lab failover ({meta['date']}, lab kernel {kernel}, guest 1 CPU, keepalived "
        f"2.2.7 pair, 2 nginx DR real servers, {args.kills} kills per case)",
        "",
        "Loss window: first failed to first good fresh-connection probe (one every 20 ms, "
        "0.5 s timeout). Failed: failed probes per kill. Kept: established keep-alive "
        "connections still serving after the switch / open at it (failover and failback). "
        "Max probe gap: the longest pause between probe starts in a failover window. "
        f"Ratio: failover loss median / the default case's (same run). Goal: < {GOAL_S:g} s; "
        f"for reference, MetalLB L2 ~{METALLB_L2_S:g} s as reported elsewhere (the seed's "
        "figure), not measured here.",
        "",
        "| case | advert_int | sync | 3 x advert + skew | VIP moved (median) "
        "| failover loss median / max | ratio | failed per kill | failback loss median / max "
        "| kept conns | max probe gap | ok |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for c in cases:
        ratio = statistics.median(c.failover_loss_s) / base if base and c.failover_loss_s \
            else float("nan")
        per_kill = statistics.mean(c.failover_failed) if c.failover_failed else 0.0
        lines.append(
            f"| {c.name} | {c.advert_int:g} s | {'on' if c.sync else 'off'} | "
            f"{c.master_down_s:.2f} s | {c.vip_moved_median_s:.2f} s | "
            f"{med(c.failover_loss_s)} / {max(c.failover_loss_s, default=0):.2f} s | "
            f"{ratio:.2f} | {per_kill:.1f} | "
            f"{med(c.failback_loss_s)} / {max(c.failback_loss_s, default=0):.2f} s | "
            f"{c.established - c.lost}/{c.established} | {c.max_gap_s * 1000:.0f} ms | "
            f"{'yes' if c.ok else 'no: ' + c.reason} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
