"""The journal: original values (and replaced files) recorded durably before anything changes.

One JSON file per apply under the state directory (`/var/lib/lbtune/journal/` below the host
root, or `$LBTUNE_STATE_DIR`), written through `HostFS` like every other write: confined to
its root, never through a symlink, one atomic fsynced replace per save. It is written before
the first change and rewritten as the apply progresses, so a crash leaves a journal in state
`applying` that the next run detects and `lbtune rollback` restores. Each journal records the
root, machine-id and hostname it belongs to; rollback refuses another host's journal. The
lock beside it (host/lock.py) refuses concurrent runs.
"""

from __future__ import annotations

import base64
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
from lbtune.host.lock import HostLock

STATE_DIR = "/var/lib/lbtune"

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
    _store: Any = field(default=None, repr=False, compare=False)

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


# The start of a journal as `StateDir.write` lays it out: id, profile, created, then state
# (JSON strings spelled out in full, escapes included). Anything else is read whole.
_HEAD = re.compile(rb'\{"id":"(?:[^"\\]|\\.)*","profile":"(?:[^"\\]|\\.)*",'
                   rb'"created":[-+0-9.eE]+,"state":"([a-z_]+)"')


class StateDir:
    """Where journals and the lock live for one host (and one network namespace).

    Default: `/var/lib/lbtune` below the host root, through the host's own `HostFS` (so a
    link in a host tree cannot move it outside). `override` (or `$LBTUNE_STATE_DIR`) names a
    directory on this machine instead; files there are confined to it.
    """

    def __init__(self, host: Host, override: Optional[str] = None) -> None:
        override = override or os.environ.get("LBTUNE_STATE_DIR") or None
        if override:
            self.fs = HostFS.create(override)
            base = "/"
        else:
            self.fs = host.fs
            base = STATE_DIR
        # One journal line per namespace: values in a namespace are not the host's.
        self.base = posixpath.join(base, f"netns-{host.netns}") if host.netns else base
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
        blob = json.dumps(data, separators=(",", ":")).encode()
        self.fs.write_file(self._kpath(journal.id), blob, 0o600, follow=False)
        self.fs.remove_stale_temps(self._kpath(journal.id))  # of a save killed midway

    def load(self, name: str) -> Journal:
        kpath = posixpath.join(self.journal_kdir, name)
        where = self.fs.path(kpath)
        try:
            raw = self.fs.read_bytes(kpath)
            if raw is None:
                raise OSError("vanished")
            data = json.loads(raw)
            j = Journal(
                id=data["id"],
                profile=data["profile"],
                created=data["created"],
                state=data["state"],
                hostname=data.get("hostname"),
                netns=data.get("netns"),
                knobs=[KnobRecord(**k) for k in data.get("knobs", [])],
                files=[FileRecord(**f) for f in data.get("files", [])],
                error=data.get("error", ""),
                root=data.get("root"),
                machine_id=data.get("machine_id"),
                dirs=[str(d) for d in data.get("dirs", [])],
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise BadInput(f"{where}: unreadable journal ({e})") from None
        if f"{j.id}.json" != name:
            raise BadInput(f"{where}: unreadable journal (id {j.id!r} does not match the name)")
        j._store = self
        return j

    def journals(self) -> list[Journal]:
        """All journals, oldest first."""
        names = sorted(n for n in self.fs.listdir(self.journal_kdir) if n.endswith(".json"))
        return [self.load(n) for n in names]

    def interrupted(self) -> Optional[Journal]:
        """A journal left `applying` by a run that did not finish (crash, kill -9). Only the
        newest can be: no apply starts while one is (so only it is read, not every journal
        of every apply)."""
        names = [n for n in self.fs.listdir(self.journal_kdir) if n.endswith(".json")]
        if not names:
            return None
        head = _HEAD.match(self.fs.read_bytes(posixpath.join(self.journal_kdir, max(names)))
                           or b"")  # fmt: skip
        if head is not None and head.group(1).decode() != APPLYING:
            return None  # the common case, told without reading 11,000 records
        newest = self.load(max(names))
        return newest if newest.state == APPLYING else None

    def new_journal(self, profile: str, knobs: list[KnobRecord]) -> Journal:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        names = self.fs.listdir(self.journal_kdir)
        existing = {n[: -len(".json")] for n in names if n.endswith(".json")}
        n = 1
        while f"{stamp}-{n:03d}" in existing:
            n += 1
        ident = self.host.identity()
        j = Journal(
            id=f"{stamp}-{n:03d}",
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
        """BadInput when `journal` belongs to another root, machine or namespace."""
        why = self.host.identity().mismatch(journal.root, journal.machine_id, journal.hostname)
        if why is None and journal.netns != self.host.netns:
            why = f"it was written in netns {journal.netns}, this run is in {self.host.netns}"
        if why is not None:
            raise BadInput(f"journal {journal.id} is not this host's: {why}; refusing to restore")
