"""The record of a no-op `lbtune ipvs apply`, and its check against the host now (docs/ipvs.md,
"Performance").

A reconcile is level-triggered: cron, Ansible and operators run `lbtune ipvs apply CONFIG`
again and again, and nearly every run finds nothing to change. The full run reads, validates
and plans 11,000 objects to learn that; this module answers the same question from what the
last full no-op recorded, and answers "I cannot tell" (None: the full run goes ahead) at the
first thing it cannot vouch for.

When a full `ipvs apply` plans nothing, it records under its lock, in the state directory
(root's, mode 0600): the config's SHA-256 and the name it was given as; a digest of the IPVS
table exactly as the kernel sent it (every service and real server setting; connection counts
and statistics left out), taken from the very replies the plan was made from; the sysctls,
timeouts, VIPs and local addresses the config needs, as values to compare; the journal
directory's listing (no apply, rollback or interrupted run since); the files that tell which
schedulers the kernel offers; and the lbtune code that planned it. `check` takes the same
lock (for an apply; a plan takes none, as the full plan takes none), checks every item
against the host now, and only when all hold vouches for the run: the command line
(lbtune.cli.ipvs.fast) then prints what the full run would. Anything it cannot vouch for
(another config, a table one weight apart, a held lock, a record that is missing, foreign
or damaged) leaves it to the full run, which re-records (an apply; a plan never records).

Only the interpreter's C modules and lbtune's netlink client and lock (which import no
more) are imported here: the point is to not pay for the imports (click, the planner) of
the run it replaces.
"""

from __future__ import annotations

import _socket
import _struct
import marshal
import os
import sys

from lbtune.host import lock as lock_
from lbtune.host.net import netlink as nl_
from lbtune.host.net.netlink import NLATTR, Netlink, attr, parse_attrs

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    from collections.abc import Callable

    from lbtune.host.fs import HostFS

# SHA-256 from the interpreter's own module, as lbtune.host.identity (hashlib loads OpenSSL)
try:
    from _sha256 import sha256  # type: ignore[import-not-found]  # Python 3.11
except ImportError:  # pragma: no cover - 3.12 and later
    from _sha2 import sha256  # type: ignore[import-not-found]

FORMAT = 1
MEMO = "ipvs-noop.memo"
STATE_DIR = "/var/lib/lbtune"
# What the running kernel can load, per /lib/modules/RELEASE (lbtune.host.ipvs.table reads them).
MODULE_LISTS = ("modules.builtin", "modules.dep")
MAX_MEMO = 1 << 20
MAX_CONFIG = 4 << 20  # lbtune.ipvs.config.MAX_BYTES (tests/unit check they agree)

# The modules whose code decides what a config means and what the kernel must hold: a memo
# recorded by other code (an upgrade, an edit) is not trusted (tests/unit lists them).
# The answer's own code (entry, the fast path and the words it prints, environment check,
# this check, its netlink client and lock) counts too.
CODE = ("__init__.py", "host/ipvs/memo.py", "ipvs/config.py", "ipvs/plaintoml.py",
        "ipvs/reconcile.py", "tune/plan.py", "tune/engine.py", "tune/journal.py",
        "tune/knobs/ipvs.py", "tune/knobs/sysctl.py", "host/ipvs/table.py", "host/ipvs/wire.py",
        "host/net/addr.py", "host/net/netlink.py", "host/lock.py", "cli/ipvs/commands.py",
        "cli/ipvs/common.py", "cli/ipvs/fast.py", "cli/ipvs/render.py", "cli/output.py",
        "cli/entry.py", "environ.py", "host/endpoints/serve.py")  # fmt: skip
