"""Where a no-op `lbtune ipvs apply` of 1,000 services x 10 real servers spends its time.

Usage: python bench/ipvs_profile.py [--out FILE]   (runs inside the UML lab kernel)

One lab boot. The table of bench/ipvs.py is loaded with `ipvsadm -R` and applied once with
lbtune (so a journal of 11,000 records exists, as after a real first apply). Then:

- fresh processes: `python3 -c pass` (the floor), the imports of the apply path, and the
  whole no-op `lbtune ipvs apply` as the full run (`--debug` keeps it from the record;
  median of 3 each; lbtune's bytecode compiled first, as an installed package has it),
  the repeated no-op answered from the record of the last full one (lbtune.host.ipvs.memo),
  and the full no-op from a copy of the source without bytecode (every module compiled in
  every run);
- in one process, each phase of the no-op timed on its own (median of 3): config parse,
  host facts, the netlink dump (bytes only), decoding the replies, the full table read,
  the planner's targets, the plan (every target compared, as `plan -v`; and without rows
  for services in place, as apply), the engine's lock and journal check; the whole
  in-process reconcile as the CLI runs it (cycle collector on, as a library caller has it);
- a cProfile of the in-process no-op `apply_director`, its top functions by own time.

Results go to bench/results/ipvs_profile.json and .md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pathlib
import pstats
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/ipvs",
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.ipvs import compile_bytecode, lab_setup, restore_lines, table_config  # noqa: E402

REPEAT = 3


def _ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def _median_ms(fn: Callable[[], Any]) -> float:
    return statistics.median(_ms(fn)[0] for _ in range(REPEAT))


def _proc(argv: list[str]) -> float:
    def run() -> None:
        subprocess.run(argv, check=True, capture_output=True)
    return _median_ms(run)


def guest(services: int, reals: int) -> dict[str, Any]:
    lab_setup()
    cfg_path = "/tmp/table.toml"
    pathlib.Path(cfg_path).write_text(table_config(services, reals))
    subprocess.run(["ipvsadm", "-C"], check=True)
    subprocess.run(["ipvsadm", "-R"], input=restore_lines(services, reals), text=True,
                   check=True)
    subprocess.run(["ipvsadm", "-C"], check=True)
    lbtune = [sys.executable, "-m", "lbtune"]
    subprocess.run([*lbtune, "ipvs", "apply", cfg_path, "--json"], check=True,
                   capture_output=True)  # the first apply: a journal of every object
    fresh = {
        "python3 -c pass": _proc([sys.executable, "-c", "pass"]),
        "imports of the apply path": _proc([sys.executable, "-c",
                                            "import lbtune.cli.main, lbtune.cli.ipvs.commands, "
                                            "lbtune.ipvs.reconcile, lbtune.ipvs.config"]),
        # --debug (tracebacks on errors: nothing else) keeps the full run: a plain repeated
        # no-op is answered from the record of the last full one
        "lbtune ipvs apply (no-op), whole process": _proc(
            [*lbtune, "ipvs", "apply", cfg_path, "--json", "--debug"]),
    }
    subprocess.run([*lbtune, "ipvs", "apply", cfg_path, "--json"], check=True,
                   capture_output=True)  # a full no-op: it records
    fresh["lbtune ipvs apply (repeated no-op, from the record), whole process"] = _proc(
        [*lbtune, "ipvs", "apply", cfg_path, "--json"])
    # The same from a copy of the source without bytecode: every module compiled each run
    # (as this bench measured before it compiled lbtune's bytecode first).
    copy = "/tmp/nobytecode"
    shutil.copytree(ROOT / "lbtune", f"{copy}/lbtune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    probe = subprocess.run([sys.executable, "-c", "import lbtune; print(lbtune.__file__)"],
                           check=True, capture_output=True, text=True, cwd=copy)
    if not probe.stdout.startswith(f"{copy}/"):
        raise RuntimeError(f"the copy without bytecode is not the one imported: {probe.stdout}")
    fresh["lbtune ipvs apply (no-op), whole process, no bytecode"] = _median_ms(
        lambda: subprocess.run([*lbtune, "ipvs", "apply", cfg_path, "--json", "--debug"],
                               check=True, capture_output=True, cwd=copy))

    from lbtune.host.host import Host
    from lbtune.host.ipvs.table import (
        CMD_GET_DEST,
        CMD_GET_SERVICE,
        IpvsSocket,
        decode_dest,
        decode_service,
        ipvs_of,
        read_table,
        service_attrs,
    )
    from lbtune.ipvs.config import check_host, load_config
    from lbtune.ipvs.reconcile import apply_director, desired_targets, host_facts, in_place
    from lbtune.tune.engine import apply_plan
    from lbtune.tune.journal import StateDir
    from lbtune.tune.knobs.ipvs import Drain
    from lbtune.tune.plan import make_plan

    host = Host.open()
    state = StateDir(host)
    sock = IpvsSocket()
    cfg = load_config(cfg_path)
    svc_bodies = sock.dump(CMD_GET_SERVICE)
    svcs = [s for s in (decode_service(b, False) for b in svc_bodies) if s is not None]

    def dump() -> list[list[bytes]]:
        sock.dump(CMD_GET_SERVICE)
        return [sock.dump(CMD_GET_DEST, service_attrs(s.key)) for s in svcs]

    dest_bodies = dump()

    def decode() -> None:
        for b in svc_bodies:
            decode_service(b, False)
        for s, bodies in zip(svcs, dest_bodies):
            for b in bodies:
                decode_dest(b, s.key.family, False)

    table = {s.key: s for s in read_table(sock, False)}
    drain = Drain(cfg.drain_timeout)
    targets = desired_targets(cfg, table, drain)

    def plan() -> Any:
        ipvs_of(host).assume(table.values())
        return make_plan(host, "ipvs profile", targets)

    empty = plan()

    def short_plan() -> Any:
        ipvs_of(host).assume(table.values())
        return make_plan(host, "ipvs profile",
                         desired_targets(cfg, table, drain, in_place(cfg, table)))

    def memo_digest() -> str:
        from lbtune.host.ipvs.memo import table_digest

        return table_digest()

    def lock_journal() -> None:
        with state.lock():
            apply_plan(host, empty, state)

    phases = {
        "config parse (load_config)": _median_ms(lambda: load_config(cfg_path)),
        "host facts + check": _median_ms(lambda: check_host(cfg, host_facts(host))),
        "netlink dump (bytes only)": _median_ms(dump),
        "decode replies": _median_ms(decode),
        "table read (dump + decode + objects)": _median_ms(lambda: read_table(sock, False)),
        "targets (desired_targets)": _median_ms(lambda: desired_targets(cfg, table, drain)),
        "plan, every row (make_plan, table cached; plan -v)": _median_ms(plan),
        "plan without rows for services in place (in_place + make_plan)":
            _median_ms(short_plan),
        "lock + journal check (apply_plan, empty)": _median_ms(lock_journal),
        "the record's check: table digest (dump + settings cut, ipvs_memo.read_digest)":
            _median_ms(memo_digest),
    }
    sock.close()

    def whole() -> None:
        ipvs_of(host).invalidate()
        apply_director(host, load_config(cfg_path), state, every_row=False)  # as the CLI

    phases["in-process apply_director (all of the above)"] = _median_ms(whole)
    prof = cProfile.Profile()
    ipvs_of(host).invalidate()
    prof.enable()
    apply_director(host, load_config(cfg_path), state, every_row=False)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
    return {"fresh": fresh, "phases": phases, "profile": buf.getvalue(),
            "services": services, "reals": reals, "kernel": os.uname().release}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--reals", type=int, default=10)
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "ipvs_profile.json")
    args = ap.parse_args()
    from bench.results_io import run_meta
    from lbtune.lab.guests.uml import run_in_lab

    compile_bytecode()
    v = run_in_lab("bench.ipvs_profile:guest", args.services, args.reals, timeout=3600,
                   cwd=str(ROOT)).value
    objects = v["services"] * (1 + v["reals"])
    meta = run_meta(REPEAT, lab_kernel=v["kernel"], services=v["services"],
                    real_servers=v["reals"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "fresh_ms": v["fresh"],
                                    "phases_ms": v["phases"], "profile": v["profile"]},
                                   indent=2) + "\n")
    md = [f"No-op `lbtune ipvs apply`: {v['services']} services x {v['reals']} real servers "
          f"({objects} objects), lab kernel {v['kernel']}, medians of {REPEAT}.", "",
          "| step | ms |", "|---|---:|"]
    md += [f"| {k} (fresh process) | {ms:.1f} |" for k, ms in v["fresh"].items()]
    md += [f"| {k} | {ms:.1f} |" for k, ms in v["phases"].items()]
    md += ["", "cProfile of the in-process no-op, by own time:", "", "```",
           v["profile"].strip(), "```"]
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
