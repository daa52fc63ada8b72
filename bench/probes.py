"""Probe overhead benchmark: packets per second of a 64-byte UDP flood with and without probes.

Usage: python bench/probes.py [--rounds N] [--seconds S] [--workloads W,W] [--out FILE]
       [--only PART,PART]  (root; bcc; --only runs the cases naming a part, for iterating)

Two throwaway namespaces A and B joined by a veth pair; bench/udpflood.c (built here with
gcc) floods 64-byte frames from A to B, pinned to CPU 0, for S seconds (default 5: lbtune
samples its BPF statistics 1 s in every 5 s, and a 5 s flood that starts 0.5 s after the
probes attach holds 1 s of statistics). Two workloads (WORKLOADS):

- full socket: to a UDP socket in B that never reads. Every datagram is received by B's
  veth and then dropped by the full socket (SOCKET_RCVBUFF): one skb:kfree_skb per packet.
- closed port: to a port nothing listens on in B. Every datagram is dropped (NO_SOCKET) and
  answered with ICMP port unreachable: one skb:kfree_skb and one icmp:icmp_send per packet
  (the drops probe's closed-port program), and the ICMP reply is one more packet on B's tx
  and A's rx. The kernel rate-limits port unreachables per namespace; B's
  net.ipv4.icmp_ratemask is set to 0 (B only, a throwaway namespace) so that every drop is
  answered: the worst case for the drops probe. A's socket then sees ECONNREFUSED now and
  then; the flood goes on.

PPS = B's veth rx_packets over the flood / S; per CPU-s = packets per CPU-second of the
flood process.

Cases per workload, rounds interleaved, medians reported as ratios to the no-probe case of
the same workload and run:
- no probe (baseline)
- `lbtune --netns B probe queues --iface <B's veth>`
- `lbtune --netns B probe drops`
- bcc's `netqtop -n <B's veth>` (full socket only; in B, tracefs mounted privately by
  `ip netns exec`)
- `lbtune --netns B probe drops queues napi --iface <B's veth>`
- floors: an empty BPF program on the queues probe's tracepoints, on the drops probe's
  (skb:kfree_skb; with the closed-port ones on the closed-port workload), and on every
  tracepoint `drops queues napi` attaches to. One empty program per tracepoint, so each
  tracepoint's floor is known. This is what any tracepoint-based probe pays before doing
  any work. And (full socket) a program that only copies the device name out of the
  record, as the queues probe does on records (bpf_probe_read_kernel: the kernel refuses
  to attach a tracepoint program that reads the record's strings directly); and (both
  workloads) an empty BTF-typed tracepoint program (tp_btf, loaded as lbtune loads its
  own: lbtune.host.trace.bpf.load_typed_tracepoint) on the queues probe's tracepoints, the
  floor of the programs queues has where the kernel has BTF. tp_btf programs keep 15
  bytes of their name: their tracepoint is the one their link names.

ns/event comes from the kernel's BPF run-time statistics, per program (bpftool prog show,
read after each flood, before the probe stops): lbtune's probes and the floors alike switch
them on with BPF_ENABLE_STATS for 1 s of every 5 s (lbtune.observe.probes COST_WINDOW_S,
COST_PERIOD_S) and off when the process ends. The host-global kernel.bpf_stats_enabled
sysctl is never written (its value is recorded before and after). Per case, ns/event is
the median over rounds of a round's run time / run count; lbtune's `ns/event` column is
the mean over its probes of each probe's own figure (lbtune's JSON `costs`), as before.
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
from typing import Any, Optional

from results_io import run_meta, write_json, write_markdown

MEASURES = (  # the code whose changes make this script's result stale (bench/check.py)
    "@cli",  # the command line every run starts (bench/check.py GROUPS)
    "lbtune/observe",
    "probes",
    "bench/udpflood.c",
)

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
A_IP, B_IP, PORT, CLOSED_PORT = "10.88.0.1", "10.88.0.2", 9000, 9001
BASELINE = "no probe"
FULL, CLOSED = "full socket", "closed port"
WORKLOADS = {FULL: PORT, CLOSED: CLOSED_PORT}  # workload -> the port the flood goes to
RX_AND_TX = ["net:net_dev_start_xmit", "net:netif_receive_skb_entry", "net:napi_gro_receive_entry",
             "net:napi_gro_frags_entry", "net:netif_receive_skb_list_entry", "net:netif_rx_entry"]
DROPS_TPS = {FULL: ["skb:kfree_skb"],
             CLOSED: ["skb:kfree_skb", "tcp:tcp_send_reset", "icmp:icmp_send"]}
ALL_TPS = [*RX_AND_TX, "skb:kfree_skb", "tcp:tcp_send_reset", "icmp:icmp_send", "napi:napi_poll"]
PROBES = ("drops", "queues", "napi")
# One empty program per tracepoint (lbt_fl_<event>; with --copy-name first, each copies the
# record's device name with bpf_probe_read_kernel as the queues probe does, the `name`
# __data_loc being at offset 8 of every queues tracepoint), loaded by bcc, with BPF statistics
# switched on as lbtune switches them for its probes (BPF_ENABLE_STATS, COST_WINDOW_S of
# every COST_PERIOD_S from attaching), held until SIGINT. Tracepoints this kernel lacks are
# left out, as lbtune leaves them out.
FLOOR = """
import os, signal, sys, threading
from bcc import BPF, lib
from lbtune.host.trace.bpf import RunTimeStats
from lbtune.observe.probes import COST_PERIOD_S, COST_WINDOW_S
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
copy = sys.argv[1] == "--copy-name"  # the programs copy the device name, as queues does
typed = sys.argv[1] == "--tp-btf"  # BTF-typed tracepoint programs, as queues' rx ones
tps = [tp for tp in sys.argv[1 + (copy or typed):]
       if os.path.isdir("/sys/kernel/tracing/events/" + tp.replace(":", "/"))]
