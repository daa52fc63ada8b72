"""Apply, verify and roll back plans transactionally, journaling originals first."""

from __future__ import annotations

import base64
import contextlib
import enum
import posixpath
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lbtune.errors import BadInput, ExitCode, LbtuneError
from lbtune.host.host import Host
from lbtune.host.signals import interruptible, shielded
from lbtune.tune.journal import (
    ACTIVE,
    APPLIED,
    ROLLBACK_INCOMPLETE,
    ROLLED_BACK,
    FileRecord,
    Journal,
    KnobRecord,
    StateDir,
    lbtune_command,
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
    """A previous apply did not finish; it must be rolled back first."""

    exit_code = ExitCode.USAGE


# Test hook: called with the index of each change just before it is written.
FaultHook = Callable[[int, Knob], None]


class Transaction:
    """The running apply: writes knobs and files, always journaling the original first."""

    def __init__(self, host: Host, journal: Journal) -> None:
        self.host = host
        self.journal = journal
        self._files_done: list[FileRecord] = []

    def _journal_dirs(self, kpath: str) -> None:
        """Record (fsynced) the directories writing `kpath` will create, so rollback removes
        them again and leaves the tree as it found it."""
        new = [d for d in self.host.fs.missing_dirs(posixpath.dirname(kpath))
               if d not in self.journal.dirs]  # fmt: skip
        if new:
            self.journal.dirs.extend(new)
            self.journal.save()

    def replace_file(self, kpath: str, content: bytes, mode: int = 0o644) -> None:
        """Write a persistence file, journaling (fsynced) what it replaces first. A link at
        `kpath` is the admin's (`systemctl mask` links a unit to /dev/null): refused."""
        if self.host.fs.islink(kpath):
            raise BadInput(
                f"{kpath} is a symlink (masked or managed elsewhere); refusing to write through "
                "it: remove the link, or leave out --persist"
            )
        self._journal_dirs(kpath)
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
                f"apply {stale.id} ({stale.profile}) was interrupted; run "
                f"`{lbtune_command(host, 'rollback')}` first"
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
        started: list[int] = []  # a write cut short by a signal may still have landed
        # SIGTERM restores like Ctrl-C until the journal says applied (the commit); after
        # that a signal is held back and the decided outcome is reported (host/signals.py).
        with interruptible() as scope:
            try:
                for i, c in enumerate(changes):
                    if fault is not None:
                        fault(i, c.knob)
                    started.append(i)
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
                journal.state = APPLIED
                journal.save()  # the commit
                scope.decide()
            except (Exception, KeyboardInterrupt) as e:
                with shielded():  # a second Ctrl-C or SIGTERM must not stop the restore
                    failures = _restore(host, journal, [records[i] for i in started])
                    if isinstance(e, KeyboardInterrupt):
                        e = Exception(f"interrupted ({e.args[0] if e.args else 'SIGINT'})")
                    journal.error = str(e)
                    journal.state = ROLLBACK_INCOMPLETE if failures else ROLLED_BACK
                    journal.save()
                    scope.decide()
                if failures:
                    raise RollbackIncomplete(
                        f"{e}; restoring failed for {', '.join(failures)} "
                        f"(journal {journal.id}: `{lbtune_command(host, 'rollback')}` retries)"
                    ) from e
                raise RolledBack(f"{e}; all {len(done)} applied change(s) restored") from e
        return journal


# Kinds whose change makes the driver re-create its queues and IRQs and place them again
# (virtio_net re-sets every queue IRQ's affinity on a channel change): restored before every
# other knob, so the per-queue values (IRQ affinity, RPS/XPS) restored after them stay.
REQUEUE_KINDS = ("channels", "ring")
# Kinds with a step before any knob is restored (Knob.prepare_restore): an RSS table lbtune
# set goes back to the driver's default first, so the channel count can come back.
PREPARE_KINDS = ("rss_indir",)


def restore_order(knobs: Sequence[KnobRecord]) -> list[KnobRecord]:
    """The order rollback restores knobs in: the reverse of apply order, except that the
    kinds in REQUEUE_KINDS come first (in reverse among themselves)."""
    rev = list(reversed(knobs))
    return [r for r in rev if r.kind in REQUEUE_KINDS] + [
        r for r in rev if r.kind not in REQUEUE_KINDS
    ]


def _restore(host: Host, journal: Journal, knobs: Sequence[KnobRecord]) -> list[str]:
    """Put back files (newest first), the directories apply created and knob originals
    (`restore_order`: channels and rings first, then the rest in reverse), byte for byte;
    return what failed."""
    failures: list[str] = []
    for f in reversed(journal.files):
        try:
            if f.original is None:
                host.fs.remove_file(f.path)
            else:
                host.fs.write_file(f.path, f.original, f.mode or 0o644)
            host.fs.remove_stale_temps(f.path)  # a run killed inside write_file leaves one
        except (OSError, BadInput) as e:
            failures.append(f"{f.path} ({getattr(e, 'strerror', None) or e})")
    for d in reversed(journal.dirs):
        try:
            host.fs.remove_dir(d)  # only when empty: something else may have been put there
        except (OSError, BadInput) as e:  # the knobs below are restored all the same
            failures.append(f"{d} ({getattr(e, 'strerror', None) or e})")
    order = restore_order(knobs)
    for rec in order:
        if rec.kind in PREPARE_KINDS:
            with contextlib.suppress(BadInput, KnobError, OSError):  # its restore says so
                knob_from_record(rec.kind, rec.obj).prepare_restore(host, rec.original)
    for rec in order:
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
    """Restore the newest active apply, or every active apply back to and including `to`.

    Refuses (BadInput) a journal written for another root, machine or namespace.
    """
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
            foreign = state.foreign()
            if foreign:
                raise BadInput(f"nothing to roll back for this root; {foreign}")
            raise BadInput("nothing to roll back (see `lbtune history`)")
        for j in selected:
            state.check_owner(j)
        for j in selected:
            with shielded():
                failures = _restore(host, j, j.knobs)
            if failures:
                j.state = ROLLBACK_INCOMPLETE
                j.error = "restore failed: " + ", ".join(failures)
                j.save()
                raise RollbackIncomplete(f"journal {j.id}: could not restore {', '.join(failures)}")
            j.state = ROLLED_BACK
            j.save()
        return selected


class KnobStatus(str, enum.Enum):
    """The state of one tuned setting (a different axis from lbtune.vocab.Level)."""

    OK = "ok"
    DRIFT = "drift"
    MISSING = "missing"
    SKIPPED = "skipped"  # host-global knob in a namespace's view: judged on the host


@dataclass(frozen=True)
class KnobCheck:
    """Whether one knob has its desired value now (a row of `verify`; JSON vocabulary)."""

    kind: str
    object: str
    key: str
    current: Optional[str]
    desired: str
    status: KnobStatus

    @property
    def ident(self) -> str:
        return f"{self.kind}:{self.object}"


def verify_targets(host: Host, targets: Sequence[Target]) -> list[KnobCheck]:
    """Is every target in effect now? (Verify is a dry apply that writes nothing.)"""
    out = []
    for t in targets:
        if host.view_netns is not None and not t.knob.netns_scoped(host):
            # host-global: judged on the host, never missing or drift in a namespace
            out.append(KnobCheck(t.knob.kind, t.knob.obj, t.key, t.knob.host_value(host),
                                 t.value, KnobStatus.SKIPPED))  # fmt: skip
            continue
        cur = t.knob.read(host)
        if cur is None or t.knob.unsettable(host) is not None:
            status = KnobStatus.MISSING
        elif t.mode is not Mode.SET:
            ok = t.knob.same(bounded(cur, t.value, t.mode, t.knob.ident), cur)
            status = KnobStatus.OK if ok else KnobStatus.DRIFT
        else:
            status = KnobStatus.OK if t.knob.same(cur, t.value) else KnobStatus.DRIFT
        out.append(KnobCheck(t.knob.kind, t.knob.obj, t.key, cur, t.value, status))
    return out


def verify_journal(host: Host, journal: Journal) -> list[KnobCheck]:
    """Are the values of an applied journal still in effect?"""
    targets = [Target(knob_from_record(r.kind, r.obj), r.desired, key=r.key) for r in journal.knobs]
    return verify_targets(host, targets)


def last_applied(state: StateDir) -> Optional[Journal]:
    for j in reversed(state.journals()):
        if j.state == APPLIED:
            return j
    return None
