"""What the eBPF probes add to a diagnosis: the kernel's own words for the findings.

The counter rules say *that* packets died and why in their terms; the `drops` probe gives
the kernel's drop reason and the function that freed each packet, and the `napi` probe the
budget exhaustion per NAPI instance, queue and CPU. `explain` adds those as evidence to the
findings they explain (a pure function of the findings and one `ProbeSample`): the
accept-queue finding gets `TCP_LISTEN_OVERFLOW` with its count and location, a CPU's time
squeeze gets the queues whose polls ran out of budget on that CPU. `ProbeRun` says whether
the probes ran, over which part of the window, and if not, what is missing and how to get it:
every report format shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Optional, Sequence

from lbtune.diagnose.finding import Evidence, Finding, Fix
from lbtune.diagnose.rules.base import endpoint
from lbtune.diagnose.rules.closed_port import NO_PORT_SAID, UNKNOWN_PORT, port_fixes
from lbtune.observe.probes import DropCount, NapiCount, PortCount, ProbeSample

DIAGNOSE_PROBES = ("drops", "napi")
TOP_EVIDENCE = 3  # drop rows added to one finding
TOP_DROPS = 10  # drop rows the report lists

# Probe states (`ProbeRun.status`).
RAN = "ran"
OFF = "off"  # --no-probes
UNAVAILABLE = "unavailable"  # no root, no bcc: nothing was tried
FAILED = "failed"  # tried: the plan, compile or attach failed
NOT_READY = "not-ready"  # still compiling when the window closed
NOT_APPLICABLE = "not-applicable"  # a recorded tree: nothing runs

# The kernel drop reasons (skb_drop_reason names, Linux 5.17+) that explain each rule's loss,
# and for kernels without reasons the functions that free those packets. A reason listed
# here that the running kernel lacks simply never matches.
REASONS: Mapping[str, tuple[str, ...]] = {
    "accept-queue-overflow": ("TCP_LISTEN_OVERFLOW",),
    "syn-queue-full": ("TCP_LISTEN_OVERFLOW", "TCP_REQQFULLDROP"),
    "socket-backlog-drop": ("SOCKET_BACKLOG",),
    "rcvbuf-prune": ("TCP_OFO_QUEUE_PRUNE", "TCP_OFO_DROP", "TCP_ZEROWINDOW", "PROTO_MEM"),
    "udp-rcvbuf-errors": ("SOCKET_RCVBUFF", "PROTO_MEM"),
    "tcp-memory-pressure": ("PROTO_MEM",),
    "rp-filter-drop": ("IP_RPFILTER",),
    "cpu-backlog-drop": ("CPU_BACKLOG",),
    "qdisc-drop": (
        "QDISC_DROP", "QDISC_OVERLIMIT", "QDISC_CONGESTED", "CAKE_FLOOD", "FQ_BAND_LIMIT",
        "FQ_HORIZON_LIMIT", "FQ_FLOW_LIMIT", "TC_EGRESS",
    ),
    "conntrack-full": ("NETFILTER_DROP",),
    "conntrack-insert-failed": ("NETFILTER_DROP",),
    "udp-no-port": ("NO_SOCKET",),
    "addr-not-local": ("IP_INADDRERRORS", "IPV6_INADDRERRORS"),
    "tcp-no-listener": ("NO_SOCKET",),
}
# Rules whose reason is shared by protocols: the drop's function must name the protocol too
# (NO_SOCKET is both UDP's `__udp4_lib_rcv` and TCP's `tcp_v4_rcv`).
_BY_FUNCTION = {"udp-no-port": "udp", "tcp-no-listener": "tcp"}
TOP_PORTS = 3  # closed ports named in one finding
SCAN_PORTS = 20  # this many closed ports, none with half the packets: a scan
FUNCTIONS: Mapping[str, tuple[str, ...]] = {
    "accept-queue-overflow": ("tcp_v4_syn_recv_sock", "tcp_v6_syn_recv_sock", "tcp_check_req"),
    "syn-queue-full": ("tcp_conn_request",),
    "socket-backlog-drop": ("tcp_add_backlog",),
    "udp-rcvbuf-errors": ("__udp_queue_rcv_skb", "udp_queue_rcv_one_skb", "__udpv6_queue_rcv_skb"),
    "rp-filter-drop": ("ip_rcv_finish_core", "ip_route_input_slow"),
    "cpu-backlog-drop": ("enqueue_to_backlog",),
    "qdisc-drop": ("qdisc_drop", "__dev_xmit_skb"),
    "conntrack-full": ("nf_hook_slow",),
    "conntrack-insert-failed": ("nf_hook_slow",),
}


@dataclass(frozen=True)
class ProbeRun:
    """Whether the probes ran during a diagnosis, and what they saw (host-wide drops).

    `seconds` is how much of the window they covered (they attach after compiling, while
    the window already runs). `missing`/`fix` say why they did not run and how to get them.
    """

    status: str  # RAN, OFF, UNAVAILABLE, FAILED, NOT_READY, NOT_APPLICABLE
    probes: tuple[str, ...] = DIAGNOSE_PROBES
    seconds: Optional[float] = None
    window: Optional[float] = None
    missing: str = ""
    fix: str = ""
    drops: tuple[DropCount, ...] = ()  # largest first, at most TOP_DROPS
    drops_total: int = 0
    drops_scope: str = "host"
    notes: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The one line every report shows."""
        names = ", ".join(self.probes)
        if self.status == RAN:
            part = ""
            if self.seconds is not None and self.window:
                part = f" for {self.seconds:.1f} s of the {self.window:.1f} s window"
            return f"{names} ran{part} (drops host-wide)"
        if self.status == OFF:
            return "off (--no-probes): counters only"
        if self.status == NOT_APPLICABLE:
            return "not run on a recorded tree: counters only"
        if self.status == NOT_READY:
            return f"counters only: {self.missing}; {self.fix}"
        return f"counters only: {self.missing}; to get kernel drop reasons: {self.fix}"

    def document(self) -> dict[str, object]:
        """The JSON of the report's `probes` key (keys per lbtune.vocab)."""
        return {
            "status": self.status,
            "probes": list(self.probes),
            "seconds": self.seconds,
            "reason": self.missing or None,
            "fix": self.fix or None,
            "drops_total": self.drops_total,
            "drops_scope": self.drops_scope,
            "drops": [
                {
                    "reason": d.reason,
                    "reason_code": d.reason_code,
                    "location": d.location,
                    "function": d.function,
                    "protocol": d.protocol,
                    "count": d.count,
                }
                for d in self.drops
            ],
            "notes": list(self.notes),
        }


