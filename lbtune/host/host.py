"""`Host`: the one object through which lbtune reads (and later changes) a machine."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Optional

from lbtune.host.fs import HostFS

# Imported where used: a sysctl-only apply should not pay for sockets, netlink, ethtool ioctls
# and subprocess at start-up, nor the IPVS fast path for the identity's dataclasses and json.
if TYPE_CHECKING:
    from lbtune.host.identity import HostIdentity
    from lbtune.host.net.ethtool import EthtoolSource
    from lbtune.host.net.qdisc import QdiscStats
    from lbtune.host.net.sockdiag import ListenSocket, TcpReceiver, UdpSocket
    from lbtune.host.runner import CommandRunner


class Host:
    """A filesystem view, an ethtool source, netlink and a command runner for one machine.

    `root="/"` is the running machine (live ethtool and netlink); any other root is a host tree
    (fixture, capture, sosreport) whose ethtool data is read from recorded command output and
    which has no netlink side. `netns` names the namespace the process already joined (see
    `lbtune.host.net.netns.enter_netns`), for display and for code that must know.
    """

    def __init__(
        self,
        fs: HostFS,
        ethtool: Optional[EthtoolSource] = None,
        runner: Optional[CommandRunner] = None,
        netns: Optional[str] = None,
    ) -> None:
        self.fs = fs
        self._ethtool = ethtool
        self._runner = runner
        self.netns = netns
        self._ipr: Any = None
        self._view_netns: Optional[str] = None
        self._view_read = False

    @classmethod
    def open(cls, root: str = "/", netns: Optional[str] = None) -> Host:
        return cls(HostFS(root), netns=netns)

    @property
    def ethtool(self) -> EthtoolSource:
        """ioctl on the live host, recorded `ethtool` output in a tree (opened on first use)."""
        if self._ethtool is None:
            from lbtune.host.net.ethtool import LiveEthtool, RecordedEthtool

            self._ethtool = LiveEthtool() if self.fs.is_live else RecordedEthtool(self.fs)
        return self._ethtool

    @ethtool.setter
    def ethtool(self, value: EthtoolSource) -> None:
        self._ethtool = value

    @property
    def runner(self) -> CommandRunner:
        if self._runner is None:
            from lbtune.host.runner import CommandRunner

            self._runner = CommandRunner()
        return self._runner

    @runner.setter
    def runner(self, value: CommandRunner) -> None:
        self._runner = value

    @property
    def is_live(self) -> bool:
        return self.fs.is_live

    @property
    def view_netns(self) -> Optional[str]:
        """The network namespace whose view this is: the one joined (`--netns`), or for a
        host tree the one its capture manifest names (`lbtune --netns NS capture`); None for
        a host's own view. In a namespace's view host-global settings are the host's."""
        if self.netns is not None or self.is_live:
            return self.netns
        if not self._view_read:
            from lbtune.host.capture.manifest import read_manifest

            ns = (read_manifest(self.fs) or {}).get("netns")
            self._view_netns = ns if isinstance(ns, str) and ns else None
            self._view_read = True
        return self._view_netns

    def read_host_view(self, path: str) -> Optional[str]:
        """`/proc/sys` file `path` as the host's own namespace shows it, from a process that
        joined a namespace (`--netns`): host-global `net.*` sysctls that a namespace does not
        show at all (`net.core.netdev_max_backlog`). None elsewhere (a host tree records
        only the namespace's view) or when unreadable."""
        if self.netns is None or not self.is_live or not path.startswith("/proc/sys/"):
            return None
        from lbtune.host.net.netns import read_in_origin

        return read_in_origin(path)

    def identity(self) -> HostIdentity:
        """This host's identity, as recorded in journals."""
        from lbtune.host.identity import HostIdentity

        mid = self.fs.read("/etc/machine-id")
        return HostIdentity(
            os.path.realpath(self.fs.root),
            mid.strip() if mid else None,
            self.fs.read("/proc/sys/kernel/hostname"),
        )

    def iproute(self) -> Any:
        """pyroute2 IPRoute for this process's network namespace (live hosts only)."""
        if not self.is_live:
            raise RuntimeError("netlink is only available on the live host")
        if self._ipr is None:
            from pyroute2 import IPRoute

            self._ipr = IPRoute()
        return self._ipr

    # Sockets and qdiscs: netlink on the live host, recorded command output in a host tree.
    # None means "this source is unavailable" (the tree has no such record), which is not the
    # same as an empty list (a host with no such sockets).

    def _recorded_ss(self) -> Optional[tuple[list[ListenSocket], list[UdpSocket]]]:
        from lbtune.host.net.sockdiag import SS_RECORD, parse_ss

        text = self.fs.read(SS_RECORD)
        return None if text is None else parse_ss(text, self.fs.path(SS_RECORD))

    def recorded_sockets(self) -> Optional[tuple[list[ListenSocket], list[UdpSocket]]]:
        """A host tree's listening TCP and UDP sockets from one read and parse of its
        `ss -peaonmi` record (what `listen_sockets` and `udp_sockets` read there, each on its
        own); None if unrecorded. ValueError on the live host (netlink dumps each)."""
        if self.is_live:
            raise ValueError("recorded_sockets: the live host has no recording")
        return self._recorded_ss()

    def listen_sockets(self, syn_recv: bool = True) -> Optional[list[ListenSocket]]:
        """Listening TCP sockets (sock_diag live, `ss -peaonmi` recorded); None if unrecorded.
        Live, without `syn_recv` their SYN queues are not read (None): the kernel then walks
        only the listening sockets, not its whole connection table."""
        if self.is_live:
            from lbtune.host.net.sockdiag import dump_listen_sockets

            return dump_listen_sockets(syn_recv=syn_recv)
        recorded = self._recorded_ss()
        return None if recorded is None else recorded[0]

    def udp_sockets(self) -> Optional[list[UdpSocket]]:
        """UDP sockets (sock_diag live, `ss -peaonmi` recorded); None if unrecorded."""
        if self.is_live:
            from lbtune.host.net.sockdiag import dump_udp_sockets

            return dump_udp_sockets()
        recorded = self._recorded_ss()
        return None if recorded is None else recorded[1]

    def tcp_receivers(self) -> Optional[list[TcpReceiver]]:
        """Connected TCP sockets under receive pressure (sock_diag live, `ss -peaonmi`
        recorded); None if unrecorded."""
        from lbtune.host.net.sockdiag import SS_RECORD, dump_tcp_receivers, parse_ss_receivers

        if self.is_live:
            return dump_tcp_receivers()
        text = self.fs.read(SS_RECORD)
        return None if text is None else parse_ss_receivers(text, self.fs.path(SS_RECORD))

    def link_stats(self) -> Optional[dict[str, dict[str, int]]]:
        """Every interface's counters as /sys/class/net/DEV/statistics names them, in one
        netlink dump on the live host; None in a host tree (read the files there)."""
        if not self.is_live:
            return None
        from lbtune.host.net.linkstats import dump_link_stats

        return dump_link_stats()

    def qdiscs(self) -> Optional[list[QdiscStats]]:
        """Qdisc statistics (netlink live, `tc -s qdisc show` recorded); None if unrecorded."""
        from lbtune.host.net.qdisc import TC_QDISC_RECORD, dump_qdiscs, parse_tc_qdisc

        if self.is_live:
            return dump_qdiscs()
        text = self.fs.read(TC_QDISC_RECORD)
        return None if text is None else parse_tc_qdisc(text, self.fs.path(TC_QDISC_RECORD))

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        if self._ethtool is not None:
            from lbtune.host.net.ethtool import LiveEthtool

            if isinstance(self._ethtool, LiveEthtool):
                self._ethtool.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
