"""Apply, verify and roll back plans transactionally, journaling originals first."""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lbtune.errors import BadInput, ExitCode, LbtuneError
from lbtune.host.host import Host
from lbtune.tune.journal import (
    ACTIVE,
    APPLIED,
    ROLLBACK_INCOMPLETE,
    ROLLED_BACK,
    FileRecord,
    Journal,
    KnobRecord,
    StateDir,
)
from lbtune.tune.knob import Knob, KnobError
from lbtune.tune.plan import Mode, Plan, Target, bounded
from lbtune.tune.registry import knob_from_record


class RolledBack(LbtuneError):
    """A change failed; everything applied so far was restored."""

    exit_code = ExitCode.ROLLED_BACK


class RollbackIncomplete(LbtuneError):
    """A change failed and restoring some values failed too (journal kept for `rollback`)."""

    exit_code = ExitCode.ROLLBACK_INCOMPLETE


class Interrupted(LbtuneError):
    """A previous apply did not finish; it must be rolled back (or confirmed) first."""

    exit_code = ExitCode.USAGE


# Test hook: called with the index of each change just before it is written.
FaultHook = Callable[[int, Knob], None]


class Transaction:
    """The running apply: writes knobs and files, always journaling the original first."""

    def __init__(self, host: Host, journal: Journal) -> None:
        self.host = host
        self.journal = journal
        self._files_done: list[FileRecord] = []

    def replace_file(self, kpath: str, content: bytes, mode: int = 0o644) -> None:
        """Write a persistence file, journaling (fsynced) what it replaces first."""
        if not any(f.path == kpath for f in self.journal.files):
            original = self.host.fs.read_bytes(kpath)
            rec = FileRecord(
                kpath,
                None if original is None else base64.b64encode(original).decode(),
                self.host.fs.file_mode(kpath),  # the original's mode, restored with it
            )
            self.journal.files.append(rec)
            self.journal.save()
        self.host.fs.write_file(kpath, content, mode)

    def remove_file(self, kpath: str) -> None:
        if not any(f.path == kpath for f in self.journal.files):
            original = self.host.fs.read_bytes(kpath)
            if original is None:
                return
            self.journal.files.append(
                FileRecord(
                    kpath, base64.b64encode(original).decode(), self.host.fs.file_mode(kpath)
                )
            )
            self.journal.save()
        self.host.fs.remove_file(kpath)


# Persistence: called inside the transaction after all knobs are applied (see persist.py).
PersistHook = Callable[[Transaction, Plan], None]


def apply_plan(
    host: Host,
    plan: Plan,
    state: StateDir,
    fault: Optional[FaultHook] = None,
    persist: Optional[PersistHook] = None,
) -> Optional[Journal]:
    """Apply every change of `plan`; on any failure restore all in reverse and raise.

    Returns the journal, or None when there was nothing to do.
    """
    with state.lock():
        stale = state.interrupted()
        if stale is not None:
            raise Interrupted(
                f"apply {stale.id} ({stale.profile}) was interrupted; run `lbtune rollback` first"
            )
        changes = plan.to_apply
        if not changes and persist is None:
            return None
        records = [
            KnobRecord(c.knob.kind, c.knob.obj, c.current, c.desired, c.target.key) for c in changes
        ]
        journal = state.new_journal(plan.profile, records)  # fsynced before the first change
        txn = Transaction(host, journal)
        done: list[int] = []
        try:
            for i, c in enumerate(changes):
                if fault is not None:
                    fault(i, c.knob)
                c.knob.write(host, c.desired)
                done.append(i)
            for c in changes:
                now = c.knob.read(host)
                if not c.knob.same(now, c.desired):
                    raise KnobError(
                        f"{c.knob.ident}: wrote {c.desired!r} but the kernel reports {now!r}"
                    )
            if persist is not None:
                persist(txn, plan)
        except (Exception, KeyboardInterrupt) as e:
            failures = _restore(host, journal, [records[i] for i in done])
            journal.error = str(e)
            if failures:
                journal.state = ROLLBACK_INCOMPLETE
                journal.save()
                raise RollbackIncomplete(
                    f"{e}; restoring failed for {', '.join(failures)} "
                    f"(journal {journal.id}: `lbtune rollback` retries)"
                ) from e
            journal.state = ROLLED_BACK
            journal.save()
            if isinstance(e, KeyboardInterrupt):
                raise
            raise RolledBack(f"{e}; all {len(done)} applied change(s) restored") from e
        journal.state = APPLIED
        journal.save()
        return journal


