"""The repeated no-op of `lbtune ipvs apply`, answered from a memo (docs/ipvs.md, "Performance").

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
schedulers the kernel offers; and the lbtune code that planned it. A later run with the same
arguments takes the same lock, checks every item against the host now, and only when all
hold prints what the full run would ("CONFIG: nothing to change", or its --json document)
and exits 0. `ipvs plan CONFIG` is answered from the same record under the same checks but
without the lock, which the full plan does not take either (the empty plan): Ansible's
check mode runs it. Anything else (another config, a table one
weight apart, a held lock, a memo that is missing, foreign or damaged, a terminal, other
options) leaves it to the full run, which re-records (an apply; a plan never records).

Only the standard library's C modules are imported here: the point is to not pay for the
imports (click, the planner) of the run it replaces.
"""

from __future__ import annotations

import _socket
import _struct
import fcntl
import marshal
import os
import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
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
_MAX_MEMO = 1 << 20
_MAX_CONFIG = 4 << 20  # lbtune.ipvs.config.MAX_BYTES (tests/unit check they agree)

# The modules whose code decides what a config means and what the kernel must hold: a memo
# recorded by other code (an upgrade, an edit) is not trusted (tests/unit lists them).
# The answer's own code (entry, environment check, the output it copies) counts too.
CODE = ("__init__.py", "host/ipvs/memo.py", "ipvs/config.py", "ipvs/plaintoml.py",
        "ipvs/reconcile.py", "tune/plan.py", "tune/engine.py", "tune/journal.py",
        "tune/knobs/ipvs.py", "tune/knobs/sysctl.py", "host/ipvs/table.py", "host/ipvs/wire.py",
        "host/net/addr.py", "cli/ipvs/commands.py", "cli/ipvs/common.py", "cli/output.py",
        "cli/entry.py", "environ.py", "host/endpoints/serve.py")  # fmt: skip
_PKG = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# include/uapi/linux/netlink.h, genetlink.h, ip_vs.h, rtnetlink.h, if_addr.h
_HDR = _struct.Struct("=IHHII")  # struct nlmsghdr
_NLA = _struct.Struct("=HH")  # struct nlattr
_IFADDR = _struct.Struct("=BBBBI")  # struct ifaddrmsg
_AF_NETLINK, _SOCK_RAW, _SOCK_CLOEXEC = 16, 3, 0o2000000
_NETLINK_ROUTE, _NETLINK_GENERIC = 0, 16
_F_REQUEST, _F_ACK, _F_DUMP = 0x1, 0x4, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_GENL_ID_CTRL, _CTRL_CMD_GETFAMILY, _CTRL_ATTR_FAMILY_ID, _CTRL_ATTR_FAMILY_NAME = 16, 3, 1, 2
_CMD_GET_SERVICE, _CMD_GET_DEST, _CMD_GET_CONFIG = 4, 8, 13
_CMD_ATTR_SERVICE, _CMD_ATTR_DEST = 1, 2
_TIMEOUT_ATTRS = {"tcp": 4, "tcpfin": 5, "udp": 6}
_SVC_IDENT = (1, 2, 3, 4, 5)  # AF, PROTOCOL, ADDR, PORT, FWMARK: what names a service
_SVC_VOLATILE = frozenset((10, 12))  # STATS, STATS64
_DEST_VOLATILE = frozenset((7, 8, 9, 10, 12))  # ACTIVE/INACT/PERSIST_CONNS, STATS, STATS64
_RTM_NEWADDR, _RTM_GETADDR = 20, 22
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_AF = {4: 2, 6: 10}
_NESTED = 0x8000
_TYPE = 0x3FFF


class _Miss(Exception):
    """The memo cannot vouch for this run: the full run decides."""


# ------------------------------------------------------------------------------ the table


def _attrs(buf: bytes, start: int, end: int) -> list[tuple[int, bytes]]:
    """(type, the attribute's bytes: header and payload, no padding) in the kernel's order."""
    out = []
    unpack = _NLA.unpack_from
    while start + 4 <= end:
        length, atype = unpack(buf, start)
        if length < 4 or start + length > end:
            raise _Miss("malformed attribute")
        out.append((atype & _TYPE, buf[start : start + length]))
        start += (length + 3) & ~3
    return out


