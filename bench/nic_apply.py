"""NIC families benchmark: apply + rollback of the NIC knob families (features, coalesce,
pause, rss_hash, rss_indir, flow_rules) with lbtune, against a baseline in the same run.

Usage: python bench/nic_apply.py [--rounds N] [--out FILE]   (root; creates and deletes a netns)

Cases, each step a fresh process, rounds interleaved, medians reported as ratios:
- netns (the live kernel path, ethtool ioctls on a veth): `lbtune --netns NS apply P --yes`
  + `lbtune --netns NS rollback`, P setting on v0 `features.gro = on` (a veth's default is
  off), `features.rx-udp-gro-forwarding = on` and `features.tx = off` (the alias: the
  tx-checksum-* members a veth can change), against the runbook doing the same by hand, each
  step a command in the namespace (`ip netns exec`): save `ethtool -k v0` to a file,
  `ethtool -K v0 gro on rx-udp-gro-forwarding on tx off`, and to roll back `ethtool -K` the
  three saved values (read from the saved file). After the rounds, `ethtool -k v0` must print
  what it printed before them (checked outside the timing).
- fixture (every NIC family, through the fixture's recorded setters): `lbtune --root <copy of
  the 48-CPU fixture> plan P` alone, and `apply P --yes` + `rollback`, P setting on the mlx5
  port ens1f0np0 one knob of each family (6 changes, see FIXTURE_PROFILE), against the
  `python3 -c pass` start-up floor (a fixture has no runbook equivalent). After the rounds the
  copy must equal the fixture again (`diff -r`, outside the timing).
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
from typing import Callable

from results_io import run_meta
from tune import Saved, Step, lbtune, run, timed

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/tune",
    "tests/data/hosts/dell-r750-mlx5-ixgbe",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
FIXTURE = ROOT / "tests" / "data" / "hosts" / "dell-r750-mlx5-ixgbe"
NS = f"lbtune-nicbench-{os.getpid()}"
RUNBOOK = "runbook netns: ethtool -k > saved, ethtool -K, ethtool -K saved values"
FLOOR = "python3 -c pass"
FLOOR2 = "python3 -c pass, twice (start-up floor of apply + rollback)"
PLAN = "lbtune fixture plan (6 NIC knobs)"
APPLY = "lbtune fixture apply + rollback (6 NIC knobs)"
NETNS = "lbtune netns apply + rollback (veth features)"
# On a veth: ethtool's word -> (the line of `ethtool -k` that holds its value, the target).
VETH_FEATURES = {
    "gro": ("generic-receive-offload", "on"),
    "rx-udp-gro-forwarding": ("rx-udp-gro-forwarding", "on"),
    "tx": ("tx-checksumming", "off"),
}
NETNS_PROFILE = "".join(
    f'features.{k} = {{ value = "{v}", reason = "bench" }}\n' for k, (_, v) in VETH_FEATURES.items()
)
# One knob of each NIC family on the fixture's mlx5 port (each plans as a change).
FIXTURE_PROFILE = """\
coalesce.rx-usecs = { value = 16, reason = "bench: coalesce" }
features.rx-udp-gro-forwarding = { value = "on", reason = "bench: feature" }
pause.rx = { value = "off", reason = "bench: pause" }
rss_hash = { udp4 = "sd", reason = "bench: rss_hash" }
rss_indir = { value = "equal 16", reason = "bench: rss_indir" }
flow_rules = { rules = ["flow-type tcp4 dst-port 179"], queue = 2, reason = "bench: flow rule" }
"""

def restore_argv(ns: list[str], saved: pathlib.Path) -> Callable[[], list[str]]:
    """The runbook's rollback: `ethtool -K v0` with the values the saved `ethtool -k` shows."""

    def argv() -> list[str]:
        values = {}
        for line in saved.read_text().splitlines():
            name, _, value = line.strip().partition(": ")
            values[name] = value.split()[0] if value else ""
        out = [*ns, "ethtool", "-K", "v0"]
        for word, (line, _) in VETH_FEATURES.items():
            out += [word, values[line]]
        return out

    return argv


def changed(k: str) -> bool:
    """Whether `ethtool -k v0` output shows every VETH_FEATURES target."""
    lines = {line.strip() for line in k.splitlines()}
    return all(f"{line}: {value}" in lines for line, value in VETH_FEATURES.values())


