"""NIC, IRQ, irqbalance, boot-cmdline and CPU-frequency knobs.

Every knob is built from its object string alone (the journal rebuilds knobs from
(kind, obj)). Object formats:

- `ring` `eth0:rx` | `eth0:tx`: integer descriptor count (link reset).
- `channels` `eth0:combined` | `:rx` | `:tx` | `:other`: integer queue count (link reset).
- `txqueuelen` `eth0`: integer.
- `irq_affinity` `96` (IRQ number): CPU list (`12-15,36`).
- `rps_cpus` `eth0:rx-3`, `xps_cpus` `eth0:tx-3`: CPU list ("" = off); `0x<mask>` (32-bit
  words, as the kernel prints them) is accepted too. Written as the kernel's hex mask.
- `rps_flow_cnt` `eth0:rx-3`: 0 or a power of two.
- `irqbalance` `service`: `running` | `stopped`, optionally `,enabled` | `,disabled`.
- `irqbalance_ban` `banned_cpus`: CPU list, or `0x<mask>` for the IRQBALANCE_BANNED_CPUS form.
- `cmdline` `isolcpus` | `nohz_full` | `rcu_nocbs` | `irqaffinity`: the parameter's value,
  "" = absent (reboot required).
- `governor` `cpu3`: a name from scaling_available_governors.

Cmdline knobs read and write the *configured* command line (`GRUB_CMDLINE_LINUX` in
`/etc/default/grub`), not the running one: `verify` of a cmdline knob therefore compares the
configured value, and callers use `CmdlineKnob.running_value()` (from /proc/cmdline) to report
"reboot required" when the running kernel differs. `write` never runs a bootloader tool;
`lbtune.tune.persist` does (live hosts only), and `restore` does on live hosts so that a rollback
also regenerates the bootloader configuration.
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import Callable, ClassVar, Optional

from lbtune.errors import BadInput
from lbtune.host.cmdline import ISOLCPUS_FLAGS, KernelCmdline
from lbtune.host.cpulist import (
    CpuListError,
    format_cpulist,
    format_cpumask,
    parse_cpulist,
    parse_cpumask,
)
from lbtune.host.host import Host
from lbtune.host.irqbalance import CONFIG_FILES, UNIT_WANTS, find_process
from lbtune.host.topology import CPU_SYS
from lbtune.tune.knob import Knob, KnobError

NET_SYS = "/sys/class/net"
_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-.@]{0,14}$")


def _ifname(name: str, what: str) -> str:
    if not _IFNAME.match(name) or name in (".", ".."):
        raise BadInput(f"{what}: {name!r} is not an interface name")
    return name


def _split_dev(obj: str, kind: str) -> tuple[str, str]:
    """`eth0:rx` -> ("eth0", "rx"); the part after the LAST colon is the field."""
    dev, sep, field = obj.rpartition(":")
    if not sep or not dev:
        raise BadInput(f"{kind} {obj!r}: expected DEVICE:FIELD")
    return _ifname(dev, f"{kind} {obj!r}"), field


def _int(value: str, what: str) -> int:
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        raise BadInput(f"{what}: {value!r} is not a non-negative integer")
    return int(text)


def _online(host: Host) -> frozenset[int]:
    """Online CPUs (`online` file, else the cpuN directories)."""
    cpus = host.fs.read_cpulist(f"{CPU_SYS}/online")
    if cpus is None:
        cpus = frozenset(
            int(n[3:]) for n in host.fs.listdir(CPU_SYS) if n.startswith("cpu") and n[3:].isdigit()
        )
    return cpus


def _nr_possible(host: Host) -> int:
    possible = host.fs.read_cpulist(f"{CPU_SYS}/possible") or _online(host)
    return max(possible, default=0) + 1


def parse_cpuset(value: str, what: str) -> frozenset[int]:
    """A CPU set given as a list (`0-3,8`) or as a hex mask prefixed `0x` (`0x0000,000f`)."""
    text = value.strip()
    try:
        if text.lower().startswith("0x"):
            return parse_cpumask(text[2:])
        return parse_cpulist(text)
    except CpuListError as e:
        raise BadInput(f"{what}: {e}") from None


def _cpuset_normalize(value: str) -> str:
    try:
        return format_cpulist(parse_cpuset(value, "cpu set"))
    except BadInput:
        return " ".join(value.split())


def _write_attr(host: Host, kpath: str, text: str, what: str) -> None:
    try:
        host.fs.write_attr(kpath, text)
    except OSError as e:
        raise KnobError(f"{what}={text}: {e.strerror or e}") from None


def _file_mode(host: Host, kpath: str) -> int:
    try:
        return os.stat(host.fs.path(host.fs.realpath(kpath))).st_mode & 0o7777
    except OSError:
        return 0o644


# ------------------------------------------------------------------ ethtool: rings, channels


class RingKnob(Knob):
    """`ethtool -G DEV rx|tx N`; most drivers reset the link."""

    per_netns = True  # the device lives in the namespace

    kind = "ring"
    note = "link reset"
    disruptive = True
    FIELDS: ClassVar[tuple[str, ...]] = ("rx", "tx")

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.field = _split_dev(obj, self.kind)
        if self.field not in self.FIELDS:
            raise BadInput(f"{self.kind} {obj!r}: field must be one of {', '.join(self.FIELDS)}")

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def _values(self, host: Host) -> tuple[Optional[int], Optional[int]]:
        r = host.ethtool.rings(self.dev)
        if r is None:
            return None, None
        return getattr(r, self.field), getattr(r, self.field + "_max")

    def read(self, host: Host) -> Optional[str]:
        cur, _ = self._values(host)
        return None if cur is None else str(cur)

    def normalize(self, value: str) -> str:
        text = value.strip()
        return str(int(text)) if text.isdigit() else " ".join(value.split())

    def check(self, host: Host, value: str) -> None:
        n = _int(value, self.ident)
        _, top = self._values(host)
        if n < 1:
            raise BadInput(f"{self.ident}: {n} is below 1")
        if top is not None and n > top:
            raise BadInput(f"{self.ident}: {n} is beyond the driver maximum {top}")

    def _set(self, host: Host, n: int) -> None:
        host.ethtool.set_rings(self.dev, **{self.field: n})

    def write(self, host: Host, value: str) -> None:
        try:
            n = int(value.strip())
        except ValueError:
            raise KnobError(f"{self.ident}: not an integer: {value!r}") from None
        try:
            self._set(host, n)
        except OSError as e:
            raise KnobError(f"{self.ident}={n}: {e.strerror or e}") from None


class ChannelsKnob(RingKnob):
    """`ethtool -L DEV combined|rx|tx|other N`; resets the queues (and usually the link).

    `combined` must stay >= 1; rx/tx/other may be 0 (drivers with both kinds).
    """

    kind = "channels"
    FIELDS: ClassVar[tuple[str, ...]] = ("combined", "rx", "tx", "other")

    def _values(self, host: Host) -> tuple[Optional[int], Optional[int]]:
        c = host.ethtool.channels(self.dev)
        if c is None:
            return None, None
        return getattr(c, self.field), getattr(c, self.field + "_max")

    def check(self, host: Host, value: str) -> None:
        n = _int(value, self.ident)
        _, top = self._values(host)
        if self.field == "combined" and n < 1:
            raise BadInput(f"{self.ident}: {n} is below 1")
        if top is not None and n > top:
            raise BadInput(f"{self.ident}: {n} is beyond the driver maximum {top}")

    def _set(self, host: Host, n: int) -> None:
        host.ethtool.set_channels(self.dev, **{self.field: n})


# ------------------------------------------------------------------ sysfs attributes


class _AttrKnob(Knob):
    """A knob backed by one sysfs/procfs attribute."""

    path: str

    def read(self, host: Host) -> Optional[str]:
        return host.fs.read(self.path)

    def write(self, host: Host, value: str) -> None:
        _write_attr(host, self.path, value.strip(), self.ident)


class TxqueuelenKnob(_AttrKnob):
    per_netns = True  # the device lives in the namespace
    kind = "txqueuelen"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev = _ifname(obj, self.kind)
        self.path = f"{NET_SYS}/{self.dev}/tx_queue_len"

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def normalize(self, value: str) -> str:
        text = value.strip()
        return str(int(text)) if text.isdigit() else " ".join(value.split())

    def check(self, host: Host, value: str) -> None:
        if _int(value, self.ident) > 0xFFFFFFFF:
            raise BadInput(f"{self.ident}: {value} is out of range")


class IrqAffinityKnob(_AttrKnob):
    """`/proc/irq/N/smp_affinity_list`: only online CPUs, never empty."""

    kind = "irq_affinity"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        if not obj.isdigit() or not obj.isascii() or len(obj) > 7:
            raise BadInput(f"{self.kind} {obj!r}: not an IRQ number")
        self.irq = int(obj)
        self.path = f"/proc/irq/{self.irq}/smp_affinity_list"

    def normalize(self, value: str) -> str:
        return _cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        if not cpus:
            raise BadInput(f"{self.ident}: empty CPU list")
        offline = cpus - _online(host)
        if offline:
            raise BadInput(f"{self.ident}: CPU(s) {format_cpulist(offline)} are not online")

    def write(self, host: Host, value: str) -> None:
        text = value.strip()
        if text.lower().startswith("0x"):
            text = format_cpulist(parse_cpuset(text, self.ident))
        _write_attr(host, self.path, text, self.ident)


class _QueueKnob(_AttrKnob):
    """A per-queue attribute under /sys/class/net/DEV/queues/{rx,tx}-N/."""

    per_netns = True  # the device lives in the namespace

    direction: ClassVar[str]
    attr: ClassVar[str]

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, queue = _split_dev(obj, self.kind)
        prefix = self.direction + "-"
        idx = queue[len(prefix) :]
        if not queue.startswith(prefix) or not idx.isdigit() or not idx.isascii():
            raise BadInput(f"{self.kind} {obj!r}: expected DEVICE:{prefix}N")
        self.queue = int(idx)
        self.path = f"{NET_SYS}/{self.dev}/queues/{prefix}{self.queue}/{self.attr}"

    @property
    def interface(self) -> Optional[str]:
        return self.dev


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
        return _cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        offline = cpus - _online(host)
        if offline:
            raise BadInput(f"{self.ident}: CPU(s) {format_cpulist(offline)} are not online")

    def write(self, host: Host, value: str) -> None:
        try:
            cpus = parse_cpuset(value, self.ident)
        except BadInput as e:
            raise KnobError(str(e)) from None
        _write_attr(host, self.path, format_cpumask(cpus, _nr_possible(host)), self.ident)


class XpsCpusKnob(RpsCpusKnob):
    kind = "xps_cpus"
    direction = "tx"
    attr = "xps_cpus"


class RpsFlowCntKnob(_QueueKnob):
    """`rps_flow_cnt`: the kernel rounds up to a power of two, so only those are accepted."""

    kind = "rps_flow_cnt"
    direction = "rx"
    attr = "rps_flow_cnt"

    def normalize(self, value: str) -> str:
        text = value.strip()
        return str(int(text)) if text.isdigit() else " ".join(value.split())

    def check(self, host: Host, value: str) -> None:
        n = _int(value, self.ident)
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
                    detail = (res.stderr or res.stdout).strip()
                    raise KnobError(f"{self.ident}: {' '.join(argv)} failed: {detail}")
            return
        self._set_link(host, enabled)

    @staticmethod
    def _set_link(host: Host, enabled: bool) -> None:
        link = UNIT_WANTS[0]
        for p in UNIT_WANTS:
            parent = posixpath.dirname(p)
            if host.fs.exists(parent) and host.fs.realpath(parent) != parent:
                raise KnobError(f"irqbalance: {parent} is a link in this host tree; refusing")
        if not enabled:
            for p in UNIT_WANTS:
                if host.fs.islink(p):
                    os.unlink(host.fs.path(p))
            return
        if IrqbalanceKnob._enabled(host):
            return
        unit = next((p for p in UNIT_FILES[1:] if host.fs.exists(p)), UNIT_FILES[1])
        parent = posixpath.dirname(link)
        os.makedirs(host.fs.path(parent), exist_ok=True)
        # relative, so the link resolves inside a host tree as well
        os.symlink(posixpath.relpath(unit, parent), host.fs.path(link))


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
    (`systemctl try-restart`) to pick the change up.
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
        return _cpuset_normalize(value)

    def check(self, host: Host, value: str) -> None:
        cpus = parse_cpuset(value, self.ident)
        online = _online(host)
        if online and cpus >= online:
            raise BadInput(f"{self.ident}: {value!r} bans every online CPU")

    def write(self, host: Host, value: str) -> None:
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
        try:
            host.fs.write_file(path, content, _file_mode(host, path))
        except OSError as e:
            raise KnobError(f"{self.ident}: {path}: {e.strerror or e}") from None
        if host.is_live:
            host.runner.run(["systemctl", "try-restart", _UNIT])


# ------------------------------------------------------------------ kernel command line

GRUB_DEFAULT = "/etc/default/grub"
CMDLINE_KEYS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity")
_GRUB_LINE = re.compile(
    r"^(?P<pre>\s*(?:export\s+)?GRUB_CMDLINE_LINUX(?P<default>_DEFAULT)?=)"
    r"(?P<q>[\"']?)(?P<val>.*?)(?P=q)(?P<post>\s*)$",
    re.DOTALL,
)
_CMDLINE_VALUE = re.compile(r"^[A-Za-z0-9,_\-:/]*$")


def _grub_lines(text: str) -> list[tuple[int, re.Match[str]]]:
    out = []
    for i, line in enumerate(text.splitlines(True)):
        m = _GRUB_LINE.match(line)
        if m:
            out.append((i, m))
    return out


def _edit_words(value: str, key: str, new: str) -> str:
    """Set `key=new` in a space-separated parameter string, editing in place.

    The first occurrence is replaced where it stands; later ones (and all, for "") are removed
    together with the whitespace before them (after them, for the first word). Everything else
    is kept byte for byte; a missing parameter is appended.
    """
    tokens = re.split(r"(\s+)", value)  # words at even positions, separators at odd
    keep: list[str] = []
    replaced = False
    for i in range(0, len(tokens), 2):
        word = tokens[i]
        sep_before = tokens[i - 1] if i else ""
        if word and word.split("=", 1)[0] == key:
            if new and not replaced:
                keep.extend([sep_before, f"{key}={new}"])
                replaced = True
            continue  # dropped together with the separator before it
        keep.extend([sep_before, word])
    out = "".join(keep)
    # dropping the first word leaves its following separator at the front
    if len(out) < len(value) and value[:1].strip() and out[:1].isspace():
        out = out.lstrip()
    if not replaced and new:
        sep = "" if not out or out[-1:].isspace() else " "
        out = f"{out}{sep}{key}={new}"
    return out


def update_bootloader(host: Host, params: dict[str, str]) -> None:
    """Regenerate the bootloader configuration on a LIVE host after /etc/default/grub changed.

    Debian/Ubuntu: `update-grub`. RHEL family: `grubby --update-kernel=ALL --args=k=v` (and
    `--remove-args=k` for parameters set to ""). Never runs anything on a host tree.
    """
    if not host.is_live or not params:
        return
    if host.runner.which("update-grub"):
        argvs = [["update-grub"]]
    elif host.runner.which("grubby"):
        add = " ".join(f"{k}={v}" for k, v in params.items() if v)
        remove = " ".join(k for k, v in params.items() if not v)
        argvs = []
        if add:
            argvs.append(["grubby", "--update-kernel=ALL", f"--args={add}"])
        if remove:
            argvs.append(["grubby", "--update-kernel=ALL", f"--remove-args={remove}"])
    else:
        raise KnobError("kernel command line: neither update-grub nor grubby is installed")
    for argv in argvs:
        res = host.runner.run(argv, timeout=300)
        if not res.ok:
            detail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            raise KnobError(f"{' '.join(argv)} failed ({res.returncode}): {detail[0]}")


class CmdlineKnob(Knob):
    """One parameter of the configured kernel command line (GRUB_CMDLINE_LINUX)."""

    kind = "cmdline"
    note = "reboot required"

    def __init__(self, obj: str) -> None:
        if obj not in CMDLINE_KEYS:
            raise BadInput(f"{self.kind} {obj!r}: must be one of {', '.join(CMDLINE_KEYS)}")
        super().__init__(obj)

    def _line(self, host: Host, default: bool = False) -> Optional[re.Match[str]]:
        text = host.fs.read(GRUB_DEFAULT)
        if text is None:
            return None
        hits = [m for _, m in _grub_lines(text) if bool(m.group("default")) == default]
        return hits[-1] if hits else None

    def read(self, host: Host) -> Optional[str]:
        if host.fs.read(GRUB_DEFAULT) is None:
            return None
        m = self._line(host)
        value = KernelCmdline.parse(m.group("val") if m else "").get(self.obj)
        return value or ""

    def running_value(self, host: Host) -> str:
        """The value the running kernel booted with (/proc/cmdline); "" when absent."""
        return KernelCmdline.parse(host.fs.read("/proc/cmdline") or "").get(self.obj) or ""

    def _cpus(self, value: str) -> tuple[tuple[str, ...], frozenset[int]]:
        parts = value.strip().split(",") if value.strip() else []
        flags: list[str] = []
        if self.obj == "isolcpus":
            while parts and parts[0] in ISOLCPUS_FLAGS:
                flags.append(parts.pop(0))
        try:
            return tuple(flags), parse_cpulist(",".join(parts))
        except CpuListError as e:
            raise BadInput(f"{self.ident}: {e}") from None

    def normalize(self, value: str) -> str:
        try:
            flags, cpus = self._cpus(value)
        except BadInput:
            return " ".join(value.split())
        return ",".join([*flags, format_cpulist(cpus)] if cpus else list(flags))

    def check(self, host: Host, value: str) -> None:
        if not _CMDLINE_VALUE.match(value.strip()):
            raise BadInput(f"{self.ident}: {value!r} is not a CPU list")
        _, cpus = self._cpus(value)
        online = _online(host)
        if self.obj in ("isolcpus", "nohz_full") and online and cpus >= online:
            raise BadInput(
                f"{self.ident}={value}: isolates every online CPU; no housekeeping CPU left"
            )
        if self.obj == "irqaffinity" and value.strip() and not cpus & online:
            raise BadInput(f"{self.ident}={value}: no online CPU left for interrupts")
        other = self._line(host, default=True)
        if other is not None and KernelCmdline.parse(other.group("val")).has(self.obj):
            raise BadInput(
                f"{self.ident}: also set in GRUB_CMDLINE_LINUX_DEFAULT, which overrides "
                "GRUB_CMDLINE_LINUX; move it to GRUB_CMDLINE_LINUX first"
            )

    def write(self, host: Host, value: str) -> None:
        new = value.strip()
        if not _CMDLINE_VALUE.match(new):
            raise KnobError(f"{self.ident}: refusing to write {value!r}")
        raw = host.fs.read_bytes(GRUB_DEFAULT)
        if raw is None:
            raise KnobError(f"{self.ident}: {GRUB_DEFAULT} does not exist")
        text = raw.decode(errors="surrogateescape")
        lines = text.splitlines(True)
        hits = [(i, m) for i, m in _grub_lines(text) if not m.group("default")]
        if hits:
            i, m = hits[-1]
            q = m.group("q")
            val = _edit_words(m.group("val"), self.obj, new)
            if not q and " " in val:
                q = '"'
            lines[i] = f"{m.group('pre')}{q}{val}{q}{m.group('post')}"
        elif new:
            if lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.append(f'GRUB_CMDLINE_LINUX="{self.obj}={new}"\n')
        else:
            return
        content = "".join(lines).encode(errors="surrogateescape")
        try:
            host.fs.write_file(GRUB_DEFAULT, content, _file_mode(host, GRUB_DEFAULT))
        except OSError as e:
            raise KnobError(f"{self.ident}: {GRUB_DEFAULT}: {e.strerror or e}") from None

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put the configured value back and, on a live host, regenerate the bootloader config
        (persist may have run update-grub/grubby with the new value)."""
        if original is None:
            return
        self.write(host, original)
        update_bootloader(host, {self.obj: original.strip()})


