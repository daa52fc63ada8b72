"""IPVS benchmark: reconcile 1,000 services x 10 real servers vs `ipvsadm -R` of the same table.

Usage: python bench/ipvs.py [--rounds N] [--out FILE]   (runs inside the UML lab kernel)

One lab boot. The table: 10 VIPs (on a dummy interface, placed before timing) x 100 ports,
each service wrr with 10 real servers of different weights: 1,000 services and 10,000
destinations, 11,000 objects. Each round, interleaved, every step a fresh process:

- `ipvsadm -R` of the table's restore lines into an empty table (what an operator runs);
- `lbtune ipvs apply` of the same table as a config into an empty table: start-up, TOML
  parse and validation, kernel read, plan, journal, pipelined changes, read-back;
- `lbtune ipvs apply` again on the full table: the level-triggered no-op (0 operations);
- `python3 -c pass`, the start-up floor.

Medians are reported as ratios to `ipvsadm -R` measured in the same run; the results go to
bench/results/ipvs.json and ipvs.md. The table is flushed with `ipvsadm -C` between rounds
(outside the timings).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VIPS = [f"10.200.0.{i}" for i in range(1, 11)]
PORTS = range(1000, 1100)
REALS = 10


def table_config() -> str:
    out = ["[director]\ndrain_timeout = 0\n"]
    for vip in VIPS:
        for port in PORTS:
            out.append(f'[[service]]\naddress = "{vip}"\nport = {port}\nscheduler = "wrr"\n')
            for r in range(REALS):
                out.append(f'[[service.real_server]]\naddress = "10.201.{r}.{port % 250}"\n'
                           f"weight = {r + 1}\n")
    return "".join(out)


def restore_lines() -> str:
    out = []
    for vip in VIPS:
        for port in PORTS:
            out.append(f"-A -t {vip}:{port} -s wrr")
            for r in range(REALS):
                out.append(f"-a -t {vip}:{port} -r 10.201.{r}.{port % 250}:{port} -g -w {r + 1}")
    return "\n".join(out) + "\n"


def _run(argv: list[str], stdin: Optional[str] = None) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    ms = (time.perf_counter() - t0) * 1000
    if p.returncode != 0:
        raise RuntimeError(f"{argv[:3]}: exit {p.returncode}: {p.stderr[:300]}")
    return ms, p.stdout


def guest(rounds: int) -> dict[str, Any]:
    """Inside the lab: the timings, and what each lbtune run reported."""
    subprocess.run(["modprobe", "ip_vs"], check=True)
    for m in ("ip_vs_wrr", "dummy"):
        subprocess.run(["modprobe", m], check=True)
    subprocess.run(["ip", "link", "add", "vip0", "type", "dummy"], check=True)
    subprocess.run(["ip", "link", "set", "vip0", "up"], check=True)
    for vip in VIPS:
        subprocess.run(["ip", "addr", "add", f"{vip}/32", "dev", "vip0"], check=True)
    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"
    cfg, rules = "/tmp/table.toml", restore_lines()
    pathlib.Path(cfg).write_text(table_config())
    lbtune = [sys.executable, "-m", "lbtune"]
    times: dict[str, list[float]] = {"ipvsadm": [], "apply": [], "noop": [], "floor": []}
    ops: dict[str, list[int]] = {"apply": [], "noop": []}
    for _ in range(rounds):
        _run(["ipvsadm", "-C"])
        ms, _ = _run(["ipvsadm", "-R"], rules)
        times["ipvsadm"].append(ms)
        saved_ipvsadm = _run(["ipvsadm", "-S", "-n"])[1]
        _run(["ipvsadm", "-C"])
        ms, out = _run([*lbtune, "ipvs", "apply", cfg, "--json"])
        times["apply"].append(ms)
        ops["apply"].append(json.loads(out)["operations"])
        same = _run(["ipvsadm", "-S", "-n"])[1] == saved_ipvsadm
        ms, out = _run([*lbtune, "ipvs", "apply", cfg, "--json"])
        times["noop"].append(ms)
        ops["noop"].append(json.loads(out)["operations"])
        times["floor"].append(_run([sys.executable, "-c", "pass"])[0])
        if not same:
            raise RuntimeError("lbtune and ipvsadm -R built different tables")
    services = len(VIPS) * len(PORTS)
    return {"times": times, "ops": ops, "services": services, "dests": services * REALS,
            "kernel": os.uname().release}


@dataclass
class Row:
    case: str
    median_ms: float
    ratio: float
    baseline: str
    operations: Optional[int] = None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)  # as bench/results/ipvs.*
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "ipvs.json")
    args = ap.parse_args()
    from bench.results_io import run_meta, write_json
    from lbtune.lab.uml import run_in_lab

    res = run_in_lab("bench.ipvs:guest", args.rounds, timeout=3600, cwd=str(ROOT))
    v = res.value
    med = {k: statistics.median(x) for k, x in v["times"].items()}
    base = "ipvsadm -R"
    rows = [
        Row(base, round(med["ipvsadm"], 1), 1.0, ""),
        Row("lbtune ipvs apply (empty table)", round(med["apply"], 1),
            round(med["apply"] / med["ipvsadm"], 2), base, max(v["ops"]["apply"])),
        Row("lbtune ipvs apply again (no-op)", round(med["noop"], 1),
            round(med["noop"] / med["ipvsadm"], 2), base, max(v["ops"]["noop"])),
        Row("python3 -c pass", round(med["floor"], 1), round(med["floor"] / med["ipvsadm"], 3),
            base),
    ]
    meta = run_meta(args.rounds, lab_kernel=v["kernel"], services=v["services"],
                    destinations=v["dests"], raw_ms=v["times"], operations=v["ops"])
    write_json(args.out, meta, rows)
    md = [f"IPVS reconcile: {v['services']} services x {REALS} real servers "
          f"({v['services'] + v['dests']} objects), lab kernel {v['kernel']}, "
          f"{args.rounds} rounds, medians, fresh process per step.", "",
          "| case | median ms | ratio | baseline | operations |", "|---|---:|---:|---|---:|"]
    for r in rows:
        n = "" if r.operations is None else str(r.operations)
        md.append(f"| {r.case} | {r.median_ms} | {r.ratio} | {r.baseline} | {n} |")
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
