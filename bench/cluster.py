"""Director-cluster benchmark: what a director's death, return, addition and drain cost.

Usage: python bench/cluster.py [--kills N] [--out FILE]

One lab guest is brought up once (`lbtune lab up`); every case is a `lab cluster` in it:
three directors, each running `lbtune ipvs apply` of one cluster config, BIRD with the config
`lbtune ipvs export --format bird --director NAME` writes and `lbtune ipvs gate`; a router
namespace running BIRD (BGP with every director, `merge paths`: one multipath route in its
kernel, hashed over the 5-tuple); a client behind the router opening a fresh connection every
20 ms and holding 12 keep-alive connections with a request every 300 ms; two nginx DR real
servers. Each director in turn dies like a host (cable pulled, BIRD and the gate SIGKILLed)
and comes back (IPVS cleared, apply, BIRD, gate); then a fourth director is added and the
one carrying the most connections drained (its gate stopped). Cases:

* mh + sloppy TCP, no sync, BFD 100 ms x 5: the stateless recipe (goal: 0 established
  connections broken at every event; the router drops a dead director in < 1 s);
* the same without BFD: the BGP hold time (3 s here) is what notices a dead director;
* wlc without sloppy TCP (no sync): the control, which must break connections.

After the events of each case, wrk runs through the 3 active directors and then through one
alone (the scale-out figure; in a one-CPU guest it measures that CPU).

Per case and event kind: the router's time to change (median, max), failed new connections,
and the keep-alive connections the event's director and the others carried / broke / moved.
The guest has ONE CPU shared by every director, the router, the client and the servers.
Results go to bench/results/cluster.json and .md; nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
from dataclasses import dataclass

from results_io import run_meta, write_json

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",
    "lbtune/ipvs",
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from lbtune.lab.experiments.cluster import ClusterLabConfig  # noqa: E402
from lbtune.lab.guests import session  # noqa: E402
from lbtune.lab.launch import run_cluster_lab  # noqa: E402

THROUGHPUT_S = 5.0  # wrk through the 3 active directors, then through one, per case
CASES = (("mh-sloppy-bfd", "mh", True, True), ("mh-sloppy-nobfd", "mh", True, False),
         ("control-wlc", "wlc", False, True))  # fmt: skip


@dataclass(frozen=True)
class KindRow:
    case: str
    kind: str
    events: int
    took_median_s: float
    took_max_s: float
    failed: int
    probes: int
    carried_dir: int
    broken_dir: int
    carried_others: int
    broken_others: int
    moved: int


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "cluster.json"))
    args = ap.parse_args()

    if session.current() is not None:
        print("a lab is already up: run `lbtune lab down` first", file=sys.stderr)
        return 2
    rows: list[KindRow] = []
    oks: dict[str, str] = {}
    tput: dict[str, dict[str, float]] = {}
    kernel = ""
    session.up()
    try:
        for name, sched, sloppy, bfd in CASES:
            cfg = ClusterLabConfig(kills=args.kills, scheduler=sched, sloppy=sloppy, bfd=bfd,
                                   throughput=THROUGHPUT_S)  # fmt: skip
            res = run_cluster_lab(cfg)
            kernel = res.kernel
            oks[name] = "yes" if res.ok else f"no: {res.reason}"
            tput[name] = dict(res.throughput)
            for kind in ("kill", "return", "add", "drain"):
                rs = [r for r in res.rows if r.kind == kind]
                took = [r.took_s for r in rs if r.took_s is not None]
                if not rs:
                    continue
                rows.append(KindRow(
                    name, kind, len(rs), round(statistics.median(took), 2) if took else -1,
                    max(took, default=-1), sum(r.failed for r in rs), sum(r.probes for r in rs),
                    sum(r.carried_dir for r in rs), sum(r.broken_dir for r in rs),
                    sum(r.carried_others for r in rs), sum(r.broken_others for r in rs),
                    sum(r.moved for r in rs)))  # fmt: skip
            print(f"{name}: {oks[name]}", file=sys.stderr)
    finally:
        session.down()

    meta = run_meta(1, kills=args.kills, lab_kernel=kernel, guest_cpus=1, directors=3,
                    keepalive_connections=12, keepalive_interval_s=0.3, probe_interval_ms=20,
                    bfd="100 ms x 5", hold_time_s=3, ok=oks, throughput_s=THROUGHPUT_S,
                    throughput=tput)  # fmt: skip
    out = pathlib.Path(args.out)
    write_json(out, meta, rows)
    lines = [
        f"# lab cluster ({meta['date']}, commit {meta['commit']}, lab kernel {kernel}, guest "
        f"1 CPU, 3 directors + 1 added, 2 nginx DR real servers, {args.kills} kills per case)",
        "",
        "Router: the event to the router's kernel route without (kill, drain) or with "
        "(return, add) the director, polled every ~0.1 s. Failed new: failed / all fresh "
        "connections (one every 20 ms, 0.5 s timeout) in the events' windows. Its / others: "
        "broken / carried keep-alive connections (12, a request every 300 ms) on the event's "
        "director and on the others, at the event (the router's own `ip route get` with the "
        "ports). Moved: sent to another director after the event.",
        "",
        "| case | event | n | router median / max | failed new | broken: its | others "
        "| moved |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r.case} | {r.kind} | {r.events} | {r.took_median_s:.2f} / "
                     f"{r.took_max_s:.2f} s | {r.failed}/{r.probes} | "
                     f"{r.broken_dir}/{r.carried_dir} | {r.broken_others}/{r.carried_others} "
                     f"| {r.moved} |")  # fmt: skip
    lines += ["", "ok: " + "; ".join(f"{k} {v}" for k, v in oks.items()), "",
              f"Throughput (wrk, {THROUGHPUT_S:g} s each, 32 connections, a new connection per "
              "request, after the events): through the 3 active directors, then through one "
              "alone (the others' gates stopped: the router sends everything to one director, "
              "as to an active/backup pair's master). The guest has ONE CPU for every "
              "director, the router, the client (wrk) and the servers: this measures that CPU, "
              "not the scale-out a director per machine gives.", "",
              "| case | 3 directors req/s | 1 director req/s | ratio |", "|---|---:|---:|---:|"]
    for name, t in tput.items():
        if t.get("one_rps"):
            lines.append(f"| {name} | {t['rps']:.0f} | {t['one_rps']:.0f} | "
                         f"{t['rps'] / t['one_rps']:.2f} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
