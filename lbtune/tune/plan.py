"""Targets (what a profile wants) and plans (current -> desired, per knob, on this host)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Sequence

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.tune.knob import Knob


class Mode(str, enum.Enum):
    SET = "set"  # exactly this value
    RAISE = "raise"  # at least this value (field by field for multi-field values)
    LOWER = "lower"  # at most this value


class Action(str, enum.Enum):
    CHANGE = "change"
    OK = "ok"  # already as wanted
    MISSING = "missing"  # object or setting absent/unsupported on this host: skipped
    SKIPPED = "skipped"  # host-global knob in a --netns run: never changed from a namespace


@dataclass(frozen=True)
class Target:
    """One value a profile wants for one knob, and why."""

    knob: Knob
    value: str
    reason: str = ""
    key: str = ""  # the profile key it came from, e.g. "sysctl.net.core.somaxconn"
    mode: Mode = Mode.SET


@dataclass(frozen=True)
class Change:
    """One plan row."""

    target: Target
    current: Optional[str]
    desired: str  # for raise/lower: the value that will actually be written
    action: Action
    why: str = ""  # a missing row's reason when it is known ("unsettable: ...")

    @property
    def knob(self) -> Knob:
        return self.target.knob


@dataclass(frozen=True)
class Plan:
    profile: str
    changes: tuple[Change, ...]

    @property
    def to_apply(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.action is Action.CHANGE)

    @property
    def unchanged(self) -> int:
        """Knobs already at their target (the plan's ok rows)."""
        return sum(1 for c in self.changes if c.action is Action.OK)

    @property
    def needs_reboot(self) -> bool:
        return any(c.knob.note == "reboot required" for c in self.to_apply)


def _fields(value: str, what: str) -> list[int]:
    try:
        return [int(f) for f in value.split()]
    except ValueError:
        raise BadInput(f"{what}: only-raise/only-lower needs numbers, got {value!r}") from None


def bounded(current: str, wanted: str, mode: Mode, what: str) -> str:
    """The value to write so that `current` becomes at least/at most `wanted` field by field."""
    cur, want = _fields(current, what), _fields(wanted, what)
    if len(cur) != len(want):
        return wanted
    pick = max if mode is Mode.RAISE else min
    return " ".join(str(pick(c, w)) for c, w in zip(cur, want))


# Apply order by kind: irqbalance must stop (or stop touching the CPUs) before IRQs are placed;
# channels change the set of queues and IRQs, so they go before anything per queue; features
# (LRO, hw GRO re-create the queues on some drivers) before coalescing, which they can reset;
# pause after them (it renegotiates the link); the kernel command line only matters at the
# next boot and goes last. Sorting is stable, so a
# profile's own order is kept within a kind.
KIND_ORDER = (
    "irqbalance",
    "irqbalance_ban",
    "irqbalance_banirq",
    "channels",
    "ring",
    "feature",
    "coalesce",
    "pause",
    "txqueuelen",
    # the table after the channels (it may point at the queues they make), the key and hash
    # fields with it, then the rules (their queues exist by then)
    "rss_indir",
    "rss_key",
    "rss_hash",
    "ntuple",
    "irq_affinity",
    "rps_cpus",
    "rps_flow_cnt",
    "xps_cpus",
    "sysctl",
    "governor",
    "cmdline",
)


def _order(t: Target) -> int:
    kind = t.knob.kind
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def host_global_row(host: Host, t: Target) -> Change:
    """The SKIPPED row of a host-global knob in a namespace's view: never changed from
    there, judged on the host. `current` is the host's value when the view can read it, and
    `desired` what the profile's mode makes of it there (at least/at most: never a value
    the mode would keep, so a hint built from it never lowers a higher host value)."""
    current = t.knob.host_value(host)
    desired = t.value
    if current is not None and t.mode is not Mode.SET:
        desired = bounded(current, t.value, t.mode, t.knob.ident)
    return Change(t, current, desired, Action.SKIPPED)


def in_place(c: Change) -> bool:
    """A host-global row whose host value the profile already accepts."""
    return c.current is not None and c.knob.same(c.current, c.desired)


def make_plan(host: Host, profile: str, targets: Sequence[Target]) -> Plan:
    """Compare every target with the host's current value. Validates before reading.

    Changes come out in a safe apply order (KIND_ORDER). Per-queue knobs are planned against
    the queue count the plan itself produces: a queue that a channel change earlier in the
    plan creates is planned as a change (its original is "absent"), so verify passes right
    after the apply and a second apply plans nothing.
    """
    targets = sorted(targets, key=_order)
    seen: dict[str, Target] = {}
    # queue counts the plan's channel changes leave: what an indirection table or a flow
    # rule later in the plan may point at
    planned: dict[tuple[str, str], int] = {}
    for t in targets:
        if t.mode is Mode.SET:
            planned.update(t.knob.queues_after(t.value))
    for t in targets:
        if t.knob.ident in seen:
            raise BadInput(f"{t.knob.ident}: set twice ({seen[t.knob.ident].key} and {t.key})")
        seen[t.knob.ident] = t
        t.knob.check_planned(host, t.value, planned)
    rows: list[Change] = []
    created: dict[tuple[str, str], int] = {}  # (device, "rx"|"tx") -> queues after the plan
    for t in targets:
        if host.view_netns is not None and not t.knob.netns_scoped(host):
            rows.append(host_global_row(host, t))
            continue
        fixed = t.knob.unsettable(host)
        if fixed is not None:
            rows.append(Change(t, t.knob.read(host), t.value, Action.MISSING,
                               why=f"unsettable: {fixed}"))  # fmt: skip
            continue
        current = t.knob.read(host)
        if current is None:
            queue = t.knob.queue_of()
            # Only a live kernel creates queues; a host tree keeps the ones it recorded.
            if host.is_live and queue is not None and queue[2] < created.get(queue[:2], 0):
                rows.append(Change(t, None, t.value, Action.CHANGE))  # made by the channels
            else:
                rows.append(Change(t, None, t.value, Action.MISSING))
            continue
        desired = t.value
        if t.mode is not Mode.SET:
            desired = bounded(current, t.value, t.mode, t.knob.ident)
        action = Action.OK if t.knob.same(current, desired) else Action.CHANGE
        rows.append(Change(t, current, desired if action is Action.CHANGE else current, action))
        if action is Action.CHANGE:
            for (dev, direction), n in t.knob.queues_after(desired).items():
                created[dev, direction] = max(created.get((dev, direction), 0), n)
    return Plan(profile, tuple(rows))
