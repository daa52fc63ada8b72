"""IPVS benchmark: reconcile at kube-proxy size vs `ipvsadm -R` of the same table.

Usage: python bench/ipvs.py [--rounds N] [--big-rounds N] [--out FILE]   (in the UML lab)

One lab boot. Tables: VIPs (on a dummy interface, placed before timing) x 100 ports, each
service wrr with real servers of different weights. Every step is a fresh process, and
each case is measured against `ipvsadm -R` of the same table in the same run:

- 1,000 services x 10 real servers (11,000 objects), `--rounds` interleaved rounds of:
  `ipvsadm -R` into an empty table; `lbtune ipvs apply` of the same table as a config into
  an empty table (start-up, TOML parse and validation, kernel read, plan, journal,
  pipelined changes, read-back); the apply again (the level-triggered no-op, 0
  operations: the full run, which records the no-op); a third time (the repeated no-op,
  answered from that record by lbtune.cli.ipvs.fast, which lbtune.host.ipvs.memo checks;
  checked: the record is not rewritten);
  `lbtune ipvs plan` of the same config (what the Ansible collection runs in check mode),
  answered from the record (checked once per case by an untimed run under `-X importtime`:
  click, which the full run imports, must not be imported) and the full plan (forced with
  `--debug`); one weight edit (a config differing in one real server's weight: 1
  operation); `python3 -c pass`, the start-up floor; then, with `lbtune ipvs serve`
  running (the resident reconciler), as many rounds of: the edit, the edit back, the
  no-op, each a fresh `lbtune ipvs apply` process that hands its work to the server
  (checked: the server's log answers each), and the server's peak memory;
- 10,000 services x 5 real servers (60,000 objects, kube-proxy's scale), `--big-rounds`
  rounds of the same steps; each process's peak memory (ru_maxrss) is reported, with the
  floor a child of the spawner that starts them reports (see `_SPAWNER`);
- one `adapt` poll round at 1,000 x 10 (in process, agent reports injected: one server
  says down), counted by tests/lab/guest/adapt_rounds.py: the round that changes a weight
  and the round after it that changes nothing, against adapt's default 2 s interval.

lbtune's bytecode is compiled before the lab boots (`compile_bytecode`), as an installed
package has it. Medians are reported as ratios to `ipvsadm -R` measured in the same run;
the results go to bench/results/ipvs.json and ipvs.md. The table is flushed with
`ipvsadm -C` between rounds (outside the timings).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Optional

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/ipvs",
    "lbtune/lab",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PORTS = range(1000, 1100)  # each VIP carries 100 services
REALS = 10


def vips(services: int) -> list[str]:
    return [f"10.200.{i // 250}.{i % 250 + 1}" for i in range(max(1, services // len(PORTS)))]


def table_config(services: int = 1000, reals: int = REALS) -> str:
    out = ["[director]\ndrain_timeout = 0\n"]
    for vip in vips(services):
        for port in PORTS:
            out.append(f'[[service]]\naddress = "{vip}"\nport = {port}\nscheduler = "wrr"\n')
            for r in range(reals):
                out.append(f'[[service.real_server]]\naddress = "10.201.{r}.{port % 250}"\n'
                           f"weight = {r + 1}\n")
    return "".join(out)


def restore_lines(services: int = 1000, reals: int = REALS) -> str:
    out = []
    for vip in vips(services):
        for port in PORTS:
            out.append(f"-A -t {vip}:{port} -s wrr")
            for r in range(reals):
                out.append(f"-a -t {vip}:{port} -r 10.201.{r}.{port % 250}:{port} -g -w {r + 1}")
    return "\n".join(out) + "\n"


def lab_setup(services: int = 1000) -> None:
    """Inside the lab: IPVS and its wrr scheduler loaded, the VIPs on a dummy interface."""
    for m in ("ip_vs", "ip_vs_wrr", "dummy"):
        subprocess.run(["modprobe", m], check=True)
    if subprocess.run(["ip", "link", "show", "vip0"], capture_output=True).returncode != 0:
        subprocess.run(["ip", "link", "add", "vip0", "type", "dummy"], check=True)
        subprocess.run(["ip", "link", "set", "vip0", "up"], check=True)
    batch = "".join(f"address replace {vip}/32 dev vip0\n" for vip in vips(services))
    subprocess.run(["ip", "-batch", "-"], input=batch, text=True, check=True)
    os.environ["LBTUNE_STATE_DIR"] = "/tmp/lbtune-state"


def compile_bytecode() -> None:
    """lbtune's bytecode compiled before a run, as an installed package has it (`pip
    install` compiles it). The lab guest runs Python with PYTHONDONTWRITEBYTECODE and the
    working tree has no __pycache__ by itself: without this, every `lbtune` process of
    the run compiled the source of every module it imports, a cost no installation pays."""
    import compileall

    if not compileall.compile_dir(str(ROOT / "lbtune"), quiet=1):
        raise RuntimeError("compileall failed for lbtune")


# The measured processes are started by this small process, not by the bench: a child's
# ru_maxrss starts at the resident size of the process it was forked from (Linux carries the
# old memory's high-water mark through exec), and the bench holds 60,000-line tables, so
# children it forked itself reported its size (109 MiB for ipvsadm -R). This one stays small
# (`python3 -S`, nothing imported but json); `floor_kib` is what a child of it reports at
# least (`/bin/true`: 9.5 MiB in the lab), so a peak at the floor means "at most that".
_SPAWNER = r"""
import json, os, sys, time
for line in sys.stdin:
    req = json.loads(line)
    fds = [os.open(req["stdin"], os.O_RDONLY), os.open(req["stdout"], os.O_WRONLY),
           os.open(req["stderr"], os.O_WRONLY)]
    acts = [(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)]
    t0 = time.perf_counter()
    try:
        pid = os.posix_spawnp(req["argv"][0], req["argv"], os.environ, file_actions=acts)
    except OSError as exc:
        os.write(fds[2], str(exc).encode())
        ms, code, rss = 0.0, 127, 0
    else:
        _, status, usage = os.wait4(pid, 0)
        ms = (time.perf_counter() - t0) * 1000
        code, rss = os.waitstatus_to_exitcode(status), usage.ru_maxrss
    for fd in fds:
        os.close(fd)
    print(json.dumps([ms, code, rss]), flush=True)
"""
_spawner: Optional[subprocess.Popen[str]] = None


def _spawn(argv: list[str], fin: str, fout: str, ferr: str) -> tuple[float, int, int]:
    global _spawner
    if _spawner is None:
        _spawner = subprocess.Popen([sys.executable, "-S", "-c", _SPAWNER],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert _spawner.stdin is not None and _spawner.stdout is not None
    _spawner.stdin.write(json.dumps({"argv": argv, "stdin": fin, "stdout": fout,
                                     "stderr": ferr}) + "\n")  # fmt: skip
    _spawner.stdin.flush()
    line = _spawner.stdout.readline()
    if not line:
        raise RuntimeError("the spawner died")
    ms, code, kib = json.loads(line)
    return float(ms), int(code), int(kib)


def _run(argv: list[str], stdin: Optional[str] = None) -> tuple[float, str, int]:
    """Run `argv` (through the spawner): (wall ms, stdout, peak resident KiB)."""
    with tempfile.TemporaryDirectory() as d:
        fin, fout, ferr = (os.path.join(d, n) for n in ("in", "out", "err"))
        pathlib.Path(fin).write_text(stdin or "")
        pathlib.Path(fout).touch()
        pathlib.Path(ferr).touch()
        ms, code, kib = _spawn(argv, fin, fout, ferr)
        out, err = pathlib.Path(fout).read_text(), pathlib.Path(ferr).read_text()
    if code != 0:
        raise RuntimeError(f"{argv[:3]}: exit {code}: {err[:300]}")
    return ms, out, kib


def floor_kib() -> int:
    """The least peak a child of the spawner reports: /bin/true's."""
    return min(_run(["/bin/true"])[2] for _ in range(3))


def _edited(config: str) -> str:
    """The config with the weight of its first real server changed (one edit in place)."""
    return config.replace("weight = 1\n", "weight = 7\n", 1)


def table_case(services: int, reals: int, rounds: int) -> dict[str, Any]:
    """The interleaved rounds of one table size: timings, operations, peak memory."""
    cfg, edit = f"/tmp/table-{services}.toml", f"/tmp/table-{services}-edit.toml"
    text = table_config(services, reals)
    pathlib.Path(cfg).write_text(text)
    pathlib.Path(edit).write_text(_edited(text))
    rules = restore_lines(services, reals)
    lbtune = [sys.executable, "-m", "lbtune"]
    steps = ("ipvsadm", "apply", "noop", "memo", "plan", "plan_full", "edit", "floor",
             "serve_edit", "serve_noop")
    lbtune_steps = ("apply", "noop", "memo", "plan", "plan_full", "edit", "serve_edit",
                    "serve_noop")
    times: dict[str, list[float]] = {k: [] for k in steps}
    ops: dict[str, list[int]] = {k: [] for k in lbtune_steps}
    rss: dict[str, list[int]] = {k: [] for k in ("ipvsadm", *lbtune_steps)}
    answered: list[bool] = []  # the repeated no-op came from the record (not rewritten)

    def lb(step: str, path: str, command: str = "apply", *extra: str) -> None:
        ms, out, kib = _run([*lbtune, "ipvs", command, path, "--json", *extra])
        times[step].append(ms)
        rss[step].append(kib)
        ops[step].append(json.loads(out)["operations"])

    for _ in range(rounds):
        _run(["ipvsadm", "-C"])
        ms, _, kib = _run(["ipvsadm", "-R"], rules)
        times["ipvsadm"].append(ms)
        rss["ipvsadm"].append(kib)
        saved_ipvsadm = _run(["ipvsadm", "-S", "-n"])[1]
        _run(["ipvsadm", "-C"])
        lb("apply", cfg)
        same = _run(["ipvsadm", "-S", "-n"])[1] == saved_ipvsadm
        lb("noop", cfg)  # the full run: finds nothing to change and records that
        before = _memo_stat()
        lb("memo", cfg)  # the repeated no-op: answered from the record
        answered.append(before is not None and _memo_stat() == before)
        lb("plan", cfg, "plan")  # Ansible's check mode: from the record
        lb("plan_full", cfg, "plan", "--debug")  # the full plan (--debug skips the record)
        if len(answered) == 1:
            _plan_from_record(cfg)
        lb("edit", edit)
        _run([*lbtune, "ipvs", "apply", cfg])  # back to the table (not timed)
        times["floor"].append(_run([sys.executable, "-c", "pass"])[0])
        if not same:
            raise RuntimeError("lbtune and ipvsadm -R built different tables")
    if not all(answered):
        raise RuntimeError(f"the repeated no-op was not answered from its record: {answered}")
    server_kib = _serve_rounds(cfg, edit, rounds, lb)
    _run(["ipvsadm", "-C"])
    return {"times": times, "ops": ops, "rss_kib": rss, "services": services,
            "dests": services * reals, "reals": reals, "rounds": rounds,
            "server_kib": server_kib}


SERVE_LOG = "/tmp/serve-bench.log"


def _served() -> int:
    return pathlib.Path(SERVE_LOG).read_text().count("lbtune ipvs serve: apply ")


def _serve_rounds(cfg: str, edit: str, rounds: int, lb: Any) -> int:
    """The same edit and no-op handed to `lbtune ipvs serve` (started here, warmed by one
    untimed apply: the first request reads every section and decodes the table): per round
    the edit, the edit back (both 1 operation) and the no-op. Checked: the server answered
    every one (its log). Returns the server's peak resident KiB (VmHWM)."""
    import signal
    import time

    pathlib.Path(SERVE_LOG).write_text("")
    with open(SERVE_LOG, "ab") as err:
        server = subprocess.Popen([sys.executable, "-m", "lbtune", "ipvs", "serve"],
                                  stderr=err, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while "listening on" not in pathlib.Path(SERVE_LOG).read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"lbtune ipvs serve: {pathlib.Path(SERVE_LOG).read_text()}")
            time.sleep(0.1)
        _run([sys.executable, "-m", "lbtune", "ipvs", "apply", cfg])  # warm, not timed
        for _ in range(rounds):
            lb("serve_edit", edit)
            lb("serve_edit", cfg)
            lb("serve_noop", cfg)
        if _served() != 1 + 3 * rounds:
            raise RuntimeError(f"the server did not answer every run: {_served()} answers")
        status = pathlib.Path(f"/proc/{server.pid}/status").read_text()
        hwm = next(ln for ln in status.splitlines() if ln.startswith("VmHWM:"))
        return int(hwm.split()[1])
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def _plan_from_record(cfg: str) -> None:
    """An untimed `ipvs plan` under `-X importtime`: the record answered it when click (the
    command line, which the full run imports first) was never imported."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lbtune", "ipvs", "plan",
                        cfg, "--json"], capture_output=True, text=True, check=True)  # fmt: skip
    imported = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines()
                if line.startswith("import time:")}  # fmt: skip
    if "click" in imported or "lbtune.host.ipvs.memo" not in imported:
        raise RuntimeError("`ipvs plan` was not answered from the record (click imported)")


def _memo_stat() -> Optional[tuple[int, int]]:
    """(inode, mtime) of the no-op record: a full no-op rewrites it (a new inode), the
    answer from the record leaves it as it was."""
    import glob

    found = glob.glob(f"{os.environ['LBTUNE_STATE_DIR']}/hosts/*/ipvs-noop.memo")
    if len(found) != 1:
        return None
    st = os.stat(found[0])
    return st.st_ino, st.st_mtime_ns


def adapt_case(services: int, reals: int) -> dict[str, Any]:
    """One adapt poll round that changes a weight, and the one after it (changes nothing),
    with their netlink requests counted."""
    sys.path.insert(0, str(ROOT))
    from tests.lab.guest.adapt_rounds import run

    return run(services, reals, 2)


def guest(rounds: int, big_rounds: int) -> dict[str, Any]:
    """Inside the lab: the timings, and what each lbtune run reported."""
    lab_setup(10_000 if big_rounds else 1000)
    out: dict[str, Any] = {"cases": [table_case(1000, REALS, rounds)],
                           "kernel": os.uname().release,
                           "floor_kib": floor_kib()}
    if big_rounds:
        out["cases"].append(table_case(10_000, 5, big_rounds))
    out["adapt"] = adapt_case(1000, REALS)
    return out


@dataclass
class Row:
    case: str
    median_ms: float
    ratio: float
    baseline: str
    operations: Optional[int] = None
    peak_mib: Optional[float] = None


def _rows(case: dict[str, Any]) -> list[Row]:
    med = {k: statistics.median(x) for k, x in case["times"].items()}
    rss = {k: max(x) for k, x in case["rss_kib"].items()}
    base = "ipvsadm -R"
    size = f"{case['services']}x{case['reals']}"

    def row(name: str, key: str, ops: bool = True) -> Row:
        return Row(f"{size} {name}", round(med[key], 1), round(med[key] / med["ipvsadm"], 3),
                   base, max(case["ops"][key]) if ops else None,
                   round(rss[key] / 1024, 1) if key in rss else None)

    return [
        Row(f"{size} {base}", round(med["ipvsadm"], 1), 1.0, "", None,
            round(rss["ipvsadm"] / 1024, 1)),
        row("lbtune ipvs apply (empty table)", "apply"),
        row("lbtune ipvs apply again (no-op: the full run, which records it)", "noop"),
        row("lbtune ipvs apply a third time (repeated no-op: from the record)", "memo"),
        row("lbtune ipvs plan (check mode: from the record)", "plan"),
        row("lbtune ipvs plan --debug (the full plan)", "plan_full"),
        row("lbtune ipvs apply, one weight edit", "edit"),
        row("lbtune ipvs apply, one weight edit, through lbtune ipvs serve", "serve_edit"),
        row("lbtune ipvs apply (no-op) through lbtune ipvs serve", "serve_noop"),
        row("python3 -c pass (start-up floor)", "floor", ops=False),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    # as bench/results/ipvs.* (tests/unit/test_bench_settings.py)
    ap.add_argument("--rounds", type=int, default=4, help="rounds at 1,000 x 10")
    ap.add_argument("--big-rounds", type=int, default=3, help="rounds at 10,000 x 5 (0: none)")
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "ipvs.json")
    args = ap.parse_args()
    from bench.results_io import run_meta, write_json
    from lbtune.lab.guests.uml import run_in_lab

    compile_bytecode()
    load_before = os.getloadavg()[0]
    res = run_in_lab("bench.ipvs:guest", args.rounds, args.big_rounds, timeout=7200,
                     cwd=str(ROOT))
    load = (round(load_before, 1), round(os.getloadavg()[0], 1))  # the machine is shared
    v = res.value
    rows = [r for case in v["cases"] for r in _rows(case)]
    adapt = v["adapt"]
    changed, quiet = adapt["rounds"][0], adapt["rounds"][1]
    meta = run_meta(args.rounds, big_rounds=args.big_rounds, lab_kernel=v["kernel"],
                    cases=[{k: c[k] for k in ("services", "dests", "rounds", "times", "ops",
                                              "rss_kib", "server_kib")} for c in v["cases"]],
                    adapt=adapt, host_load_1min=load,
                    peak_floor_kib=v["floor_kib"])  # fmt: skip
    write_json(args.out, meta, rows)
    md = [f"IPVS reconcile vs `ipvsadm -R` of the same table, at commit {meta['commit']}, "
          f"lab kernel {v['kernel']}; "
          f"{args.rounds} rounds at 1000x10 (11,000 objects), {args.big_rounds} at 10000x5 "
          "(60,000 objects); medians, fresh process per step, both sides in the same run. "
          "Peak memory is the process's ru_maxrss, started by a small spawner (a child of it "
          f"reports at least {v['floor_kib'] / 1024:.1f} MiB, `/bin/true`'s: a value at that "
          "floor means at most that). lbtune's bytecode compiled before the run "
          "(as `pip install` does). Host load average (1 min) before/after the "
          f"run: {load[0]}/{load[1]} on {os.cpu_count()} CPUs.", "",
          "| case | median ms | ratio | baseline | operations | peak MiB |",
          "|---|---:|---:|---|---:|---:|"]
    for r in rows:
        n = "" if r.operations is None else str(r.operations)
        mib = "" if r.peak_mib is None else str(r.peak_mib)
        md.append(f"| {r.case} | {r.median_ms} | {r.ratio} | {r.baseline} | {n} | {mib} |")
    md += ["", "Peak resident memory of `lbtune ipvs serve` (VmHWM) after its rounds: "
           + ", ".join(f"{c['services']}x{c['reals']}: {c['server_kib'] / 1024:.1f} MiB"
                       for c in v["cases"]) + "."]
    md += ["", f"`adapt` poll round at {adapt['objects']} objects (in process, agents "
           "injected; interval 2000 ms):", "",
           "| round | ms | table reads | per-service reads | weights written | locks |",
           "|---|---:|---:|---:|---:|---:|"]
    for name, r in (("an agent says down: its weights go to 0", changed),
                    ("the next round: nothing changes", quiet)):
        md.append(f"| {name} | {r['ms']:.1f} | {r['table_reads']} | {r['service_reads']} | "
                  f"{r['changes']} | {r['locks']} |")
    args.out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