PKG = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# include/uapi/linux/ip_vs.h (lbtune.host.ipvs.wire's numbers: that module imports what
# this one must not), rtnetlink.h, if_addr.h
_IFADDR = _struct.Struct("=BBBBI")  # struct ifaddrmsg
_CMD_GET_SERVICE, _CMD_GET_DEST, _CMD_GET_CONFIG = 4, 8, 13
_CMD_ATTR_SERVICE, _CMD_ATTR_DEST = 1, 2
_TIMEOUT_ATTRS = {"tcp": 4, "tcpfin": 5, "udp": 6}
_SVC_IDENT = (1, 2, 3, 4, 5)  # AF, PROTOCOL, ADDR, PORT, FWMARK: what names a service
SVC_VOLATILE = frozenset((10, 12))  # STATS, STATS64
DEST_VOLATILE = frozenset((7, 8, 9, 10, 12))  # ACTIVE/INACT/PERSIST_CONNS, STATS, STATS64
_RTM_GETADDR = 22
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_AF = {4: 2, 6: 10}
_TYPE = nl_.NLA_TYPE_MASK
_REQ, _DUMP, _ACK = nl_.NLM_F_REQUEST, nl_.NLM_F_REQUEST | nl_.NLM_F_DUMP, nl_.NLM_F_ACK


class Miss(Exception):
    """The record cannot vouch for this run: the full run decides."""


# ------------------------------------------------------------------------------ the table


class Cutter:
    """The bytes of one reply that are settings: its attributes without the volatile ones
    (connection counts, statistics), header lengths included (they frame each record).

    Replies of one length nearly always share one layout (a kernel sends the same
    attributes for every IPv4 real server): the first is walked attribute by attribute,
    which yields a template (where each header sits, and the spans to keep); the next of
    that length is cut by the template once one struct unpack shows every one of its
    attribute headers is the template's, so it parses exactly alike."""

    def __init__(self, volatile: frozenset[int]) -> None:
        self.volatile = volatile
        self.templates: dict[int, tuple[_struct.Struct, tuple[int, ...],
                                        tuple[slice, ...]]] = {}

    def walk(self, body: bytes) -> tuple[list[int], list[slice]]:
        """(offsets of every attribute header, the spans to keep) of one reply; Miss when
        an attribute does not fit."""
        heads: list[int] = []
        keep: list[slice] = []
        at, end, start = 4, len(body), 4  # after the genl header
        unpack = NLATTR.unpack_from
        while at + 4 <= end:
            length, atype = unpack(body, at)
            if length < 4 or at + length > end:
                raise Miss("malformed attribute")
            heads.append(at)
            top_end = at + ((length + 3) & ~3)
            if atype & _TYPE in (_CMD_ATTR_SERVICE, _CMD_ATTR_DEST):
                inner = at + 4
                while inner + 4 <= at + length:
                    ilen, itype = unpack(body, inner)
                    if ilen < 4 or inner + ilen > at + length:
                        raise Miss("malformed attribute")
                    heads.append(inner)
                    nxt = inner + ((ilen + 3) & ~3)
                    if itype & _TYPE in self.volatile:
                        if start < inner:
                            keep.append(slice(start, inner))
                        start = nxt
                    inner = nxt
            at = top_end
        if start < end:
            keep.append(slice(start, end))
        return heads, keep

    def feed(self, body: bytes, update: Callable[[bytes], object]) -> None:
        """Hand the settings of `body` to `update`, span by span."""
        known = self.templates.get(len(body))
        if known is not None:
            layout, expected, keep = known
            if layout.unpack_from(body) == expected:
                for part in keep:
                    update(body[part])
                return
        heads, spans = self.walk(body)
        fmt, prev = "=", 0
        for off in heads:
            fmt += f"{off - prev}xHH" if off > prev else "HH"
            prev = off + 4
        layout = _struct.Struct(fmt)
        if known is None:
            self.templates[len(body)] = (layout, layout.unpack_from(body), tuple(spans))
        for part in spans:
            update(body[part])


