"""`Host`: the one object through which lbtune reads (and later changes) a machine."""

from __future__ import annotations

from typing import Any, Optional

from lbtune.host.ethtool import EthtoolSource, LiveEthtool, RecordedEthtool
from lbtune.host.fs import HostFS
from lbtune.host.runner import CommandRunner


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