def _restore(host: Host, journal: Journal, knobs: Sequence[KnobRecord]) -> list[str]:
    """Put back files (newest first) and knob originals (in reverse); return what failed."""
    failures: list[str] = []
    for f in reversed(journal.files):
        try:
            if f.original is None:
                host.fs.remove_file(f.path)
            else:
                host.fs.write_file(f.path, f.original, f.mode or 0o644)
        except OSError as e:
            failures.append(f"{f.path} ({e.strerror})")
    for rec in reversed(knobs):
        try:
            knob = knob_from_record(rec.kind, rec.obj)
        except BadInput as e:  # a damaged or foreign journal entry must not stop the rest
            failures.append(f"{rec.kind}:{rec.obj} ({e})")
            continue
        try:
            knob.restore(host, rec.original)
            if rec.original is not None and not knob.same(knob.read(host), rec.original):
                failures.append(f"{knob.ident} (reads back {knob.read(host)!r})")
        except (KnobError, OSError) as e:
            failures.append(f"{knob.ident} ({e})")
    return failures


def rollback(host: Host, state: StateDir, to: Optional[str] = None) -> list[Journal]:
    """Restore the newest active apply, or every active apply back to and including `to`."""
    with state.lock():
        active = [j for j in reversed(state.journals()) if j.state in ACTIVE]
        if to is not None:
            ids = [j.id for j in active]
            if to not in ids:
                known = {j.id: j.state for j in state.journals()}
                if to in known:
                    raise BadInput(f"--to {to}: already {known[to]}")
                raise BadInput(f"--to {to}: no such journal (see `lbtune history`)")
            selected = active[: ids.index(to) + 1]
        else:
            selected = active[:1]
        if not selected:
            raise BadInput("nothing to roll back (see `lbtune history`)")
        for j in selected:
            failures = _restore(host, j, j.knobs)
            if failures:
                j.state = ROLLBACK_INCOMPLETE
                j.error = "restore failed: " + ", ".join(failures)
                j.save()
                raise RollbackIncomplete(f"journal {j.id}: could not restore {', '.join(failures)}")
            j.state = ROLLED_BACK
            j.save()
        return selected


class Status(str, enum.Enum):
    OK = "ok"
    DRIFT = "drift"
    MISSING = "missing"
    SKIPPED = "skipped"  # host-global knob seen from a --netns run: not the namespace's


@dataclass(frozen=True)
class Verdict:
    ident: str
    kind: str
    obj: str
    desired: str
    current: Optional[str]
    status: Status
    key: str = ""


def verify_targets(host: Host, targets: Sequence[Target]) -> list[Verdict]:
    """Is every target in effect now? (Verify is a dry apply that writes nothing.)"""
    out = []
    for t in targets:
        if host.netns is not None and not t.knob.netns_scoped(host):
            out.append(Verdict(t.knob.ident, t.knob.kind, t.knob.obj, t.value, None,
                               Status.SKIPPED, t.key))  # fmt: skip
            continue
        cur = t.knob.read(host)
        if cur is None:
            status = Status.MISSING
        elif t.mode is not Mode.SET:
            ok = t.knob.same(bounded(cur, t.value, t.mode, t.knob.ident), cur)
            status = Status.OK if ok else Status.DRIFT
        else:
            status = Status.OK if t.knob.same(cur, t.value) else Status.DRIFT
        out.append(Verdict(t.knob.ident, t.knob.kind, t.knob.obj, t.value, cur, status, t.key))
    return out


def verify_journal(host: Host, journal: Journal) -> list[Verdict]:
    """Are the values of an applied journal still in effect?"""
    targets = [Target(knob_from_record(r.kind, r.obj), r.desired, key=r.key) for r in journal.knobs]
    return verify_targets(host, targets)


def last_applied(state: StateDir) -> Optional[Journal]:
    for j in reversed(state.journals()):
        if j.state == APPLIED:
            return j
    return None
