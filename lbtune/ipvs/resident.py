"""What `lbtune ipvs serve` keeps of the IPVS table between two applies.

A reconcile reads the whole table: one dump of the services and one of each service's real
servers (the kernel has no generation number to tell a table unchanged), and the server
reads it too, for every request. What it saves is the decoding: for a service that was in
place (the kernel held exactly what the config asked) at the last apply, it keeps the
replies cut to their settings (`lbtune.host.ipvs.memo.TableDigest.cut`: connection counts
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

from lbtune.host.ipvs.memo import TableDigest
from lbtune.host.ipvs.table import Service, ServiceKey
from lbtune.ipvs.config import DirectorConfig, VirtualService


class _Read(TableDigest):
    """One table read: the digest the no-op record takes, and each service's cut replies."""

    def __init__(self, keep: ResidentTable, wanted: Mapping[ServiceKey, VirtualService]) -> None:
        super().__init__()
        self._keep, self._wanted = keep, wanted
        self.cuts: dict[ServiceKey, bytes] = {}
        self.services: dict[bytes, Service] = {}  # service replies (cut) -> decoded
        self._body, self._cut, self._last = b"", b"", b""
        self.reused = 0

    def service(self, body: bytes) -> Optional[Service]:  # type: ignore[override]
        self._body, self._cut = body, self.cut_service(body)
        return self._keep.services.get(self._cut)

    def add(self, service: bytes, dests: list[bytes]) -> None:
        head = self._cut if service is self._body else self.cut_service(service)
        self._last = head + self.cut_dests(dests)
        self.take(self._last)

    def known(self, service: object) -> Optional[Service]:  # type: ignore[override]
        assert isinstance(service, Service)
        key = service.key
        self.services[self._cut] = service
        self.cuts[key] = self._last
        entry = self._keep.kept.get(key)
        if entry is None or entry[0] != self._last or entry[1] is not self._wanted.get(key):
            return None
        self.reused += 1
        self._keep.trusted.add(key)
        return entry[2]


class ResidentTable:
    """The services in place at the last apply, by key: (cut replies, the config's service
    object, the decoded Service)."""

    def __init__(self) -> None:
        self.kept: dict[ServiceKey, tuple[bytes, VirtualService, Service]] = {}
        # every service reply of the last read, cut to its settings, and its decoding (the
        # service alone): a reply that comes again is not decoded again
        self.services: dict[bytes, Service] = {}
        self._reads: list[_Read] = []
        # the services the read going on took from the kept ones: in place, with no need
        # to compare (lbtune.ipvs.reconcile.in_place)
        self.trusted: set[ServiceKey] = set()
        self.reused = 0  # services the last read did not decode ...
        self.decoded = 0  # ... and did

    def reader(self, cfg: DirectorConfig) -> Callable[[], TableDigest]:
        """The tap for the table reads of one apply of `cfg`."""
        wanted = {s.key: s for s in cfg.services}
        self._reads = []
        self.trusted = set()

        def tap() -> TableDigest:
            if self._reads:  # a second read (a reconcile makes none): a plain digest
                return TableDigest()
            read = _Read(self, wanted)
            self._reads.append(read)
            return read

        return tap

    def remember(self, cfg: DirectorConfig, table: Mapping[ServiceKey, Service],
                 placed: frozenset[ServiceKey]) -> None:
        """After planning: keep the services found in place, if the table was read once."""
        reads, self._reads = self._reads, []
        self.kept = {}
        if len(reads) != 1:
            return
        read = reads[0]
        self.services = read.services
        wanted = {s.key: s for s in cfg.services if s.key in placed}
        self.reused, self.decoded = read.reused, len(read.cuts) - read.reused
        for key, svc in wanted.items():
            cut, now = read.cuts.get(key), table.get(key)
            if cut is not None and now is not None:
                self.kept[key] = (cut, svc, now)