def profile(tmp: pathlib.Path, name: str, nic: str, body: str) -> str:
    p = tmp / f"{name}.toml"
    p.write_text(f'[profile]\nname = "{name}"\n\n[nic.{nic}]\n{body}')
    return str(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)  # bench/results/nic_apply.* were made with 15
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "nic_apply.json")
    args = ap.parse_args()
    # What an installed package has: byte-compiled modules (PYTHONDONTWRITEBYTECODE may be set).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "lbtune")], check=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lbtune-nicbench-"))
    copy = tmp / "host"
    shutil.copytree(FIXTURE, copy, symlinks=True)
    env = dict(os.environ, LBTUNE_STATE_DIR=str(tmp / "state"))
    fixture_p = profile(tmp, "nic-families", "ens1f0np0", FIXTURE_PROFILE)
    veth_p = profile(tmp, "veth-features", "v0", NETNS_PROFILE)
    ns = ["ip", "netns", "exec", NS]
    run(["ip", "netns", "add", NS])
    try:
        run(["ip", "-n", NS, "link", "add", "v0", "numrxqueues", "4", "numtxqueues", "4",
             "type", "veth", "peer", "name", "v1"])  # fmt: skip
        before = run([*ns, "ethtool", "-k", "v0"])
        plan = run(lbtune("--root", str(copy), "plan", fixture_p), env)
        if "6 change(s), 0 already in place" not in plan:
            raise SystemExit(f"the fixture profile does not plan 6 changes:\n{plan}")
        saved = tmp / "saved-k.txt"
        change = [*ns, "ethtool", "-K", "v0"]
        for word, (_, value) in VETH_FEATURES.items():
            change += [word, value]
        cases: dict[str, tuple[list[Step], dict[str, str] | None]] = {
            FLOOR: ([[sys.executable, "-c", "pass"]], None),
            FLOOR2: ([[sys.executable, "-c", "pass"], [sys.executable, "-c", "pass"]], None),
            PLAN: ([lbtune("--root", str(copy), "plan", fixture_p)], env),
            APPLY: (
                [
                    lbtune("--root", str(copy), "apply", fixture_p, "--yes"),
                    lbtune("--root", str(copy), "rollback"),
                ],
                env,
            ),
            NETNS: (
                [
                    lbtune("--netns", NS, "apply", veth_p, "--yes"),
                    lbtune("--netns", NS, "rollback"),
                ],
                env,
            ),
            RUNBOOK: (
                [Saved([*ns, "ethtool", "-k", "v0"], saved), change, restore_argv(ns, saved)],
                None,
            ),
        }
        # Once, untimed: both ways make the change on v0 and their rollback undoes it.
        for way in (NETNS, RUNBOOK):
            steps = cases[way][0]
            for step in steps[:-1]:
                run(step() if callable(step) else step, cases[way][1])
            if not changed(run([*ns, "ethtool", "-k", "v0"])):
                raise SystemExit(f"{way}: v0's features are not the targets after apply")
            last = steps[-1]
            run(last() if callable(last) else last, cases[way][1])
            if run([*ns, "ethtool", "-k", "v0"]) != before:
                raise SystemExit(f"{way}: v0's features differ after rollback")
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.rounds):
            for name, (steps, e) in cases.items():
                times[name].append(timed(steps, e))
        after = run([*ns, "ethtool", "-k", "v0"])
        if after != before:
            raise SystemExit("v0's features differ from before the rounds")
        diff = subprocess.run(["diff", "-r", "--no-dereference", str(FIXTURE), str(copy)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if diff.returncode != 0:
            out = (diff.stdout + diff.stderr)[:1000]
            raise SystemExit(f"the fixture copy differs after rollback:\n{out}")
    finally:
        subprocess.run(["ip", "netns", "del", NS], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = {PLAN: FLOOR, APPLY: FLOOR, NETNS: RUNBOOK, FLOOR2: RUNBOOK}
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
    meta = run_meta(args.rounds)
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    lines = [
        f"# NIC families apply + rollback benchmark ({meta['date']}, Python {meta['python']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds)",
        "",
        "| case | median ms | ratio | baseline |",
        "|---|---:|---:|---|",
    ]
    lines += [
        f"| {r['case']} | {r['median_ms']} | {r['ratio']} | {r['baseline']} |" for r in results
    ]
    md = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
