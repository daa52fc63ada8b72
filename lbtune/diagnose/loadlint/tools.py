"""One parser per load generator (ab, wrk/wrk2, httperf, vegeta, hey, h2load, oha): its
options read into a `LoadPlan`, plus the problems its own options cause (`LoadIssue`), such
as `ab` without `-c` or `wrk2` without a rate. Rules against the host are in `rules.py`."""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Optional, Sequence

from lbtune.diagnose.loadlint.model import (
    AB_MAX_CONCURRENCY,
    HTTPERF_PORTS,
    TIME_WAIT_SECONDS,
    LoadIssue,
    LoadPlan,
    fmt_number,
)
from lbtune.diagnose.loadlint.options import (
    Spec,
    count,
    getopt,
    go_duration,
    goflags,
    to_bool,
    to_float,
    url_port,
)
from lbtune.errors import BadInput
from lbtune.vocab import Level

# ------------------------------------------------------------------ tools

Parsed = tuple[LoadPlan, list[LoadIssue]]

# apr_getopt string of ab 2.3: "n:c:t:s:b:T:p:u:v:lrkVhwiIx:y:z:C:H:P:A:g:X:de:SqB:m:" + SSL.
_AB: Spec = {
    **{f"-{c}": (c, True) for c in "nctsbTpuvxyzCHPAgXeBmZfE"},
    **{f"-{c}": (c, False) for c in "lrkVhwiIdSq"},
}


def _ab(argv: list[str], words: Sequence[str]) -> Parsed:
    o = getopt("ab", argv[1:], _AB)
    c = count(o, "-c", o.last("c"))
    n = count(o, "-n", o.last("n"))
    timelimit = to_float(o, "-t", o.last("t"))
    if n is None:
        n = 50000 if timelimit else 1  # ab: -t implies -n 50000
    keepalive = o.has("k")
    plan = LoadPlan(
        "ab", tuple(argv), c or 1, keepalive, requests=n,
        new_connections=(c or 1) if keepalive else n, port=url_port(o.args),
    )  # fmt: skip
    issues = []
    if c is None:
        issues.append(
            LoadIssue(
                "ab-no-concurrency",
                Level.FAIL,
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
                Level.WARN,
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
                Level.FAIL,
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
                Level.FAIL,
                "ab",
                f"ab -c {c} is above ab's limit of {AB_MAX_CONCURRENCY}",
                "ab refuses to start with more than 20000 concurrent requests",
                "use several ab processes, or wrk/h2load for this many connections",
            )
        )
    return plan, issues


