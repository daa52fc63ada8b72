"""Reading a command line as its tool would: shell splitting into stages, wrappers looked
through (`sudo`, `taskset`, `ip netns exec`), POSIX getopt_long and Go flag parsing, and the
number, duration and URL forms the tools accept. Nothing here ever runs the command."""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence
from urllib.parse import urlsplit

from lbtune.errors import BadInput

# Programs that run the command after them (their own options are skipped).
WRAPPERS = {
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
SEPARATORS = ("|", "||", "&&", ";", "&", "|&")

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
        if w in SEPARATORS:
            stages.append([])
        else:
            stages[-1].append(w)
    return [s for s in stages if s]


def unwrap(argv: list[str]) -> list[str]:
    """Drop `VAR=x`, `sudo`, `taskset -c 0-3`, `ip netns exec NS`... before the program."""
    i = 0
    while i < len(argv):
        word = argv[i]
        name = posixpath.basename(word)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", word):
            i += 1
        elif name == "ip" and argv[i + 1 : i + 3] == ["netns", "exec"]:
            i += 4
        elif name in WRAPPERS:
            i += 1
            with_arg = WRAPPERS[name]
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in with_arg else 1
            if name in ("taskset", "timeout") and i < len(argv):
                i += 1  # the CPU mask or list (`taskset [-c] MASK`), or the duration
        else:
            break
    return argv[i:]


# ------------------------------------------------------------------ option parsing

Spec = Mapping[str, tuple[str, bool]]  # spelling -> (canonical name, takes a value)


@dataclass
class Opts:
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


def getopt(tool: str, argv: Sequence[str], spec: Spec) -> Opts:
    """POSIX getopt_long: clustered short flags, `-c100`, `--long=v`, unique long prefixes."""
    out = Opts(tool)
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


def goflags(tool: str, argv: Sequence[str], spec: Mapping[str, bool]) -> Opts:
    """Go's flag package: `-name`, `--name`, `-name=v`, `-name v` (not for booleans)."""
    out = Opts(tool)
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


def count(opts: Opts, name: str, text: Optional[str], metric: bool = False) -> Optional[int]:
    """A count option; wrk-style `1k`/`2M` suffixes when `metric`. BadInput when not a number."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)\s*", text)
    if not m or (m.group(2) and not metric):
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number")
    return int(m.group(1)) * _METRIC[m.group(2).lower()]


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text: str) -> Optional[float]:
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


def to_float(opts: Opts, name: str, text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number") from None
    if value < 0 or value != value:
        raise BadInput(f"--load: {opts.tool} {name} {text!r}: not a number")
    return value


def url_port(words: Sequence[str]) -> Optional[int]:
    for w in words:
        for m in re.finditer(r"\bhttps?://[^\s\"']+", w):
            try:
                parts = urlsplit(m.group(0))
                port = parts.port
            except ValueError:
                continue
            return port if port is not None else (443 if parts.scheme == "https" else 80)
    return None


def to_bool(text: Optional[str], default: bool) -> bool:
    """A Go boolean flag value (`-keepalive=false`); `default` when absent."""
    if text is None:
        return default
    return text.lower() in ("1", "t", "true", "yes")
