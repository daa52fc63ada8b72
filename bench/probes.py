"""Probe overhead benchmark: packets per second of a 64-byte UDP flood with and without probes.

Usage: python bench/probes.py [--rounds N] [--seconds S] [--out FILE]      (root; bcc)

Two throwaway namespaces A and B joined by a veth pair; bench/udpflood.c (built here with
gcc) floods 64-byte frames from A to a UDP socket in B that never reads, pinned to CPU 0,
for S seconds (default 5: lbtune samples its BPF statistics 1 s in every 5 s, and a 5 s
flood that starts 0.5 s after the probes attach holds 1 s of statistics). Every datagram
is received by B's veth and then dropped by the full socket (SOCKET_RCVBUFF), so every
packet is one event for each probe: the worst case for the drops probe. PPS = B's veth
rx_packets over the flood / S; per CPU-s = packets per CPU-second of the flood process.

Cases, rounds interleaved, medians reported as ratios to the no-probe case of the same run:
- no probe (baseline)
- `lbtune --netns B probe queues --iface <B's veth>`
- `lbtune --netns B probe drops`
- bcc's `netqtop -n <B's veth>` (in B, tracefs mounted privately by `ip netns exec`)
- `lbtune --netns B probe drops queues napi --iface <B's veth>`
- floors: an empty BPF program on the queues probe's tracepoints, and on skb:kfree_skb.
  This is what any tracepoint-based probe pays before doing any work.
lbtune's own cost (ns/event, from the kernel's BPF statistics) is recorded per round.
Nothing on the host changes: namespaces, and mounts in private mount namespaces.
Results go to bench/results/probes.json and .md; nothing here asserts a number.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/observe",
    "probes",
    "bench/udpflood.c",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
A_IP, B_IP, PORT = "10.88.0.1", "10.88.0.2", 9000
BASELINE = "no probe"
RX_AND_TX = ["net:net_dev_start_xmit", "net:netif_receive_skb_entry", "net:napi_gro_receive_entry",
             "net:napi_gro_frags_entry", "net:netif_receive_skb_list_entry", "net:netif_rx_entry"]
# An empty program on some tracepoints, loaded by bcc, held until SIGINT.
FLOOR = """
import signal, sys
from bcc import BPF, lib
b = BPF(text="int lbt_floor(void *ctx) { return 0; }")
fn = b.load_func("lbt_floor", BPF.TRACEPOINT)
fds = [lib.bpf_attach_tracepoint(fn.fd, *(p.encode() for p in tp.split(":")))
       for tp in sys.argv[1:]]
