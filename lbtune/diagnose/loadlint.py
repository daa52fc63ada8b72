"""Lint a planned load-generator command line: will it measure the server, or itself?

`lbtune checklist --load "CMD"` hands the command here. It is split like a shell would split
it (`shlex`, never executed), each pipeline/list stage is recognised by its program name (ab,
wrk, wrk2, httperf, vegeta, hey, h2load, oha; wrappers such as `sudo`, `taskset` or `numactl`
are looked through) and its options are read into a `LoadPlan`: how many connections it keeps
open, whether it reuses them (keep-alive), at what fixed rate, against which port. Rules then
compare the plan with what the tool itself accepts and with the host's limits (`LoadFacts`:
ephemeral ports, TIME_WAIT, listen backlogs, open-file limits). Each `LoadIssue` says what is
wrong, with the numbers, and *why* in plain words. Every rule is listed in docs/checklist.md.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Sequence
from urllib.parse import urlsplit

from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.sockdiag import ListenSocket

# The kernel keeps a closed connection in TIME_WAIT for TCP_TIMEWAIT_LEN, fixed at 60 s
# (tcp_fin_timeout is a different timer: FIN-WAIT-2 of orphaned sockets).
TIME_WAIT_SECONDS = 60
# httperf without --hog leaves port choice to its own loop over 1024-5000 (its man page).
HTTPERF_PORTS = 5000 - 1024 + 1
# Descriptors a generator needs besides its sockets: stdio, epoll, timers, files, logs.
FD_OVERHEAD = 16
# vegeta: sockets in flight = rate x response time. The fail threshold assumes a saturated
# server answering in 250 ms; the warning one a server stalling for a second.
SLOW_RESPONSE = 0.25
STALLED_RESPONSE = 1.0
# A plan using more than this share of a limit leaves no room for anything else.
NEAR = 0.8
# ab's compiled-in MAX_CONCURRENCY.
AB_MAX_CONCURRENCY = 20000

KNOWN_TOOLS = ("ab", "wrk", "wrk2", "httperf", "vegeta", "hey", "h2load", "oha")
CLIENT_ROLES = ("client",)
SERVER_ROLES = ("web", "lb-proxy", "realserver")
# Programs that run the command after them (their own options are skipped).
_WRAPPERS = {
    "sudo": ("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"),
    "env": ("-u", "-C", "-S"),
    "nice": ("-n",),
    "nohup": (),
    "time": ("-f", "-o"),
    "command": (),
    "exec": (),
    "stdbuf": ("-i", "-o", "-e"),
    "chrt": (),
    "numactl": ("-N", "-m", "-C", "-p", "-i", "-P"),
    "taskset": (),
    "timeout": ("-s", "-k"),
}
_SEPARATORS = ("|", "||", "&&", ";", "&", "|&")


@dataclass(frozen=True)
class LoadFacts:
    """The host's limits a load command runs into. Unknown values are None.

    `backlogs` maps a local listening TCP port to its effective accept backlog
    (min(application backlog, somaxconn), as the kernel reports it per listener).
    """

    port_range: Optional[tuple[int, int]] = None  # net.ipv4.ip_local_port_range
    reserved_ports: int = 0  # ports of ip_local_reserved_ports inside the range
    tw_reuse: Optional[int] = None  # net.ipv4.tcp_tw_reuse
    max_tw_buckets: Optional[int] = None  # net.ipv4.tcp_max_tw_buckets
    somaxconn: Optional[int] = None  # net.core.somaxconn
    backlogs: Mapping[int, int] = field(default_factory=dict)
    nofile_soft: Optional[int] = None  # RLIMIT_NOFILE of the shell that runs the command
    nofile_hard: Optional[int] = None

    @property
    def ephemeral_ports(self) -> Optional[int]:
        """Source ports connect() can use towards one destination address and port."""
        if self.port_range is None:
            return None
        lo, hi = self.port_range
        return max(0, hi - lo + 1 - self.reserved_ports)


@dataclass(frozen=True)
class LoadPlan:
    """What one load command will do, as far as its arguments say."""

    tool: str  # "ab", "wrk", ...
    argv: tuple[str, ...]
    connections: Optional[int]  # connections open at once (None: unbounded or unknown)
    keepalive: bool  # requests reuse connections
    rate: Optional[float] = None  # fixed requests per second, None when "as fast as possible"
    conn_rate: Optional[float] = None  # fixed new connections per second (closed ones too)
    requests: Optional[int] = None  # total requests when fixed
    new_connections: Optional[int] = None  # connections opened over the run, when fixed
    threads: Optional[int] = None
    port: Optional[int] = None  # destination TCP port, when the target is on the line
    nofile_soft: Optional[int] = None  # `ulimit -n N` earlier on the same line
    own_ports: bool = False  # picks source ports itself (httperf without --hog), not the kernel


@dataclass(frozen=True)
class LoadIssue:
    """One problem of a load command."""

    rule: str  # stable id, documented in docs/checklist.md: "ab-no-concurrency"
    status: str  # "fail" (the run will not measure the server) or "warn"
    tool: str
    reason: str  # what is wrong, with the numbers
    why: str  # why it matters, in plain words
    fix: str  # the option or knob to change


# ------------------------------------------------------------------ host facts


def _range(fs: HostFS) -> Optional[tuple[int, int]]:
    text = fs.read("/proc/sys/net/ipv4/ip_local_port_range")
    if text is None:
        return None
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise MalformedHostFile(
            fs.path("/proc/sys/net/ipv4/ip_local_port_range"), f"expected two ports, got {text!r}"
        )
    return int(parts[0]), int(parts[1])


def parse_port_list(text: str) -> frozenset[int]:
    """`8080,9000-9100` (ip_local_reserved_ports) as a set of ports; ValueError when bad."""
    out: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        a = int(lo)
        b = int(hi) if dash else a
        if not 0 <= a <= b <= 65535:
            raise ValueError(f"bad port range {part!r}")
        out.update(range(a, b + 1))
    return frozenset(out)


def read_load_facts(
    fs: HostFS,
    listeners: Optional[Sequence[ListenSocket]] = None,
    nofile: Optional[tuple[int, int]] = None,
) -> LoadFacts:
    """The limits of the host below `fs`; `listeners` and `nofile` come from the live side.

    `nofile` is the (soft, hard) RLIMIT_NOFILE of the shell that will run the command.
    """
    port_range = _range(fs)
    reserved = 0
    text = fs.read("/proc/sys/net/ipv4/ip_local_reserved_ports")
    if text and port_range is not None:
        try:
            ports = parse_port_list(text)
        except ValueError as e:
            raise MalformedHostFile(
                fs.path("/proc/sys/net/ipv4/ip_local_reserved_ports"), str(e)
            ) from None
        lo, hi = port_range
        reserved = sum(1 for p in ports if lo <= p <= hi)
    backlogs: dict[int, int] = {}
    for s in listeners or ():
        # Several listeners on one port (v4 + v6, SO_REUSEPORT): the smallest queue limits.
        backlogs[s.port] = min(backlogs.get(s.port, s.backlog), s.backlog)
    return LoadFacts(
        port_range=port_range,
        reserved_ports=reserved,
        tw_reuse=fs.read_int("/proc/sys/net/ipv4/tcp_tw_reuse"),
        max_tw_buckets=fs.read_int("/proc/sys/net/ipv4/tcp_max_tw_buckets"),
        somaxconn=fs.read_int("/proc/sys/net/core/somaxconn"),
        backlogs=backlogs,
        nofile_soft=nofile[0] if nofile else None,
        nofile_hard=nofile[1] if nofile else None,
    )


# ------------------------------------------------------------------ splitting


def split_command(command: str) -> list[list[str]]:
    """Split a shell command line into its stages (pipeline and `;`/`&&` lists); never runs it."""
    if not command.strip():
        raise BadInput("--load: empty command")
    lex = shlex.shlex(command, posix=True, punctuation_chars="|&;")
    lex.whitespace_split = True
    try:
        words = list(lex)
    except ValueError as e:
        raise BadInput(f"--load: cannot split the command: {e}") from None
    stages: list[list[str]] = [[]]
    for w in words:
        if w in _SEPARATORS:
            stages.append([])
        else:
            stages[-1].append(w)
    return [s for s in stages if s]


def _unwrap(argv: list[str]) -> list[str]:
    """Drop `VAR=x`, `sudo`, `taskset -c 0-3`, `ip netns exec NS`... before the program."""
    i = 0
    while i < len(argv):
        word = argv[i]
        name = posixpath.basename(word)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            i += 1
        elif name == "ip" and argv[i + 1 : i + 3] == ["netns", "exec"]:
            i += 4
        elif name in _WRAPPERS:
            i += 1
            with_arg = _WRAPPERS[name]
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in with_arg else 1
            if name in ("taskset", "timeout") and i < len(argv):
                i += 1  # the CPU mask or list (`taskset [-c] MASK`), or the duration
        else:
            break
    return argv[i:]


# ------------------------------------------------------------------ option parsing

_Spec = Mapping[str, tuple[str, bool]]  # spelling -> (canonical name, takes a value)


@dataclass
class _Opts:
    tool: str
    values: dict[str, list[str]] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return name in self.values

    def last(self, name: str) -> Optional[str]:
        v = self.values.get(name)
        return v[-1] if v else None

    def all(self, name: str) -> list[str]:
        return self.values.get(name, [])


def _getopt(tool: str, argv: Sequence[str], spec: _Spec) -> _Opts:
    """POSIX getopt_long: clustered short flags, `-c100`, `--long=v`, unique long prefixes."""
    out = _Opts(tool)
    longs = [s for s in spec if s.startswith("--")]
    i = 0
    while i < len(argv):
        a = argv[i]
        i += 1
        if a == "--":
            out.args.extend(argv[i:])
            break
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if name not in spec:
                hits = [s for s in longs if s.startswith(name)]
                if len(hits) == 1:
                    name = hits[0]
            if name not in spec:
                continue  # an option this lint does not need
            canon, takes = spec[name]
            if takes and not eq:
                if i >= len(argv):
                    raise BadInput(f"--load: {tool} {name} needs a value")
                value = argv[i]
                i += 1
            out.values.setdefault(canon, []).append(value if takes else "")
        elif a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                opt = "-" + a[j]
                j += 1
                if opt not in spec:
                    continue
                canon, takes = spec[opt]
                if takes:
                    value = a[j:]
                    if not value:
                        if i >= len(argv):
                            raise BadInput(f"--load: {tool} {opt} needs a value")
                        value = argv[i]
                        i += 1
                    out.values.setdefault(canon, []).append(value)
                    break
                out.values.setdefault(canon, []).append("")
        else:
            out.args.append(a)
    return out


def _goflags(tool: str, argv: Sequence[str], spec: Mapping[str, bool]) -> _Opts:
    """Go's flag package: `-name`, `--name`, `-name=v`, `-name v` (not for booleans)."""
    out = _Opts(tool)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--" or not a.startswith("-") or a == "-":
            out.args.extend(argv[i + (a == "--") :])
            break
        i += 1
        name, eq, value = a.lstrip("-").partition("=")
        if name not in spec:
            continue
        if not eq:
            if not spec[name]:  # a boolean flag
                value = "true"
            else:
                if i >= len(argv):
                    raise BadInput(f"--load: {tool} -{name} needs a value")
                value = argv[i]
                i += 1
        out.values.setdefault(name, []).append(value)
    return out