def ran(sample: ProbeSample, window: Optional[float]) -> ProbeRun:
    """The run of probes that produced `sample` over (part of) a window of `window` s."""
    return ProbeRun(
        status=RAN,
        probes=sample.probes,
        seconds=round(sample.seconds, 3),
        window=window,
        drops=sample.drops[:TOP_DROPS],
        drops_total=sum(d.count for d in sample.drops),
        drops_scope=sample.drops_scope,
        notes=sample.notes,
    )


def _matches(rule: str, d: DropCount) -> bool:
    proto = _BY_FUNCTION.get(rule)
    if proto is not None and proto not in d.function:
        return False
    if d.reason:
        return d.reason in REASONS.get(rule, ())
    return d.function in FUNCTIONS.get(rule, ())


def _rate(count: int, seconds: float) -> Optional[float]:
    return round(count / seconds, 3) if seconds > 0 else None


def drop_evidence(rule: str, drops: Iterable[DropCount], seconds: float) -> list[Evidence]:
    """The kernel drop rows that explain `rule`'s loss, largest first, at most TOP_EVIDENCE
    (one more row sums the rest)."""
    hits = sorted((d for d in drops if _matches(rule, d)), key=lambda d: -d.count)
    out = [
        Evidence(
            f"kernel drop {d.reason or 'at'} {d.location} ({d.protocol})",
            d.count,
            _rate(d.count, seconds),
            "probe drops (host-wide)",
        )
        for d in hits[:TOP_EVIDENCE]
    ]
    rest = sum(d.count for d in hits[TOP_EVIDENCE:])
    if rest:
        out.append(
            Evidence("kernel drops, other locations", rest, _rate(rest, seconds), "probe drops")
        )
    return out


def _cpu_of(obj: str) -> Optional[int]:
    kind, _, num = obj.partition(" ")
    return int(num) if kind == "cpu" and num.isdigit() else None


