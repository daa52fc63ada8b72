"""The sampler: one call reads every counter source of a host into a `Sample`.

The same sampler feeds `lbtune diagnose` (two samples a window apart, or one capture read as
"since boot") and the live monitor (a sample per refresh). A source that cannot be read (no
conntrack, no permission, a namespace without sysfs, an old capture) does not stop the
others: it is recorded in `Sample.missing` with the reason, and rules that need it stay quiet.
"""

from __future__ import annotations

import time
from typing import Callable, Optional, Sequence, TypeVar

from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.host import Host
from lbtune.host.interrupts import IrqLine, read_interrupts
from lbtune.host.sockdiag import count_tcp_local_ports
from lbtune.observe.conntrack import read_conntrack
from lbtune.observe.ipvs_stats import read_ipvs_stats
from lbtune.observe.model import Sample, SnmpCounters, SockStat, SoftnetCpu
from lbtune.observe.nicstats import check_interfaces, read_all_nics
from lbtune.observe.procnet import read_snmp, read_sockstat
from lbtune.observe.softirqs import read_softirqs
from lbtune.observe.softnet import read_softnet

T = TypeVar("T")


class Sampler:
    """Reads one `Sample` per `take()` from `host`; `ifaces` limits the NICs read."""

    def __init__(self, host: Host, ifaces: Optional[Sequence[str]] = None) -> None:
        self.host = host
        self.ifaces = list(ifaces) if ifaces else None
        if self.ifaces:
            # Fail on a typo before the window starts, not after it.
            check_interfaces(host.fs, self.ifaces)

    def _uptime(self) -> Optional[float]:
        text = self.host.fs.read("/proc/uptime")
        if not text:
            return None
        try:
            return float(text.split()[0])
        except (ValueError, IndexError):
            raise MalformedHostFile(self.host.fs.path("/proc/uptime"), "bad format") from None

    def take(self) -> Sample:
        fs = self.host.fs
        missing: dict[str, str] = {}

        def get(name: str, fn: Callable[[], T], default: T) -> T:
            try:
                return fn()
            except MalformedHostFile as e:
                missing[name] = str(e)
            except OSError as e:
                missing[name] = f"{e.strerror or e}"
            return default

        def optional(name: str, fn: Callable[[], Optional[T]], why: str) -> Optional[T]:
            value = get(name, fn, None)
            if value is None and name not in missing:
                missing[name] = why
            return value

        uptime = get("uptime", self._uptime, None)
        live = self.host.is_live
        snmp = get("snmp", lambda: read_snmp(fs), SnmpCounters({}))
        no_softnet: tuple[SoftnetCpu, ...] = ()
        softnet = get("softnet", lambda: read_softnet(fs), no_softnet)
        softirqs = optional("softirqs", lambda: read_softirqs(fs), "no /proc/softirqs")
        interrupts: dict[int, IrqLine] = get("interrupts", lambda: read_interrupts(fs), {})
        try:
            nics = read_all_nics(fs, self.host.ethtool, self.ifaces)
        except BadInput:
            raise  # an --iface that vanished mid-run is the user's to know
        except (MalformedHostFile, OSError) as e:
            missing["nics"] = str(e)
            nics = {}
        listen = optional("listen", self.host.listen_sockets, "no sock_diag and no ss recording")
        udp = optional("udp", self.host.udp_sockets, "no sock_diag and no ss recording")
        qdiscs = optional("qdisc", self.host.qdiscs, "no rtnetlink and no tc recording")
        sockstat = optional("sockstat", lambda: read_sockstat(fs), "no /proc/net/sockstat")
        conntrack = optional("conntrack", lambda: read_conntrack(fs), "conntrack not loaded")
        ipvs = get("ipvs", lambda: read_ipvs_stats(fs), None)
        ephemeral = None
        if live and sockstat is not None:
            ephemeral = get("ephemeral", lambda: self._ephemeral(sockstat), None)
        now_mono = time.monotonic()
        return Sample(
            # A recorded tree has no clock of its own: its uptime orders two captures.
            monotonic=now_mono if live else (uptime or 0.0),
            wallclock=time.time() if live else 0.0,
            uptime=uptime,
            snmp=snmp,
            softnet=softnet,
            softirqs=softirqs,
            interrupts=interrupts,
            nics=nics,
            listen=tuple(listen or ()),
            udp=tuple(udp or ()),
            sockstat=sockstat,
            conntrack=conntrack,
            qdiscs=tuple(qdiscs or ()),
            ipvs=ipvs,
            missing=missing,
            ephemeral_in_use=ephemeral,
        )

    def _ephemeral(self, st: SockStat) -> Optional[int]:
        """Count ports of ip_local_port_range in use, when sockstat says it may be full."""
        text = self.host.fs.read("/proc/sys/net/ipv4/ip_local_port_range")
        try:
            low, high = (int(x) for x in (text or "").split())
        except ValueError:
            return None
        if st.tcp_inuse + st.tcp_tw < 0.8 * (high - low + 1):
            return None
        return count_tcp_local_ports(low, high)