names = ["lbt_fl_" + tp.split(":")[1] for tp in tps]
body = ("u64 w[2] = {}; u32 loc = *(u32 *)((char *)ctx + 8); "
        "bpf_probe_read_kernel(w, sizeof(w), (char *)ctx + (loc & 0xFFFF)); " if copy else "")
b = BPF(text="".join("int %s(void *ctx) { %sreturn 0; }\\n" % (n, body) for n in names))
stats = RunTimeStats()
assert stats.open(), stats.problem
keep = []
if typed:
    from lbtune.host.trace.bpf import attach_typed_tracepoint, load_typed_tracepoint
    from lbtune.host.trace.btf import KIND_TYPEDEF, BtfTypes
    btf = BtfTypes(open("/sys/kernel/btf/vmlinux", "rb").read())
for name, tp in zip(names, tps):
    if typed:
        fd, why = load_typed_tracepoint(b.dump_func(name.encode()), name, b"GPL",
                                        btf.type_id(KIND_TYPEDEF, "btf_trace_" + tp.split(":")[1]))
        assert fd >= 0, why
        keep += [fd, attach_typed_tracepoint(fd)]
        assert keep[-1] >= 0, tp
        continue
    fn = b.load_func(name.encode(), BPF.TRACEPOINT)
    assert lib.bpf_attach_tracepoint(fn.fd, *(p.encode() for p in tp.split(":"))) >= 0, tp
stop = threading.Event()
def sample():
    while True:
        stop.wait(COST_WINDOW_S)
        stats.close()
        if stop.wait(COST_PERIOD_S - COST_WINDOW_S) or not stats.open():
            return
