"""What `lbtune ipvs serve` keeps of the IPVS table between two applies.

A reconcile reads the whole table: one dump of the services and one of each service's real
servers (the kernel has no generation number to tell a table unchanged), and the server
reads it too, for every request. What it saves is the decoding: for a service that was in
place (the kernel held exactly what the config asked) at the last apply, it keeps the
replies cut to their settings (`lbtune.host.ipvs_memo.TableDigest.cut`: connection counts
and statistics left out) and the decoded `Service`. When the same replies come again and
the config asks for that service with the very object it asked for then (an unchanged
`[[service]]` section: lbtune.ipvs.config.SectionCache), the kept `Service` stands for it:
same bytes, same settings, and the same wanted service, so it is in place again and the
plan has no row for it. Its connection counts are the old ones, and nothing reads them: a
plan reads counts only for real servers and services it removes, which an in-place service
has none of. Every other service is decoded as always.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional

from lbtune.host import ipvs_memo as memo_
from lbtune.host.ipvs import Service, ServiceKey
from lbtune.ipvs.config import DirectorConfig, VirtualService


class _Read(memo_.TableDigest):
    """One table read: the digest the no-op record takes, and each service's cut replies."""

    def __init__(self, kept: Mapping[ServiceKey, tuple[bytes, VirtualService, Service]],
                 wanted: Mapping[ServiceKey, VirtualService], trusted: set[ServiceKey]) -> None:
        super().__init__()
        self._kept, self._wanted, self._trusted = kept, wanted, trusted
        self.cuts: dict[ServiceKey, bytes] = {}
        self._last = b""
        self.reused = 0

    def add(self, service: bytes, dests: list[bytes]) -> None:
        self._last = self.cut(service, dests)
        self._hash.update(self._last)

    def known(self, key: object) -> Optional[Service]:  # type: ignore[override]
        assert isinstance(key, ServiceKey)
        self.cuts[key] = self._last
        entry = self._kept.get(key)
        if entry is None or entry[0] != self._last or entry[1] is not self._wanted.get(key):
            return None
        self.reused += 1
        self._trusted.add(key)
        return entry[2]


class ResidentTable:
    """The services in place at the last apply, by key: (cut replies, the config's service
    object, the decoded Service)."""

    def __init__(self) -> None:
        self._kept: dict[ServiceKey, tuple[bytes, VirtualService, Service]] = {}
        self._reads: list[_Read] = []
        # the services the read going on took from the kept ones: in place, with no need
        # to compare (lbtune.ipvs.reconcile.in_place)
        self.trusted: set[ServiceKey] = set()
        self.reused = 0  # services the last read did not decode
        self.services = 0

    def reader(self, cfg: DirectorConfig) -> Callable[[], memo_.TableDigest]:
        """The tap for the table reads of one apply of `cfg`."""
        wanted = {s.key: s for s in cfg.services}
        self._reads = []
        self.trusted = set()

        def tap() -> memo_.TableDigest:
            if self._reads:  # a second read: trust nothing (remember keeps nothing either)
                self.trusted.clear()
                return memo_.TableDigest()
            read = _Read(self._kept, wanted, self.trusted)
            self._reads.append(read)
            return read

        return tap

    def remember(self, cfg: DirectorConfig, table: Mapping[ServiceKey, Service],
                 placed: frozenset[ServiceKey]) -> None:
        """After planning: keep the services found in place, if the table was read once."""
        reads, self._reads = self._reads, []
        self._kept = {}
        if len(reads) != 1:
            return
        read = reads[0]
        wanted = {s.key: s for s in cfg.services if s.key in placed}
        self.reused, self.services = read.reused, len(read.cuts)
        for key, svc in wanted.items():
            cut, now = read.cuts.get(key), table.get(key)
            if cut is not None and now is not None:
                self._kept[key] = (cut, svc, now)
