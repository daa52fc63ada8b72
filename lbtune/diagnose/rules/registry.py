"""The rule registry: each rule's id, summary, function and what it needs sampled.

A rule is a pure function of a `Context` (a window of samples, the topology and NICs). It
declares the configuration values it judges by (`sysctls`, sysfs `paths`, `*` for every
entry of a directory) and whether it needs connected TCP sockets (`receivers`), so the
sampler reads exactly those at sampling time; `sample_spec` collects them for a set of rules.
A rule that judges the NICs' ethtool settings (coalescing, features, pause, RSS) says
`nic_settings=True`: they are read (`diagnose.nicsettings`) only when a chosen rule needs them.
A rule that reads the listeners' SYN queues (`ListenSocket.syn_recv`) names the SNMP counters
whose movement in the window is the only way it gets to read them (`syn_queues_on`): the
sampler's `SYN_OVERFLOWS`, after whose movement alone the monitor and the exporter read
them (`Sampler.syn_walk_hold`), must hold them all (tests/unit/diagnose/test_syn_queue_gate.py).
It also declares whether its findings can carry a fix `lbtune apply` makes (`profile_fix`:
a profile line); a rule whose every fix is the application's, the platform's or made by hand
says `profile_fix=False` (tests/unit/diagnose/test_fix_profiles.py holds every rule to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Iterable, Optional, Sequence

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import Finding, rank
from lbtune.errors import BadInput
from lbtune.host.kernel.sysctl import sysctl_path
from lbtune.observe.sampler import SampleSpec

RuleFn = Callable[[Context], Iterable[Finding]]


def sysctl_pattern_path(key: str) -> str:
    """The /proc/sys path of a sysctl key in which a component may be `*` (every entry)."""
    parts = key.split(".")
    stars = [i for i, p in enumerate(parts) if p == "*"]
    path = sysctl_path(".".join("x" if p == "*" else p for p in parts)).split("/")
    for i in stars:  # "/proc/sys/" + one path component per key component
        path[3 + i] = "*"
    return "/".join(path)


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    fn: RuleFn
    sysctls: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    receivers: bool = False
    profile_fix: bool = True
    nic_settings: bool = False
    syn_queues_on: tuple[str, ...] = ()

    @cached_property
    def config(self) -> tuple[str, ...]:
        """Kernel paths of every configuration value the rule reads (computed once: the
        monitor judges every rule every second)."""
        return tuple(sysctl_pattern_path(k) for k in self.sysctls) + self.paths

    @cached_property
    def allowed(self) -> frozenset[str]:
        """`config` as the set a Context checks reads against."""
        return frozenset(self.config)


RULES: list[Rule] = []


def rule(
    rule_id: str,
    summary: str,
    sysctls: Sequence[str] = (),
    paths: Sequence[str] = (),
    receivers: bool = False,
    profile_fix: bool = True,
    nic_settings: bool = False,
    syn_queues_on: Sequence[str] = (),
) -> Callable[[RuleFn], RuleFn]:
    """Register a rule (see the module docstring for what it declares)."""

    def register(fn: RuleFn) -> RuleFn:
        RULES.append(
            Rule(
                rule_id,
                summary,
                fn,
                tuple(sysctls),
                tuple(paths),
                receivers,
                profile_fix,
                nic_settings,
                tuple(syn_queues_on),
            )
        )
        return fn

    return register


def select(only: Optional[Iterable[str]] = None) -> list[Rule]:
    """The named rules (all when `only` is empty); BadInput for an unknown id."""
    if not only:
        return list(RULES)
    wanted = list(dict.fromkeys(only))
    known = {r.id for r in RULES}
    for rule_id in wanted:
        if rule_id not in known:
            raise BadInput(f"--rule {rule_id}: unknown rule (see docs/diagnose.md)")
    return [r for r in RULES if r.id in wanted]


def sample_spec(rules: Sequence[Rule]) -> SampleSpec:
    """What the sampler must read for `rules`."""
    config = tuple(dict.fromkeys(p for r in rules for p in r.config))
    return SampleSpec(config=config, receivers=any(r.receivers for r in rules))


def run_rules(ctx: Context, rules: Optional[Sequence[Rule]] = None) -> list[Finding]:
    """All findings of `rules` (default: all), most severe and biggest first. Each rule sees
    only the configuration values it declared."""
    out: list[Finding] = []
    for r in RULES if rules is None else rules:
        out.extend(r.fn(ctx.allowing(r.allowed)))
    return rank(out)
