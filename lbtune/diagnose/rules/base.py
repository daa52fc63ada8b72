"""Helpers every rule uses: evidence with rates, fixes that set a sysctl, a finding's shape.

A fix is only proposed when it can work where lbtune runs: `sysctl_fix` marks a setting
that a network namespace cannot change (absent or read-only there: the host's own) as a
HOST fix, and a fix whose needed value is the current one is dropped. Every value a fix
sets is a profile line as a profile file takes it (`ProfileSetting`): a limit is raised
(`mode = "raise"`: a host already above it keeps its value), a switch is set, and the
reason is the finding's own one line (`finding` fills it in).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Iterable, Optional

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import HOST, PROFILE, Evidence, Finding, Fix, ProfileSetting
from lbtune.diagnose.tomltext import Scalar
from lbtune.observe import counters as C
from lbtune.observe.counters import CounterRef
from lbtune.observe.procnet import NETSTAT, SNMP
from lbtune.tune.plan import Mode
from lbtune.vocab import Level

MAX_REASON = 200  # a profile's reason is one line of at most this many characters

_NETSTAT_GROUPS = ("TcpExt", "IpExt", "MPTcpExt")


def _rate(ctx: Context, value: int) -> Optional[float]:
    r = ctx.rate(value)
    return None if r is None else round(r, 3)


def moved(
    ctx: Context, counter: str, value: int, source: str, ref: Optional[CounterRef] = None
) -> Evidence:
    """Evidence of a counter that moved by `value` over the window, with its rate; `ref`
    names it for per-second series."""
    return Evidence(counter, value, _rate(ctx, value), source, ref)


def reading(counter: str, value: int, source: str, ref: Optional[CounterRef] = None) -> Evidence:
    """Evidence of a gauge read at the end of the window: a value, no rate."""
    return Evidence(counter, value, None, source, ref)


def snmp_ev(ctx: Context, key: str) -> Evidence:
    source = NETSTAT if key.split(".")[0] in _NETSTAT_GROUPS else SNMP
    return moved(ctx, key, ctx.window.snmp(key), source, CounterRef(C.SNMP, (key,)))


def shown(value: Optional[object]) -> str:
    """A configuration value in a sentence: the value, or why it is unknown."""
    return "unknown here" if value is None else str(value)


def sysctl_setting(key: str, value: object, mode: Mode = Mode.RAISE) -> ProfileSetting:
    """The profile value `[sysctl] "key" = { value = ..., mode = ... }` (reason added later).

    A number is written as a TOML integer, anything else (`"4096 131072 16777216"`) as a
    string; `mode` is left out when it is "set" (the profile default)."""
    text = str(value)
    v: Scalar = int(text) if text.lstrip("-").isdigit() else text
    fields: list[tuple[str, Scalar]] = [("value", v)]
    if mode is not Mode.SET:
        fields.append(("mode", mode.value))
    return ProfileSetting(("sysctl",), key, tuple(fields))


def nic_setting(dev: str, name: str, *fields: tuple[str, Scalar]) -> ProfileSetting:
    """A `[nic."DEV"]` profile value (rings, channels, txqueuelen, rps, irq_affinity)."""
    return ProfileSetting(("nic", dev), name, tuple(fields))


def nic_group_setting(dev: str, group: str, name: str, value: Scalar) -> ProfileSetting:
    """A named value of a NIC group (`[nic."DEV"] features.lro = { value = "off" }`; groups:
    coalesce, features, pause)."""
    return ProfileSetting(("nic", dev, group), name, (("value", value),))


def sysctl_fix(
    ctx: Context, key: str, needed: object, note: str = "", mode: Mode = Mode.RAISE
) -> Fix:
    """A fix that sets one sysctl, with the profile line and the one-off command.

    `mode` is RAISE for a limit (the default) and SET for a switch (rp_filter, syncookies)
    or a range. Diagnosing inside a namespace, a host-global key (absent or read-only there)
    becomes a HOST fix: it must be set on the host, `lbtune --netns` cannot.
    """
    text = str(needed)
    scope = PROFILE
    if ctx.host_global(key):
        scope = HOST
        where = f"host-global: namespace {ctx.netns} cannot change it; set it on the host"
        note = f"{where} ({note})" if note else where
    return Fix(
        knob=f"sysctl {key}",
        current=ctx.sysctl(key),
        desired=text,
        settings=(sysctl_setting(key, text, mode),),
        command=f"sysctl -w {key}={text}" if " " not in text else f'sysctl -w {key}="{text}"',
        note=note,
        scope=scope,
    )


def in_netns(ctx: Context, command: Optional[str]) -> Optional[str]:
    """`command` as it must be typed to act on the namespace being diagnosed: with
    `ip netns exec NS` in front (pasted as is, it would read or change the host)."""
    if ctx.netns is None or not command or command.startswith("ip netns exec "):
        return command
    return f"ip netns exec {ctx.netns} {command}"


def pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1.0, n))))


def finding(
    ctx: Context,
    rule_id: str,
    title: str,
    level: Level,
    obj: str,
    cause: str,
    count: int,
    unit: str,
    evidence: Iterable[Evidence],
    fixes: Iterable[Fix],
    gauge: bool = False,
) -> Finding:
    """A finding; `gauge` when `count` is a reading now (no rate), not events in the window.

    Every profile value its fixes set gets the finding's one-line reason (`reason_of`)."""
    why = reason_of(ctx, rule_id, title, count, unit, gauge)
    fixes = [
        replace(
            f,
            settings=tuple(s if s.reason else s.with_reason(why) for s in f.settings),
            command=in_netns(ctx, f.command) if f.scope != HOST else f.command,
        )
        for f in fixes
    ]
    return Finding(
        rule=rule_id,
        title=title,
        level=level,
        object=obj,
        cause=cause,
        count=count,
        unit=unit,
        rate=None if gauge else _rate(ctx, count),
        evidence=tuple(evidence),
        # A fix whose needed value is the current one tells the user to change nothing.
        fixes=tuple(f for f in fixes if f.desired is None or f.desired != f.current),
        gauge=gauge,
    )


def reason_of(
    ctx: Context, rule_id: str, title: str, count: int, unit: str, gauge: bool = False
) -> str:
    """The reason a profile value carries: what the finding saw, on one printable line."""
    when = "at the end of the window" if gauge and not ctx.window.cumulative else since(ctx)
    if gauge and ctx.window.cumulative:
        when = "when captured"
    text = f"{title}: {count:,} {unit} {when} (lbtune diagnose {rule_id})"
    if not text.isprintable():  # (checked whole first: a finding is made per rule per tick)
        text = "".join(ch if ch.isprintable() else " " for ch in text)
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 3] + "..."
    return text


def since(ctx: Context) -> str:
    if ctx.window.cumulative:
        return "since boot"
    s = ctx.window.seconds or 0.0
    return f"in {s:.1f} s"


def endpoint(family: int, addr: str, port: int) -> str:
    return f"[{addr}]:{port}" if family == 6 else f"{addr}:{port}"