class TableDigest:
    """SHA-256 of an IPVS table's settings: each service's reply, then its real servers'
    replies, cut to their settings (`Cutter`), in the order the kernel sent them. The
    order is part of the digest: the same table read twice comes in the same order (the
    kernel's hash buckets and lists), and a table rebuilt in another order only costs a
    full run. `add` is fed replies as read; the full run's table read and this module's
    own read feed it alike."""

    def __init__(self) -> None:
        self._hash = sha256()
        self._services = Cutter(SVC_VOLATILE)
        self._dests = Cutter(DEST_VOLATILE)
        self.spoiled = False  # a reply the full run left out: nothing may be recorded

    def add(self, service: bytes, dests: list[bytes]) -> None:
        self.take(self.cut(service, dests))

    def take(self, cut: bytes) -> None:
        """One service's replies, already cut (`cut`), into the digest."""
        self._hash.update(cut)

    def cut(self, service: bytes, dests: list[bytes]) -> bytes:
        """One service's replies cut to their settings, as the digest takes them."""
        return self.cut_service(service) + self.cut_dests(dests)

    def cut_service(self, body: bytes) -> bytes:
        parts: list[bytes] = []
        self._services.feed(body, parts.append)
        return b"".join(parts)

    def cut_dests(self, dests: list[bytes]) -> bytes:
        parts: list[bytes] = []
        keep = parts.append
        feed = self._dests.feed
        for body in dests:
            feed(body, keep)
        return b"".join(parts)

    def service(self, body: bytes) -> None:
        """Nothing decoded before: every reply is decoded (lbtune.host.ipvs.table.Tap)."""
        return None

    def hexdigest(self) -> str:
        return str(self._hash.hexdigest())

    def known(self, service: object) -> None:
        """Nothing decoded before: every reply is decoded (lbtune.host.ipvs.table.Tap)."""
        return None


def _genl(cmd: int, attrs: bytes = b"") -> bytes:
    return nl_.GENLMSGHDR.pack(cmd, 1, 0) + attrs


def read_digest(nl: Netlink, family: int) -> str:
    """The digest of the table the kernel holds now: one dump of the services, then one of
    each service's real servers (what `lbtune.host.ipvs.table.read_table` reads)."""
    digest = TableDigest()
    for body in nl.talk(family, _DUMP, _genl(_CMD_GET_SERVICE)):
        nested = parse_attrs(body, 4).get(_CMD_ATTR_SERVICE)
        fields = parse_attrs(nested) if nested is not None else {}
        ident = b"".join(attr(t, fields[t]) for t in _SVC_IDENT if t in fields)
        if not ident:
            raise Miss("a service without its address")
        request = attr(_CMD_ATTR_SERVICE | nl_.NLA_F_NESTED, ident)
        digest.add(body, nl.talk(family, _DUMP, _genl(_CMD_GET_DEST, request)))
    return digest.hexdigest()


def _ipvs_family(nl: Netlink) -> int:
    family = nl.family("IPVS")
    if family is None:
        raise Miss("no IPVS family")
    return family


def table_digest() -> str:
    """The digest of the table the kernel holds now, on a netlink socket of its own."""
    nl = Netlink(nl_.NETLINK_GENERIC, rcvbuf=1 << 21)
    try:
        return read_digest(nl, _ipvs_family(nl))
    finally:
        nl.close()


# ------------------------------------------------------------------------------ the record


def code_signature() -> tuple[object, ...]:
    """The planning code's files as (path, size, mtime) and the interpreter's version."""
    return files_signature(tuple(os.path.join(PKG, name) for name in CODE))


def files_signature(paths: tuple[str, ...]) -> tuple[object, ...]:
    """Each file's (path, size, mtime; or None when it is gone) and the interpreter's
    version: what an upgrade or an edit of the code changes (also `lbtune ipvs serve`'s
    check of the modules it has loaded)."""
    out: list[object] = [sys.hexversion]
    for path in paths:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            out.append((path, None))
            continue
        out.append((path, st.st_size, st.st_mtime_ns))
    return tuple(out)