_METRIC = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def _count(opts: _Opts, name: str, text: Optional[str], metric: bool = False) -> Optional[int]:
    """A count option; wrk-style `1k`/`2M` suffixes when `metric`. BadInput when not a number."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)\s*", text)
    if not m or (m.group(2) and not metric):
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number")
    return int(m.group(1)) * _METRIC[m.group(2).lower()]


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration(text: str) -> Optional[float]:
    """Seconds of a Go duration (`1s`, `1m30s`, `500ms`); None when it is not one."""
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and pos else None


def _float(opts: _Opts, name: str, text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number") from None
    if value < 0 or value != value:
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number")
    return value


def _url_port(words: Sequence[str]) -> Optional[int]:
    for w in words:
        for m in re.finditer(r"\bhttps?://[^\s\"']+", w):
            try:
                parts = urlsplit(m.group(0))
                port = parts.port
            except ValueError:
                continue
            return port if port is not None else (443 if parts.scheme == "https" else 80)
    return None


# ------------------------------------------------------------------ tools

_Parsed = tuple[LoadPlan, list[LoadIssue]]

# apr_getopt string of ab 2.3: "n:c:t:s:b:T:p:u:v:lrkVhwiIx:y:z:C:H:P:A:g:X:de:SqB:m:" + SSL.
_AB: _Spec = {
    **{f"-{c}": (c, True) for c in "nctsbTpuvxyzCHPAgXeBmZfE"},
    **{f"-{c}": (c, False) for c in "lrkVhwiIdSq"},
}


def _ab(argv: list[str], words: Sequence[str]) -> _Parsed:
    o = _getopt("ab", argv[1:], _AB)
    c = _count(o, "-c", o.last("c"))
    n = _count(o, "-n", o.last("n"))
    timelimit = _float(o, "-t", o.last("t"))
    if n is None:
        n = 50000 if timelimit else 1  # ab: -t implies -n 50000
    keepalive = o.has("k")
    plan = LoadPlan(
        "ab", tuple(argv), c or 1, keepalive, requests=n,
        new_connections=(c or 1) if keepalive else n, port=_url_port(o.args),
    )  # fmt: skip
    issues = []
    if c is None:
        issues.append(
            LoadIssue(
                "ab-no-concurrency",
                "fail",
                "ab",
                "ab without -c runs one request at a time (concurrency 1)",
                "with one request in flight ab measures one client's latency, not how many "
                "requests the server can handle; the server sits idle between requests",
                "add -c N (e.g. -c 100) to keep N requests in flight",
            )
        )
    if not keepalive:
        issues.append(
            LoadIssue(
                "ab-no-keepalive",
                "warn",
                "ab",
                f"ab without -k opens a new TCP connection for each of its {n} requests",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT, which uses up ephemeral ports",
                "add -k (HTTP keep-alive) unless connection setup is what you want to measure",
            )
        )
    if c is not None and c > n:
        issues.append(
            LoadIssue(
                "ab-concurrency-above-requests",
                "fail",
                "ab",
                f"ab -c {c} is larger than -n {n}",
                "ab refuses to start: it cannot keep more requests in flight than it sends",
                f"raise -n to at least {c} (a run of a few seconds needs far more)",
            )
        )
    if c is not None and c > AB_MAX_CONCURRENCY:
        issues.append(
            LoadIssue(
                "ab-concurrency-max",
                "fail",
                "ab",
                f"ab -c {c} is above ab's limit of {AB_MAX_CONCURRENCY}",
                "ab refuses to start with more than 20000 concurrent requests",
                "use several ab processes, or wrk/h2load for this many connections",
            )
        )
    return plan, issues


_WRK: _Spec = {
    "-c": ("c", True), "--connections": ("c", True),
    "-t": ("t", True), "--threads": ("t", True),
    "-d": ("d", True), "--duration": ("d", True),
    "-s": ("s", True), "--script": ("s", True),
    "-H": ("H", True), "--header": ("H", True),
    "-T": ("T", True), "--timeout": ("T", True),
    "-R": ("R", True), "--rate": ("R", True),
    "-L": ("L", False), "--latency": ("L", False),
    "-U": ("U", False), "--u_latency": ("U", False),
    "-B": ("B", False), "--batch_latency": ("B", False),
    "-v": ("v", False), "--version": ("v", False),
}  # fmt: skip


def _wrk(argv: list[str], words: Sequence[str]) -> _Parsed:
    tool = "wrk2" if posixpath.basename(argv[0]) == "wrk2" else "wrk"
    o = _getopt(tool, argv[1:], _WRK)
    c = _count(o, "-c", o.last("c"), metric=True)
    t = _count(o, "-t", o.last("t"), metric=True)
    rate = _count(o, "-R", o.last("R"), metric=True)
    connections = 10 if c is None else c  # wrk's defaults: 10 connections, 2 threads
    threads = 2 if t is None else t
    close = any(re.match(r"\s*connection\s*:\s*close\b", h, re.I) for h in o.all("H"))
    fixed = float(rate) if rate is not None else None
    plan = LoadPlan(
        tool, tuple(argv), connections, not close, rate=fixed,
        conn_rate=fixed if close else None, new_connections=None if close else connections,
        threads=threads, port=_url_port(o.args),
    )  # fmt: skip
    issues = []
    if threads == 0 or connections < threads:
        issues.append(
            LoadIssue(
                "wrk-connections-below-threads",
                "fail",
                tool,
                f"{tool} -c {connections} is lower than -t {threads}",
                f"{tool} refuses to start: every thread needs at least one connection",
                f"use -c >= -t (e.g. -t {max(threads, 1)} -c {max(threads, 1) * 25})",
            )
        )
    if tool == "wrk2" and rate is None:
        issues.append(
            LoadIssue(
                "wrk2-no-rate",
                "fail",
                tool,
                "wrk2 without -R (requests per second)",
                "wrk2 refuses to start without a fixed rate: a constant rate is what it is for",
                "add -R N, the request rate to hold",
            )
        )
    if close:
        issues.append(
            LoadIssue(
                "no-keepalive",
                "warn",
                tool,
                f"{tool} sends 'Connection: close': a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "drop the 'Connection: close' header unless connection setup is what you measure",
            )
        )
    return plan, issues


_HTTPERF_ARG = (
    "add-header", "burst-length", "client", "debug", "failure-status", "http-version",
    "max-connections", "max-piped-calls", "method", "num-calls", "num-conns", "period", "port",
    "print-reply", "print-request", "rate", "recv-buffer", "send-buffer", "server",
    "server-name", "ssl-ciphers", "think-timeout", "timeout", "uri", "wlog", "wsess",
    "wsesslog", "wset",
)  # fmt: skip
_HTTPERF_FLAG = (
    "hog", "close-with-reset", "help", "no-host-hdr", "retry-on-failure", "session-cookies",
    "ssl", "ssl-no-reuse", "verbose", "version",
)  # fmt: skip
_HTTPERF: _Spec = {
    **{f"--{n}": (n, True) for n in _HTTPERF_ARG},
    **{f"--{n}": (n, False) for n in _HTTPERF_FLAG},
    "-v": ("verbose", False), "-d": ("debug", True), "-V": ("version", False),
}  # fmt: skip


def _httperf(argv: list[str], words: Sequence[str]) -> _Parsed:
    o = _getopt("httperf", argv[1:], _HTTPERF)
    conns = _count(o, "--num-conns", o.last("num-conns"))
    calls = _count(o, "--num-calls", o.last("num-calls"))
    rate = _float(o, "--rate", o.last("rate"))
    port = _count(o, "--port", o.last("port"))
    conns = 1 if conns is None else conns
    calls = 1 if calls is None else calls
    # httperf's --rate is connections per second; each carries --num-calls requests and is
    # closed by httperf afterwards, so TIME_WAIT grows at --rate whatever --num-calls is.
    plan = LoadPlan(
        "httperf", tuple(argv), None, calls > 1,
        rate=(rate * calls if rate else None), conn_rate=rate or None, requests=conns * calls,
        new_connections=conns, port=80 if port is None else port, own_ports=not o.has("hog"),
    )  # fmt: skip
    issues = []
    if not o.has("hog"):
        planned = max(conns, rate * TIME_WAIT_SECONDS if rate else 0)
        need = f"{conns}"
        if rate:
            need = f"{_fmt(rate)}/s x {TIME_WAIT_SECONDS} s TIME_WAIT = {int(planned)}"
        status = "fail" if planned > HTTPERF_PORTS else "warn"
        issues.append(
            LoadIssue(
                "httperf-no-hog",
                status,
                "httperf",
                f"httperf without --hog uses only ports 1024-5000 ({HTTPERF_PORTS} ports); "
                f"this run needs {need} connections",
                "without --hog httperf picks source ports itself from 1024-5000 instead of the "
                "kernel's ephemeral range; closed connections hold them 60 s in TIME_WAIT, so "
                "it runs out after a few thousand connections and reports errors, not the server",
                "add --hog",
            )
        )
    return plan, issues


# vegeta attack flags: True = takes a value, False = boolean.
_VEGETA = {
    "rate": True, "duration": True, "workers": True, "max-workers": True,
    "connections": True, "max-connections": True, "keepalive": False, "timeout": True,
    "targets": True, "format": True, "body": True, "header": True, "output": True,
    "http2": False, "h2c": False, "insecure": False, "laddr": True, "lazy": False,
    "max-body": True, "name": True, "proxy-header": True, "redirects": True,
    "resolvers": True, "root-certs": True, "session-tickets": False, "unix-socket": True,
    "chunked": False, "dns-ttl": True, "cert": True, "key": True, "cpus": True,
    "profile": True,
}  # fmt: skip


def _bool(text: Optional[str], default: bool) -> bool:
    if text is None:
        return default
    return text.lower() in ("1", "t", "true", "yes")


def _vegeta(argv: list[str], words: Sequence[str]) -> Optional[_Parsed]:
    o = _goflags("vegeta", argv[1:], _VEGETA)
    if not o.args or o.args[0] != "attack":
        return None  # report, plot, encode: they generate no load
    a = _goflags("vegeta", o.args[1:], _VEGETA)
    rate_text = a.last("rate") or "50/1s"
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:/(.+))?", rate_text)
    per = _go_duration(m.group(2)) if m and m.group(2) else 1.0
    if m is None or per is None or per <= 0:
        raise BadInput(f"--load: vegeta -rate {rate_text!r}: not a rate (N or N/duration)")
    rate = float(m.group(1)) / per
    max_workers = _count(a, "-max-workers", a.last("max-workers"))
    max_conns = _count(a, "-max-connections", a.last("max-connections"))
    caps = [v for v in (max_workers, max_conns) if v]
    keepalive = _bool(a.last("keepalive"), True)
    plan = LoadPlan(
        "vegeta", tuple(argv), min(caps) if caps else None, keepalive, rate=rate or None,
        conn_rate=None if keepalive else (rate or None), port=_url_port(words),
    )  # fmt: skip
    issues = []
    if rate == 0 and not max_workers:
        issues.append(
            LoadIssue(
                "vegeta-rate-zero",
                "fail",
                "vegeta",
                "vegeta -rate=0 (as fast as possible) without -max-workers",
                "vegeta refuses to start: an unlimited rate needs a bound on workers",
                "add -max-workers N, or give a fixed -rate",
            )
        )
    if not plan.keepalive:
        issues.append(
            LoadIssue(
                "no-keepalive",
                "warn",
                "vegeta",
                "vegeta -keepalive=false opens a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "leave -keepalive at its default (true)",
            )
        )
    return plan, issues


_HEY = {
    "n": True, "c": True, "q": True, "z": True, "o": True, "m": True, "H": True, "t": True,
    "A": True, "d": True, "D": True, "T": True, "a": True, "x": True, "h2": False,
    "host": True, "cpus": True, "disable-compression": False, "disable-keepalive": False,
    "disable-redirects": False,
}  # fmt: skip


def _hey(argv: list[str], words: Sequence[str]) -> _Parsed:
    o = _goflags("hey", argv[1:], _HEY)
    n = _count(o, "-n", o.last("n"))
    c = _count(o, "-c", o.last("c"))
    q = _float(o, "-q", o.last("q"))
    n = 200 if n is None else n
    c = 50 if c is None else c
    keepalive = not _bool(o.last("disable-keepalive"), False)
    # hey's -q is per worker; -z (duration) replaces -n.
    rate = q * c if q else None
    requests = None if o.has("z") else n
    plan = LoadPlan(
        "hey", tuple(argv), c, keepalive, rate=rate, conn_rate=None if keepalive else rate,
        requests=requests, new_connections=c if keepalive else requests, port=_url_port(o.args),
    )  # fmt: skip
    issues = []
    if not o.has("z") and n < c:
        issues.append(
            LoadIssue(
                "hey-requests-below-workers",
                "fail",
                "hey",
                f"hey -n {n} is lower than -c {c}",
                "hey refuses to start: every worker must send at least one request",
                f"raise -n to at least {c}",
            )
        )
    if not keepalive:
        issues.append(
            LoadIssue(
                "no-keepalive",
                "warn",
                "hey",
                "hey -disable-keepalive opens a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "drop -disable-keepalive unless connection setup is what you measure",
            )
        )
    return plan, issues


_H2LOAD: _Spec = {
    "-n": ("n", True), "--requests": ("n", True),
    "-c": ("c", True), "--clients": ("c", True),
    "-t": ("t", True), "--threads": ("t", True),
    "-m": ("m", True), "--max-concurrent-streams": ("m", True),
    "-r": ("r", True), "--rate": ("r", True),
    "--rate-period": ("rate-period", True),
    "-D": ("D", True), "--duration": ("D", True),
    "-T": ("T", True), "--connection-active-timeout": ("T", True),
    "-N": ("N", True), "--connection-inactivity-timeout": ("N", True),
    "-H": ("H", True), "--header": ("H", True),
    "-d": ("d", True), "--data": ("d", True),
    "-i": ("i", True), "--input-file": ("i", True),
    "-p": ("p", True), "--no-tls-proto": ("p", True),
    "-w": ("w", True), "-W": ("W", True), "-B": ("B", True),
    "--h1": ("h1", False), "-v": ("v", False), "--verbose": ("v", False),
    "--warm-up-time": ("warm-up-time", True), "--npn-list": ("npn-list", True),
    "--ciphers": ("ciphers", True), "--log-file": ("log-file", True),
}  # fmt: skip


def _h2load(argv: list[str], words: Sequence[str]) -> _Parsed:
    o = _getopt("h2load", argv[1:], _H2LOAD)
    n = _count(o, "-n", o.last("n"), metric=True)
    c = _count(o, "-c", o.last("c"), metric=True)
    t = _count(o, "-t", o.last("t"), metric=True)
    n = 1 if n is None else n
    c = 1 if c is None else c
    t = 1 if t is None else t
    timed = o.has("D")
    plan = LoadPlan(
        "h2load", tuple(argv), c, True, requests=None if timed else n, new_connections=c,
        threads=t, port=_url_port(o.args),
    )  # fmt: skip
    issues = []
    if c < t:
        issues.append(
            LoadIssue(
                "h2load-clients-below-threads",
                "fail",
                "h2load",
                f"h2load -c {c} is lower than -t {t}",
                "h2load refuses to start: every thread needs at least one client",
                f"use -c >= -t (e.g. -c {t * 25})",
            )
        )
    if not timed and n < c:
        issues.append(
            LoadIssue(
                "h2load-requests-below-clients",
                "fail",
                "h2load",
                f"h2load -n {n} is lower than -c {c}",
                "h2load refuses to start: every client must send at least one request",
                "raise -n (or use -D for a timed run)",
            )
        )
    if c == 1 and not o.has("c"):
        issues.append(
            LoadIssue(
                "h2load-one-client",
                "warn",
                "h2load",
                "h2load without -c uses one client connection",
                "one connection measures one client's latency (with -m streams), not the server's "
                "capacity across connections",
                "add -c N",
            )
        )
    return plan, issues


_OHA: _Spec = {
    "-n": ("n", True), "-c": ("c", True), "-z": ("z", True), "-q": ("q", True),
    "-H": ("H", True), "-m": ("m", True), "--method": ("m", True), "-d": ("d", True),
    "-t": ("t", True), "--timeout": ("t", True), "-o": ("o", True),
    "--disable-keepalive": ("disable-keepalive", False), "--http2": ("http2", False),
    "--no-tui": ("no-tui", False), "-j": ("j", False), "--json": ("j", False),
    "-p": ("p", True), "--latency-correction": ("latency-correction", False),
    "--http-version": ("http-version", True), "--burst-delay": ("burst-delay", True),
    "--burst-rate": ("burst-rate", True), "--rand-regex-url": ("rand-regex-url", False),
    "--connect-timeout": ("connect-timeout", True),
}  # fmt: skip


def _oha(argv: list[str], words: Sequence[str]) -> _Parsed:
    o = _getopt("oha", argv[1:], _OHA)
    n = _count(o, "-n", o.last("n"))
    c = _count(o, "-c", o.last("c"))
    q = _float(o, "-q", o.last("q"))
    c = 50 if c is None else c
    keepalive = not o.has("disable-keepalive")
    requests = None if o.has("z") else (200 if n is None else n)
    plan = LoadPlan(
        "oha", tuple(argv), c, keepalive, rate=q or None,
        conn_rate=None if keepalive else (q or None), requests=requests,
        new_connections=c if keepalive else requests, port=_url_port(o.args),
    )  # fmt: skip
    issues = []
    if not keepalive:
        issues.append(
            LoadIssue(
                "no-keepalive",
                "warn",
                "oha",
                "oha --disable-keepalive opens a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "drop --disable-keepalive unless connection setup is what you measure",
            )
        )
    return plan, issues


_TOOLS: dict[str, Callable[[list[str], Sequence[str]], Optional[_Parsed]]] = {
    "ab": _ab, "ab2": _ab, "wrk": _wrk, "wrk2": _wrk, "httperf": _httperf,
    "vegeta": _vegeta, "hey": _hey, "h2load": _h2load, "oha": _oha,
}  # fmt: skip


def _ulimit_nofile(argv: list[str]) -> Optional[int]:
    """N of `ulimit -n N` / `ulimit -Sn N` (the soft limit later stages start with)."""
    if posixpath.basename(argv[0]) != "ulimit" or len(argv) < 3:
        return None
    flags = "".join(a.lstrip("-") for a in argv[1:-1] if a.startswith("-"))
    if "n" in flags and argv[-1].isdigit() and "H" not in flags:
        return int(argv[-1])
    return None


def _parse(command: str) -> list[tuple[LoadPlan, list[LoadIssue]]]:
    stages = split_command(command)
    words = [w for s in stages for w in s]
    out = []
    nofile: Optional[int] = None
    seen: list[str] = []
    for stage in stages:
        argv = _unwrap(stage)
        if not argv:
            continue
        limit = _ulimit_nofile(argv)
        if limit is not None:
            nofile = limit
            continue
        name = posixpath.basename(argv[0])
        seen.append(name)
        parser = _TOOLS.get(name)
        if parser is None:
            continue
        parsed = parser(argv, words)
        if parsed is None:
            continue
        plan, issues = parsed
        if nofile is not None:
            plan = _with_nofile(plan, nofile)
        out.append((plan, issues))
    if not out:
        what = ", ".join(dict.fromkeys(seen)) or "nothing"
        raise BadInput(
            f"--load: no load generator found in the command (saw {what}; "
            f"know {', '.join(KNOWN_TOOLS)})"
        )
    return out


def _with_nofile(plan: LoadPlan, nofile: int) -> LoadPlan:
    from dataclasses import replace

    return replace(plan, nofile_soft=nofile)


def parse_load(command: str) -> list[LoadPlan]:
    """The load plans of a command line; BadInput when it cannot be split or runs no known tool."""
    return [plan for plan, _ in _parse(command)]


def open_connections(plan: LoadPlan) -> Optional[int]:
    """Connections one plan holds open at once, None when unknown.

    Fixed-rate tools without a connection count (vegeta, httperf) hold rate x response time;
    this assumes a saturated server's 250 ms, capped by the tool's own connection/worker limit.
    """
    if plan.rate and plan.tool in ("vegeta", "httperf"):
        n = int(plan.rate * SLOW_RESPONSE)
        return min(n, plan.connections) if plan.connections else n
    return plan.connections


def planned_connections(plans: Sequence[LoadPlan]) -> Optional[int]:
    """Connections all plans hold open at once (see `open_connections`), None when unknown."""
    counts = [n for n in map(open_connections, plans) if n is not None]
    return sum(counts) if counts else None


# ------------------------------------------------------------------ rules against the host


def _fmt(n: float) -> str:
    return f"{int(n)}" if n == int(n) else f"{n:g}"


def _host_rules(plan: LoadPlan, role: str, facts: LoadFacts) -> list[LoadIssue]:
    out: list[LoadIssue] = []
    tool = plan.tool
    # A tool that picks its own source ports has its own rule; the kernel's range is not used.
    ports = None if plan.own_ports else facts.ephemeral_ports
    conns = plan.connections
    port_fix = (
        'sysctl net.ipv4.ip_local_port_range = "1024 65535" (profile loadgen), or spread '
        "the load over more client IPs or target addresses"
    )
    if role in (*CLIENT_ROLES, "lb-proxy") and ports is not None and conns is not None:
        where = "per destination" if role in CLIENT_ROLES else "per backend address"
        if conns > ports:
            status = "fail" if role in CLIENT_ROLES else "warn"
            out.append(
                LoadIssue(
                    "connections-above-ports",
                    status,
                    tool,
                    f"{tool} opens {conns} connections but this host has {ports} ephemeral ports "
                    f"{where} (ip_local_port_range {facts.port_range[0]}-{facts.port_range[1]}"  # type: ignore[index]
                    + (f", {facts.reserved_ports} reserved" if facts.reserved_ports else "")
                    + ")",
                    "each connection to one address:port needs its own source port; past the range "
                    "connect() fails with EADDRNOTAVAIL and the tool reports socket errors, not "
                    "server errors",
                    f"at most {ports} connections per client IP, or widen the range: {port_fix}",
                )
            )
        elif conns > NEAR * ports:
            out.append(
                LoadIssue(
                    "connections-near-ports",
                    "warn",
                    tool,
                    f"{tool} opens {conns} connections, {100 * conns // ports}% of the {ports} "
                    f"ephemeral ports {where}",
                    "the connections of anything else on this host (and TIME_WAIT left over from "
                    "earlier runs) share the same ports",
                    port_fix,
                )
            )
    rate = plan.conn_rate
    if rate is not None or not plan.keepalive:
        if role in CLIENT_ROLES and ports is not None:
            reuse = facts.tw_reuse == 1
            reuse_note = (
                " (tcp_tw_reuse=1 lets connect() reuse TIME_WAIT ports, so this may still work)"
                if reuse else ""
            )  # fmt: skip
            if rate is not None and rate * TIME_WAIT_SECONDS > ports:
                out.append(
                    LoadIssue(
                        "time-wait-exhausts-ports",
                        "warn" if reuse else "fail",
                        tool,
                        f"{_fmt(rate)} new connections/s x {TIME_WAIT_SECONDS} s TIME_WAIT = "
                        f"{int(rate * TIME_WAIT_SECONDS)} ports, more than the {ports} ephemeral "
                        f"ports{reuse_note}",
                        "a connection closed by the client keeps its source port in TIME_WAIT for "
                        "60 s; at this rate the ports run out within the first minute and "
                        "connect() fails",
                        "use keep-alive, or net.ipv4.tcp_tw_reuse = 1 and a wider "
                        "ip_local_port_range (profile loadgen)",
                    )
                )
            elif rate is None and (plan.new_connections or 0) > ports:
                out.append(
                    LoadIssue(
                        "time-wait-exhausts-ports",
                        "warn",
                        tool,
                        f"{tool} opens {plan.new_connections} connections in one run, more "
                        f"than the {ports} ephemeral ports{reuse_note}",
                        "each closed connection keeps its source port 60 s in TIME_WAIT; a run "
                        f"faster than {ports // TIME_WAIT_SECONDS} connections/s runs out of ports",
                        "use keep-alive, or net.ipv4.tcp_tw_reuse = 1 and a wider "
                        "ip_local_port_range (profile loadgen)",
                    )
                )
        if (
            role in SERVER_ROLES
            and rate is not None
            and facts.max_tw_buckets is not None
            and rate * TIME_WAIT_SECONDS > facts.max_tw_buckets
        ):
            out.append(
                LoadIssue(
                    "time-wait-buckets",
                    "warn",
                    tool,
                    f"{_fmt(rate)} new connections/s x {TIME_WAIT_SECONDS} s = "
                    f"{int(rate * TIME_WAIT_SECONDS)} TIME_WAIT sockets, more than "
                    f"net.ipv4.tcp_max_tw_buckets {facts.max_tw_buckets}",
                    "when the server closes first it keeps TIME_WAIT; past tcp_max_tw_buckets the "
                    "kernel destroys them early (TCPTimeWaitOverflow) and late packets of old "
                    "connections can hit new ones",
                    "use keep-alive, or raise net.ipv4.tcp_max_tw_buckets",
                )
            )
    if role in SERVER_ROLES and plan.port is not None and plan.port in facts.backlogs:
        backlog = facts.backlogs[plan.port]
        if conns is not None and conns > backlog:
            out.append(
                LoadIssue(
                    "connections-above-backlog",
                    "fail",
                    tool,
                    f"{tool} opens {conns} connections at once; port {plan.port} accepts a "
                    f"queue of {backlog} (effective backlog = min(listen() backlog, somaxconn "
                    f"{facts.somaxconn if facts.somaxconn is not None else '?'}))",
                    "connections beyond the accept queue are dropped until the server accepts; "
                    "the client retries their SYN after 1 s, 3 s, 7 s, which shows up as latency "
                    "the server does not have",
                    "raise the application's listen backlog (nginx: listen ... backlog=N) and "
                    "net.core.somaxconn above the connection count",
                )
            )
    nofile = plan.nofile_soft or (facts.nofile_soft if role in CLIENT_ROLES else None)
    if nofile is not None:
        source = "ulimit -n on the command line" if plan.nofile_soft else "this shell's soft limit"
        if tool == "vegeta" and plan.rate:
            cap = conns
            need = plan.rate * SLOW_RESPONSE
            need_warn = plan.rate * STALLED_RESPONSE
            if cap is not None:
                need, need_warn = min(need, cap), min(need_warn, cap)
            level: Optional[str] = None
            lat = SLOW_RESPONSE
            if need + FD_OVERHEAD > nofile:
                level, lat = "fail", SLOW_RESPONSE
            elif need_warn + FD_OVERHEAD > nofile:
                level, lat = "warn", STALLED_RESPONSE
            if level is not None:
                held = int(min(plan.rate * lat, cap) if cap else plan.rate * lat)
                out.append(
                    LoadIssue(
                        "vegeta-nofile",
                        level,
                        tool,
                        f"vegeta at {_fmt(plan.rate)} requests/s holds {held} sockets open when "
                        f"responses take {int(lat * 1000)} ms; the open-file limit is {nofile} "
                        f"({source})",
                        "vegeta keeps sending at the fixed rate whatever the server's latency, so "
                        "sockets in flight = rate x response time; past the limit it reports "
                        "'too many open files' errors that look like server failures",
                        f"ulimit -n {max(65536, int(plan.rate) * 2)} before the run, or bound it "
                        "with -max-workers",
                    )
                )
        elif conns is not None and conns + FD_OVERHEAD > nofile:
            out.append(
                LoadIssue(
                    "connections-above-nofile",
                    "fail",
                    tool,
                    f"{tool} opens {conns} connections; the open-file limit is {nofile} ({source})",
                    "every connection is a file descriptor; past the limit socket() fails with "
                    "EMFILE and the tool counts errors, not server responses",
                    f"ulimit -n {max(65536, conns * 2)} before the run",
                )
            )
    return out


def lint_load(command: str, role: str, facts: LoadFacts) -> list[LoadIssue]:
    """Problems of the load command `command` run against (or from) a host of `role`.

    `role` says which side `facts` describe: `client` = the command runs on this host (its
    ports and open-file limit count); `web`, `lb-proxy`, `realserver` = this host serves the
    load (its listen backlogs and TIME_WAIT buckets count). Rules about the tool's own options
    apply to every role. BadInput when the command cannot be parsed.
    """
    out: list[LoadIssue] = []
    for plan, issues in _parse(command):
        out.extend(issues)
        out.extend(_host_rules(plan, role, facts))
    return out
