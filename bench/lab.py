"""Lab benchmark: requests per second through IPVS DR versus HAProxy, at 1 and 4 wrk threads.

Usage: python bench/lab.py [--rounds N] [--duration S] [--servers N] [--out FILE]

The seed benchmark this project started from measured direct server return about 10% ahead
of a proxy at one client thread. Here both run in the embedded lab (lbtune.lab): one UML
guest is brought up once (`lbtune lab up`), then every case is a `lab run` in it, the cases
interleaved round by round (dr/1, proxy/1, dr/4, proxy/4, ...), same real servers, same
nginx, same 12 keep-alive connections, no diagnose running beside the load. Reported: median
req/s and latency per case and the DR/proxy ratio at each thread count, measured in the same
run. The lab guest has ONE CPU shared by client, director and servers: the ratio says how
much work each forwarding path costs that CPU, not what a real director reaches.

Results go to bench/results/lab.json and .md; nothing here asserts a number.
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
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from lbtune.lab.experiments.scenario import ScenarioConfig  # noqa: E402
from lbtune.lab.guests import session  # noqa: E402
from lbtune.lab.launch import run_lab  # noqa: E402

THREADS = (1, 4)
MODES = ("dr", "proxy")


@dataclass(frozen=True)
class Case:
    mode: str
    threads: int
    rps: float  # median over rounds
    p50_ms: float
    p99_ms: float
    requests: int  # summed over rounds
    failures: int  # summed over rounds
    rounds: list[float]  # req/s of each round


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)  # as bench/results/lab.*
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--servers", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "lab.json"))
    args = ap.parse_args()

    if session.current() is not None:
        print("a lab is already up: run `lbtune lab down` first", file=sys.stderr)
        return 2
    runs: dict[tuple[str, int], list[tuple[float, float, float, int, int]]] = {}
    kernel = ""
    session.up()
    try:
        for r in range(args.rounds):
            for threads in THREADS:
                for mode in MODES:
                    cfg = ScenarioConfig(mode=mode, threads=threads, servers=args.servers,
                                         duration=args.duration, diagnose=False)  # fmt: skip
                    res = run_lab(cfg)
                    if res.load is None:
                        print(f"{mode}/{threads}: {res.reason}", file=sys.stderr)
                        return 1
                    kernel = res.kernel
                    ld = res.load
                    runs.setdefault((mode, threads), []).append(
                        (ld.rps, ld.latency_ms.get("p50", 0.0), ld.latency_ms.get("p99", 0.0),
                         ld.requests, ld.failures)
                    )  # fmt: skip
                    print(f"round {r + 1} {mode:<5} t={threads}: {ld.rps:,.0f} req/s "
                          f"p99 {ld.latency_ms.get('p99', 0):.2f} ms", file=sys.stderr)  # fmt: skip
    finally:
        session.down()

    cases = []
    for (mode, threads), rs in runs.items():
        rps, p50, p99, requests, failures = zip(*rs)
        cases.append(Case(mode, threads, statistics.median(rps), statistics.median(p50),
                          statistics.median(p99), sum(requests), sum(failures), list(rps)))
    meta = run_meta(args.rounds, duration=args.duration, servers=args.servers, connections=12,
                    lab_kernel=kernel, guest_cpus=1)  # fmt: skip
    out = pathlib.Path(args.out)
    write_json(out, meta, cases)
    by = {(c.mode, c.threads): c for c in cases}
    lines = [
        f"# lab DR vs proxy ({meta['date']}, lab kernel {kernel}, guest 1 CPU, "
        f"{args.servers} nginx real servers, {args.rounds} round(s) of {args.duration:g} s, "
        "wrk 12 keep-alive connections)",
        "",
        "Median req/s per case; ratio = DR / proxy at the same thread count (same run).",
        "",
        "| wrk threads | DR req/s | proxy req/s | DR / proxy | DR p50 / p99 ms "
        "| proxy p50 / p99 ms | failed requests |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in THREADS:
        dr, px = by[("dr", t)], by[("proxy", t)]
        ratio = dr.rps / px.rps if px.rps else float("nan")
        lines.append(
            f"| {t} | {dr.rps:,.0f} | {px.rps:,.0f} | {ratio:.2f} | "
            f"{dr.p50_ms:.2f} / {dr.p99_ms:.2f} | {px.p50_ms:.2f} / {px.p99_ms:.2f} | "
            f"{dr.failures + px.failures} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