class _Cutter:
    """The bytes of one reply that are settings: its attributes without the volatile ones
    (connection counts, statistics), header lengths included (they frame each record).

    Replies of one length nearly always share one layout (a kernel sends the same
    attributes for every IPv4 real server): the first is walked attribute by attribute,
    which yields a template (where each header sits, and the spans to keep); the next of
    that length is cut by the template once one struct unpack shows every one of its
    attribute headers is the template's, so it parses exactly alike."""

    def __init__(self, volatile: frozenset[int]) -> None:
        self.volatile = volatile
        self.templates: dict[int, tuple[_struct.Struct, tuple[int, ...], tuple[slice, ...]]] = {}

    def _walk(self, body: bytes) -> tuple[list[int], list[slice]]:
        heads: list[int] = []  # offsets of every attribute header
        keep: list[slice] = []
        at, end, start = 4, len(body), 4  # after the genl header
        unpack = _NLA.unpack_from
        while at + 4 <= end:
            length, atype = unpack(body, at)
            if length < 4 or at + length > end:
                raise _Miss("malformed attribute")
            heads.append(at)
            top_end = at + ((length + 3) & ~3)
            if atype & _TYPE in (_CMD_ATTR_SERVICE, _CMD_ATTR_DEST):
                inner = at + 4
                while inner + 4 <= at + length:
                    ilen, itype = unpack(body, inner)
                    if ilen < 4 or inner + ilen > at + length:
                        raise _Miss("malformed attribute")
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
        known = self.templates.get(len(body))
        if known is not None:
            layout, expected, keep = known
            if layout.unpack_from(body) == expected:
                for part in keep:
                    update(body[part])
                return
        heads, spans = self._walk(body)
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
    replies, cut to their settings (`_Cutter`), in the order the kernel sent them. The
    order is part of the digest: the same table read twice comes in the same order (the
    kernel's hash buckets and lists), and a table rebuilt in another order only costs a
    full run. `add` is fed replies as read; the full run's table read and this module's
    own read feed it alike."""

    def __init__(self) -> None:
        self._hash = sha256()
        self._services = _Cutter(_SVC_VOLATILE)
        self._dests = _Cutter(_DEST_VOLATILE)
        self.spoiled = False  # a reply the full run left out: nothing may be recorded

    def add(self, service: bytes, dests: list[bytes]) -> None:
        self._hash.update(self.cut(service, dests))

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


class _Netlink:
    """One netlink socket for requests and dumps; any error is a _Miss.

    What `lbtune.host.net.netlink.dump` and `lbtune.host.ipvs.table.IpvsSocket` do, on `_socket`:
    those import `socket` (its enum tables), `typing` and the IPVS dataclasses, which is
    the start-up this module exists to skip (bench/ipvs_profile.py: the imports of the
    full run cost more than the whole answer from the record)."""

    def __init__(self, protocol: int) -> None:
        self.sock = _socket.socket(_AF_NETLINK, _SOCK_RAW | _SOCK_CLOEXEC, protocol)
        try:
            # the kernel's timeout (SO_RCVTIMEO/SO_SNDTIMEO), not Python's settimeout, which
            # polls before every send and receive: 1,001 dumps, each syscall costly in UML
            timeval = _struct.pack("@ll", 5, 0)
            self.sock.setsockopt(1, 20, timeval)
            self.sock.setsockopt(1, 21, timeval)
            self.sock.setsockopt(1, 33, 1 << 21)  # SO_RCVBUFFORCE (root): no overrun
            self.sock.bind((0, 0))
        except BaseException:
            self.sock.close()
            raise
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def talk(self, mtype: int, flags: int, payload: bytes) -> list[bytes]:
        """Send one request; the payloads of its answers (a dump's until NLMSG_DONE, a
        request's until its ack)."""
        self.seq += 1
        seq = self.seq
        self.sock.send(_HDR.pack(16 + len(payload), mtype, flags, seq, 0) + payload)
        out: list[bytes] = []
        while True:
            chunk = self.sock.recv(1 << 16)
            at = 0
            while at + 16 <= len(chunk):
                length, kind, _f, got, _pid = _HDR.unpack_from(chunk, at)
                if length < 16 or at + length > len(chunk):
                    raise _Miss("malformed netlink message")
                body = chunk[at + 16 : at + length]
                at += (length + 3) & ~3
                if got != seq:
                    continue
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    if body[:4] != b"\0\0\0\0":
                        raise _Miss("the kernel refused a read")
                    if not flags & _F_DUMP:
                        return out
                    continue
                out.append(body)


def _genl(cmd: int, attrs: bytes = b"") -> bytes:
    return bytes((cmd, 1, 0, 0)) + attrs


def _attr(atype: int, payload: bytes) -> bytes:
    raw = _NLA.pack(4 + len(payload), atype) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _ipvs_family(nl: _Netlink) -> int:
    for body in nl.talk(_GENL_ID_CTRL, _F_REQUEST | _F_ACK,
                        _genl(_CTRL_CMD_GETFAMILY, _attr(_CTRL_ATTR_FAMILY_NAME, b"IPVS\0"))):
        for atype, raw in _attrs(body, 4, len(body)):
            if atype == _CTRL_ATTR_FAMILY_ID and len(raw) >= 6:
                return int.from_bytes(raw[4:6], sys.byteorder)
    raise _Miss("no IPVS family")


def read_digest(nl: _Netlink, family: int) -> str:
    """The digest of the table the kernel holds now: one dump of the services, then one of
    each service's real servers (what `lbtune.host.ipvs.table.read_table` reads)."""
    digest = TableDigest()
    for body in nl.talk(family, _F_REQUEST | _F_DUMP, _genl(_CMD_GET_SERVICE)):
        ident = b""
        for atype, raw in _attrs(body, 4, len(body)):
            if atype == _CMD_ATTR_SERVICE:
                ident = b"".join(a + b"\0" * (-len(a) % 4)
                                 for t, a in _attrs(raw, 4, len(raw)) if t in _SVC_IDENT)
        if not ident:
            raise _Miss("a service without its address")
        nested = _NLA.pack(4 + len(ident), _CMD_ATTR_SERVICE | _NESTED) + ident
        digest.add(body, nl.talk(family, _F_REQUEST | _F_DUMP, _genl(_CMD_GET_DEST, nested)))
    return digest.hexdigest()


# ------------------------------------------------------------------------------ the memo


def code_signature() -> tuple[object, ...]:
    """The planning code's files as (path, size, mtime) and the interpreter's version."""
    return files_signature(tuple(os.path.join(_PKG, name) for name in CODE))


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


def _args(argv: list[str]) -> tuple[str, str, bool] | None:
    """(COMMAND, CONFIG, --json) of exactly `ipvs apply CONFIG` or `ipvs plan CONFIG`, with
    `--json` once anywhere (`lbtune --json ipvs apply CONFIG` is how the Ansible collection
    runs it, and `ipvs plan` in check mode); None for anything else (other options, `--`,
    other commands)."""
    rest = [a for a in argv if a != "--json"]
    if len(argv) - len(rest) > 1 or len(rest) != 3 or rest[0] != "ipvs":
        return None
    if rest[1] not in ("apply", "plan") or rest[2].startswith("-") or not rest[2]:
        return None
    return rest[1], rest[2], len(rest) != len(argv)


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./@+=,-")


def _state_base() -> str:
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


def _read_config(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > _MAX_CONFIG:
            raise _Miss("not a regular file of a config's size")
        chunks: list[bytes] = []
        size = 0
        while size <= _MAX_CONFIG:  # a file that grows while read stops at the limit
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > _MAX_CONFIG:
        raise _Miss("too large")
    return str(sha256(data).hexdigest())


def _load_memo(dir_fd: int) -> dict[str, object]:
    fd = os.open(MEMO, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if ((st.st_mode & 0o170000) != 0o100000 or st.st_uid != os.geteuid()
                or st.st_mode & 0o077 or st.st_size > _MAX_MEMO):
            raise _Miss("a memo not written by this user's lbtune")
        data = os.read(fd, _MAX_MEMO + 1)
    finally:
        os.close(fd)
    # marshal trusts its input: the memo is root's own (checked above, in root's 0700
    # state directory), as trusted as the journals beside it
    memo = marshal.loads(data)  # noqa: S302
    if type(memo) is not dict or memo.get("format") != FORMAT:
        raise _Miss("another memo format")
    return memo


def _lock(dir_fd: int) -> int:
    """The state directory's lock, as `lbtune.host.lock.HostLock` takes it (never waits:
    a held lock is the full run's to report)."""
    fd = os.open("lock", os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_nlink != 1:
            raise _Miss("a lock file with other names")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _host_holds(memo: dict[str, object]) -> None:
    """The sysctls, VIPs and local addresses the config needs are there now."""
    for path, want in memo["sysctls"]:  # type: ignore[attr-defined]
        with open(path, "rb") as f:
            if f.read(4096).strip().decode() != want:
                raise _Miss("a sysctl differs")
    vips, local = memo["vips"], memo["local"]
    if not vips and not local:
        return
    nl = _Netlink(_NETLINK_ROUTE)
    try:
        have = set()
        for body in nl.talk(_RTM_GETADDR, _F_REQUEST | _F_DUMP, _IFADDR.pack(0, 0, 0, 0, 0)):
            if len(body) < _IFADDR.size:
                continue
            _fam, plen, _fl, _sc, index = _IFADDR.unpack_from(body)
            got = dict(_attrs(body, _IFADDR.size, len(body)))
            raw = got.get(_IFA_LOCAL) or got.get(_IFA_ADDRESS)
            if raw is not None:
                have.add((index, plen, raw[4:]))
    finally:
        nl.close()
    addrs = {a for _i, _p, a in have}
    for dev, addr, plen in vips:  # type: ignore[attr-defined]
        raw = _socket.inet_pton(_AF[6 if ":" in addr else 4], addr)
        if (_socket.if_nametoindex(dev), plen, raw) not in have:
            raise _Miss("a VIP is not in place")
    for addr in local:  # type: ignore[attr-defined]
        if _socket.inet_pton(_AF[6 if ":" in addr else 4], addr) not in addrs:
            raise _Miss("a VIP is not local")


def _kernel_holds(memo: dict[str, object]) -> None:
    """IPVS's timeouts and table are as recorded."""
    nl = _Netlink(_NETLINK_GENERIC)
    try:
        family = _ipvs_family(nl)
        if memo["timeouts"]:
            bodies = nl.talk(family, _F_REQUEST | _F_ACK, _genl(_CMD_GET_CONFIG))
            got = {t: raw for body in bodies for t, raw in _attrs(body, 4, len(body))}
            for name, want in memo["timeouts"]:  # type: ignore[attr-defined]
                raw = got.get(_TIMEOUT_ATTRS[name])
                if raw is None or int.from_bytes(raw[4:8], sys.byteorder) != want:
                    raise _Miss("a timeout differs")
        if read_digest(nl, family) != memo["table"]:
            raise _Miss("the table differs")
    finally:
        nl.close()


def _say(command: str, source: str, as_json: bool, unchanged: int) -> None:
    """What the full run prints for this no-op (lbtune.cli.ipvs.commands: `_applied` for apply,
    `plan_command` for plan; tests/lab/test_ipvs_noop_lab.py compares them byte for byte)."""
    if as_json:
        from _json import encode_basestring_ascii

        name = encode_basestring_ascii(source)
        if command == "plan":
            doc = (f'{{\n  "config": {name},\n  "operations": 0,\n  "unchanged": {unchanged},'
                   '\n  "changes": [],\n  "warnings": []\n}\n')
        else:
            doc = (f'{{\n  "config": {name},\n  "journal": null,\n  "operations": 0,\n'
                   f'  "unchanged": {unchanged},\n  "changes": [],\n  "cut": [],\n'
                   '  "warnings": []\n}\n')
        os.write(1, doc.encode())
        return
    if command == "plan":
        line = f"0 operation(s), {unchanged} already in place"
    else:
        line = f"{source}: nothing to change"
    columns = os.environ.get("COLUMNS", "").strip()
    width = int(columns) if columns.isdigit() and 20 <= int(columns) <= 10_000 else 120
    if len(line) > width:  # the console would wrap it
        raise _Miss("a line the console wraps")
    os.write(1, (line + "\n").encode())


def try_noop(argv: list[str]) -> int | None:
    """Exit code 0 when `argv` is an `ipvs apply` (or `ipvs plan`) the memo proves a no-op
    (its output printed); None when the full run must decide (nothing printed, nothing
    changed). An apply is checked under the apply's lock, as the full apply runs; a plan
    takes no lock, as the full plan takes none: a plan holding it, even for a moment,
    would make an apply that starts then fail (exit 6). Without it, every item is still
    read from the host now, so an answer is what the table was when it was read, as the
    full plan's is; an apply's change in between makes an item differ (the full plan)."""
    parsed = _args(argv)
    if parsed is None or os.geteuid() != 0:
        return None
    command, source, as_json = parsed
    from lbtune.environ import problem

    if os.environ.get("LBTUNE_ROOT") or problem(os.environ) is not None:
        return None  # another root is refused, garbage reported, by the full run
    if not set(source) <= _SAFE or (not as_json and os.isatty(1)):
        return None  # printed through rich: markup, emoji codes, a terminal's width
    lock = -1
    try:
        config = _read_config(source)
        base = _state_base()
        dir_fd = _open_dir(base)
        try:
            memo = _load_memo(dir_fd)
            if (memo.get("source") != source or memo.get("config") != config
                    or memo.get("state") != base or memo.get("code") != code_signature()):
                return None
            if command == "apply":
                lock = _lock(dir_fd)
            if listing(dir_fd, "journal") != memo["journals"]:
                return None
        finally:
            os.close(dir_fd)
        if modules_signature() != memo["modules"]:
            return None
        _host_holds(memo)
        _kernel_holds(memo)
        unchanged = memo["unchanged"]
        if type(unchanged) is not int:
            return None
        try:
            _say(command, source, as_json, unchanged)
        except BrokenPipeError:
            return 0  # as the full run: the reader went away, the answer stands
        return 0
    except Exception:  # whatever it is, the full run decides (and says what it is)
        return None
    finally:
        if lock >= 0:
            os.close(lock)