def listing(dir_fd: int, name: str) -> tuple[tuple[str, int, int, int], ...]:
    """A directory's entries as (name, inode, size, mtime): a journal written, rewritten or
    added (an apply, a rollback, an interrupted run, a temp file) changes it."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except FileNotFoundError:
        return ()
    try:
        out = []
        for entry in os.scandir(fd):
            st = entry.stat(follow_symlinks=False)
            out.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(sorted(out))
    finally:
        os.close(fd)


def modules_signature() -> tuple[object, ...]:
    """What `available_schedulers` reads: the release and its modules lists, as stats."""
    with open("/proc/sys/kernel/osrelease", "rb") as f:
        release = f.read().strip().decode()
    out: list[object] = [release]
    for name in MODULE_LISTS:
        try:
            st = os.stat(f"/lib/modules/{release}/{name}")
            out.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError as e:
            out.append((name, e.errno))
    return tuple(out)


def record(fs: HostFS, base: str, *, source: str, config_sha256: str, table: str,
           modules: object, sysctls: tuple[tuple[str, str], ...],
           timeouts: tuple[tuple[str, int], ...], vips: tuple[tuple[str, str, int], ...],
           local: tuple[str, ...], unchanged: int) -> None:
    """Write the record of a full no-op (the apply calls this under its lock, after it
    planned nothing): `fs`/`base` its state directory; `table` the digest of the replies
    its plan was made from; `modules` `modules_signature()` taken before it read what
    that describes; `sysctls` (full key, value), `timeouts` (name, seconds), `vips` (dev,
    address, prefix) and `local` (service VIPs the host must hold) as the config wants."""
    import posixpath

    where = fs.path(base)
    dir_fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        journals = listing(dir_fd, "journal")
    finally:
        os.close(dir_fd)
    memo = {
        "format": FORMAT, "code": code_signature(), "state": where, "source": source,
        "config": config_sha256, "table": table, "journals": journals, "modules": modules,
        "sysctls": tuple((f"/proc/sys/{k.replace('.', '/')}", v) for k, v in sysctls),
        "timeouts": timeouts, "vips": vips, "local": local, "unchanged": unchanged,
    }  # fmt: skip
    # atomic (temp, fsync, rename); the temp of a write killed midway goes with the next
    fs.write_file(posixpath.join(base, MEMO), marshal.dumps(memo), 0o600, follow=False)


def forget(fs: HostFS, base: str) -> None:
    """Remove the record (an apply that changes something: it describes a table gone)."""
    import contextlib
    import posixpath

    with contextlib.suppress(FileNotFoundError):
        os.unlink(fs.path(posixpath.join(base, MEMO)))


# ------------------------------------------------------------------------------ the check


def state_base() -> str:
    """The state directory's path as `lbtune.tune.journal.StateDir` makes it for the live
    host: $LBTUNE_STATE_DIR/hosts/KEY (KEY: this root and machine), or /var/lib/lbtune."""
    override = os.environ.get("LBTUNE_STATE_DIR") or ""
    if not override:
        return STATE_DIR
    try:
        with open("/etc/machine-id", "rb") as f:
            machine = f.read(4096).decode().strip()
    except FileNotFoundError:
        machine = ""
    key = sha256(f"/\0{machine}".encode()).hexdigest()[:16]
    return os.path.join(os.path.realpath(override), "hosts", key)


def _open_dir(path: str) -> int:
    """A directory opened component by component, never through a symlink."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in path.split("/") if p]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _config_sha256(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_CONFIG:
            raise Miss("not a regular file of a config's size")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_CONFIG:  # a file that grows while read stops at the limit
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG:
        raise Miss("too large")
    return str(sha256(data).hexdigest())