def napi_evidence(cpu: int, napi: Sequence[NapiCount], seconds: float) -> list[Evidence]:
    """NAPI instances that used their whole budget on `cpu`, most exhausted first."""
    hits = sorted((n for n in napi if n.cpu == cpu and n.exhausted > 0), key=lambda n: -n.exhausted)
    out = []
    for n in hits[:TOP_EVIDENCE]:
        queue = "?" if n.queue is None else str(n.queue)
        what = "backlog" if n.dev == "backlog" else f"{n.dev} queue {queue}"
        out.append(
            Evidence(
                f"napi {what} cpu {cpu} budget exhausted ({n.exhausted} of {n.polls} polls, "
                f"budget {n.budget})",
                n.exhausted,
                _rate(n.exhausted, seconds),
                "probe napi",
            )
        )
    return out


def explain(findings: Sequence[Finding], sample: ProbeSample) -> tuple[Finding, ...]:
    """`findings` with the probe evidence that explains each added to it (same order)."""
    out = []
    for f in findings:
        if f.rule in _BY_FUNCTION:
            f = closed_port(f, sample.ports, sample.seconds)
        extra = drop_evidence(f.rule, sample.drops, sample.seconds)
        cpu = _cpu_of(f.object)
        if f.rule == "time-squeeze" and cpu is not None:
            extra += napi_evidence(cpu, sample.napi, sample.seconds)
        if extra:
            said = _kernel_says(f.rule, extra)
            f = replace(f, evidence=f.evidence + tuple(extra), cause=f"{f.cause} {said}")
        out.append(f)
    return tuple(out)


def closed_port(f: Finding, ports: Sequence[PortCount], seconds: float) -> Finding:
    """A closed-port finding with the ports the probe saw: the busiest one becomes its
    object, title and fix; up to TOP_PORTS are evidence. Unchanged when the probe saw none
    (IPv6 UDP, or a kernel without the tracepoints: the finding keeps "port unknown")."""
    proto = _BY_FUNCTION[f.rule]
    hits = sorted((p for p in ports if p.proto == proto), key=lambda p: -p.count)
    if not hits:
        return f
    total = sum(p.count for p in hits)
    top = hits[0]
    ep = endpoint(top.family, top.addr, top.port)
    what = "datagrams" if proto == "udp" else "resets"
    ev = [
        Evidence(
            f"probe {proto} no socket on {endpoint(p.family, p.addr, p.port)}",
            p.count,
            _rate(p.count, seconds),
            f"probe {'icmp_send' if proto == 'udp' else 'tcp_send_reset'} (host-wide)",
        )
        for p in hits[:TOP_PORTS]
    ]
    rest = hits[TOP_PORTS:]
    if rest:
        n = sum(p.count for p in rest)
        ev.append(Evidence(f"probe {proto} no socket, {len(rest)} other ports", n,
                           _rate(n, seconds), "probe drops"))  # fmt: skip
    share = 100 * top.count // total
    said = f"The probe named the port: {top.count:,} of {total:,} {what} it saw went to {ep}"
    said += f" ({share}%)." if len(hits) > 1 else "."
    if len(hits) >= SCAN_PORTS and share < 50:
        said += (f" They are spread over {len(hits)} ports: a port scan, or clients "
                 "probing a range, rather than one dead service.")  # fmt: skip
    unknown = f"{proto} {UNKNOWN_PORT}"
    title = (f"UDP datagrams to port {top.port}: nothing listens" if proto == "udp"
             else f"TCP connections to port {top.port} reset: nothing listens")  # fmt: skip
    return replace(
        f,
        title=title,
        object=f"{proto} {ep}" if f.object == unknown else f.object,
        cause=f"{f.cause.replace(NO_PORT_SAID, '')} {said}",
        evidence=f.evidence + tuple(ev),
        fixes=tuple(_same_netns(f, fx) for fx in port_fixes(proto, ep)),
    )


def _same_netns(f: Finding, fix: Fix) -> Fix:
    """`fix` with the `ip netns exec NS` prefix the finding's own fixes carry, if any."""
    first = next((x.command for x in f.fixes if x.command), "") or ""
    if not first.startswith("ip netns exec ") or not fix.command:
        return fix
    prefix = " ".join(first.split()[:4])
    return replace(fix, command=f"{prefix} {fix.command}")


def _kernel_says(rule: str, extra: Sequence[Evidence]) -> str:
    if rule == "time-squeeze" and extra and extra[0].source == "probe napi":
        return f"The napi probe saw budget exhaustion: {extra[0].counter}."
    top = extra[0]
    what = top.counter.replace("kernel drop ", "", 1)
    return f"The kernel's own drop record: {top.value:,} x {what}."
