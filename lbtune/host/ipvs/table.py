"""IPVS over generic netlink: the one module that speaks to the kernel's virtual server table.

The values, their wire format and the change requests are `lbtune.host.ipvs.wire` (pure;
re-exported here, import them from this module). Reads services, destinations (with their
connection counts and statistics), the TCP/UDP timeouts, sync daemons and the version;
adds, edits and deletes services and destinations.
A session of lbtune's netlink client (`lbtune.host.net.netlink.Netlink`) rather than
pyroute2: one socket per session, the family id resolved once, and requests pipelined (many
messages per `sendmsg`, one ACK each), which is what makes a reconcile of 10,000
destinations fast. Layouts and numbers are from include/uapi/linux/ip_vs.h and
include/uapi/linux/genetlink.h; the kernel side is net/netfilter/ipvs/ip_vs_ctl.c
(`ip_vs_genl_*`).

Kernel facts this module encodes (docs/ipvs.md has the user-facing side):

- an edit (`IPVS_CMD_SET_SERVICE/_DEST`) replaces every field: always send the complete
  service or destination, or thresholds and flags silently reset;
- the persistence netmask is a be32 mask for IPv4 but a plain prefix length for IPv6, and the
  kernel refuses an IPv6 service (fwmark ones too) without one;
- a DR destination must have the service's address family (only tunnels may mix);
- a dump holds one service's destinations, so reading the table is one dump per service.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import weakref
from dataclasses import replace
from typing import Callable, Iterable, Iterator, Optional, Protocol, Sequence

from lbtune.errors import BadInput, NeedsPrivilege
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.ipvs.memo import MODULE_LISTS
from lbtune.host.ipvs.procfs import PROC_IP_VS
from lbtune.host.ipvs.wire import (
    CMD_ATTR_DAEMON,
    CMD_ATTR_TIMEOUT_TCP,
    CMD_ATTR_TIMEOUT_TCP_FIN,
    CMD_ATTR_TIMEOUT_UDP,
    CMD_DEL_DEST,
    CMD_DEL_SERVICE,
    CMD_GET_CONFIG,
    CMD_GET_DAEMON,
    CMD_GET_DEST,
    CMD_GET_INFO,
    CMD_GET_SERVICE,
    CMD_NEW_SERVICE,
    CMD_SET_CONFIG,
    CMD_SET_SERVICE,
    DAEMON_MCAST_IFN,
    DAEMON_STATE,
    DAEMON_SYNC_ID,
    F_ONEPACKET,
    F_PERSISTENT,
    F_SCHED1,
    F_SCHED2,
    F_SCHED3,
    FWD_METHODS,
    FWD_NAMES,
    INFO_CONN_TAB_SIZE,
    INFO_VERSION,
    IPVS_GENL_NAME,
    IPVS_GENL_VERSION,
    KNOWN_SCHEDULERS,
    PROTOCOLS,
    SERVICE_FLAG_MASK,
    Counters,
    Destination,
    DestKey,
    DestSettings,
    IpvsInfo,
    Op,
    Service,
    ServiceKey,
    ServiceSettings,
    SyncDaemon,
    Timeouts,
    add_dest_op,
    add_service_op,
    canonical_addr,
    decode_dest,
    decode_service,
    default_netmask,
    delete_dest_op,
    delete_service_op,
    edit_dest_op,
    edit_service_op,
    flag_names,
    format_version,
    get_str,
    get_u,
    parse_flags,
    service_attrs,
    set_timeouts_op,
)
from lbtune.host.net.netlink import (
    GENLMSGHDR,
    NETLINK_GENERIC,
    NLM_F_ACK,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSGHDR,
    Netlink,
    align4,
    error_of,
    parse_attrs,
)

# The public face of IPVS in lbtune: this module's session and reads, and the values and
# requests of lbtune.host.ipvs.wire that callers use with them.
__all__ = [
    "FWD_METHODS", "FWD_NAMES", "F_ONEPACKET", "F_PERSISTENT", "F_SCHED1", "F_SCHED2",
    "F_SCHED3", "KNOWN_SCHEDULERS", "PROC_IP_VS", "PROTOCOLS", "SERVICE_FLAG_MASK", "Counters",
    "DestKey", "DestSettings", "Destination", "Ipvs", "IpvsError", "IpvsInfo", "IpvsSocket",
    "IpvsUnavailable", "Op", "Service", "ServiceKey", "ServiceSettings", "SyncDaemon",
    "Timeouts", "add_dest_op", "add_service_op", "available_schedulers", "canonical_addr",
    "decode_dest", "decode_service", "default_netmask", "delete_dest_op", "delete_service_op",
    "edit_dest_op", "edit_service_op", "flag_names", "format_version", "ipvs_loaded",
    "ipvs_of", "module_available", "parse_flags", "read_daemons", "read_info", "read_service",
    "read_services", "read_table", "read_timeouts", "set_timeouts_op",
]  # fmt: skip

# Every answer is an skb of its own and every recv() returns one: acking each change would
# cost a recv per change (in the UML lab about 0.2 ms each). Batches therefore ask for one
# ack at their end; failures answer anyway. Each answer costs the receive buffer a whole skb
# (~1 KiB of truesize), so the buffer is raised where the kernel allows and a batch stays
# below the default send buffer (212 KiB; netlink refuses larger messages).
_BATCH_BYTES = 128 << 10
_RCVBUF = 4 << 20
_RECV = 1 << 16
_TIMEOUT_S = 10


class IpvsUnavailable(NeedsPrivilege):
    """The running kernel has no IPVS (module not loaded, or not built)."""


class IpvsError(OSError):
    """The kernel refused an IPVS request; `errno` is its errno, str() one line."""

    def __str__(self) -> str:
        return str(self.strerror)


# ------------------------------------------------------------------------------ the socket


class IpvsSocket(Netlink):
    """A generic netlink socket bound to the IPVS family of this network namespace."""

    def __init__(self) -> None:
        super().__init__(NETLINK_GENERIC, _TIMEOUT_S, _RCVBUF, ext_ack=True)
        try:
            self.family_id = self._resolve_family()
        except BaseException:
            self.close()
            raise

    def _message(self, msg_type: int, flags: int, cmd: int, attrs: bytes, seq: int) -> bytes:
        payload = GENLMSGHDR.pack(cmd, IPVS_GENL_VERSION, 0) + attrs
        return NLMSGHDR.pack(NLMSGHDR.size + len(payload), msg_type, flags, seq, 0) + payload

    def _resolve_family(self) -> int:
        try:
            family = self.family(IPVS_GENL_NAME)
        except BlockingIOError:  # SO_RCVTIMEO: EAGAIN
            raise IpvsError(errno.ETIMEDOUT, "IPVS: the kernel did not answer") from None
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise IpvsUnavailable("no IPVS in this kernel (module ip_vs not loaded)") from None
            raise IpvsError(e.errno, os.strerror(e.errno or errno.EIO)) from None
        if family is None:
            raise IpvsUnavailable("the kernel did not name the IPVS netlink family")
        return family

    def _exchange(self, data: bytes, seqs: set[int], dump: bool = False) -> list[tuple[int, bytes]]:
        """Send `data` (one or more messages) and read until every seq is acked (or, for a
        dump, until NLMSG_DONE). Returns (seq, body) of data replies; raises the first error."""
        status, replies = self._send_collect(data, seqs, dump)
        failed = [e for e in status.values() if e is not None]
        if failed:
            raise failed[0]
        return replies

    def _send_collect(
        self, data: bytes, seqs: set[int], dump: bool, track: Optional[set[int]] = None
    ) -> tuple[dict[int, Optional[OSError]], list[tuple[int, bytes]]]:
        """Send, then read until every seq in `seqs` is answered. Answers to the other seqs
        in `track` (failures of un-acked messages sent before them) are collected too."""
        replies: list[tuple[int, bytes]] = []
        self.sock.send(data)
        pending = set(seqs)
        known = pending | (track or set())
        status: dict[int, Optional[OSError]] = {}
        while pending:
            try:
                chunk = self.sock.recv(_RECV)
            except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO: EAGAIN
                raise IpvsError(errno.ETIMEDOUT, "IPVS: the kernel did not answer") from None
            for mtype, flags, seq, body in _split(chunk):
                if seq not in known:
                    continue
                if mtype == NLMSG_DONE:
                    pending.discard(seq)
                    status[seq] = _done_status(body)
                elif mtype == NLMSG_ERROR:
                    code, text = error_of(body, flags)
                    if code == 0 and dump:
                        continue
                    pending.discard(seq)
                    status[seq] = None if code == 0 else IpvsError(code, text)
                else:
                    replies.append((seq, body))
        return status, replies

    # -- requests ------------------------------------------------------------------------

    def request(self, cmd: int, attrs: bytes = b"") -> list[bytes]:
        """One doit request with an ACK; returns the bodies of its replies."""
        seq = self.next_seq()
        msg = self._message(self.family_id, NLM_F_REQUEST | NLM_F_ACK, cmd, attrs, seq)
        return [body for _s, body in self._exchange(msg, {seq})]

    def dump(self, cmd: int, attrs: bytes = b"") -> list[bytes]:
        seq = self.next_seq()
        msg = self._message(self.family_id, NLM_F_REQUEST | NLM_F_DUMP, cmd, attrs, seq)
        return [body for _s, body in self._exchange(msg, {seq}, dump=True)]

    def execute(self, ops: Sequence[Op]) -> list[Optional[OSError]]:
        """Run change requests in order, pipelined: returns one error (or None) per op.

        Many messages go in one `sendmsg` and the kernel handles them in turn, acking only
        failures (no NLM_F_ACK) and the batch's last message (NLM_F_ACK): its ack says the
        batch is done. Every op of a batch is attempted, even after one fails.
        """
        out: list[Optional[OSError]] = []
        start = 0
        while start < len(ops):
            size, end = 0, start
            while end < len(ops) and (end == start or size + len(ops[end].attrs) < _BATCH_BYTES):
                size += len(ops[end].attrs) + NLMSGHDR.size + GENLMSGHDR.size
                end += 1
            batch = ops[start:end]
            seqs = [self.next_seq() for _ in batch]
            last = len(batch) - 1
            data = b"".join(
                self._message(self.family_id,
                              NLM_F_REQUEST | (NLM_F_ACK if i == last else 0), op.cmd, op.attrs, s)
                for i, (op, s) in enumerate(zip(batch, seqs))
            )  # fmt: skip
            status, _ = self._send_collect(data, {seqs[-1]}, dump=False, track=set(seqs))
            for op, s in zip(batch, seqs):
                err = status.get(s)
                out.append(None if err is None else IpvsError(err.errno, f"{op.what}: {err}"))
            start = end
        return out


def _split(chunk: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    offset = 0
    while offset + NLMSGHDR.size <= len(chunk):
        length, mtype, flags, seq, _pid = NLMSGHDR.unpack_from(chunk, offset)
        if length < NLMSGHDR.size or offset + length > len(chunk):
            raise IpvsError(errno.EBADMSG, f"IPVS netlink: bad message length {length}")
        yield mtype, flags, seq, chunk[offset + NLMSGHDR.size : offset + length]
        offset += align4(length)


def _done_status(body: bytes) -> Optional[OSError]:
    if len(body) >= 4:
        (code,) = struct.unpack_from("=i", body)
        if code < 0:
            return IpvsError(-code, f"IPVS dump: {os.strerror(-code)}")
    return None


# ------------------------------------------------------------------------------ the session

_Entry = Optional[tuple[ServiceSettings, dict[DestKey, DestSettings]]]
_View = dict[ServiceKey, _Entry]


class Ipvs:
    """IPVS of one host (the current network namespace): cached reads, batched changes.

    `table()` reads every service and its destinations once and keeps the result until a
    change is made: a plan of 10,000 knobs reads the kernel once, and the read-back after an
    apply once more. Changes go through `submit`. Normally each runs at once (an OSError
    carries the kernel's errno); inside `batching()` they are queued and sent pipelined
    (`IpvsSocket.execute`) when the queue is full, before any read, and when the block ends;
    the first failure of a batch is raised then. `planned_service`/`planned_dest` answer
    "what will the kernel hold once the queue is sent", which is what a change is based on.
    """

    def __init__(self, host: Host) -> None:
        self.host = host
        self._sock: Optional[IpvsSocket] = None
        self._table: Optional[dict[ServiceKey, Service]] = None
        self._stale: set[ServiceKey] = set()  # changed since read: read again when asked
        self._counters = False  # the cached table has statistics
        self._timeouts: Optional[Timeouts] = None
        self._view: Optional[_View] = None
        self._base: dict[ServiceKey, Service] = {}  # the table the view started from
        self._queue: list[Op] = []
        self._batching = 0
        self.failed: set[tuple[Optional[ServiceKey], Optional[DestKey]]] = set()
        # `tap()` makes each whole-table read digest the replies: `digest` is that of the
        # cached table as read whole, None after any change sent or partial re-read (a
        # reconcile that plans nothing records it for the next run: lbtune.host.ipvs.memo)
        self.tap: Optional[Callable[[], Tap]] = None
        self.digest: Optional[str] = None

    # -- connection ----------------------------------------------------------------------

    def available(self) -> bool:
        """IPVS is loaded here. Never loads it: the kernel loads ip_vs on the first lookup
        of its netlink family, so the family is only looked up once /proc/net/ip_vs shows
        the module is there (reads stay reads; `load` is the explicit change)."""
        if self._sock is None and not ipvs_loaded(self.host.fs):
            return False
        try:
            self.socket()
        except IpvsUnavailable:
            return False
        return True

    def socket(self) -> IpvsSocket:
        if self._sock is None:
            if not self.host.is_live:
                raise BadInput("IPVS is read from the running kernel: --root cannot be used")
            self._sock = IpvsSocket()
        return self._sock

    def load(self) -> None:
        """Make sure IPVS is there: `modprobe ip_vs` once if the family is missing (what
        ipvsadm does); IpvsUnavailable when the kernel has none."""
        if self.available():
            return
        res = self.host.runner.run(["modprobe", "ip_vs"], timeout=60)
        if not self.available():
            detail = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
            raise IpvsUnavailable(f"no IPVS in this kernel (modprobe ip_vs: {detail})")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- reads ---------------------------------------------------------------------------

    def assume(self, table: Iterable[Service]) -> None:
        """Take `table` as what the kernel holds, without reading it (tests, and planning
        against a recorded table); cleared by the next change."""
        self._table = {s.key: s for s in table}
        self.digest = None
        self._stale.clear()
        self._view = None

    def invalidate(self) -> None:
        self.digest = None
        self._table = None
        self._stale.clear()
        self._timeouts = None
        self._view = None

    def table(self, counters: bool = False) -> dict[ServiceKey, Service]:
        """Every service with its destinations; empty when IPVS is not loaded (then there
        is nothing in it by definition: a freshly loaded module starts empty). Statistics
        (`counters`) are decoded only when asked for; connection counts always are."""
        self.flush()
        if self._table is None or self._stale or (counters and not self._counters):
            if not self.available():
                return {}
            tap = self.tap() if self.tap is not None else None
            self._table = {s.key: s for s in read_table(self.socket(), counters, tap)}
            self.digest = None if tap is None or tap.spoiled else tap.hexdigest()
            self._counters = counters
            self._stale.clear()
        return self._table

    def service(self, key: ServiceKey, fresh: bool = False) -> Optional[Service]:
        """One service as the kernel has it (cached until it is changed; `fresh`: read it
        now, for its connection counts and statistics)."""
        self.flush()
        if fresh and self._table is not None:
            self._stale.add(key)
        if self._table is not None and key in self._stale and len(self._stale) <= _REREAD_ONE:
            # a few services changed: read those again rather than the whole table
            self._stale.discard(key)
            self.digest = None
            now = read_service(self.socket(), key)
            if now is None:
                self._table.pop(key, None)
            else:
                self._table[key] = now
            return now
        return self.table().get(key)

    def refresh(self, keys: Iterable[ServiceKey]) -> None:
        """Read these services again now, one by one (what another run changed, their
        connection counts), however many: two requests each instead of a dump per service
        of the whole table. Reads the whole table when none is cached yet."""
        self.flush()
        if self._table is None:
            self.table()
            return
        self.digest = None
        if self.available():
            for key in keys:
                now = read_service(self.socket(), key)
                if now is None:
                    self._table.pop(key, None)
                else:
                    self._table[key] = now
                self._stale.discard(key)
        self._view = None  # rebuilt from the table (read again whole while any is stale)

    def destinations(self, key: ServiceKey) -> Optional[tuple[Destination, ...]]:
        """The destinations of one service read now, with their connection counts; None
        when the service does not exist."""
        if not self.available():
            return None
        svc = self.service(key, fresh=True)
        return None if svc is None else svc.destinations

    def timeouts(self) -> Optional[Timeouts]:
        self.flush()
        if self._timeouts is None and self.available():
            self._timeouts = read_timeouts(self.socket())
        return self._timeouts

    def info(self) -> Optional[IpvsInfo]:
        return read_info(self.socket()) if self.available() else None

    def daemons(self) -> list[SyncDaemon]:
        return read_daemons(self.socket()) if self.available() else []

    # -- what the kernel will hold -------------------------------------------------------

    def _entry(self, key: ServiceKey) -> _Entry:
        """What the kernel will hold of one service (None: none). The view starts as the
        table when first asked (a snapshot), and each service's entry is made from that
        snapshot when first asked for: a change to one service of 1,000 makes one entry."""
        if self._view is None:
            self._view = {}
            self._base = dict(self.table())
        if key not in self._view:
            s = self._base.get(key)
            self._view[key] = (None if s is None else
                               (s.settings, {d.key: d.settings for d in s.destinations}))
        return self._view[key]

    def planned_service(self, key: ServiceKey) -> Optional[ServiceSettings]:
        entry = self._entry(key)
        return None if entry is None else entry[0]

    def planned_dest(self, svc: ServiceKey, key: DestKey) -> Optional[DestSettings]:
        entry = self._entry(svc)
        return None if entry is None else entry[1].get(key)

    def _note(self, op: Op) -> None:
        if op.svc is None:
            return
        old = self._entry(op.svc)
        view = self._view
        assert view is not None
        if op.cmd in (CMD_NEW_SERVICE, CMD_SET_SERVICE) and op.svc_settings is not None:
            view[op.svc] = (op.svc_settings, old[1] if old else {})
        elif op.cmd == CMD_DEL_SERVICE:
            view[op.svc] = None
        elif op.dest is not None and old is not None:
            dests = old[1]
            if op.cmd == CMD_DEL_DEST:
                dests.pop(op.dest, None)
            elif op.dest_settings is not None:
                dests[op.dest] = op.dest_settings

    # -- changes -------------------------------------------------------------------------

    def submit(self, op: Op) -> None:
        """Make one change: now, or queued inside `batching()`."""
        if self._batching and len(self._queue) >= _QUEUE:
            self.flush()  # before queueing: a failure then belongs to ops already submitted
        self._note(op)
        if self._batching:
            self._queue.append(op)
        else:
            self._send([op])

    def _send(self, ops: Sequence[Op]) -> None:
        # the kernel changes: cached reads of what the ops touch are stale, the view is not
        self.digest = None
        self._stale.update(op.svc for op in ops if op.svc is not None)
        if any(op.cmd == CMD_SET_CONFIG for op in ops):
            self._timeouts = None
        errors = self.socket().execute(ops)
        failures = [(op, e) for op, e in zip(ops, errors) if e is not None]
        if failures:
            self._view = None
            self.failed.update((op.svc, op.dest) for op, _e in failures)
            raise failures[0][1]

    def flush(self) -> None:
        """Send queued changes; raise the first failure (every queued op was attempted)."""
        if self._queue:
            ops, self._queue = self._queue, []
            self._send(ops)

    @contextlib.contextmanager
    def batching(self) -> Iterator[None]:
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching:
                self.flush()

    def execute(self, ops: Sequence[Op]) -> list[Optional[OSError]]:
        """Run ops pipelined now, returning one error or None each (no exception)."""
        self.flush()
        self.invalidate()
        return self.socket().execute(ops)

    def run(self, op: Op) -> None:
        """One op now; OSError (with the kernel's errno) when it fails."""
        self.flush()
        self._note(op)
        self._send([op])


_QUEUE = 2000
# Up to this many changed services are read one by one (two requests each); more, and the
# whole table is read again (one request per service plus one).
_REREAD_ONE = 64
_SESSIONS: weakref.WeakKeyDictionary[Host, Ipvs] = weakref.WeakKeyDictionary()


def ipvs_of(host: Host) -> Ipvs:
    """The IPVS session of `host` (one per Host object, so its cached table is shared)."""
    session = _SESSIONS.get(host)
    if session is None:
        session = _SESSIONS[host] = Ipvs(host)
    return session


def ipvs_loaded(fs: HostFS) -> bool:
    """The ip_vs module is loaded (it registers /proc/net/ip_vs in every namespace)."""
    return fs.exists(PROC_IP_VS)


def module_available(fs: HostFS) -> bool:
    """The running kernel could load ip_vs (built in, or a module in modules.dep)."""
    release = (fs.read("/proc/sys/kernel/osrelease") or "").strip()
    for name in MODULE_LISTS:
        text = fs.read(f"/lib/modules/{release}/{name}") or ""
        if any(line.split(":", 1)[0].rsplit("/", 1)[-1].startswith("ip_vs.ko")
               for line in text.splitlines()):
            return True
    return False


class Tap(Protocol):
    """Sees every reply of a table read (`read_table`), the way the kernel sent it."""

    spoiled: bool  # set when a reply was left out of the table

    def add(self, service: bytes, dests: list[bytes]) -> None: ...

    def hexdigest(self) -> str: ...

    def service(self, body: bytes) -> Optional[Service]:
        """A service reply decoded before (its settings; no real servers), when this is the
        same reply less its statistics (`lbtune ipvs serve`: lbtune.ipvs.resident); None:
        decode it."""
        ...

    def known(self, service: Service) -> Optional[Service]:
        """The service with its real servers as decoded before, when the replies just added
        are ones it can vouch for (lbtune.ipvs.resident); None: decode them."""
        ...


def read_services(sock: IpvsSocket, counters: bool = True) -> list[Service]:
    return [s for s in (decode_service(b, counters) for b in sock.dump(CMD_GET_SERVICE))
            if s is not None]


def read_service(sock: IpvsSocket, key: ServiceKey) -> Optional[Service]:
    """One service and its destinations; None when it does not exist."""
    try:
        bodies = sock.request(CMD_GET_SERVICE, service_attrs(key))
    except OSError as e:
        if e.errno in (errno.ESRCH, errno.ENOENT):
            return None
        raise
    for body in bodies:
        svc = decode_service(body)
        if svc is not None:
            return _with_dests(sock, svc)
    return None


def _with_dests(sock: IpvsSocket, svc: Service, counters: bool = True) -> Service:
    return _decoded(svc, sock.dump(CMD_GET_DEST, service_attrs(svc.key)), counters)


def _decoded(svc: Service, bodies: list[bytes], counters: bool,
             tap: Optional[Tap] = None) -> Service:
    dests = [d for d in (decode_dest(b, svc.key.family, counters) for b in bodies)
             if d is not None]  # fmt: skip
    if tap is not None and len(dests) != len(bodies):
        tap.spoiled = True
    return replace(svc, destinations=tuple(sorted(dests, key=_dest_order)))


def read_table(sock: IpvsSocket, counters: bool = True,
               tap: Optional[Tap] = None) -> list[Service]:
    """Every service with its destinations; `counters=False` skips decoding statistics
    (a reconcile compares settings only). One dump for the services, then one per
    service for its destinations: a dump's request cannot be pipelined behind another's
    (the kernel answers EBUSY while one is unfinished; measured: slower, not faster).
    `tap` is fed every reply as read (the no-op memo's digest, lbtune.host.ipvs.memo)."""
    if tap is None:
        return sorted((_with_dests(sock, svc, counters)
                       for svc in read_services(sock, counters)), key=_service_order)
    out = []
    for body in sock.dump(CMD_GET_SERVICE):
        svc = None if counters else tap.service(body)
        if svc is None:
            svc = decode_service(body, counters)
        if svc is None:
            tap.spoiled = True  # a reply the table leaves out: not what a digest vouches for
            continue
        bodies = sock.dump(CMD_GET_DEST, service_attrs(svc.key))
        tap.add(body, bodies)
        known = tap.known(svc)
        out.append(known if known is not None else
                   _decoded(svc, bodies, counters, tap))
    return sorted(out, key=_service_order)


# The keys' own order (their fields in turn), as plain tuples: compared in C, not through
# the dataclasses' generated methods (a table read sorts 10,000 real servers).
def _dest_order(d: Destination) -> tuple[int, str, int]:
    k = d.key
    return (k.family, k.addr, k.port)


def _service_order(s: Service) -> tuple[int, str, str, int, int]:
    k = s.key
    return (k.family, k.protocol, k.addr, k.port, k.fwmark)


def read_timeouts(sock: IpvsSocket) -> Timeouts:
    for body in sock.request(CMD_GET_CONFIG):
        a = parse_attrs(body, GENLMSGHDR.size)
        return Timeouts(get_u(a, CMD_ATTR_TIMEOUT_TCP), get_u(a, CMD_ATTR_TIMEOUT_TCP_FIN),
                        get_u(a, CMD_ATTR_TIMEOUT_UDP))  # fmt: skip
    raise IpvsError(errno.EIO, "IPVS_CMD_GET_CONFIG returned nothing")


def read_info(sock: IpvsSocket) -> IpvsInfo:
    for body in sock.request(CMD_GET_INFO):
        a = parse_attrs(body, GENLMSGHDR.size)
        code = get_u(a, INFO_VERSION)
        return IpvsInfo(format_version(code), get_u(a, INFO_CONN_TAB_SIZE), code)
    raise IpvsError(errno.EIO, "IPVS_CMD_GET_INFO returned nothing")


def read_daemons(sock: IpvsSocket) -> list[SyncDaemon]:
    out = []
    for body in sock.dump(CMD_GET_DAEMON):
        top = parse_attrs(body, GENLMSGHDR.size)
        if CMD_ATTR_DAEMON not in top:
            continue
        a = parse_attrs(top[CMD_ATTR_DAEMON])
        state = {1: "master", 2: "backup"}.get(get_u(a, DAEMON_STATE), "none")
        out.append(SyncDaemon(state, get_str(a, DAEMON_MCAST_IFN), get_u(a, DAEMON_SYNC_ID)))
    return out


# ------------------------------------------------------------------------------ kernel facts


def available_schedulers(fs: HostFS) -> Optional[frozenset[str]]:
    """Schedulers the running kernel can load: `ip_vs_<name>` built in or as a module file
    (modules.builtin / modules.dep of /lib/modules/<release>). None when that cannot be
    told (no modules directory, e.g. a container): then the kernel decides at apply time."""
    release = (fs.read("/proc/sys/kernel/osrelease") or "").strip()
    if not release:
        return None
    base = f"/lib/modules/{release}"
    found: set[str] = set()
    seen_any = False
    for name in MODULE_LISTS:
        text = fs.read(f"{base}/{name}")
        if text is None:
            continue
        seen_any = True
        for line in text.splitlines():
            path = line.split(":", 1)[0]
            mod = path.rsplit("/", 1)[-1]
            for suffix in (".ko", ".ko.xz", ".ko.zst", ".ko.gz"):
                if mod.endswith(suffix):
                    mod = mod[: -len(suffix)]
                    break
            if mod.startswith("ip_vs_") and mod[6:] in KNOWN_SCHEDULERS:
                found.add(mod[6:])
    return frozenset(found) if seen_any else None