# ------------------------------------------------------------------ CPU frequency


class GovernorKnob(_AttrKnob):
    kind = "governor"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        n = obj[3:]
        if not obj.startswith("cpu") or not n.isdigit() or not n.isascii() or len(n) > 5:
            raise BadInput(f"{self.kind} {obj!r}: expected cpuN")
        self.cpu = int(n)
        base = f"{CPU_SYS}/cpu{self.cpu}/cpufreq"
        self.path = f"{base}/scaling_governor"
        self.available_path = f"{base}/scaling_available_governors"

    def check(self, host: Host, value: str) -> None:
        name = value.strip()
        if not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise BadInput(f"{self.ident}: {value!r} is not a governor name")
        available = host.fs.read(self.available_path)
        if available is not None and name not in available.split():
            raise BadInput(
                f"{self.ident}: governor {name!r} not available (have: {available.strip()})"
            )


# ------------------------------------------------------------------ registry

ALL_KINDS: tuple[type[Knob], ...] = (
    RingKnob,
    ChannelsKnob,
    TxqueuelenKnob,
    IrqAffinityKnob,
    RpsCpusKnob,
    RpsFlowCntKnob,
    XpsCpusKnob,
    IrqbalanceKnob,
    IrqbalanceBanKnob,
    CmdlineKnob,
    GovernorKnob,
)


def register_all(register: Callable[[str, Callable[[str], Knob]], None]) -> None:
    """Register every kind of this module with lbtune.tune.registry."""
    for cls in ALL_KINDS:
        register(cls.kind, cls)
