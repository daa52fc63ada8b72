"""Adaptive weights benchmark: rr and wlc vs `lbtune ipvs adapt` on unequal real servers.

Usage: python bench/adapt.py [--rounds N] [--duration S] [--rates M1,M2,M3] [--connections N]

One lab boot (`lbtune lab run --adaptive`, lbtune/lab/experiments/adaptive.py): three nginx real
servers
whose egress is limited by tbf to --rates Mbit/s (default 60,60,15: one server a quarter of
the others), a mixed workload (wrk, one request per connection, 50% 1 KiB / 40% 256 KiB /
10% 768 KiB: the ALBM paper's 50/40/10 mix of tiny, 5 MB and 15 MB scaled down), and the
schemes interleaved round by round on the same topology: rr, wlc (weights all 1), adapt (wlc
with weights from the agents). Reported per scheme: median req/s, p50/p99 latency and errors
over the rounds, request shares per server, per-server egress and connections over time
(medians of the agents' 1 s samples), and adapt/best-static ratios measured in the same run.
The lab guest has ONE CPU shared by client, director, servers, agents and adapt.

Results go to bench/results/adapt.json and .md; nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/ipvs",
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from lbtune.lab.experiments.adaptive import SCHEMES, AdaptiveConfig, rows  # noqa: E402
from lbtune.lab.launch import run_adaptive_lab  # noqa: E402


@dataclass(frozen=True)
class Case:
    scheme: str
    rps: float  # median over rounds
    p50_ms: float
    p99_ms: float
    errors: int  # summed over rounds
    rounds_rps: list[float]
    rounds_p99: list[float]
    shares: dict[str, float]  # median share of requests per server
    egress_mbit: dict[str, float]  # median of the per-second samples under load
    connections: dict[str, float]
    weights: dict[str, float] = field(default_factory=dict)  # adapt: median weight in IPVS
    weight_changes: int = 0


def _median(xs: list[float]) -> float:
    return round(statistics.median(xs), 2) if xs else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rates", default="60,60,15")
    ap.add_argument("--connections", type=int, default=24)
    ap.add_argument("--out", default=str(HERE / "results" / "adapt.json"))
    args = ap.parse_args()

    rates = tuple(int(x) for x in args.rates.split(","))
    cfg = AdaptiveConfig(rates=rates, schemes=SCHEMES * args.rounds, duration=args.duration,
                         connections=args.connections)  # fmt: skip

    def show(step: Any) -> None:
        if step.state != "tick":
            print(f"{step.elapsed:6.1f}s {step.state:>5} {step.name} {step.detail}", flush=True)

    doc = run_adaptive_lab(cfg, show)
    out = pathlib.Path(args.out)
    names = [n for n, _a, _r in doc["servers"]]
    addr_of = {a: n for n, a, _r in doc["servers"]}
    by: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for r, raw in zip(rows(doc), doc["schemes"]):
        by.setdefault(r.scheme, []).append((r, raw))
    cases = []
    for scheme in SCHEMES:
        runs = by.get(scheme, [])
        ok = [(r, raw) for r, raw in runs if r.rps is not None]
        if not ok:
            print(f"{scheme}: no result", file=sys.stderr)
            return 1
        if any(v is None for r, _ in ok for v in r.shares.values()):
            print(f"{scheme}: request counts unknown (an access log is missing)", file=sys.stderr)
            return 1
        samples = [x for _r, raw in ok for x in raw["samples"] if x["egress_mbit"] > 0.5]
        weights: dict[str, float] = {}
        changes = 0
        if scheme == "adapt":
            for _r, raw in ok:
                changes += sum(1 for e in raw["events"] if e.get("kind") == "weight")
            weights = {n: _median([x["weight"] for x in samples if x["server"] == n])
                       for n in names}  # fmt: skip
        cases.append(Case(
            scheme=scheme,
            rps=_median([r.rps for r, _ in ok]),
            p50_ms=_median([r.p50_ms or 0.0 for r, _ in ok]),
            p99_ms=_median([r.p99_ms or 0.0 for r, _ in ok]),
            errors=sum(r.errors or 0 for r, _ in ok),
            rounds_rps=[r.rps or 0.0 for r, _ in ok],
            rounds_p99=[r.p99_ms or 0.0 for r, _ in ok],
            shares={n: _median([r.shares.get(n) or 0.0 for r, _ in ok]) for n in names},
            egress_mbit={n: _median([x["egress_mbit"] for x in samples if x["server"] == n])
                         for n in names},
            connections={n: _median([x["connections"] for x in samples if x["server"] == n])
                         for n in names},
            weights=weights, weight_changes=changes,
        ))  # fmt: skip
    static = [c for c in cases if c.scheme != "adapt"]
    adapt = next(c for c in cases if c.scheme == "adapt")
    best_rps = max(static, key=lambda c: c.rps)
    best_p99 = min(static, key=lambda c: c.p99_ms)
    ratios = {
        "rps_vs_best_static": round(adapt.rps / best_rps.rps, 3) if best_rps.rps else None,
        "best_static_rps": best_rps.scheme,
        "p99_vs_best_static": round(adapt.p99_ms / best_p99.p99_ms, 3) if best_p99.p99_ms
        else None,
        "best_static_p99": best_p99.scheme,
    }  # fmt: skip
    meta = run_meta(args.rounds, lab_kernel=doc["kernel"], rates_mbit=list(rates),
                    duration=args.duration, connections=args.connections,
                    mix="50% 1 KiB, 40% 256 KiB, 10% 768 KiB, Connection: close",
                    ratios=ratios, addresses=addr_of)  # fmt: skip
    write_json(out, meta, cases)
    # the guest's own samples and events, under the same meta (bench/check.py reads it)
    raw = {"meta": meta, "raw": doc}
    out.with_name(out.stem + "-raw.json").write_text(json.dumps(raw) + "\n")
    _markdown(out, meta, cases, names, ratios)
    return 0


def _f(v: Optional[float], fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _markdown(out: pathlib.Path, meta: dict[str, Any], cases: list[Case], names: list[str],
              ratios: dict[str, Any]) -> None:  # fmt: skip
    rates = ", ".join(f"{n} {r} Mbit/s" for n, r in zip(names, meta["rates_mbit"]))
    heading = [
        "# Adaptive weights vs static schedulers (lab)",
        "",
        f"{meta['date']}, lab kernel {meta['lab_kernel']} (one CPU) on a {meta['cpus']}-CPU "
        f"host; {meta['rounds']} round(s) of {meta['duration']:g} s per scheme, interleaved; "
        f"{meta['connections']} wrk connections; real servers {rates}; mix {meta['mix']}.",
        "",
        f"adapt vs best static: req/s x{_f(ratios['rps_vs_best_static'], '{:.3f}')} "
        f"({ratios['best_static_rps']}), p99 x{_f(ratios['p99_vs_best_static'], '{:.3f}')} "
        f"({ratios['best_static_p99']}).",
    ]
    cols = [("scheme", "l"), ("req/s", "r"), ("p50 ms", "r"), ("p99 ms", "r"), ("errors", "r")]
    cols += [(f"{n} share", "r") for n in names]
    cols += [(f"{n} Mbit/s", "r") for n in names]
    cols += [(f"{n} conns", "r") for n in names]
    cols += [("weights (median)", "l"), ("rounds req/s", "l")]
    table = []
    for c in cases:
        w = "/".join(f"{c.weights[n]:g}" for n in names) if c.weights else "1/1/1"
        if c.scheme == "adapt":
            w += f" ({c.weight_changes} changes)"
        table.append([c.scheme, f"{c.rps:.1f}", f"{c.p50_ms:.0f}", f"{c.p99_ms:.0f}",
                      str(c.errors), *[f"{c.shares[n]:.0%}" for n in names],
                      *[f"{c.egress_mbit[n]:.1f}" for n in names],
                      *[f"{c.connections[n]:g}" for n in names], w,
                      ", ".join(f"{x:.1f}" for x in c.rounds_rps)])  # fmt: skip
    write_markdown(out, heading, cols, table)


if __name__ == "__main__":
    sys.exit(main())
