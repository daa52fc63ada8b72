"""NIC settings that live behind ethtool rather than in files: driver info, rings, channels, stats.

Two sources share one interface: `LiveEthtool` asks the running kernel (pyroute2's ethtool
netlink/ioctl), `RecordedEthtool` reads `ethtool` command output stored the way sosreport
stores it (`sos_commands/networking/ethtool_-g_eth0`), so fixture trees, lbtune captures and
real sosreports all work with `--root`.
"""

from __future__ import annotations

import ctypes
import fcntl
import re
import socket
import struct
from dataclasses import dataclass, fields
from typing import Optional, Protocol

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS

RECORD_DIR = "/sos_commands/networking"


@dataclass(frozen=True)
class DriverInfo:
    driver: str
    version: str = ""
    firmware: str = ""
    bus_info: str = ""


@dataclass(frozen=True)
class RingSizes:
    """Descriptor ring sizes (`ethtool -g`): current and driver maximum, None = not reported."""

    rx: Optional[int] = None
    tx: Optional[int] = None
    rx_max: Optional[int] = None
    tx_max: Optional[int] = None
    rx_mini: Optional[int] = None
    rx_mini_max: Optional[int] = None
    rx_jumbo: Optional[int] = None
    rx_jumbo_max: Optional[int] = None


@dataclass(frozen=True)
class Channels:
    """Queue counts (`ethtool -l`): current and maximum per kind, None = not reported."""

    rx: Optional[int] = None
    tx: Optional[int] = None
    other: Optional[int] = None
    combined: Optional[int] = None
    rx_max: Optional[int] = None
    tx_max: Optional[int] = None
    other_max: Optional[int] = None
    combined_max: Optional[int] = None


class EthtoolSource(Protocol):
    """Per-NIC ethtool data; each method returns None when the driver does not support it."""

    def driver_info(self, dev: str) -> Optional[DriverInfo]: ...
    def rings(self, dev: str) -> Optional[RingSizes]: ...
    def channels(self, dev: str) -> Optional[Channels]: ...
    def stats(self, dev: str) -> Optional[dict[str, int]]: ...


# ---------------------------------------------------------------- recorded (text output)

_SECTION_KEYS = {
    "RX": "rx",
    "TX": "tx",
    "RX Mini": "rx_mini",
    "RX Jumbo": "rx_jumbo",
    "Other": "other",
    "Combined": "combined",
}


def _parse_two_sections(text: str, source: str) -> dict[str, Optional[int]]:
    """Parse `ethtool -g`/`-l` output: a 'Pre-set maximums' and a 'Current' section."""
    values: dict[str, Optional[int]] = {}
    suffix: Optional[str] = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.lower().startswith("pre-set maximums"):
            suffix = "_max"
            continue
        if stripped.lower().startswith("current hardware settings"):
            suffix = ""
            continue
        if suffix is None or ":" not in stripped:
            continue
        label, _, value = stripped.partition(":")
        key = _SECTION_KEYS.get(label.strip())
        if key is None:
            continue  # RX Buf Len, CQE Size, TX Push ... not used
        value = value.strip()
        if value in ("n/a", ""):
            values[key + suffix] = None
        elif value.isdigit():
            values[key + suffix] = int(value)
        else:
            raise MalformedHostFile(source, f"{label.strip()}: not a number: {value!r}")
    if suffix is None:
        raise MalformedHostFile(source, "no 'Pre-set maximums' section")
    return values


def parse_ethtool_g(text: str, source: str = "ethtool -g") -> RingSizes:
    v = _parse_two_sections(text, source)
    return RingSizes(**{f.name: v.get(f.name) for f in fields(RingSizes)})


def parse_ethtool_l(text: str, source: str = "ethtool -l") -> Channels:
    v = _parse_two_sections(text, source)
    return Channels(**{f.name: v.get(f.name) for f in fields(Channels)})


def parse_ethtool_i(text: str, source: str = "ethtool -i") -> DriverInfo:
    kv = {}
    for line in text.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            kv[k.strip()] = v.strip()
    if "driver" not in kv:
        raise MalformedHostFile(source, "no 'driver:' line")
    return DriverInfo(
        driver=kv["driver"],
        version=kv.get("version", ""),
        firmware=kv.get("firmware-version", ""),
        bus_info=kv.get("bus-info", ""),
    )


_STAT = re.compile(r"^\s+(\S.*?):\s+(-?\d+)\s*$")


def parse_ethtool_S(text: str, source: str = "ethtool -S") -> dict[str, int]:  # noqa: N802
    lines = text.splitlines()
    if not lines or not lines[0].startswith("NIC statistics"):
        raise MalformedHostFile(source, "does not start with 'NIC statistics:'")
    out: dict[str, int] = {}
    for line in lines[1:]:
        m = _STAT.match(line)
        if m:
            out[m.group(1)] = int(m.group(2))
        elif line.strip():
            raise MalformedHostFile(source, f"unexpected line {line!r}")
    return out