def load(dir_fd: int) -> dict[str, object]:
    """The record in an opened state directory, as written by `record`; Miss for one that
    is not root's own (0600), or of another format."""
    fd = os.open(MEMO, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if ((st.st_mode & 0o170000) != 0o100000 or st.st_uid != os.geteuid()
                or st.st_mode & 0o077 or st.st_size > MAX_MEMO):
            raise Miss("a memo not written by this user's lbtune")
        data = os.read(fd, MAX_MEMO + 1)
    finally:
        os.close(fd)
    # marshal trusts its input: the memo is root's own (checked above, in root's 0700
    # state directory), as trusted as the journals beside it
    memo = marshal.loads(data)  # noqa: S302
    if type(memo) is not dict or memo.get("format") != FORMAT:
        raise Miss("another memo format")
    return memo


def _host_holds(memo: dict[str, object]) -> None:
    """The sysctls, VIPs and local addresses the config needs are there now."""
    for path, want in memo["sysctls"]:  # type: ignore[attr-defined]
        with open(path, "rb") as f:
            if f.read(4096).strip().decode() != want:
                raise Miss("a sysctl differs")
    vips, local = memo["vips"], memo["local"]
    if not vips and not local:
        return
    nl = Netlink(nl_.NETLINK_ROUTE, rcvbuf=1 << 21)
    try:
        have = set()
        for body in nl.talk(_RTM_GETADDR, _DUMP, _IFADDR.pack(0, 0, 0, 0, 0)):
            if len(body) < _IFADDR.size:
                continue
            _fam, plen, _fl, _sc, index = _IFADDR.unpack_from(body)
            got = parse_attrs(body, _IFADDR.size)
            raw = got.get(_IFA_LOCAL) or got.get(_IFA_ADDRESS)
            if raw is not None:
                have.add((index, plen, raw))
    finally:
        nl.close()
    addrs = {a for _i, _p, a in have}
    for dev, addr, plen in vips:  # type: ignore[attr-defined]
        raw = _socket.inet_pton(_AF[6 if ":" in addr else 4], addr)
        if (_socket.if_nametoindex(dev), plen, raw) not in have:
            raise Miss("a VIP is not in place")
    for addr in local:  # type: ignore[attr-defined]
        if _socket.inet_pton(_AF[6 if ":" in addr else 4], addr) not in addrs:
            raise Miss("a VIP is not local")


def _kernel_holds(memo: dict[str, object]) -> None:
    """IPVS's timeouts and table are as recorded."""
    nl = Netlink(nl_.NETLINK_GENERIC, rcvbuf=1 << 21)
    try:
        family = _ipvs_family(nl)
        if memo["timeouts"]:
            got: dict[int, bytes] = {}
            for body in nl.talk(family, _REQ | _ACK, _genl(_CMD_GET_CONFIG)):
                got.update(parse_attrs(body, 4))
            for name, want in memo["timeouts"]:  # type: ignore[attr-defined]
                raw = got.get(_TIMEOUT_ATTRS[name])
                if raw is None or int.from_bytes(raw[:4], sys.byteorder) != want:
                    raise Miss("a timeout differs")
        if read_digest(nl, family) != memo["table"]:
            raise Miss("the table differs")
    finally:
        nl.close()


class Vouched:
    """The record's answer: the run would plan nothing, `unchanged` objects already in
    place. An apply's holds the apply's lock until `release` (after its output)."""

    def __init__(self, unchanged: int, lock: int) -> None:
        self.unchanged = unchanged
        self._lock = lock

    def release(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


def check(source: str, base: str, *, apply: bool) -> Vouched | None:
    """What the record in state directory `base` vouches for a run of `ipvs apply SOURCE`
    (`apply`) or `ipvs plan SOURCE`; None when the full run must decide (nothing changed).
    An apply is checked under the apply's lock, as the full apply runs; a plan takes no
    lock, as the full plan takes none: a plan holding it, even for a moment, would make an
    apply that starts then fail (exit 6). Without it, every item is still read from the
    host now, so an answer is what the table was when it was read, as the full plan's is;
    an apply's change in between makes an item differ (the full plan)."""
    lock = -1
    try:
        config = _config_sha256(source)
        dir_fd = _open_dir(base)
        try:
            memo = load(dir_fd)
            if (memo.get("source") != source or memo.get("config") != config
                    or memo.get("state") != base or memo.get("code") != code_signature()):
                return None
            if apply:
                lock = lock_.take(dir_fd)
            if listing(dir_fd, "journal") != memo["journals"]:
                raise Miss("a journal was written")
        finally:
            os.close(dir_fd)
        if modules_signature() != memo["modules"]:
            raise Miss("the kernel's modules changed")
        _host_holds(memo)
        _kernel_holds(memo)
        unchanged = memo["unchanged"]
        if type(unchanged) is not int:
            raise Miss("a count that is not one")
        vouched, lock = Vouched(unchanged, lock), -1
        return vouched
    except Exception:  # whatever it is, the full run decides (and says what it is)
        return None
    finally:
        if lock >= 0:
            os.close(lock)
