"""Rules for the connection tracking table: full (drops, early drops) and insert clashes.

nf_conntrack_max is host-global: a namespace sees it read-only, so from one the fix is a
HOST fix. A table nearly full without drops yet is a gauge (entries in use now). A bigger
table needs a hash to match (nf_conntrack_buckets, at least a quarter of the maximum), or
every packet walks long chains once it fills: the fix sets both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Finding, Fix
from lbtune.diagnose.rules.base import (
    finding,
    moved,
    pow2_at_least,
    reading,
    shown,
    since,
    sysctl_fix,
    sysctl_setting,
)
from lbtune.diagnose.rules.registry import rule
from lbtune.observe import counters as C
from lbtune.observe.conntrack import STAT as CONNTRACK_STAT
from lbtune.observe.counters import CounterRef
from lbtune.vocab import Level


@rule(
    "conntrack-full",
    "conntrack table full: new flows dropped",
    sysctls=("net.netfilter.nf_conntrack_max", "net.netfilter.nf_conntrack_buckets"),
)
def conntrack_full(ctx: Context) -> Iterator[Finding]:
    ct = ctx.window.after.conntrack
    if ct is None:
        return
    drop = ctx.window.conntrack("drop")
    early = ctx.window.conntrack("early_drop")
    full = ct.max is not None and ct.max > 0 and ct.count >= 0.9 * ct.max
    if drop <= 0 and early <= 0 and not full:
        return
    needed = pow2_at_least(max(2 * (ct.max or 65536), 2 * ct.count))
    lost = drop + early
    yield finding(
        ctx,
        "conntrack-full",
        "Conntrack table full" if lost else "Conntrack table nearly full",
        Level.FAIL if lost else Level.WARN,
        "nf_conntrack",
        f"{ct.count} of {ct.max} conntrack entries in use; {drop} packets dropped and "
        f"{early} entries evicted early {since(ctx)} because the table was full "
        "(kernel log: 'nf_conntrack: table full, dropping packet').",
        lost if lost else ct.count,
        "packets and evictions" if lost else "entries in use",
        [
            moved(ctx, "nf_conntrack drop", drop, CONNTRACK_STAT, _column("drop")),
            moved(ctx, "nf_conntrack early_drop", early, CONNTRACK_STAT, _column("early_drop")),
            reading(
                "nf_conntrack_count",
                ct.count,
                "/proc/sys/net/netfilter",
                CounterRef(C.CONNTRACK_COUNT),
            ),
        ],
        [_table_fix(ctx, needed)],
        gauge=not lost,
    )


def _column(name: str) -> CounterRef:
    return CounterRef(C.CONNTRACK, (name,))


def _table_fix(ctx: Context, needed: int) -> Fix:
    buckets = pow2_at_least(needed / 4)
    now = ctx.sysctl_int("net.netfilter.nf_conntrack_buckets")
    fix = sysctl_fix(
        ctx,
        "net.netfilter.nf_conntrack_max",
        needed,
        f"with a hash of at least {buckets} buckets (net.netfilter.nf_conntrack_buckets, "
        f"{shown(now)} now); on an IPVS DR director, better not to track VIP traffic at all "
        "(NOTRACK)",
    )
    command = fix.command
    if now is None or now < buckets:
        command = f"{command} net.netfilter.nf_conntrack_buckets={buckets}"
    return replace(
        fix,
        command=command,
        settings=(*fix.settings, sysctl_setting("net.netfilter.nf_conntrack_buckets", buckets)),
    )


@rule(
    "conntrack-insert-failed",
    "conntrack entries failed to insert (races, clashes)",
    profile_fix=False,
)
def conntrack_insert_failed(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.conntrack("insert_failed")
    if n <= 0:
        return
    yield finding(
        ctx,
        "conntrack-insert-failed",
        "Conntrack insert failures",
        Level.WARN,
        "nf_conntrack",
        f"{n} packets {since(ctx)} created a conntrack entry that clashed with one inserted "
        "by another CPU at the same time (parallel UDP, e.g. DNS A+AAAA from one socket) and "
        "were dropped.",
        n,
        "packets",
        [moved(ctx, "nf_conntrack insert_failed", n, CONNTRACK_STAT, _column("insert_failed"))],
        [
            Fix(
                knob="client resolver / UDP flow pattern",
                current=None,
                desired=None,
                note="glibc `options single-request-reopen`, or NOTRACK for the flow",
                scope=MANUAL,
            )
        ],
    )
