"""The journal: original values (and replaced files) recorded durably before anything changes.

One JSON file per apply under the state directory (`/var/lib/lbtune/journal/` below the host
root, or `$LBTUNE_STATE_DIR`), written through `HostFS` like every other write: confined to
its root, never through a symlink, one atomic fsynced replace per save. It is written before
the first change and rewritten as the apply progresses, so a crash leaves a journal in state
`applying` that the next run detects and `lbtune rollback` restores. Each journal records the
root, machine-id and hostname it belongs to; rollback refuses another host's journal. The
lock beside it (host/lock.py) refuses concurrent runs.

Integrity: each save starts with a SHA-256 digest of the rest of the file
(`{"digest":"sha256:HEX",...}`), so a journal that was corrupted or edited (a mode of 4777
it never read, an identity stripped) is refused, never replayed. A journal without a digest
(written by lbtune before it had one) is listed by `history` but never restored: `rollback`
says so in one line (check it, restore by hand if needed, move it away). A journal without
an identity (root) is refused too.

Order: ids are `SEQ-STAMP` (`000042-20261125T101500`); the sequence, one more than the
highest in the directory, orders journals, not the wall clock (a boot-time apply before NTP
has an old stamp). Older `STAMP-NNN` ids sort before every sequenced one.

Per root and machine: below the host root the state directory is the tree's own; a shared
`$LBTUNE_STATE_DIR` keeps each root and machine in its own subdirectory
(`hosts/<digest of root and machine-id>/`), so one root's journals never block another's.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import posixpath
import re
import shlex
import time
from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Optional

from lbtune.errors import BadInput, Busy
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.identity import sha256
from lbtune.host.lock import HostLock

STATE_DIR = "/var/lib/lbtune"
# The largest journal read: an IPVS reconcile of 11,000 objects journals ~3 MB; a bigger file
# is refused with one line instead of being read whole.
MAX_JOURNAL = 64 << 20

APPLYING = "applying"  # in progress, or interrupted (crash) if found later
APPLIED = "applied"
ROLLED_BACK = "rolled-back"
ROLLBACK_INCOMPLETE = "rollback-incomplete"
ACTIVE = (APPLYING, APPLIED, ROLLBACK_INCOMPLETE)  # states that rollback can act on

__all__ = ["Busy", "FileRecord", "Journal", "KnobRecord", "StateDir"]


@dataclass
class KnobRecord:
    kind: str
    obj: str
    original: Optional[str]
    desired: str
    key: str = ""


@dataclass
class FileRecord:
    path: str  # kernel-style absolute path below the host root
    original_b64: Optional[str]  # None: the file did not exist
    mode: Optional[int] = None

    @property
    def original(self) -> Optional[bytes]:
        return None if self.original_b64 is None else base64.b64decode(self.original_b64)


@dataclass
class Journal:
    id: str
    profile: str
    created: float
    state: str
    hostname: Optional[str]
    netns: Optional[str]
    knobs: list[KnobRecord] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    error: str = ""
    root: Optional[str] = None  # real path of the host root it was applied to
    machine_id: Optional[str] = None
    dirs: list[str] = field(default_factory=list)  # directories the apply created
    seq: int = 0  # order among the journals of one state directory (0: written before)
    _store: Any = field(default=None, repr=False, compare=False)
    _verified: bool = field(default=True, repr=False, compare=False)  # its digest matched

    @property
    def verified(self) -> bool:
        """False for a journal without a digest (written by an older lbtune)."""
        return self._verified

    def save(self) -> None:
        """Write atomically and durably (temp file, fsync, rename, fsync dir)."""
        assert self._store is not None, "journal not attached to a state directory"
        self._store.write(self)


def lbtune_command(host: Host, verb: str) -> str:
    """The command line that acts on this host's journals, e.g. `lbtune --netns lab1 rollback`:
    journals are per root and per namespace, so a hint without the options would look in the
    wrong place."""
    words = ["lbtune"]
    if host.fs.root not in ("/", ""):
        words += ["--root", host.fs.root]
    if host.netns:
        words += ["--netns", host.netns]
    return shlex.join([*words, verb])


# The start of a journal as `StateDir.write` lays it out: its digest, then id, profile,
# created and state (JSON strings spelled out in full, escapes included). Anything else is
# read whole. Only `interrupted()` trusts this unverified look: a journal it passes over as
# finished is still checked against its digest when anything restores it.
_HEAD = re.compile(rb'\{(?:"digest":"sha256:[0-9a-f]{64}",)?"id":"(?:[^"\\]|\\.)*",'
                   rb'"profile":"(?:[^"\\]|\\.)*","created":[-+0-9.eE]+,"state":"([a-z_]+)"')
_DIGEST_HEAD = b'{"digest":"sha256:'
_SEQ_NAME = re.compile(r"(\d+)-\d{8}T\d{6}\.json")


def _order(name: str) -> tuple[int, int, str]:
    """Sort key of a journal file name: sequenced ids by sequence, after older ids."""
    m = _SEQ_NAME.fullmatch(name)
    return (1, int(m.group(1)), name) if m else (0, 0, name)


def _str(v: Any, what: str, optional: bool = False) -> Any:
    if v is None and optional:
        return None
    if not isinstance(v, str):
        raise TypeError(f"{what}: expected a string")
    return v


def _knob_record(d: Any) -> KnobRecord:
    if not isinstance(d, dict) or set(d) - {"kind", "obj", "original", "desired", "key"}:
        raise TypeError("a knob entry has unknown fields")
    return KnobRecord(_str(d.get("kind"), "kind"), _str(d.get("obj"), "obj"),
                      _str(d.get("original"), "original", True), _str(d.get("desired"), "desired"),
                      _str(d.get("key", ""), "key"))  # fmt: skip


def _file_record(d: Any) -> FileRecord:
    if not isinstance(d, dict) or set(d) - {"path", "original_b64", "mode"}:
        raise TypeError("a file entry has unknown fields")
    path = _str(d.get("path"), "path")
    if not path.startswith("/") or posixpath.normpath(path) != path:
        raise ValueError(f"file path {path!r} is not a normalized absolute path")
    b64 = _str(d.get("original_b64"), "original_b64", True)
    if b64 is not None:
        base64.b64decode(b64, validate=True)
    mode = d.get("mode")
    if mode is not None and (type(mode) is not int or not 0 <= mode <= 0o7777):
        raise ValueError(f"file mode {mode!r} out of range")
    return FileRecord(path, b64, mode)


class StateDir:
    """Where journals and the lock live for one host (and one network namespace).

    Default: `/var/lib/lbtune` below the host root, through the host's own `HostFS` (so a
    link in a host tree cannot move it outside). `override` (or `$LBTUNE_STATE_DIR`) names a
    directory on this machine instead; files there are confined to it.
    """

    def __init__(self, host: Host, override: Optional[str] = None) -> None:
        override = override or os.environ.get("LBTUNE_STATE_DIR") or None
        if override:
            # Shared between roots (and maybe machines): each root and machine its own.
            self.fs = HostFS.create(override)
            ident = host.identity()
            key = sha256(f"{ident.root}\0{ident.machine_id or ''}".encode())
            base = f"/hosts/{key.hexdigest()[:16]}"
        else:
            self.fs = host.fs
            base = STATE_DIR
        self.shared = bool(override)
        # One journal line per namespace: values in a namespace are not the host's.
        self._ns = f"netns-{host.netns}" if host.netns else ""
        self.base = posixpath.join(base, self._ns) if host.netns else base
        self.journal_kdir = posixpath.join(self.base, "journal")
        self.dir = self.fs.path(self.base)  # for messages
        self.host = host
        self._holder = 0  # PID holding the lock through this object

    def _ensure(self) -> None:
        self.fs.makedirs(self.journal_kdir, 0o700)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock for apply/rollback; refuses (Busy) instead of waiting. Re-entrant
        within one StateDir, so the caller can hold it across reading state, planning and
        applying while `engine.apply_plan` takes it again."""
        if self._holder == os.getpid():  # not a forked child of the holder: it holds nothing
            yield
            return
        with HostLock(self.fs, posixpath.join(self.base, "lock")):
            self._holder = os.getpid()
            try:
                # The first save of a journal killed midway leaves only its temp file,
                # which no journal names: remove such leftovers of dead runs here.
                if self.fs.isdir(self.journal_kdir):
                    self.fs.remove_dead_temps(self.journal_kdir)
                yield
            finally:
                self._holder = 0

    def _kpath(self, jid: str) -> str:
        return posixpath.join(self.journal_kdir, f"{jid}.json")

    def write(self, journal: Journal) -> None:
        # Built by hand rather than with dataclasses.asdict (which deep-copies every record)
        # and without indentation: a reconcile of 11,000 IPVS objects saves its journal twice,
        # and asdict + indent cost ~80 ms per save here (several times that in the UML lab).
        data = {f.name: getattr(journal, f.name) for f in fields(journal)
                if not f.name.startswith("_")}  # fmt: skip
        data["knobs"] = [vars(r) for r in journal.knobs]
        data["files"] = [vars(r) for r in journal.files]
        self._ensure()
        body = json.dumps(data, separators=(",", ":")).encode()
        digest = sha256(body).hexdigest().encode()
        blob = _DIGEST_HEAD + digest + b'",' + body[1:]
        self.fs.write_file(self._kpath(journal.id), blob, 0o600, follow=False)
        self.fs.remove_stale_temps(self._kpath(journal.id))  # of a save killed midway

    def load(self, name: str, kdir: Optional[str] = None) -> Journal:
        kpath = posixpath.join(kdir or self.journal_kdir, name)
        where = self.fs.path(kpath)
        try:
            raw = self.fs.read_bytes(kpath, MAX_JOURNAL)
            if raw is None:
                raise OSError("vanished")
            verified = raw.startswith(_DIGEST_HEAD)
            if verified:
                end = len(_DIGEST_HEAD) + 64
                body = b"{" + raw[end + 2 :]
                if raw[end : end + 2] != b'",' or (
                    sha256(body).hexdigest().encode() != raw[len(_DIGEST_HEAD) : end]
                ):
                    raise BadInput(
                        f"{where}: journal fails its digest (corrupted or edited); refusing "
                        f"it: check it and move it out of {self.dir} to continue"
                    )
                raw = body
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise TypeError("not an object")
            seq = data.get("seq", 0)
            if type(seq) is not int or seq < 0:
                raise ValueError(f"seq {seq!r}")
            created = data["created"]
            if type(created) not in (int, float):
                raise TypeError("created: expected a number")
            j = Journal(
                id=_str(data["id"], "id"),
                profile=_str(data["profile"], "profile"),
                created=created,
                state=_str(data["state"], "state"),
                hostname=_str(data.get("hostname"), "hostname", True),
                netns=_str(data.get("netns"), "netns", True),
                knobs=[_knob_record(k) for k in data.get("knobs", [])],
                files=[_file_record(f) for f in data.get("files", [])],
                error=_str(data.get("error", ""), "error"),
                root=_str(data.get("root"), "root", True),
                machine_id=_str(data.get("machine_id"), "machine_id", True),
                dirs=[_str(d, "dirs") for d in data.get("dirs", [])],
                seq=seq,
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError,
                binascii.Error) as e:
            raise BadInput(f"{where}: unreadable journal ({e})") from None
        if f"{j.id}.json" != name:
            raise BadInput(f"{where}: unreadable journal (id {j.id!r} does not match the name)")
        j._store = self
        j._verified = verified
        return j

    def _names(self, kdir: Optional[str] = None) -> list[str]:
        names = [n for n in self.fs.listdir(kdir or self.journal_kdir) if n.endswith(".json")]
        return sorted(names, key=_order)

    def journals(self) -> list[Journal]:
        """All journals, oldest first (by sequence; ids from before sequences first)."""
        return [self.load(n) for n in self._names()]

    def interrupted(self) -> Optional[Journal]:
        """A journal left `applying` by a run that did not finish (crash, kill -9). Only the
        newest can be: no apply starts while one is (so only it is read, not every journal
        of every apply)."""
        names = self._names()
        if not names:
            return None
        head = _HEAD.match(self.fs.read_bytes(posixpath.join(self.journal_kdir, names[-1]),
                                              MAX_JOURNAL)
                           or b"")  # fmt: skip
        if head is not None and head.group(1).decode() != APPLYING:
            return None  # the common case, told without reading 11,000 records
        newest = self.load(names[-1])
        return newest if newest.state == APPLYING else None

    def foreign(self) -> Optional[str]:
        """With a shared state directory: why the journals there (of other roots or
        machines, or of an older lbtune that kept them all together) are not this run's,
        for a "nothing to roll back" message; None when there are none."""
        if not self.shared:
            return None
        ident = self.host.identity()
        for key in self.fs.listdir("/hosts"):
            kdir = posixpath.join("/hosts", key, self._ns, "journal")
            if kdir == self.journal_kdir:
                continue
            try:
                names = self._names(kdir)
                j = self.load(names[-1], kdir) if names else None
            except BadInput:
                continue
            if j is not None:
                why = ident.mismatch(j.root, j.machine_id, j.hostname) or "another root"
                return f"{self.fs.path(kdir)} holds journal {j.id}, not this host's: {why}"
        legacy = posixpath.join("/", self._ns, "journal")
        if self._names(legacy):
            return (
                f"{self.fs.path(legacy)} holds journals of an older lbtune (one directory for "
                "every root), which are never restored: check them, restore by hand if "
                "needed, and move them away"
            )
        return None

    def new_journal(self, profile: str, knobs: list[KnobRecord]) -> Journal:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        names = self._names()
        last = _order(names[-1])[1] if names else 0
        seq = last + 1
        ident = self.host.identity()
        j = Journal(
            id=f"{seq:06d}-{stamp}",
            seq=seq,
            profile=profile,
            created=time.time(),
            state=APPLYING,
            hostname=ident.hostname,
            netns=self.host.netns,
            knobs=knobs,
            root=ident.root,
            machine_id=ident.machine_id,
        )
        j._store = self
        j.save()
        return j

    def check_owner(self, journal: Journal) -> None:
        """BadInput when `journal` belongs to another root, machine or namespace, records no
        identity, or has no digest (see the module doc)."""
        where = self.fs.path(self._kpath(journal.id))
        if not journal.verified:
            raise BadInput(
                f"journal {journal.id} has no digest (written by an older lbtune), so an edit "
                f"or corruption cannot be ruled out; not restoring it: check {where}, restore "
                "its values by hand if needed, then move it away"
            )
        if not journal.root:
            raise BadInput(f"journal {journal.id} records no identity (root); refusing to restore")
        renamed = frozenset(
            v
            for j in self.journals()
            if j.state in ACTIVE
            for k in j.knobs
            if (k.kind, k.obj) == ("sysctl", "kernel.hostname")
            for v in (k.original, k.desired)
            if v
        )
        ident = self.host.identity()
        why = ident.mismatch(journal.root, journal.machine_id, journal.hostname, renamed)
        if why is None and journal.netns != self.host.netns:
            why = f"it was written in netns {journal.netns}, this run is in {self.host.netns}"
        if why is not None:
            raise BadInput(f"journal {journal.id} is not this host's: {why}; refusing to restore")
