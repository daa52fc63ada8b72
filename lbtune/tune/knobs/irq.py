"""IRQ and queue-steering knobs: IRQ affinity, RPS/XPS per queue, irqbalance.

Objects: `irq_affinity` `96` (IRQ number; CPU list `12-15,36`); `rps_cpus` `eth0:rx-3`,
`xps_cpus` `eth0:tx-3` (CPU list, "" = off; `0x<mask>` in the kernel's 32-bit words accepted
too; written as the kernel's hex mask); `rps_flow_cnt` `eth0:rx-3` (0 or a power of two);
`irqbalance` `service` (`running` | `stopped`, optionally `,enabled` | `,disabled`);
`irqbalance_ban` `banned_cpus` (CPU list, or `0x<mask>` for the IRQBALANCE_BANNED_CPUS form);
`irqbalance_banirq` `banned_irqs` (IRQ numbers `24,25`, "" = none: `--banirq=N` in IRQBALANCE_ARGS).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import ClassVar, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.cpulist import CpuListError, format_cpulist, format_cpumask, parse_cpumask
from lbtune.host.kernel.irqbalance import CONFIG_FILES, UNIT_WANTS, find_process
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.knobs.common import (
    NET_SYS,
    AttrKnob,
    IntValued,
    cpuset_normalize,
    nr_possible,
    online_cpus,
    parse_count,
    parse_cpuset,
    split_dev,
    write_attr,
    write_config,
)


class IrqAffinityKnob(AttrKnob):
    """`/proc/irq/N/smp_affinity_list`: only online CPUs, never empty."""

    kind = "irq_affinity"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        if not obj.isdigit() or not obj.isascii() or len(obj) > 7:
            raise BadInput(f"{self.kind} {obj!r}: not an IRQ number")
        self.irq = int(obj)
        self.path = f"/proc/irq/{self.irq}/smp_affinity_list"

    def normalize(self, value: str) -> str:
        return cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        if not cpus:
            raise BadInput(f"{self.ident}: empty CPU list")
        offline = cpus - online_cpus(host)
        if offline:
            raise BadInput(f"{self.ident}: CPU(s) {format_cpulist(offline)} are not online")

    def write(self, host: Host, value: str) -> None:
        text = value.strip()
        if text.lower().startswith("0x"):
            text = format_cpulist(parse_cpuset(text, self.ident))
        write_attr(host, self.path, text, self.ident)


class _QueueKnob(AttrKnob):
    """A per-queue attribute under /sys/class/net/DEV/queues/{rx,tx}-N/."""

    per_netns = True  # the device lives in the namespace

    direction: ClassVar[str]
    attr: ClassVar[str]

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, queue = split_dev(obj, self.kind)
        prefix = self.direction + "-"
        idx = queue[len(prefix) :]
        if not queue.startswith(prefix) or not idx.isdigit() or not idx.isascii():
            raise BadInput(f"{self.kind} {obj!r}: expected DEVICE:{prefix}N")
        self.queue = int(idx)
        self.path = f"{NET_SYS}/{self.dev}/queues/{prefix}{self.queue}/{self.attr}"

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def queue_of(self) -> Optional[tuple[str, str, int]]:
        return self.dev, self.direction, self.queue


class RpsCpusKnob(_QueueKnob):
    """RPS CPUs of one rx queue. Values are CPU lists; the kernel's hex mask is converted."""

    kind = "rps_cpus"
    direction = "rx"
    attr = "rps_cpus"

    def read(self, host: Host) -> Optional[str]:
        text = host.fs.read(self.path)
        if text is None:
            return None
        try:
            return format_cpulist(parse_cpumask(text))
        except CpuListError:
            return text

    def normalize(self, value: str) -> str:
        return cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        offline = cpus - online_cpus(host)
        if offline:
            raise BadInput(f"{self.ident}: CPU(s) {format_cpulist(offline)} are not online")

    def write(self, host: Host, value: str) -> None:
        try:
            cpus = parse_cpuset(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        write_attr(host, self.path, format_cpumask(cpus, nr_possible(host)), self.ident)


class XpsCpusKnob(RpsCpusKnob):
    kind = "xps_cpus"
    direction = "tx"
    attr = "xps_cpus"


class RpsFlowCntKnob(IntValued, _QueueKnob):
    """`rps_flow_cnt`: the kernel rounds up to a power of two, so only those are accepted."""

    kind = "rps_flow_cnt"
    direction = "rx"
    attr = "rps_flow_cnt"

    def check(self, host: Host, value: str) -> None:
        n = parse_count(value, self.ident)
        if n and (n & (n - 1) or n > 1 << 31):
            raise BadInput(
                f"{self.ident}: {n} is not 0 or a power of two up to 2^31 "
                "(the kernel would round it up)"
            )


# ------------------------------------------------------------------ irqbalance

UNIT_FILES = (
    "/etc/systemd/system/irqbalance.service",
    "/usr/lib/systemd/system/irqbalance.service",
    "/lib/systemd/system/irqbalance.service",
)
_UNIT = "irqbalance.service"


class IrqbalanceKnob(Knob):
    """Whether irqbalance runs (and starts at boot).

    Values: `running` (started and enabled) or `stopped` (stopped and disabled); a state
    that differs from its boot setting reads as `running,disabled` / `stopped,enabled`, and
    writing that restores it exactly. Live host: `systemctl start|stop` and
    `systemctl enable|disable` (argument lists through host.runner); the running state is read
    from /proc (a process named irqbalance), the boot state from the `*.target.wants` link.

    A host tree (not live) has nothing to start or stop: like `systemctl --root=DIR`, the
    knob then manages only the boot state, the `multi-user.target.wants/irqbalance.service`
    link, and reads `running`/`stopped` from that link alone (the /proc process list of a
    capture is a record, not something to change). Mixed values are refused there.
    """

    kind = "irqbalance"

    def __init__(self, obj: str) -> None:
        if obj != "service":
            raise BadInput(f"{self.kind} {obj!r}: the only object is 'service'")
        super().__init__(obj)

    @staticmethod
    def _parse(value: str, what: str) -> tuple[bool, bool]:
        parts = [p.strip() for p in value.strip().split(",")]
        if not parts or parts[0] not in ("running", "stopped"):
            raise BadInput(f"{what}: {value!r} must be 'running' or 'stopped'")
        run = parts[0] == "running"
        if len(parts) == 1:
            return run, run
        if len(parts) == 2 and parts[1] in ("enabled", "disabled"):
            return run, parts[1] == "enabled"
        raise BadInput(f"{what}: {value!r}: expected running|stopped[,enabled|disabled]")

    @staticmethod
    def _format(run: bool, enabled: bool) -> str:
        state = "running" if run else "stopped"
        if run == enabled:
            return state
        return f"{state},{'enabled' if enabled else 'disabled'}"

    def normalize(self, value: str) -> str:
        try:
            return self._format(*self._parse(value, self.ident))
        except BadInput:
            return " ".join(value.split())

    @staticmethod
    def _installed(host: Host) -> bool:
        return any(host.fs.exists(p) for p in UNIT_FILES) or any(
            host.fs.islink(p) for p in UNIT_WANTS
        )

    @staticmethod
    def _enabled(host: Host) -> bool:
        return any(host.fs.islink(p) or host.fs.exists(p) for p in UNIT_WANTS)

    def read(self, host: Host) -> Optional[str]:
        running = find_process(host.fs, "irqbalance") is not None
        if not self._installed(host) and not running:
            return None
        enabled = self._enabled(host)
        if not host.is_live:
            return self._format(enabled, enabled)
        return self._format(running, enabled)

    def check(self, host: Host, value: str) -> None:
        run, enabled = self._parse(value, self.ident)
        if not host.is_live and run != enabled:
            raise BadInput(f"{self.ident}: a host tree only has the boot state; use {value!r}")

    def write(self, host: Host, value: str) -> None:
        try:
            run, enabled = self._parse(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        if host.is_live:
            for argv in (
                ["systemctl", "start" if run else "stop", _UNIT],
                ["systemctl", "enable" if enabled else "disable", _UNIT],
            ):
                res = host.runner.run(argv)
                if not res.ok:
                    detail = "; ".join((res.stderr or res.stdout).strip().splitlines())
                    raise KnobError(f"{self.ident}: {' '.join(argv)} failed: {detail}")
            return
        self._set_link(host, enabled)

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put the original state back; nothing to do (and no systemctl to run) when it
        still is the original, as after a `systemctl stop` that failed."""
        if original is None or self.same(self.read(host), original):
            return
        self.write(host, original)

    @staticmethod
    def _set_link(host: Host, enabled: bool) -> None:
        link = UNIT_WANTS[0]
        for p in UNIT_WANTS:
            parent = posixpath.dirname(p)
            if host.fs.exists(parent) and host.fs.realpath(parent) != parent:
                raise KnobError(f"irqbalance: {parent} is a link in this host tree; refusing")
        try:
            if not enabled:
                for p in UNIT_WANTS:
                    if host.fs.islink(p):
                        host.fs.remove_file(p)  # the link itself, never its target
                return
            if IrqbalanceKnob._enabled(host):
                return
            unit = next((p for p in UNIT_FILES[1:] if host.fs.exists(p)), UNIT_FILES[1])
            # relative, so the link resolves inside a host tree as well
            host.fs.symlink(posixpath.relpath(unit, posixpath.dirname(link)), link)
        except OSError as e:
            raise KnobError(f"irqbalance: {link}: {e.strerror or e}") from None


_BAN_LINE = re.compile(
    r"^(?P<pre>\s*(?:export\s+)?)(?P<key>IRQBALANCE_BANNED_CPU(?:S|LIST))(?P<eq>\s*=\s*)"
    r"(?P<q>[\"']?)(?P<val>[^\"'#\s]*)(?P=q)(?P<post>[^\r\n]*)(?P<nl>\r?\n?)$"
)


class IrqbalanceBanKnob(Knob):
    """The CPUs irqbalance leaves alone, in its environment file.

    The value is a CPU list, written as `IRQBALANCE_BANNED_CPULIST` (and a conflicting
    `IRQBALANCE_BANNED_CPUS` line is replaced). A file that uses the older mask form reads as
    `0x<mask>` with the file's digits, and writing such a value writes the mask form back, so a
    rollback restores the file byte for byte. Every other line is kept byte-identical; "" (no
    CPUs banned) removes the assignment. On a live host a running irqbalance is restarted
    (`systemctl try-restart`) to pick the change up; when the same irqbalance process still
    runs afterwards (no systemd, or a daemon started by hand), the apply fails and is rolled
    back, because that daemon would move IRQs onto the CPUs the profile bans.
    """

    kind = "irqbalance_ban"

    def __init__(self, obj: str) -> None:
        if obj != "banned_cpus":
            raise BadInput(f"{self.kind} {obj!r}: the only object is 'banned_cpus'")
        super().__init__(obj)

    @staticmethod
    def config_file(host: Host) -> Optional[str]:
        return next((p for p in CONFIG_FILES if host.fs.exists(p)), None)

    def read(self, host: Host) -> Optional[str]:
        path = self.config_file(host)
        if path is None:
            return None
        found: dict[str, str] = {}
        for line in (host.fs.read_bytes(path) or b"").decode(errors="replace").splitlines(True):
            m = _BAN_LINE.match(line)
            if m:
                found[m.group("key")] = m.group("val")
        if found.get("IRQBALANCE_BANNED_CPULIST"):
            return found["IRQBALANCE_BANNED_CPULIST"]
        if found.get("IRQBALANCE_BANNED_CPUS"):
            return "0x" + found["IRQBALANCE_BANNED_CPUS"]
        return ""

    def normalize(self, value: str) -> str:
        return cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        online = online_cpus(host)
        if online and cpus >= online:
            raise BadInput(f"{self.ident}: {value!r} bans every online CPU")

    def write(self, host: Host, value: str) -> None:
        self._write(host, value, strict=True)

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put the file back; a running irqbalance that cannot be restarted is not an error
        here (it keeps the ban it started with, never more CPUs than it had under lbtune)."""
        if original is not None:
            self._write(host, original, strict=False)

    def _write(self, host: Host, value: str, strict: bool) -> None:
        path = self.config_file(host)
        if path is None:
            raise KnobError(f"{self.ident}: no irqbalance configuration file")
        text = value.strip()
        if text.lower().startswith("0x"):
            key, val = "IRQBALANCE_BANNED_CPUS", text[2:]
        else:
            key, val = "IRQBALANCE_BANNED_CPULIST", text
        if not re.fullmatch(r"[0-9A-Fa-f,\-:/]*", val):
            raise KnobError(f"{self.ident}: bad value {value!r}")
        original = (host.fs.read_bytes(path) or b"").decode(errors="surrogateescape")
        out: list[str] = []
        done = False
        for line in original.splitlines(True):
            m = _BAN_LINE.match(line)
            if m is None:
                out.append(line)
                continue
            if done or not val:
                continue  # a conflicting or now empty assignment goes
            q = m.group("q") or '"'
            out.append(f"{m.group('pre')}{key}{m.group('eq')}{q}{val}{q}{m.group('post')}")
            out[-1] += m.group("nl")
            done = True
        if not done and val:
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.append(f'{key}="{val}"\n')
        content = "".join(out).encode(errors="surrogateescape")
        write_config(host, path, content, self.ident)
        if host.is_live:
            _restart(host, self.ident, path, strict)


def _restart(host: Host, ident: str, path: str, strict: bool) -> None:
    """`systemctl try-restart` so a running irqbalance reads its changed environment file. A
    daemon still running under the same PID afterwards (no systemd, or one started by hand)
    keeps its old settings and moves IRQs onto the CPUs just banned: with `strict` that is a
    KnobError, so the apply is rolled back instead of reported as done."""
    pid = find_process(host.fs, "irqbalance")
    res = host.runner.run(["systemctl", "try-restart", _UNIT])
    if not strict or pid is None or find_process(host.fs, "irqbalance") != pid:
        return
    detail = (res.stderr or res.stdout).strip().splitlines()
    why = detail[-1] if not res.ok and detail else "it is not the service's process"
    raise KnobError(
        f"{ident}: {path} written, but the running irqbalance (pid {pid}) was not "
        f"restarted by systemctl try-restart ({why}) and would keep balancing IRQs onto "
        "the CPUs to ban: stop it (or restart it through its service manager) and apply "
        "again"
    )


_ARGS_LINE = re.compile(
    r"^(?P<pre>\s*(?:export\s+)?)IRQBALANCE_ARGS(?P<eq>\s*=\s*)(?P<val>[^\r\n]*?)(?P<nl>\r?\n?)$"
)


def _args_banned(words: list[str]) -> tuple[list[str], list[int]]:
    """Split irqbalance arguments into the others and the IRQs of `--banirq=N`,
    `--banirq N` and `-i N`."""
    rest: list[str] = []
    irqs: list[int] = []
    i = 0
    while i < len(words):
        w, step = words[i], 1
        value: Optional[str] = None
        if w.startswith("--banirq="):
            value = w.split("=", 1)[1]
        elif w in ("--banirq", "-i") and i + 1 < len(words):
            value, step = words[i + 1], 2
        elif w.startswith("-i") and w[2:].isdigit():
            value = w[2:]
        if value is not None and value.isdigit():
            irqs.append(int(value))
        else:
            rest.extend(words[i : i + step])
        i += step
    return rest, irqs


def _split(val: str) -> Optional[list[str]]:
    """The arguments of an `IRQBALANCE_ARGS=` value: unquoted, then split on white space as
    systemd expands `$IRQBALANCE_ARGS`."""
    try:
        return " ".join(shlex.split(val, comments=True)).split()
    except ValueError:
        return None


class IrqbalanceBanIrqKnob(Knob):
    """The IRQs irqbalance must not move: `--banirq=N` words in `IRQBALANCE_ARGS` of its
    environment file (Debian's unit runs `irqbalance --foreground $IRQBALANCE_ARGS`).

    A CPU ban only keeps irqbalance from *placing* IRQs on those CPUs; it still moves the IRQs
    lbtune pinned there (irqbalance 1.9.2). lbtune therefore bans the IRQs it pins as well.
    The value is the sorted IRQ list (`27,28`), "" = none. Writing replaces the `--banirq`
    words of the first uncommented `IRQBALANCE_ARGS` line and keeps the other arguments; a
    file without one gets `IRQBALANCE_ARGS="--banirq=N ..."` appended, and writing "" removes
    a line left with no argument, so a rollback restores such a file byte for byte. A running
    irqbalance is restarted as for `irqbalance_ban`.
    """

    kind = "irqbalance_banirq"

    def __init__(self, obj: str) -> None:
        if obj != "banned_irqs":
            raise BadInput(f"{self.kind} {obj!r}: the only object is 'banned_irqs'")
        super().__init__(obj)

    @staticmethod
    def _parse(value: str, what: str) -> list[int]:
        words = [w for w in value.replace(",", " ").split() if w]
        if not all(w.isdigit() and w.isascii() and len(w) <= 7 for w in words):
            raise BadInput(f"{what}: {value!r}: expected IRQ numbers like '24,25'")
        return sorted({int(w) for w in words})

    def normalize(self, value: str) -> str:
        try:
            return ",".join(str(n) for n in self._parse(value, self.ident))
        except BadInput:
            return " ".join(value.split())

    def read(self, host: Host) -> Optional[str]:
        path = IrqbalanceBanKnob.config_file(host)
        if path is None:
            return None
        text = (host.fs.read_bytes(path) or b"").decode(errors="replace")
        for line in text.splitlines(True):
            m = _ARGS_LINE.match(line)
            if m:
                words = _split(m.group("val")) or []
                return ",".join(str(n) for n in sorted(set(_args_banned(words)[1])))
        return ""

    def check(self, host: Host, value: str) -> None:
        self._parse(value, self.ident)

    def write(self, host: Host, value: str) -> None:
        self._write(host, value, strict=True)

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put the file back; as for `irqbalance_ban`, a daemon that cannot be restarted is
        not an error here."""
        if original is not None:
            self._write(host, original, strict=False)

    def _write(self, host: Host, value: str, strict: bool) -> None:
        try:
            irqs = self._parse(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        path = IrqbalanceBanKnob.config_file(host)
        if path is None:
            raise KnobError(f"{self.ident}: no irqbalance configuration file")
        ban = [f"--banirq={n}" for n in irqs]
        original = (host.fs.read_bytes(path) or b"").decode(errors="surrogateescape")
        out: list[str] = []
        done = False
        for line in original.splitlines(True):
            m = _ARGS_LINE.match(line)
            if m is None or done:
                out.append(line)
                continue
            done = True
            words = _split(m.group("val"))
            if words is None:
                raise KnobError(f"{self.ident}: {path}: IRQBALANCE_ARGS is not parseable")
            rest, had = _args_banned(words)
            if sorted(set(had)) == irqs:
                out.append(line)  # unchanged: keep its bytes
                continue
            args = rest + ban
            if not args:
                continue  # nothing left: the line goes
            if any(re.search(r"[\s\"'\\$`]", w) for w in args):
                raise KnobError(
                    f"{self.ident}: {path}: IRQBALANCE_ARGS has quoting lbtune keeps away from"
                )
            quoted = " ".join(args)
            out.append(f'{m.group("pre")}IRQBALANCE_ARGS{m.group("eq")}"{quoted}"{m.group("nl")}')
        if not done and ban:
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.append(f'IRQBALANCE_ARGS="{" ".join(ban)}"\n')
        content = "".join(out).encode(errors="surrogateescape")
        if content == original.encode(errors="surrogateescape"):
            return
        write_config(host, path, content, self.ident)
        if host.is_live:
            _restart(host, self.ident, path, strict)
