"""Rules for packets the routing code refuses: strict reverse-path filtering.

The effective rp_filter of an interface is max(conf.all, conf.IF) (IN_DEV_MAXCONF), read
for every interface at sampling time (`net.ipv4.conf.*.rp_filter`).
"""

from __future__ import annotations

from typing import Iterator

from lbtune.diagnose.context import Context
from lbtune.diagnose.finding import MANUAL, Finding, Fix
from lbtune.diagnose.rules.base import finding, since, snmp_ev, sysctl_fix
from lbtune.diagnose.rules.registry import rule
from lbtune.host.kernel.sysctl import conf_key
from lbtune.tune.plan import Mode
from lbtune.vocab import Level

_CONF = "/proc/sys/net/ipv4/conf/"


def _rp_filters(ctx: Context) -> dict[str, int]:
    """Interface -> its own rp_filter value, for every interface sampled (all/default too)."""
    out = {}
    for path in ctx.config:
        if path.startswith(_CONF) and path.endswith("/rp_filter"):
            iface = path[len(_CONF) : -len("/rp_filter")]
            value = ctx.path_value(path)
            if "/" not in iface and value is not None and value.isdigit():
                out[iface] = int(value)
    return out


@rule(
    "rp-filter-drop",
    "reverse-path filter dropped packets (strict rp_filter, asymmetric path)",
    sysctls=("net.ipv4.conf.*.rp_filter",),
)
def rp_filter_drop(ctx: Context) -> Iterator[Finding]:
    n = ctx.window.snmp("TcpExt.IPReversePathFilter")
    if n <= 0:
        return
    values = _rp_filters(ctx)
    all_v = values.get("all", 0)
    strict = [
        (iface, own)
        for iface, own in sorted(values.items())
        if iface not in ("all", "default", "lo") and max(all_v, own) == 1
    ]
    obj = ", ".join(i for i, _ in strict) if strict else "ipv4"
    if not strict and all_v != 1:
        yield _loose_drop(ctx, n, all_v)
        return
    fixes = []
    if all_v == 1:
        fixes.append(
            sysctl_fix(
                ctx,
                "net.ipv4.conf.all.rp_filter",
                2,
                "the effective value is max(all, interface)",
                mode=Mode.SET,
            )
        )
    for iface, own in strict:
        if own == 1:
            fixes.append(sysctl_fix(ctx, conf_key(iface, "rp_filter"), 2, mode=Mode.SET))
    yield finding(
        ctx,
        "rp-filter-drop",
        "Packets dropped by strict reverse-path filtering",
        Level.FAIL,
        obj,
        f"{n} packets dropped {since(ctx)}: they arrived on an interface that is not the one "
        f"the route back to their source uses, and rp_filter is strict (1) there "
        f"(effective value = max(all={all_v}, interface)). Typical on DR directors and real "
        "servers, multi-homed hosts and policy routing: use loose mode (2).",
        n,
        "packets",
        [snmp_ev(ctx, "TcpExt.IPReversePathFilter")],
        fixes,
    )


def _loose_drop(ctx: Context, n: int, all_v: int) -> Finding:
    """No interface filters strictly: loose mode (2) drops only packets whose source has no
    route back at all, and rp_filter = 2 cannot be the fix."""
    return finding(
        ctx,
        "rp-filter-drop",
        "Packets dropped by reverse-path filtering: no route back to their source",
        Level.FAIL,
        "ipv4",
        f"{n} packets dropped {since(ctx)} by the reverse-path check, but no interface "
        f"filters strictly (all={all_v}): in loose mode (2) a packet is dropped when its "
        "source has no route back through any interface (martian or unrouted sources).",
        n,
        "packets",
        [snmp_ev(ctx, "TcpExt.IPReversePathFilter")],
        [
            Fix(
                knob="route back to the sources",
                current=None,
                desired=None,
                command="ip route get SOURCE",
                note="add a route to the sources (or a default route); rp_filter = 0 on the "
                "receiving interface and all turns the check off",
                scope=MANUAL,
            )
        ],
    )
