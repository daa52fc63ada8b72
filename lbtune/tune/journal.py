"""The journal: original values (and replaced files) recorded durably before anything changes.

One JSON file per apply under the state directory (`/var/lib/lbtune/journal/` below the host
root, or `$LBTUNE_STATE_DIR`). It is fsynced before the first change and rewritten (atomically)
as the apply progresses, so a crash leaves a journal in state `applying` that the next run
detects and `lbtune rollback` restores. The lock file beside it refuses concurrent runs.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Iterator, Optional

from lbtune.errors import BadInput, ExitCode, LbtuneError
from lbtune.host.fs import fsync_dir
from lbtune.host.host import Host

STATE_DIR = "/var/lib/lbtune"

APPLYING = "applying"  # in progress, or interrupted (crash) if found later
APPLIED = "applied"
ROLLED_BACK = "rolled-back"
ROLLBACK_INCOMPLETE = "rollback-incomplete"
ACTIVE = (APPLYING, APPLIED, ROLLBACK_INCOMPLETE)  # states that rollback can act on


class Busy(LbtuneError):
    """Another lbtune run holds the lock."""

    exit_code = ExitCode.BUSY


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
    _path: str = field(default="", repr=False)

    def save(self) -> None:
        """Write atomically and durably (temp file, fsync, rename, fsync dir)."""
        data = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        tmp = self._path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, json.dumps(data, indent=1).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._path)
        fsync_dir(os.path.dirname(self._path))

    @classmethod
    def load(cls, path: str) -> Journal:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            j = cls(
                id=data["id"],
                profile=data["profile"],
                created=data["created"],
                state=data["state"],
                hostname=data.get("hostname"),
                netns=data.get("netns"),
                knobs=[KnobRecord(**k) for k in data.get("knobs", [])],
                files=[FileRecord(**f) for f in data.get("files", [])],
                error=data.get("error", ""),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise BadInput(f"{path}: unreadable journal ({e})") from None
        j._path = path
        return j


class StateDir:
    """Where journals and the lock live for one host (and one network namespace)."""

    def __init__(self, host: Host, override: Optional[str] = None) -> None:
        base = override or os.environ.get("LBTUNE_STATE_DIR") or host.fs.path(STATE_DIR)
        # One journal line per namespace: values in a namespace are not the host's.
        self.dir = os.path.join(base, f"netns-{host.netns}") if host.netns else base
        self.journal_dir = os.path.join(self.dir, "journal")
        self.host = host

    def _ensure(self) -> None:
        os.makedirs(self.journal_dir, mode=0o700, exist_ok=True)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock for apply/rollback; refuses (Busy) instead of waiting."""
        self._ensure()
        path = os.path.join(self.dir, "lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                    raise Busy(
                        f"another lbtune run holds {path}" + (f" (pid {holder})" if holder else "")
                    ) from None
                raise
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def journals(self) -> list[Journal]:
        """All journals, oldest first."""
        try:
            names = sorted(n for n in os.listdir(self.journal_dir) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        return [Journal.load(os.path.join(self.journal_dir, n)) for n in names]

    def interrupted(self) -> Optional[Journal]:
        """A journal left `applying` by a run that did not finish (crash, kill -9)."""
        for j in reversed(self.journals()):
            if j.state == APPLYING:
                return j
        return None

    def new_journal(self, profile: str, knobs: list[KnobRecord]) -> Journal:
        self._ensure()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        existing = {j.id for j in self.journals()}
        n = 1
        while f"{stamp}-{n:03d}" in existing:
            n += 1
        jid = f"{stamp}-{n:03d}"
        j = Journal(
            id=jid,
            profile=profile,
            created=time.time(),
            state=APPLYING,
            hostname=self.host.fs.read("/proc/sys/kernel/hostname"),
            netns=self.host.netns,
            knobs=knobs,
        )
        j._path = os.path.join(self.journal_dir, f"{jid}.json")
        j.save()
        return j