_WRK: Spec = {
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


def _wrk(argv: list[str], words: Sequence[str]) -> Parsed:
    tool = "wrk2" if posixpath.basename(argv[0]) == "wrk2" else "wrk"
    o = getopt(tool, argv[1:], _WRK)
    c = count(o, "-c", o.last("c"), metric=True)
    t = count(o, "-t", o.last("t"), metric=True)
    rate = count(o, "-R", o.last("R"), metric=True)
    connections = 10 if c is None else c  # wrk's defaults: 10 connections, 2 threads
    threads = 2 if t is None else t
    close = any(re.match(r"\s*connection\s*:\s*close\b", h, re.I) for h in o.all("H"))
    fixed = float(rate) if rate is not None else None
    plan = LoadPlan(
        tool, tuple(argv), connections, not close, rate=fixed,
        conn_rate=fixed if close else None, new_connections=None if close else connections,
        threads=threads, port=url_port(o.args),
    )  # fmt: skip
    issues = []
    if threads == 0 or connections < threads:
        issues.append(
            LoadIssue(
                "wrk-connections-below-threads",
                Level.FAIL,
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
                Level.FAIL,
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
                Level.WARN,
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
_HTTPERF: Spec = {
    **{f"--{n}": (n, True) for n in _HTTPERF_ARG},
    **{f"--{n}": (n, False) for n in _HTTPERF_FLAG},
    "-v": ("verbose", False), "-d": ("debug", True), "-V": ("version", False),
}  # fmt: skip


def _httperf(argv: list[str], words: Sequence[str]) -> Parsed:
    o = getopt("httperf", argv[1:], _HTTPERF)
    conns = count(o, "--num-conns", o.last("num-conns"))
    calls = count(o, "--num-calls", o.last("num-calls"))
    rate = to_float(o, "--rate", o.last("rate"))
    port = count(o, "--port", o.last("port"))
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
            need = f"{fmt_number(rate)}/s x {TIME_WAIT_SECONDS} s TIME_WAIT = {int(planned)}"
        level = Level.FAIL if planned > HTTPERF_PORTS else Level.WARN
        issues.append(
            LoadIssue(
                "httperf-no-hog",
                level,
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


def _vegeta(argv: list[str], words: Sequence[str]) -> Optional[Parsed]:
    o = goflags("vegeta", argv[1:], _VEGETA)
    if not o.args or o.args[0] != "attack":
        return None  # report, plot, encode: they generate no load
    a = goflags("vegeta", o.args[1:], _VEGETA)
    rate_text = a.last("rate") or "50/1s"
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(?:/(.+))?", rate_text)
    per = go_duration(m.group(2)) if m and m.group(2) else 1.0
    if m is None or per is None or per <= 0:
        raise BadInput(f"--load: vegeta -rate {rate_text!r}: not a rate (N or N/duration)")
    rate = float(m.group(1)) / per
    max_workers = count(a, "-max-workers", a.last("max-workers"))
    max_conns = count(a, "-max-connections", a.last("max-connections"))
    caps = [v for v in (max_workers, max_conns) if v]
    keepalive = to_bool(a.last("keepalive"), True)
    plan = LoadPlan(
        "vegeta", tuple(argv), min(caps) if caps else None, keepalive, rate=rate or None,
        conn_rate=None if keepalive else (rate or None), port=url_port(words),
    )  # fmt: skip
    issues = []
    if rate == 0 and not max_workers:
        issues.append(
            LoadIssue(
                "vegeta-rate-zero",
                Level.FAIL,
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
                Level.WARN,
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


def _hey(argv: list[str], words: Sequence[str]) -> Parsed:
    o = goflags("hey", argv[1:], _HEY)
    n = count(o, "-n", o.last("n"))
    c = count(o, "-c", o.last("c"))
    q = to_float(o, "-q", o.last("q"))
    n = 200 if n is None else n
    c = 50 if c is None else c
    keepalive = not to_bool(o.last("disable-keepalive"), False)
    # hey's -q is per worker; -z (duration) replaces -n.
    rate = q * c if q else None
    requests = None if o.has("z") else n
    plan = LoadPlan(
        "hey", tuple(argv), c, keepalive, rate=rate, conn_rate=None if keepalive else rate,
        requests=requests, new_connections=c if keepalive else requests, port=url_port(o.args),
    )  # fmt: skip
    issues = []
    if not o.has("z") and n < c:
        issues.append(
            LoadIssue(
                "hey-requests-below-workers",
                Level.FAIL,
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
                Level.WARN,
                "hey",
                "hey -disable-keepalive opens a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "drop -disable-keepalive unless connection setup is what you measure",
            )
        )
    return plan, issues


_H2LOAD: Spec = {
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


def _h2load(argv: list[str], words: Sequence[str]) -> Parsed:
    o = getopt("h2load", argv[1:], _H2LOAD)
    n = count(o, "-n", o.last("n"), metric=True)
    c = count(o, "-c", o.last("c"), metric=True)
    t = count(o, "-t", o.last("t"), metric=True)
    n = 1 if n is None else n
    c = 1 if c is None else c
    t = 1 if t is None else t
    timed = o.has("D")
    plan = LoadPlan(
        "h2load", tuple(argv), c, True, requests=None if timed else n, new_connections=c,
        threads=t, port=url_port(o.args),
    )  # fmt: skip
    issues = []
    if c < t:
        issues.append(
            LoadIssue(
                "h2load-clients-below-threads",
                Level.FAIL,
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
                Level.FAIL,
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
                Level.WARN,
                "h2load",
                "h2load without -c uses one client connection",
                "one connection measures one client's latency (with -m streams), not the server's "
                "capacity across connections",
                "add -c N",
            )
        )
    return plan, issues


_OHA: Spec = {
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


def _oha(argv: list[str], words: Sequence[str]) -> Parsed:
    o = getopt("oha", argv[1:], _OHA)
    n = count(o, "-n", o.last("n"))
    c = count(o, "-c", o.last("c"))
    q = to_float(o, "-q", o.last("q"))
    c = 50 if c is None else c
    keepalive = not o.has("disable-keepalive")
    requests = None if o.has("z") else (200 if n is None else n)
    plan = LoadPlan(
        "oha", tuple(argv), c, keepalive, rate=q or None,
        conn_rate=None if keepalive else (q or None), requests=requests,
        new_connections=c if keepalive else requests, port=url_port(o.args),
    )  # fmt: skip
    issues = []
    if not keepalive:
        issues.append(
            LoadIssue(
                "no-keepalive",
                Level.WARN,
                "oha",
                "oha --disable-keepalive opens a new TCP connection for every request",
                "every request pays a TCP handshake and close, so you benchmark connection setup; "
                "each closed connection stays 60 s in TIME_WAIT",
                "drop --disable-keepalive unless connection setup is what you measure",
            )
        )
    return plan, issues


TOOLS: dict[str, Callable[[list[str], Sequence[str]], Optional[Parsed]]] = {
    "ab": _ab, "ab2": _ab, "wrk": _wrk, "wrk2": _wrk, "httperf": _httperf,
    "vegeta": _vegeta, "hey": _hey, "h2load": _h2load, "oha": _oha,
}  # fmt: skip
