"""RSS knobs: the hash fields per flow type, the indirection table and the hash key
(SIOCETHTOOL; the readers are lbtune.host.net.rss).

Objects and values:
- `rss_hash` `eth0:udp4`: ethtool's letters (`sdfn`: addresses and ports; `sd`: addresses
  only), `none` for no field. As `ethtool -N eth0 rx-flow-hash udp4 sdfn`.
- `rss_indir` `eth0`: `equal N` (entry i -> queue i % N, `ethtool -X eth0 equal N`), `weight
  W0 W1 ...` (ethtool's contiguous blocks, a 0 keeps a queue out of RSS), or `table Q0 Q1
  ...` (every entry). Reads back as the shortest of the three that gives the table exactly,
  so a rollback restores the driver's table entry for entry.
- `rss_key` `eth0`: the key as `ethtool -x` prints it (`6d:5a:...`), its length the driver's.

A driver without the feature plans these as missing ("unsettable: ..."), so a profile that
asks for RSS on every data NIC still plans on a NIC without it; a value the driver cannot
take (a queue beyond its receive rings, a key of the wrong length, port fields for a flow
type without ports) is refused at plan time (exit 2) naming what the driver has.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net import rss
from lbtune.host.net.ifname import check_ifname
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.knobs.common import split_dev

NONE = "none"


def _oserror(ident: str, value: str, e: OSError) -> KnobError:
    text = " ".join(value.split())
    if len(text) > 60:
        text = text[:57] + "..."
    why = e.strerror or str(e)
    if e.errno == errno.EINVAL:
        why += " (the driver refuses this value)"
    return KnobError(f"{ident}={text}: {why}")


def tidy(host: Host, dev: str) -> None:
    """A recorded host's leftovers of a killed write (RecordedRss.tidy); nothing live."""
    clean = getattr(host.ethtool, "tidy", None)
    if clean is not None:
        clean(dev)


class _RssKnob(Knob):
    per_netns = True  # the device lives in the namespace
    dev: str

    def restore(self, host: Host, original: Optional[str]) -> None:
        tidy(host, self.dev)
        super().restore(host, original)

    @property
    def interface(self) -> Optional[str]:
        return self.dev

    def rings(self, host: Host, planned: Optional[Mapping[tuple[str, str], int]] = None) -> int:
        """The receive rings the table and rules may point at: the count a channel change in
        the same plan leaves, else the driver's (GRXRINGS, else the channel count)."""
        if planned and (self.dev, "rx") in planned:
            return planned[self.dev, "rx"]
        r = host.ethtool.rxfh(self.dev)
        if r is not None and r.rings:
            return r.rings
        c = host.ethtool.channels(self.dev)
        return 0 if c is None else (c.combined or 0) + (c.rx or 0)


class RssHashKnob(_RssKnob):
    """`ethtool -N DEV rx-flow-hash FLOW LETTERS`."""

    kind = "rss_hash"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, self.flow = split_dev(obj, self.kind)
        if self.flow not in rss.FLOW_TYPES:
            raise BadInput(
                f"{self.kind} {obj!r}: flow type must be one of {', '.join(rss.FLOW_TYPES)}"
            )

    def read(self, host: Host) -> Optional[str]:
        letters = host.ethtool.rx_flow_hash(self.dev, self.flow)
        if letters is None:
            return None
        return letters or NONE

    def normalize(self, value: str) -> str:
        text = value.strip()
        if text == NONE:
            return NONE
        try:
            return rss.canonical_letters(text) or NONE
        except ValueError:
            return " ".join(value.split())

    def unsettable(self, host: Host) -> Optional[str]:
        letters = host.ethtool.rx_flow_hash(self.dev, self.flow)
        if letters is None:
            return f"{self.dev} reports no RSS hash fields for {self.flow}"
        if not letters:
            r = host.ethtool.rxfh(self.dev)
            if r is None or not r.indir:  # virtio_net without VIRTIO_NET_F_RSS
                return f"{self.dev} hashes on no field and has no indirection table (no RSS)"
        return None

    def check(self, host: Host, value: str) -> None:
        text = value.strip()
        try:
            letters = rss.canonical_letters(text)
        except ValueError as e:
            raise BadInput(f"{self.ident}: {e}") from None
        if len(letters) != len(text) or not rss.hash_fields_fit(self.flow, letters):
            fit = "s d t v m" if self.flow not in rss.PORT_FLOWS else "s d f n t v m"
            raise BadInput(
                f"{self.ident}: {text!r}: {self.flow} takes the fields {fit} (each once, "
                f"at least one; r alone to discard)"
            )

    def write(self, host: Host, value: str) -> None:
        try:
            host.ethtool.set_rx_flow_hash(self.dev, self.flow, value.strip())
        except OSError as e:
            raise _oserror(self.ident, value, e) from None