class RecordedEthtool:
    """ethtool output recorded under `<root>/sos_commands/networking/ethtool_-X_DEV`."""

    def __init__(self, fs: HostFS) -> None:
        self.fs = fs

    def _text(self, flag: str, dev: str) -> tuple[Optional[str], str]:
        kpath = f"{RECORD_DIR}/ethtool_-{flag}_{dev}"
        text = self.fs.read(kpath)
        # sosreport records failures as the command's error text; treat as unsupported.
        if text is not None and ("Operation not supported" in text or not text.strip()):
            text = None
        return text, self.fs.path(kpath)

    def driver_info(self, dev: str) -> Optional[DriverInfo]:
        text, src = self._text("i", dev)
        return None if text is None else parse_ethtool_i(text, src)

    def rings(self, dev: str) -> Optional[RingSizes]:
        text, src = self._text("g", dev)
        return None if text is None else parse_ethtool_g(text, src)

    def channels(self, dev: str) -> Optional[Channels]:
        text, src = self._text("l", dev)
        return None if text is None else parse_ethtool_l(text, src)

    def stats(self, dev: str) -> Optional[dict[str, int]]:
        text, src = self._text("S", dev)
        return None if text is None else parse_ethtool_S(text, src)


# ---------------------------------------------------------------- live (pyroute2)

_SIOCETHTOOL = 0x8946
_ETHTOOL_GDRVINFO = 0x00000003
# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
# erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
_DRVINFO = struct.Struct("=I32s32s32s32s32s12s5I")


def _ioctl_drvinfo(dev: str) -> Optional[DriverInfo]:
    """ETHTOOL_GDRVINFO (pyroute2 has no call for it); None when the device has no ethtool ops."""
    name = dev.encode()
    if len(name) >= 16:
        return None
    buf = ctypes.create_string_buffer(_DRVINFO.pack(_ETHTOOL_GDRVINFO, *([b""] * 6), 0, 0, 0, 0, 0))
    ifreq = struct.pack("16sP", name, ctypes.addressof(buf))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            fcntl.ioctl(s.fileno(), _SIOCETHTOOL, ifreq)
    except OSError:
        return None
    fields_ = _DRVINFO.unpack(buf.raw[: _DRVINFO.size])

    def text(b: bytes) -> str:
        return b.split(b"\0", 1)[0].decode(errors="replace")

    return DriverInfo(
        driver=text(fields_[1]),
        version=text(fields_[2]),
        firmware=text(fields_[3]),
        bus_info=text(fields_[4]),
    )


def _none_if_zero_max(value: Optional[int], maximum: Optional[int]) -> Optional[int]:
    return None if not maximum else value


class LiveEthtool:
    """The running kernel's ethtool interface, through pyroute2 (imported on first use)."""

    def __init__(self) -> None:
        self._eth: object = None

    def _ethtool(self):  # type: ignore[no-untyped-def]
        if self._eth is None:
            from pyroute2 import Ethtool

            self._eth = Ethtool()
        return self._eth

    def close(self) -> None:
        if self._eth is not None:
            self._eth.close()  # type: ignore[attr-defined]
            self._eth = None

    def driver_info(self, dev: str) -> Optional[DriverInfo]:
        return _ioctl_drvinfo(dev)

    def rings(self, dev: str) -> Optional[RingSizes]:
        try:
            r = self._ethtool().get_rings(dev)
        except Exception:
            return None
        return RingSizes(
            rx=_none_if_zero_max(r.rx, r.rx_max),
            tx=_none_if_zero_max(r.tx, r.tx_max),
            rx_max=r.rx_max or None,
            tx_max=r.tx_max or None,
            rx_mini=_none_if_zero_max(r.rx_mini, r.rx_mini_max),
            rx_mini_max=r.rx_mini_max or None,
            rx_jumbo=_none_if_zero_max(r.rx_jumbo, r.rx_jumbo_max),
            rx_jumbo_max=r.rx_jumbo_max or None,
        )

    def channels(self, dev: str) -> Optional[Channels]:
        try:
            c = self._ethtool().get_channels(dev)
        except Exception:
            return None
        return Channels(
            rx=_none_if_zero_max(c.rx_count, c.max_rx),
            tx=_none_if_zero_max(c.tx_count, c.max_tx),
            other=_none_if_zero_max(c.other_count, c.max_other),
            combined=_none_if_zero_max(c.combined_count, c.max_combined),
            rx_max=c.max_rx or None,
            tx_max=c.max_tx or None,
            other_max=c.max_other or None,
            combined_max=c.max_combined or None,
        )

    def stats(self, dev: str) -> Optional[dict[str, int]]:
        from pyroute2.ethtool.ioctl import IoctlEthtool

        try:
            io = IoctlEthtool(dev)
            try:
                return {str(k): int(v) for k, v in io.get_statistics()}  # type: ignore[no-untyped-call]
            finally:
                io.close()  # type: ignore[no-untyped-call]
        except Exception:
            return None