threading.Thread(target=sample, daemon=True).start()
signal.sigwait([signal.SIGINT, signal.SIGTERM])
stop.set()
stats.close()
"""


@dataclass
class Result:
    name: str
    baseline: str
    workload: str  # "full socket" or "closed port" (WORKLOADS)
    pps: float  # median packets per second
    ratio: float  # pps / baseline pps, same run
    loss_pct: float  # (1 - ratio) * 100
    pps_cpu: float  # median packets per CPU-second of the flood
    ratio_cpu: float  # pps_cpu / baseline pps_cpu
    loss_cpu_pct: float
    ns_per_event: Optional[float] = None  # lbtune's own cost, median (kernel BPF stats)
    rounds_pps: list[float] = field(default_factory=list)
    note: str = ""
    # lbtune's ns/event per probe (its JSON `costs`), median over rounds
    ns_by_probe: dict[str, float] = field(default_factory=dict)
    # every program of the case: tracepoint -> {ns_per_event (median over rounds of a
    # round's run time / run count), events (sampled, summed over rounds)}
    programs: dict[str, dict[str, float]] = field(default_factory=dict)
    # all programs pooled: run time / run count, median over rounds (floors: the floor)
    ns_pooled: Optional[float] = None


def sh(*argv: str) -> str:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {p.stderr.strip()}")
    return p.stdout


def programs() -> dict[int, dict[str, Any]]:
    """Every loaded BPF program by id, as bpftool shows it (run_cnt and run_time_ns are
    there once the kernel counted any), with `tracepoint` set for lbtune's and the floors'.

    tp_btf programs (lbtune loads them itself) keep only 15 bytes of their name; their
    tracepoint is the one their raw_tracepoint link names."""
    progs = {p["id"]: p for p in json.loads(sh("bpftool", "prog", "show", "--json") or "[]")}
    for p in progs.values():
        p["tracepoint"] = tracepoint_of(p.get("name", ""))
    for link in json.loads(sh("bpftool", "link", "show", "--json") or "[]"):
        p = progs.get(link.get("prog_id", -1))
        named = p is not None and p.get("name", "").startswith("lbt_")
        if p is not None and named and link.get("type") == "raw_tracepoint":
            p["tracepoint"] = next((tp for tp in ALL_TPS
                                    if tp.split(":")[1] == link.get("tp_name")), None)  # fmt: skip
    return progs


def bpf_stats_sysctl() -> str:
    """kernel.bpf_stats_enabled, read only: recorded before and after the run."""
    try:
        return pathlib.Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    except OSError:
        return "unreadable"


def tracepoint_of(name: str) -> Optional[str]:
    """The tracepoint of a program named lbt_<probe>_<event> or lbt_fl_<event>."""
    for tp in ALL_TPS:
        event = tp.split(":")[1]
        if name.startswith("lbt_") and name.endswith("_" + event):
            head = name[: -len(event) - 1]
            if head in ("lbt_fl", *(f"lbt_{p}" for p in PROBES)):
                return tp
    return None


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
        # closed-port workload: every datagram answered (see the module docstring)
        sh("ip", "netns", "exec", self.b, "sysctl", "-q", "-w", "net.ipv4.icmp_ratemask=0")
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


def flood(topo: Topology, binary: str, seconds: float, port: int) -> tuple[float, float]:
    """One flood from A to `port`, pinned to CPU 0: (packets per second B's veth received,
    packets per CPU-second of the flood process).

    taskset and `ip netns exec` exec the flood, so it is this process's child and its CPU
    time is in RUSAGE_CHILDREN. With tick accounting (no IRQ_TIME_ACCOUNTING) that time
    includes the softirq work done in its context: the veth receive, the drop, the probes.
    The second number hardly moves when other processes take CPU 0 away from the flood.
    """
    before, cpu = topo.rx_packets(), _children_cpu()
    sh("taskset", "-c", "0", "ip", "netns", "exec", topo.a, binary, A_IP, B_IP, str(port),
       str(seconds))  # fmt: skip
    packets, cpu = topo.rx_packets() - before, _children_cpu() - cpu
    return packets / seconds, packets / cpu if cpu > 0 else 0.0


@dataclass
class Measured:
    """What one round of a probe case measured, read before the probe stops."""

    lbtune_ns: Optional[float] = None  # mean over lbtune's probes of their ns/event
    by_probe: dict[str, float] = field(default_factory=dict)  # lbtune's ns/event per probe
    # tracepoint -> (run_cnt, run_time_ns) of the case's program on it, this round
    programs: dict[str, tuple[int, int]] = field(default_factory=dict)


class Probe:
    """A probe process running while the flood runs; started and stopped per round."""

    def __init__(self, argv: list[str], lbtune: bool) -> None:
        self.argv = argv
        self.lbtune = lbtune
        self.proc: Optional[subprocess.Popen[str]] = None
        self.ids: set[int] = set()

    def start(self) -> None:
        before = set(programs())
        out = subprocess.PIPE if self.lbtune else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 60
        while not set(programs()) - before:
            if self.proc.poll() is not None or time.monotonic() > end:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise SystemExit(f"{' '.join(self.argv)} did not start: {err.strip()}")
            time.sleep(0.1)
        time.sleep(0.5)  # every program attached
        self.ids = {i for i, p in programs().items()
                    if i not in before and p["tracepoint"]}  # fmt: skip

    def stop(self) -> Measured:
        """Read the programs' statistics, stop it; lbtune's ns/event when it reports one."""
        assert self.proc is not None
        got = Measured()
        for i, p in programs().items():
            tp = p["tracepoint"] if i in self.ids else None
            if tp is not None:
                cnt, ns = got.programs.get(tp, (0, 0))
                got.programs[tp] = (cnt + p.get("run_cnt", 0), ns + p.get("run_time_ns", 0))
        self.proc.send_signal(signal.SIGINT)
        out, err = self.proc.communicate(timeout=60)
        if not self.lbtune:
            return got
        if self.proc.returncode != 0:
            raise SystemExit(f"{' '.join(self.argv)}: exit {self.proc.returncode}: {err}")
        costs = json.loads(out)["costs"]
        got.by_probe = {c["probe"]: c["ns_per_event"] for c in costs if c["ns_per_event"]}
        got.lbtune_ns = statistics.mean(got.by_probe.values()) if got.by_probe else None
        return got


COPY_FLOOR = "floor: device-name copy alone, queues' tracepoints"
TYPED_FLOOR = "floor: empty tp_btf program, queues' tracepoints"
ALL_FLOOR = "floor: empty program, drops queues napi's tracepoints"


def floor_probe(topo: Topology, args: list[str]) -> Probe:
    return Probe(
        ["ip", "netns", "exec", topo.b, "sh", "-c",
         'mount -t tracefs nodev /sys/kernel/tracing && exec "$@"', "sh",
         sys.executable, "-c", FLOOR, *args], False)  # fmt: skip


def _cases(topo: Topology, workload: str, netqtop: Optional[str]) -> dict[str, Optional[Probe]]:
    """The probe cases of one workload, by name (the baseline first)."""
    lbtune = [sys.executable, "-m", "lbtune", "--netns", topo.b, "probe"]
    cases: dict[str, Optional[Probe]] = {
        BASELINE: None,
        "lbtune probe queues": Probe(
            [*lbtune, "queues", "--iface", topo.b_if, "--duration", "1h", "--json"], True),
        "lbtune probe drops": Probe([*lbtune, "drops", "--duration", "1h", "--json"], True),
        "lbtune probe drops queues napi": Probe(
            [*lbtune, "drops", "queues", "napi", "--iface", topo.b_if, "--duration", "1h",
             "--json"], True),
    }  # fmt: skip
    drops_floor = ("floor: empty program, skb:kfree_skb" if workload == FULL
                   else "floor: empty program, drops' tracepoints")  # fmt: skip
    for name, tps in (("floor: empty program, queues' tracepoints", RX_AND_TX),
                      (drops_floor, DROPS_TPS[workload]),
                      (ALL_FLOOR, ALL_TPS)):
        cases[name] = floor_probe(topo, tps)
    if workload == FULL:
        cases[COPY_FLOOR] = floor_probe(topo, ["--copy-name", *RX_AND_TX])
    cases[TYPED_FLOOR] = floor_probe(topo, ["--tp-btf", *RX_AND_TX])
    if netqtop and workload == FULL:
        cases["bcc netqtop"] = Probe(
            ["ip", "netns", "exec", topo.b, "sh", "-c",
             'mount -t tracefs nodev /sys/kernel/tracing && exec "$0" -n "$1" -i 1',
             netqtop, topo.b_if], False)  # fmt: skip
    return cases


def _ns(cnt: int, ns: int) -> Optional[float]:
    return ns / cnt if cnt else None


def _median(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 1) if known else None


def summarize(
    workload: str,
    name: str,
    pps: list[float],
    per_cpu: list[float],
    rounds: list[Measured],
    base: tuple[float, float],
) -> Result:
    """One case's medians and ratios to its workload's baseline."""
    med, med_cpu = statistics.median(pps), statistics.median(per_cpu)
    ratio, ratio_cpu = med / base[0], med_cpu / base[1]
    tps = sorted({tp for m in rounds for tp in m.programs}, key=ALL_TPS.index)
    progs = {}
    for tp in tps:
        ns = _median([_ns(*m.programs[tp]) for m in rounds if tp in m.programs])
        events = sum(m.programs[tp][0] for m in rounds if tp in m.programs)
        progs[tp] = {"ns_per_event": ns, "events": events}
    pooled = _median([_ns(sum(c for c, _ in m.programs.values()),
                          sum(t for _, t in m.programs.values())) for m in rounds])  # fmt: skip
    by_probe = {p: _median([m.by_probe.get(p) for m in rounds])
                for p in PROBES if any(p in m.by_probe for m in rounds)}  # fmt: skip
    return Result(
        name=name,
        baseline="" if name == BASELINE else BASELINE,
        workload=workload,
        pps=round(med),
        ratio=round(ratio, 3),
        loss_pct=round((1 - ratio) * 100, 1),
        pps_cpu=round(med_cpu),
        ratio_cpu=round(ratio_cpu, 3),
        loss_cpu_pct=round((1 - ratio_cpu) * 100, 1),
        ns_per_event=_median([m.lbtune_ns for m in rounds]),
        rounds_pps=[round(v) for v in pps],
        note="" if name != "bcc netqtop" else "filter reads skb->dev via headers "
        "of another kernel (counts nothing here, still runs per packet)",
        ns_by_probe={p: v for p, v in by_probe.items() if v is not None},
        programs=progs,
        ns_pooled=pooled,
    )


def floor_for(results: list[Result], workload: str, tps: list[str]) -> Optional[float]:
    """An empty program's ns/event on `tps` in `workload`: the all-tracepoints floor's
    programs on them, pooled by their events."""
    floor = next(r for r in results if r.workload == workload and r.name == ALL_FLOOR)
    parts = [floor.programs[tp] for tp in tps if tp in floor.programs]
    parts = [p for p in parts if p["ns_per_event"] is not None and p["events"]]
    events = sum(p["events"] for p in parts)
    if not events:
        return None
    return round(sum(p["ns_per_event"] * p["events"] for p in parts) / events, 1)


PROBE_TPS = {"drops": ["skb:kfree_skb", "tcp:tcp_send_reset", "icmp:icmp_send"],
             "queues": RX_AND_TX, "napi": ["napi:napi_poll"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0,
                    help="flood length per measurement (5 s holds one 1 s statistics window of "
                    "lbtune's cost sampling, the same share as in a long run)")  # fmt: skip
    ap.add_argument("--workloads", default="full socket,closed port",
                    help="comma-separated, from: " + ", ".join(WORKLOADS))
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "probes.json")
    ap.add_argument("--only", default="",
                    help="comma-separated parts of case names: run only the cases naming one "
                    "(and the baseline) while iterating; results keep full runs")  # fmt: skip
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/probes.py needs root (namespaces, BPF)")
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by sh:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the probes must see SIGINT
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if not workloads or any(w not in WORKLOADS for w in workloads):
        raise SystemExit(f"--workloads {args.workloads}: choose from " + ", ".join(WORKLOADS))
    netqtop = shutil.which("netqtop-bpfcc") or shutil.which("netqtop")
    for tool in ("gcc", "bpftool", "taskset"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is missing (`make setup` installs it)")
    sysctl_before = bpf_stats_sysctl()
    tmp = tempfile.mkdtemp(prefix="lbtune-bench-")
    binary = os.path.join(tmp, "udpflood")
    sh("gcc", "-O2", "-o", binary, str(HERE / "udpflood.c"))
    results: list[Result] = []
    try:
        with Topology() as topo:
            cases = {w: _cases(topo, w, netqtop) for w in workloads}
            only = [o.strip() for o in args.only.split(",") if o.strip()]
            if only:
                cases = {w: {n: p for n, p in c.items()
                             if n == BASELINE or any(o in n for o in only)}
                         for w, c in cases.items()}  # fmt: skip
            flood(topo, binary, 1.0, PORT)  # warm up
            pps = {(w, n): [] for w in workloads for n in cases[w]}  # type: ignore[var-annotated]
            per_cpu = {k: [] for k in pps}  # type: ignore[var-annotated]
            measured: dict[tuple[str, str], list[Measured]] = {k: [] for k in pps}
            for _ in range(args.rounds):
                for w in workloads:
                    for name, probe in cases[w].items():
                        if probe is not None:
                            probe.start()
                        got = Measured()
                        try:
                            wall, cpu = flood(topo, binary, args.seconds, WORKLOADS[w])
                            pps[(w, name)].append(wall)
                            per_cpu[(w, name)].append(cpu)
                        finally:
                            if probe is not None:
                                got = probe.stop()
                        measured[(w, name)].append(got)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for w in workloads:
        base = (statistics.median(pps[(w, BASELINE)]), statistics.median(per_cpu[(w, BASELINE)]))
        for name in cases[w]:
            results.append(summarize(w, name, pps[(w, name)], per_cpu[(w, name)],
                                     measured[(w, name)], base))  # fmt: skip
    goals = []
    for w in workloads:
        r = next((r for r in results
                  if r.workload == w and r.name == "lbtune probe drops queues napi"), None)
        if r is None or not any(f.workload == w and f.name == ALL_FLOOR for f in results):
            continue  # a run with --only
        for probe in PROBES:
            floor = floor_for(results, w, PROBE_TPS[probe])
            ns = r.ns_by_probe.get(probe)
            goals.append({"workload": w, "probe": probe, "ns_per_event": ns, "floor_ns": floor,
                          "ratio_to_floor": round(ns / floor, 2) if ns and floor else None})
    meta = run_meta(args.rounds, seconds=args.seconds, cpu="flood pinned to CPU 0",
                    netqtop=netqtop or "not installed", workloads=workloads,
                    icmp="B: net.ipv4.icmp_ratemask=0 (every port unreachable sent)",
                    bpf_stats="BPF_ENABLE_STATS fds, 1 s of every 5 s; kernel.bpf_stats_enabled "
                    f"never written: {sysctl_before} before, {bpf_stats_sysctl()} after",
                    goal_rows=goals)  # fmt: skip
    write_json(args.out, meta, results)
    write_report(args, meta, results, goals)


def write_report(args: argparse.Namespace, meta: dict[str, Any], results: list[Result],
                 goals: list[dict[str, Any]]) -> None:
    load = meta["host_load"]
    heading = [
        f"# probe overhead benchmark ({meta['date']}, kernel {meta['kernel']}, "
        f"{meta['cpus']} CPUs, {args.rounds} rounds of {args.seconds:g} s, commit "
        f"{meta['commit']}, load average {load['start'][0]} at start, {load['end'][0]} at end)",
        "",
        "64-byte UDP flood over veth between two namespaces, the flood pinned to CPU 0. "
        "Workload *full socket*: every packet dropped by a full socket (one skb:kfree_skb per "
        "packet). Workload *closed port*: every packet sent to a port nothing listens on, "
        "dropped (NO_SOCKET) and answered with ICMP port unreachable (one skb:kfree_skb and "
        "one icmp:icmp_send per packet, and the reply is one more packet on B's tx and A's rx); "
        "the receiving namespace's net.ipv4.icmp_ratemask is 0 (set in that throwaway "
        "namespace only) so that every drop is answered. "
        "PPS = receiver's veth rx_packets / s; per CPU-s = packets per CPU-second of the "
        "flood process (its softirq work included: tick accounting), which other load on "
        "the machine hardly moves. Medians over rounds; ratios to the no-probe case of the "
        "same workload and run. ns/event: from the kernel's BPF run-time statistics "
        f"for lbtune and the floors alike: {meta['bpf_stats']}. "
        "lbtune ns/event is the mean over its probes of each probe's own figure; "
        "all programs: run time / run count of every program of the case.",
    ]
    columns = [("workload", "l"), ("case", "l"), ("PPS", "r"), ("ratio", "r"), ("loss", "r"),
               ("PPS per CPU-s", "r"), ("ratio", "r"), ("loss", "r"),
               ("lbtune ns/event", "r"), ("all programs ns/event", "r"),
               ("PPS per round", "l"), ("note", "l")]  # fmt: skip
    rows = [
        [r.workload, r.name, f"{r.pps:,.0f}", f"{r.ratio}" + ("" if r.baseline else " (baseline)"),
         f"{r.loss_pct}%", f"{r.pps_cpu:,.0f}", f"{r.ratio_cpu}", f"{r.loss_cpu_pct}%",
         "" if r.ns_per_event is None else f"{r.ns_per_event:g}",
         "" if r.ns_pooled is None else f"{r.ns_pooled:g}",
         ", ".join(f"{v:,}" for v in r.rounds_pps), r.note]
        for r in results
    ]  # fmt: skip
    write_markdown(args.out, heading, columns, rows)
    extra = ["", "## Per program (where the time goes)", "",
             "ns/event of each program on each tracepoint (median over rounds), and the events "
             "its statistics saw (sampled windows, summed over rounds).", "",
             "| workload | case | tracepoint | ns/event | events |", "|---|---|---|---:|---:|"]
    for r in results:
        for tp, p in r.programs.items():
            if not p["events"]:
                continue  # a tracepoint this traffic does not pass
            ns = "" if p["ns_per_event"] is None else f"{p['ns_per_event']:g}"
            extra.append(f"| {r.workload} | {r.name} | {tp} | {ns} | {p['events']:,} |")
    extra += ["", "## `lbtune probe drops queues napi` against the floor", "",
              "Each probe's ns/event (lbtune's own figure, median over rounds) and an empty "
              "program's on the same tracepoints (the all-tracepoints floor, pooled by its "
              "events). Goal: at most 100 ns/event and at most 1.5x the floor.", "",
              "| workload | probe | ns/event | floor ns/event | ratio to floor |",
              "|---|---|---:|---:|---:|"]
    for g in goals:
        extra.append(f"| {g['workload']} | {g['probe']} | {g['ns_per_event'] or ''} | "
                     f"{g['floor_ns'] or ''} | {g['ratio_to_floor'] or ''} |")
    md = args.out.with_suffix(".md")
    md.write_text(md.read_text() + "\n".join(extra) + "\n")
    print("\n".join(extra))


if __name__ == "__main__":
    main()
