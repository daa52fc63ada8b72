"""What several knob kinds share: object-string parsing, integer and CPU-set values, and
the one-attribute base class. Knobs are built from their object string alone (the journal
rebuilds them from `(kind, object)`), so every parser here refuses anything unexpected."""

from __future__ import annotations

from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.cpulist import (
    CpuListError,
    format_cpulist,
    parse_cpulist,
    parse_cpumask,
)
from lbtune.host.kernel.cputopology import CPU_SYS
from lbtune.host.net.ifname import check_ifname
from lbtune.tune.knob import Knob, KnobError

NET_SYS = "/sys/class/net"


def split_dev(obj: str, kind: str) -> tuple[str, str]:
    """`eth0:rx` -> ("eth0", "rx"); the part after the LAST colon is the field."""
    dev, sep, field = obj.rpartition(":")
    if not sep or not dev:
        raise BadInput(f"{kind} {obj!r}: expected DEVICE:FIELD")
    return check_ifname(dev, f"{kind} {obj!r}"), field


def parse_count(value: str, what: str) -> int:
    """A non-negative decimal integer (ASCII digits only); BadInput otherwise."""
    text = value.strip()
    if not text.isdigit() or not text.isascii():
        raise BadInput(f"{what}: {value!r} is not a non-negative integer")
    return int(text)


def online_cpus(host: Host) -> frozenset[int]:
    """Online CPUs (`online` file, else the cpuN directories)."""
    cpus = host.fs.read_cpulist(f"{CPU_SYS}/online")
    if cpus is None:
        cpus = frozenset(
            int(n[3:]) for n in host.fs.listdir(CPU_SYS) if n.startswith("cpu") and n[3:].isdigit()
        )
    return cpus


def nr_possible(host: Host) -> int:
    possible = host.fs.read_cpulist(f"{CPU_SYS}/possible") or online_cpus(host)
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


def cpuset_normalize(value: str) -> str:
    try:
        return format_cpulist(parse_cpuset(value, "cpu set"))
    except BadInput:
        return " ".join(value.split())


def write_attr(host: Host, kpath: str, text: str, what: str) -> None:
    """Write one kernel attribute; the kernel's refusal becomes a KnobError naming it."""
    try:
        host.fs.write_attr(kpath, text)
    except OSError as e:
        raise KnobError(f"{what}={text}: {e.strerror or e}") from None


def write_config(host: Host, kpath: str, content: bytes, what: str) -> None:
    """Replace a configuration file atomically, keeping its permission bits."""
    try:
        host.fs.write_file(kpath, content, host.fs.file_mode(kpath) or 0o644)
    except OSError as e:
        raise KnobError(f"{what}: {kpath}: {e.strerror or e}") from None


class IntValued(Knob):
    """A knob whose value is one integer: `"0042"` and `"42"` are the same value."""

    def normalize(self, value: str) -> str:
        text = value.strip()
        return str(int(text)) if text.isdigit() else " ".join(value.split())


class AttrKnob(Knob):
    """A knob backed by one sysfs/procfs attribute."""

    path: str

    def read(self, host: Host) -> Optional[str]:
        return host.fs.read(self.path)

    def write(self, host: Host, value: str) -> None:
        write_attr(host, self.path, value.strip(), self.ident)
