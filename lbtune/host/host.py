"""`Host`: the one object through which lbtune reads (and later changes) a machine."""

from __future__ import annotations

from typing import Any, Optional

from lbtune.host.ethtool import EthtoolSource, LiveEthtool, RecordedEthtool
from lbtune.host.fs import HostFS
from lbtune.host.qdisc import TC_QDISC_RECORD, QdiscStats, dump_qdiscs, parse_tc_qdisc
from lbtune.host.runner import CommandRunner
from lbtune.host.sockdiag import (
    SS_RECORD,
    ListenSocket,
    UdpSocket,
    dump_listen_sockets,
    dump_udp_sockets,
    parse_ss,
)


class Host:
    """A filesystem view, an ethtool source, netlink and a command runner for one machine.

    `root="/"` is the running machine (live ethtool and netlink); any other root is a host tree
    (fixture, capture, sosreport) whose ethtool data is read from recorded command output and
    which has no netlink side. `netns` names the namespace the process already joined (see
    `lbtune.host.netns.enter_netns`), for display and for code that must know.
    """

    def __init__(
        self,
        fs: HostFS,
        ethtool: EthtoolSource,
        runner: Optional[CommandRunner] = None,
        netns: Optional[str] = None,
    ) -> None:
        self.fs = fs
        self.ethtool = ethtool
        self.runner = runner or CommandRunner()
        self.netns = netns
        self._ipr: Any = None

    @classmethod
    def open(cls, root: str = "/", netns: Optional[str] = None) -> Host:
        fs = HostFS(root)
        ethtool: EthtoolSource = LiveEthtool() if fs.is_live else RecordedEthtool(fs)
        return cls(fs, ethtool, netns=netns)

    @property
    def is_live(self) -> bool:
        return self.fs.is_live

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
        text = self.fs.read(SS_RECORD)
        return None if text is None else parse_ss(text, self.fs.path(SS_RECORD))

    def listen_sockets(self) -> Optional[list[ListenSocket]]:
        """Listening TCP sockets (sock_diag live, `ss -peaonmi` recorded); None if unrecorded."""
        if self.is_live:
            return dump_listen_sockets()
        recorded = self._recorded_ss()
        return None if recorded is None else recorded[0]

    def udp_sockets(self) -> Optional[list[UdpSocket]]:
        """UDP sockets (sock_diag live, `ss -peaonmi` recorded); None if unrecorded."""
        if self.is_live:
            return dump_udp_sockets()
        recorded = self._recorded_ss()
        return None if recorded is None else recorded[1]

    def qdiscs(self) -> Optional[list[QdiscStats]]:
        """Qdisc statistics (netlink live, `tc -s qdisc show` recorded); None if unrecorded."""
        if self.is_live:
            return dump_qdiscs()
        text = self.fs.read(TC_QDISC_RECORD)
        return None if text is None else parse_tc_qdisc(text, self.fs.path(TC_QDISC_RECORD))

    def close(self) -> None:
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        if isinstance(self.ethtool, LiveEthtool):
            self.ethtool.close()

    def __enter__(self) -> Host:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
