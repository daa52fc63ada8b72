"""Tuning benchmark: apply+rollback with lbtune vs. the runbook a user would run instead.

Usage: python bench/tune.py [--rounds N] [--out FILE]   (root; creates and deletes a netns)

Cases, each a fresh process per step, rounds interleaved, medians reported as ratios:
- fixture: `lbtune --root <copy of the 48-CPU fixture> apply lb-dr` + `rollback`
  against the `python3 -c pass` start-up floor (a fixture has no runbook equivalent).
- netns: `lbtune --netns NS apply web --yes` + `rollback` against the runbook:
  `sysctl -p` of the same per-namespace values plus a shell loop setting rps_cpus on every
  queue, then `sysctl -p` of the saved originals (the runbook's only "rollback").
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
NS = f"lbtune-bench-{os.getpid()}"
WEB_NET = {
    "net.core.somaxconn": "8192",
    "net.ipv4.tcp_max_syn_backlog": "8192",
    "net.ipv4.tcp_slow_start_after_idle": "0",
    "net.ipv4.ip_local_port_range": "10000 65535",
    "net.ipv4.tcp_syncookies": "1",
    "net.ipv4.tcp_rmem": "4096 131072 16777216",
    "net.ipv4.tcp_wmem": "4096 16384 16777216",
}


def lbtune(*args: str) -> list[str]:
    exe = pathlib.Path(sys.executable).with_name("lbtune")
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "lbtune", *args]


def run(argv: list[str], env: dict[str, str] | None = None) -> None:
    p = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{argv}: exit {p.returncode}: {p.stderr[:300]}")


def timed(steps: list[list[str]], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    for argv in steps:
        run(argv, env)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "tune.json")
    args = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lbtune-bench-"))
    copy = tmp / "host"
    shutil.copytree(FIXTURE, copy, symlinks=True)
    env = dict(os.environ, LBTUNE_STATE_DIR=str(tmp / "state"))
    run(["ip", "netns", "add", NS])
    try:
        run(
            [
                "ip",
                "-n",
                NS,
                "link",
                "add",
                "v0",
                "numrxqueues",
                "4",
                "numtxqueues",
                "4",
                "type",
                "veth",
                "peer",
                "name",
                "v1",
            ]
        )
        conf = tmp / "runbook.conf"
        conf.write_text("".join(f"{k} = {v}\n" for k, v in WEB_NET.items()))
        saved = tmp / "originals.conf"
        originals = []
        for k in WEB_NET:
            out = subprocess.run(
                ["ip", "netns", "exec", NS, "sysctl", "-n", k],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            originals.append(f"{k} = {out}\n")
        saved.write_text("".join(originals))
        loop = "for q in /sys/class/net/v0/queues/rx-*; do echo 3 > $q/rps_cpus; done"
        undo = "for q in /sys/class/net/v0/queues/rx-*; do echo 0 > $q/rps_cpus; done"
        cases = {
            "python3 -c pass": ([[sys.executable, "-c", "pass"]], None),
            "lbtune fixture apply lb-dr + rollback": (
                [
                    lbtune("--root", str(copy), "apply", "lb-dr", "--iface", "ens1f0np0", "--yes"),
                    lbtune("--root", str(copy), "rollback"),
                ],
                env,
            ),
            "lbtune netns apply web + rollback": (
                [lbtune("--netns", NS, "apply", "web", "--yes"), lbtune("--netns", NS, "rollback")],
                env,
            ),
            "runbook netns sysctl -p + loop, undo": (
                [
                    ["ip", "netns", "exec", NS, "sysctl", "-q", "-p", str(conf)],
                    ["ip", "netns", "exec", NS, "bash", "-c", loop],
                    ["ip", "netns", "exec", NS, "sysctl", "-q", "-p", str(saved)],
                    ["ip", "netns", "exec", NS, "bash", "-c", undo],
                ],
                None,
            ),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for name, (steps, e) in cases.items():
                times[name].append(timed(steps, e))
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = {
        "lbtune fixture apply lb-dr + rollback": "python3 -c pass",
        "lbtune netns apply web + rollback": "runbook netns sysctl -p + loop, undo",
    }
    results = [
        {
            "case": k,
            "median_ms": round(m, 1),
            "baseline": base.get(k, ""),
            "ratio": round(m / med[base[k]], 2) if k in base else 1.0,
        }
        for k, m in med.items()
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rounds": args.rounds, "results": results}, indent=2) + "\n")
    lines = ["| case | median ms | ratio | baseline |", "|---|---:|---:|---|"]
    lines += [
        f"| {r['case']} | {r['median_ms']} | {r['ratio']} | {r['baseline']} |" for r in results
    ]
    md = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
