"""Boot-time knobs: kernel command line parameters (through the bootloader) and the CPU
frequency governor.

Cmdline knobs read and write the *configured* command line (`GRUB_CMDLINE_LINUX` in
`/etc/default/grub`), not the running one: `verify` of a cmdline knob therefore compares the
configured value, and callers use `CmdlineKnob.running_value()` (from /proc/cmdline) to report
"reboot required" when the running kernel differs. `write` never runs a bootloader tool;
`lbtune.tune.persist` does (live hosts only), and `restore` does on live hosts so that a rollback
also regenerates the bootloader configuration. Objects: `cmdline` `isolcpus` | `nohz_full` |
`rcu_nocbs` | `irqaffinity` ("" = absent); `governor` `cpu3`.
"""

from __future__ import annotations

import re
from typing import Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.kernel.bootloader import BootloaderError, update_bootloader
from lbtune.host.kernel.cmdline import CMDLINE_KEYS, ISOLCPUS_FLAGS, KernelCmdline
from lbtune.host.kernel.cpulist import CpuListError, format_cpulist, parse_cpulist
from lbtune.host.kernel.cputopology import CPU_SYS
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.knobs.common import AttrKnob, online_cpus, write_config

GRUB_DEFAULT = "/etc/default/grub"
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
        online = online_cpus(host)
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
        write_config(host, GRUB_DEFAULT, content, self.ident)

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put the configured value back and, on a live host, regenerate the bootloader config
        (persist may have run update-grub/grubby with the new value)."""
        if original is None:
            return
        self.write(host, original)
        try:
            update_bootloader(host, {self.obj: original.strip()})
        except BootloaderError as e:
            raise KnobError(str(e)) from None


# ------------------------------------------------------------------ CPU frequency


class GovernorKnob(AttrKnob):
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