assert all(fd >= 0 for fd in fds)
signal.sigwait([signal.SIGINT, signal.SIGTERM])
"""


@dataclass
class Result:
    name: str
    baseline: str
    pps: float  # median packets per second
    ratio: float  # pps / baseline pps, same run
    loss_pct: float  # (1 - ratio) * 100
    pps_cpu: float  # median packets per CPU-second of the flood
    ratio_cpu: float  # pps_cpu / baseline pps_cpu
    loss_cpu_pct: float
    ns_per_event: Optional[float] = None  # lbtune's own cost, median (kernel BPF stats)
    rounds_pps: list[float] = field(default_factory=list)
    note: str = ""


def sh(*argv: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


def programs() -> set[int]:
    return {p["id"] for p in json.loads(sh("bpftool", "prog", "show", "--json") or "[]")}


class Topology:
    """Namespaces A and B, the veth pair, and a bound socket in B that never reads."""

    def __init__(self) -> None:
        tag = os.getpid() % 100000
        self.a, self.b = f"lbtune-bench-{tag}-a", f"lbtune-bench-{tag}-b"
        self.a_if, self.b_if = f"lbb{tag}a", f"lbb{tag}b"
        self.sink: Optional[subprocess.Popen[bytes]] = None

    def __enter__(self) -> Topology:
        sh("ip", "netns", "add", self.a)
        sh("ip", "netns", "add", self.b)
        sh("ip", "-n", self.a, "link", "add", self.a_if, "address", "02:88:00:00:00:01", "type",
           "veth", "peer", "name", self.b_if, "netns", self.b, "address", "02:88:00:00:00:02")
        for ns, dev, ip in ((self.a, self.a_if, A_IP), (self.b, self.b_if, B_IP)):
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w",
               f"net.ipv6.conf.{dev}.disable_ipv6=1")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", self.a, "neigh", "add", B_IP, "lladdr", "02:88:00:00:00:02", "dev",
           self.a_if)
        sh("ip", "-n", self.b, "neigh", "add", A_IP, "lladdr", "02:88:00:00:00:01", "dev",
           self.b_if)  # fmt: skip
        code = (f"import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); "
                f"s.bind(('{B_IP}',{PORT})); print('ready',flush=True); time.sleep(86400)")
        self.sink = subprocess.Popen(["ip", "netns", "exec", self.b, sys.executable, "-c", code],
                                     stdout=subprocess.PIPE)  # fmt: skip
        assert self.sink.stdout is not None
        self.sink.stdout.readline()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sink is not None:
            self.sink.kill()
            self.sink.wait()
        for ns in (self.a, self.b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def rx_packets(self) -> int:
        out = sh("ip", "netns", "exec", self.b, "cat",
                 f"/sys/class/net/{self.b_if}/statistics/rx_packets")  # fmt: skip
        return int(out)


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def flood(topo: Topology, binary: str, seconds: float) -> tuple[float, float]:
    """One flood from A, pinned to CPU 0: (packets per second B's veth received, packets per
    CPU-second of the flood process).

    taskset and `ip netns exec` exec the flood, so it is this process's child and its CPU
    time is in RUSAGE_CHILDREN. With tick accounting (no IRQ_TIME_ACCOUNTING) that time
    includes the softirq work done in its context: the veth receive, the drop, the probes.
    The second number hardly moves when other processes take CPU 0 away from the flood.
    """
    before, cpu = topo.rx_packets(), _children_cpu()
    sh("taskset", "-c", "0", "ip", "netns", "exec", topo.a, binary, A_IP, B_IP, str(PORT),
       str(seconds))  # fmt: skip
    packets, cpu = topo.rx_packets() - before, _children_cpu() - cpu
    return packets / seconds, packets / cpu if cpu > 0 else 0.0


class Probe:
    """A probe process running while the flood runs; started and stopped per round."""

    def __init__(self, argv: list[str], lbtune: bool) -> None:
        self.argv = argv
        self.lbtune = lbtune
        self.proc: Optional[subprocess.Popen[str]] = None

    def start(self) -> None:
        before = programs()
        out = subprocess.PIPE if self.lbtune else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 60
        while not programs() - before:
            if self.proc.poll() is not None or time.monotonic() > end:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise SystemExit(f"{' '.join(self.argv)} did not start: {err.strip()}")
            time.sleep(0.1)
        time.sleep(0.5)  # every program attached

    def stop(self) -> Optional[float]:
        """Stop it; lbtune's median ns/event over its probes, when it reports one."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        if not self.lbtune:
            return None
        if self.proc.returncode != 0:
            raise SystemExit(f"{' '.join(self.argv)}: exit {self.proc.returncode}: {err}")
        costs = [c["ns_per_event"] for c in json.loads(out)["costs"] if c["ns_per_event"]]
        return statistics.mean(costs) if costs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="flood length per measurement (5 s holds one 1 s statistics window of "
                    "lbtune's cost sampling, the same share as in a long run)")  # fmt: skip
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "probes.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/probes.py needs root (namespaces, BPF)")
    netqtop = shutil.which("netqtop-bpfcc") or shutil.which("netqtop")
    for tool in ("gcc", "bpftool", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing (`make setup` installs it)")
    tmp = tempfile.mkdtemp(prefix="lbtune-bench-")
    binary = os.path.join(tmp, "udpflood")
    sh("gcc", "-O2", "-o", binary, str(HERE / "udpflood.c"))
    lbtune = [sys.executable, "-m", "lbtune"]
    try:
        with Topology() as topo:
            cases: dict[str, Optional[Probe]] = {
                BASELINE: None,
                "lbtune probe queues": Probe(
                    [*lbtune, "--netns", topo.b, "probe", "queues", "--iface", topo.b_if,
                     "--duration", "1h", "--json"], True),
                "lbtune probe drops": Probe(
                    [*lbtune, "--netns", topo.b, "probe", "drops", "--duration", "1h",
                     "--json"], True),
                "lbtune probe drops queues napi": Probe(
                    [*lbtune, "--netns", topo.b, "probe", "drops", "queues", "napi",
                     "--iface", topo.b_if, "--duration", "1h", "--json"], True),
            }  # fmt: skip
            for name, tps in (("floor: empty program, queues' tracepoints", RX_AND_TX),
                              ("floor: empty program, skb:kfree_skb", ["skb:kfree_skb"])):
                cases[name] = Probe(
                    ["ip", "netns", "exec", topo.b, "sh", "-c",
                     'mount -t tracefs nodev /sys/kernel/tracing && exec "$@"', "sh",
                     sys.executable, "-c", FLOOR, *tps], False)  # fmt: skip
            if netqtop:
                cases["bcc netqtop"] = Probe(
                    ["ip", "netns", "exec", topo.b, "sh", "-c",
                     'mount -t tracefs nodev /sys/kernel/tracing && exec "$0" -n "$1" -i 1',
                     netqtop, topo.b_if], False)  # fmt: skip
            flood(topo, binary, 1.0)  # warm up
            pps: dict[str, list[float]] = {name: [] for name in cases}
            per_cpu: dict[str, list[float]] = {name: [] for name in cases}
            cost: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, probe in cases.items():
                    if probe is not None:
                        probe.start()
                    try:
                        wall, cpu = flood(topo, binary, args.seconds)
                        pps[name].append(wall)
                        per_cpu[name].append(cpu)
                    finally:
                        ns = probe.stop() if probe is not None else None
                    if ns is not None:
                        cost[name].append(ns)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(pps[BASELINE])
    base_cpu = statistics.median(per_cpu[BASELINE])
    results = []
    for name, values in pps.items():
        med = statistics.median(values)
        med_cpu = statistics.median(per_cpu[name])
        ratio, ratio_cpu = med / base, med_cpu / base_cpu
        results.append(
            Result(
                name=name,
                baseline="" if name == BASELINE else BASELINE,
                pps=round(med),
                ratio=round(ratio, 3),
                loss_pct=round((1 - ratio) * 100, 1),
                pps_cpu=round(med_cpu),
                ratio_cpu=round(ratio_cpu, 3),
                loss_cpu_pct=round((1 - ratio_cpu) * 100, 1),
                ns_per_event=round(statistics.median(cost[name]), 1) if cost[name] else None,
                rounds_pps=[round(v) for v in values],
                note="" if name != "bcc netqtop" else "filter reads skb->dev via headers "
                "of another kernel (counts nothing here, still runs per packet)",
            )
        )
    meta = run_meta(args.rounds, seconds=args.seconds, cpu="flood pinned to CPU 0",
                    netqtop=netqtop or "not installed")  # fmt: skip
    write_json(args.out, meta, results)
    heading = [
        f"# probe overhead benchmark ({meta['date']}, kernel {meta['kernel']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds of {args.seconds:g} s)",
        "",
        "64-byte UDP flood over veth between two namespaces, every packet dropped by a full "
        "socket (one event per packet for every probe), the flood pinned to CPU 0. "
        "PPS = receiver's veth rx_packets / s; per CPU-s = packets per CPU-second of the "
        "flood process (its softirq work included: tick accounting), which other load on "
        "the machine hardly moves. Medians over rounds; ratios to the no-probe case of the "
        "same run. ns/event: lbtune's own cost from the kernel's BPF run-time statistics "
        "(mean over its probes).",
    ]
    columns = [("case", "l"), ("PPS", "r"), ("ratio", "r"), ("loss", "r"),
               ("PPS per CPU-s", "r"), ("ratio", "r"), ("loss", "r"),
               ("lbtune ns/event", "r"), ("PPS per round", "l"), ("note", "l")]  # fmt: skip
    rows = [
        [r.name, f"{r.pps:,.0f}", f"{r.ratio}" + ("" if r.baseline else " (baseline)"),
         f"{r.loss_pct}%", f"{r.pps_cpu:,.0f}", f"{r.ratio_cpu}", f"{r.loss_cpu_pct}%",
         "" if r.ns_per_event is None else f"{r.ns_per_event:g}",
         ", ".join(f"{v:,}" for v in r.rounds_pps), r.note]
        for r in results
    ]  # fmt: skip
    write_markdown(args.out, heading, columns, rows)


if __name__ == "__main__":
    main()
