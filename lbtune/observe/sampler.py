"""The sampler: one call reads every counter source of a host into a `Sample`.

The same sampler feeds `lbtune diagnose` (two samples a window apart, or one capture read as
"since boot") and the live monitor (a sample per refresh); `lbtune.observe.clock` decides
when. A source that cannot be read (no conntrack, no permission, a namespace without sysfs,
an old capture) does not stop the others: it is recorded in `Sample.missing` with the reason,
and rules that need it stay quiet. What a consumer needs beyond the counters (configuration
values, connected sockets under receive pressure) it names in a `SampleSpec`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence, TypeVar

from lbtune.errors import BadInput, MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.kernel.interrupts import IrqLine, read_interrupts
from lbtune.host.net.ethtool import one_socket
from lbtune.host.net.sockdiag import ListenSocket, count_tcp_local_ports
from lbtune.observe.clock import SYSTEM_CLOCK, Clock
from lbtune.observe.config import ConfigValues, read_config
from lbtune.observe.conntrack import read_conntrack
from lbtune.observe.ipvs_stats import read_ipvs_stats
from lbtune.observe.keptfiles import KeptProcFS
from lbtune.observe.model import Sample, SnmpCounters, SockStat, SoftnetCpu
from lbtune.observe.nicstats import check_interfaces, read_all_nics
from lbtune.observe.procnet import read_snmp, read_sockstat
from lbtune.observe.softirqs import read_softirqs
from lbtune.observe.softnet import read_softnet

T = TypeVar("T")

# The counters of SYNs a full SYN queue dropped or answered with a cookie: the only rules
# that read a listener's SYN queue (lbtune.diagnose.rules.listen) report nothing unless
# one of them moved in their window.
SYN_OVERFLOWS = ("TcpExt.TCPReqQFullDrop", "TcpExt.TCPReqQFullDoCookies", "TcpExt.SyncookiesSent")


@dataclass(frozen=True)
class SampleSpec:
    """What a sample holds besides the counters every tick reads.

    `config`: kernel paths of configuration files (a `*` component for every entry of a
    directory), read into `Sample.config`. `receivers`: dump connected TCP sockets under
    receive pressure into `Sample.tcp_receivers` (walks every TCP connection: costly on a
    host with very many, so only when asked).
    """

    config: tuple[str, ...] = ()
    receivers: bool = False


class Sampler:
    """Reads one `Sample` per `take()` from `host`; `ifaces` limits the NICs read, `spec`
    adds configuration and sockets, `clock` times the samples (injectable for tests).

    `config_every` (seconds) lets a sampler that runs every second (the monitor) read the
    configuration values again only that often: they are limits an operator changes by
    hand, and reading dozens of sysctl files was a sixth of a monitor tick. 0 (diagnose,
    captures) reads them on every `take()`.

    `syn_walk_hold` (seconds) lets such a sampler walk the SYN queues only while a SYN
    overflow counter (SYN_OVERFLOWS) has moved in the last `syn_walk_hold` seconds: the
    rules that read a SYN queue report nothing otherwise, so a consumer that judges windows
    no longer than that loses nothing, and a host with TCP traffic but no SYN overflow (where
    the walk could not be left out by Tcp.InSegs) stops walking its connection table every
    second. Left out so, `ListenSocket.syn_recv` is None (not read). None (diagnose) walks
    whenever a request may be waiting; 0 (the exporter) only at a take that sees one of
    them move.

    `keep_files` (the monitor, the exporter) keeps the live root's /proc counter files open
    between takes and reads them again from offset 0 (`lbtune.observe.keptfiles`): opening
    them cost more than reading them.
    """

    def __init__(
        self,
        host: Host,
        ifaces: Optional[Sequence[str]] = None,
        spec: SampleSpec = SampleSpec(),
        clock: Clock = SYSTEM_CLOCK,
        config_every: float = 0.0,
        syn_walk_hold: Optional[float] = None,
        keep_files: bool = False,
    ) -> None:
        self.host = host
        # the counters' files (the limits are read through host.fs: every 10 s at most)
        live_root = type(host.fs) is HostFS and host.is_live
        self._kept = KeptProcFS() if keep_files and live_root else None
        self.fs: HostFS = self._kept or host.fs
        self.ifaces = list(ifaces) if ifaces else None
        self.spec = spec
        self.clock = clock
        self.config_every = config_every
        self._config: Optional[tuple[float, ConfigValues]] = None
        # (Tcp.InSegs read before the last SYN-queue walk, the requests it found)
        self._syn_walk: Optional[tuple[int, int]] = None
        self.syn_walk_hold = syn_walk_hold
        # (the SYN_OVERFLOWS counters as last read, when one of them last moved)
        self._syn_overflow: Optional[tuple[tuple[Optional[int], ...], float]] = None
        if self.ifaces:
            # Fail on a typo before the window starts, not after it.
            check_interfaces(host.fs, self.ifaces)

    def _uptime(self) -> Optional[float]:
        text = self.fs.read("/proc/uptime")
        if not text:
            return None
        try:
            return float(text.split()[0])
        except (ValueError, IndexError):
            raise MalformedHostFile(self.host.fs.path("/proc/uptime"), "bad format") from None

    def take(self) -> Sample:
        try:
            return self._take(self.fs)
        finally:
            if self._kept is not None:
                self._kept.sweep()

    def _take(self, fs: HostFS) -> Sample:
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
        # One netlink dump for every link's counters on the live host (24 files per
        # interface otherwise); a tree, or a kernel that refuses, reads the files.
        try:
            links = self.host.link_stats()
        except OSError:
            links = None
        try:
            # the monitor's: every NIC's ethtool requests on one socket
            with one_socket() if self._kept is not None else contextlib.nullcontext():
                nics = read_all_nics(fs, self.host.ethtool, self.ifaces, links)
        except BadInput:
            raise  # an --iface that vanished mid-run is the user's to know
        except (MalformedHostFile, OSError) as e:
            missing["nics"] = str(e)
            nics = {}
        no_sockets = "no sock_diag and no ss recording"
        if live:
            listen = optional("listen", lambda: self._listen(snmp), no_sockets)
            udp = optional("udp", self.host.udp_sockets, no_sockets)
        else:  # a host tree: one `ss` record holds both, read and parsed once
            both = optional("listen", self.host.recorded_sockets, no_sockets)
            if "listen" in missing:
                missing["udp"] = missing["listen"]
            listen, udp = both if both is not None else (None, None)
        qdiscs = optional("qdisc", self.host.qdiscs, "no rtnetlink and no tc recording")
        sockstat = optional("sockstat", lambda: read_sockstat(fs), "no /proc/net/sockstat")
        conntrack = optional("conntrack", lambda: read_conntrack(fs), "conntrack not loaded")
        ipvs = get("ipvs", lambda: read_ipvs_stats(fs), None)
        ephemeral = None
        if live and sockstat is not None:
            ephemeral = get("ephemeral", lambda: self._ephemeral(sockstat), None)
        receivers = None
        if self.spec.receivers:
            found = optional("tcp receivers", self.host.tcp_receivers, "no sock_diag and no ss")
            receivers = None if found is None else tuple(found)
        now_mono = self.clock.monotonic()
        config = self._read_config(now_mono)
        return Sample(
            # A recorded tree has no clock of its own: its uptime orders two captures.
            monotonic=now_mono if live else (uptime or 0.0),
            wallclock=self.clock.time() if live else 0.0,
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
            config=config.values,
            config_readonly=config.readonly,
            tcp_receivers=receivers,
        )

    def _listen(self, snmp: SnmpCounters) -> Optional[list[ListenSocket]]:
        """The listening sockets with their SYN queues. Counting the SYN queues walks every
        bucket of the kernel's connection table (half a millisecond on an idle 2-core host,
        every tick); the walk is left out when it cannot find anything: the last walk found
        every SYN queue empty and no TCP segment has come in since (Tcp.InSegs, read before
        that walk, is the same), for a request is made only by an incoming SYN; and with a
        `syn_walk_hold`, while no SYN queue has overflowed for that long."""
        insegs = snmp.values.get("Tcp.InSegs") if self.host.is_live else None
        if insegs is not None and self._syn_walk == (insegs, 0):
            found = self.host.listen_sockets(syn_recv=False)
            return None if found is None else [replace(s, syn_recv=0) for s in found]
        if self.host.is_live and not self._syn_overflow_recent(snmp):
            return self.host.listen_sockets(syn_recv=False)  # SYN queues not read: None
        found = self.host.listen_sockets()
        if found is not None:
            pending = sum(s.syn_recv or 0 for s in found)
            self._syn_walk = None if insegs is None else (insegs, pending)
        return found

    def _syn_overflow_recent(self, snmp: SnmpCounters) -> bool:
        """Whether a SYN overflow counter moved in the last `syn_walk_hold` seconds (always
        true without a hold; true on the first sample, with nothing to compare)."""
        if self.syn_walk_hold is None:
            return True
        now = self.clock.monotonic()
        counts = tuple(snmp.values.get(name) for name in SYN_OVERFLOWS)
        last = self._syn_overflow
        moved = now if last is None or last[0] != counts else last[1]
        self._syn_overflow = (counts, moved)
        return now - moved <= self.syn_walk_hold

    def _read_config(self, now: float) -> ConfigValues:
        kept = self._config
        if kept is not None and now - kept[0] < self.config_every:
            return kept[1]
        config = read_config(self.host.fs, self.spec.config)
        self._config = (now, config)
        return config

    def _ephemeral(self, st: SockStat) -> Optional[int]:
        """Count ports of ip_local_port_range in use, when sockstat says it may be full."""
        text = self.fs.read("/proc/sys/net/ipv4/ip_local_port_range")
        try:
            low, high = (int(x) for x in (text or "").split())
        except ValueError:
            return None
        if st.tcp_inuse + st.tcp_tw < 0.8 * (high - low + 1):
            return None
        return count_tcp_local_ports(low, high)