class RssIndirKnob(_RssKnob):
    """`ethtool -X DEV equal N | weight W... `: the receive-queue indirection table."""

    kind = "rss_indir"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev = check_ifname(obj, self.kind)

    def _table(self, host: Host) -> Optional[tuple[int, ...]]:
        r = host.ethtool.rxfh(self.dev)
        return None if r is None or not r.indir else r.indir

    def read(self, host: Host) -> Optional[str]:
        table = self._table(host)
        return None if table is None else rss.table_text(table)

    def unsettable(self, host: Host) -> Optional[str]:
        if self._table(host) is None:
            return f"{self.dev} has no RSS indirection table"
        return None

    def check(self, host: Host, value: str) -> None:
        self.check_planned(host, value, {})

    def check_planned(self, host: Host, value: str, planned: Mapping[tuple[str, str], int]) -> None:
        table = self._table(host)
        size = len(table) if table else 128  # unsettable: planned missing, never written
        try:
            entries = rss.table_of(value, size)
        except ValueError as e:
            raise BadInput(f"{self.ident}: {e}") from None
        if table is None:
            return
        rings = self.rings(host, planned)
        top = max(entries)
        if top >= rings:
            raise BadInput(
                f"{self.ident}: {' '.join(value.split())[:40]!r} points at queue {top}, but "
                f"{self.dev} has {rings} receive ring(s) (queues 0-{rings - 1})"
            )

    def write(self, host: Host, value: str) -> None:
        table = self._table(host)
        if table is None:
            raise KnobError(f"{self.ident}: {self.dev} has no RSS indirection table")
        try:
            entries = rss.table_of(value, len(table))
        except ValueError as e:
            raise KnobError(f"{self.ident}: {e}") from None
        # The driver's own spread (entry i -> i % rings) is asked for as the default (an empty
        # table, as `ethtool -X DEV default`): the kernel then keeps the table unpinned, so a
        # later `ethtool -L` (or rollback's) may change the queue count and the driver
        # re-spreads; a table written out in full pins its queues (IFF_RXFH_CONFIGURED).
        rings = self.rings(host)
        default = bool(rings) and entries == rss.equal_table(len(table), rings)
        try:
            if default:
                host.ethtool.set_rxfh(self.dev, default=True)
            else:
                host.ethtool.set_rxfh(self.dev, indir=entries)
        except OSError as e:
            raise _oserror(self.ident, value, e) from None

    def prepare_restore(self, host: Host, original: Optional[str]) -> None:
        """Before rollback puts the channel count back: give the driver its default table,
        so that a table lbtune set (which pins the queues it names) cannot make the kernel
        refuse fewer channels. After the channels, `restore` writes the original only when
        the driver's default over the restored count is not it already, so an original
        default table stays the driver's own (the kernel's IFF_RXFH_CONFIGURED unset)."""
        if original is None or self.same(self.read(host), original):
            return
        with contextlib.suppress(OSError):  # restore() writes the original, and says if not
            host.ethtool.set_rxfh(self.dev, default=True)

    def restore(self, host: Host, original: Optional[str]) -> None:
        tidy(host, self.dev)
        if original is not None and not self.same(self.read(host), original):
            self.write(host, original)


class RssKeyKnob(_RssKnob):
    """`ethtool -X DEV hkey KEY`: the RSS hash key."""

    kind = "rss_key"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev = check_ifname(obj, self.kind)

    def read(self, host: Host) -> Optional[str]:
        r = host.ethtool.rxfh(self.dev)
        return None if r is None or not r.key else r.key.hex(":")

    def normalize(self, value: str) -> str:
        return value.strip().lower()

    def unsettable(self, host: Host) -> Optional[str]:
        r = host.ethtool.rxfh(self.dev)
        if r is None or not r.key:
            return f"{self.dev} reports no RSS hash key"
        return None

    @staticmethod
    def _bytes(value: str) -> Optional[bytes]:
        parts = value.strip().split(":")
        if not all(len(p) == 2 for p in parts):
            return None
        try:
            return bytes(int(p, 16) for p in parts)
        except ValueError:
            return None

    def check(self, host: Host, value: str) -> None:
        key = self._bytes(value)
        if key is None:
            raise BadInput(f"{self.ident}: expected hex bytes separated by ':' (6d:5a:...)")
        r = host.ethtool.rxfh(self.dev)
        if r is not None and r.key and len(key) != len(r.key):
            raise BadInput(f"{self.ident}: {len(key)} bytes, but {self.dev}'s key has {len(r.key)}")

    def write(self, host: Host, value: str) -> None:
        key = self._bytes(value)
        if key is None:
            raise KnobError(f"{self.ident}: not a key: {value[:60]!r}")
        try:
            host.ethtool.set_rxfh(self.dev, key=key)
        except OSError as e:
            raise _oserror(self.ident, value, e) from None
