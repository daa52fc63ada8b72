"""Checks of the data NIC's ethtool settings before a run: the RSS hash and indirection
table, offloads (LRO where the host forwards, GRO where it terminates), interrupt
coalescing, pause frames. The same facts the diagnose rules judge under load
(`rss-hash-l3-only`, `rss-indirection-gap`, `lro-on-forwarding-host`, `coalescing`,
`pause-frames`), checked here as settings, since no traffic runs yet. Each NIC family the
driver does not report is skipped with the reason."""

from __future__ import annotations

from typing import Optional

from lbtune.diagnose.checklist.model import CheckResult, Ctx, result, sysctl_int
from lbtune.diagnose.checklist.system import ring_nics
from lbtune.diagnose.nicsettings import NicSettings, read_nic_settings
from lbtune.diagnose.rules.nicparams import LRO, dynamic_itr, lro_feature
from lbtune.diagnose.rules.rss import FULL_HASH
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.net.nic import Nic
from lbtune.observe.nicmaps import RX_PAUSE, TX_PAUSE, pause_counters
from lbtune.vocab import Level

FORWARDING_ROLES = ("lb-dr",)  # the IPVS DR director forwards without ip_forward
TERMINATING_ROLES = ("web", "lb-proxy", "realserver")  # TCP ends here: GRO saves per-packet work
# rx-usecs above this (and not adaptive) adds latency every request pays on the way in.
HIGH_RX_USECS = 100


def _data_nics(c: Ctx) -> list[tuple[Nic, NicSettings]]:
    """The data interface and the devices below it (or every physical one that is up),
    with their ethtool settings."""
    nics = ring_nics(c)
    settings, _ = read_nic_settings(c.host.ethtool, [n.name for n in nics])
    return [(n, settings[n.name]) for n in nics]


def _skip(c: Ctx, what: str) -> CheckResult:
    where = (
        f"{c.iface} (and the devices below it)" if c.iface else "no physical interface that is up"
    )
    return result("", Level.SKIP, f"{where} reports no {what}")


def _profile(c: Ctx, key: str) -> str:
    """The profile key that makes the fix, as the checklist names them (`nic.data.rings`)."""
    return f"nic.data.{key} (profile {c.profile_name})"


def _named(name: str, r: CheckResult) -> CheckResult:
    return CheckResult(name, r.level, r.reason, r.fix)


def check_rss_hash(c: Ctx) -> CheckResult:
    name = "nic-rss-hash"
    nics = [(n, s) for n, s in _data_nics(c) if s.flow_hash and not s.rss_off]
    if not nics:
        what = "RSS hash fields (ethtool -n IF rx-flow-hash), or it does no RSS"
        return _named(name, _skip(c, what))
    narrow = [(n.name, ft, s.hash_fields(ft)) for n, s in nics for ft in s.l3_only()]
    if narrow:
        return result(
            name,
            Level.WARN,
            "RSS hashes on the addresses only: "
            + ", ".join(f"{dev} {ft} {fields}" for dev, ft, fields in narrow)
            + " (every flow between one client and the VIP lands on one queue and one CPU)",
            f"{_profile(c, 'rss_hash')}, or "
            + "; ".join(f"ethtool -N {dev} rx-flow-hash {ft} {FULL_HASH}" for dev, ft, _ in narrow),
        )
    types = sorted({ft for _, s in nics for ft, _ in s.flow_hash})
    return result(
        name,
        Level.PASS,
        f"{', '.join(types)} hashed on addresses and ports on {', '.join(n.name for n, _ in nics)}",
    )


def _rx_queues(n: Nic) -> int:
    ch = n.channels
    count = ((ch.combined or 0) + (ch.rx or 0)) if ch else 0
    return count or len(n.rx_queues)


def check_rss_indirection(c: Ctx) -> CheckResult:
    name = "nic-rss-indirection"
    nics = [(n, s) for n, s in _data_nics(c) if s.rxfh is not None and s.rxfh.indir]
    if not nics:
        return _named(name, _skip(c, "RSS indirection table (ethtool -x)"))
    problems, fixes = [], []
    for n, s in nics:
        assert s.rxfh is not None
        count = _rx_queues(n)
        fed = frozenset(s.rxfh.indir)
        control = s.control_queues()
        with_irq = {q.queue for q in n.irqs if q.direction in ("combined", "rx")}
        unused = sorted(q for q in range(count) if q in with_irq and q not in fed | control)
        on_control = sorted(fed & control)
        if unused:
            problems.append(
                f"{n.name} queue(s) {format_cpulist(frozenset(unused))} get no RSS traffic "
                f"(the table spreads over {format_cpulist(fed)} of {count})"
            )
        if on_control:
            problems.append(
                f"{n.name} control queue(s) {format_cpulist(frozenset(on_control))} (flow "
                "rules' target) also take RSS traffic"
            )
        if unused or on_control:
            if control:
                weights = " ".join("0" if q in control else "1" for q in range(count))
                fixes.append(f"ethtool -X {n.name} weight {weights}")
            else:
                fixes.append(f"ethtool -X {n.name} equal {count}")
    if problems:
        fix = "; ".join(fixes)
        if not any("weight" in f for f in fixes):  # no hand-made control queue in the way
            fix = f'{_profile(c, "rss_indir")} = "data-queues", or {fix}'

        return result(name, Level.WARN, "; ".join(problems), fix)
    return result(
        name,
        Level.PASS,
        "indirection table feeds every data queue on " + ", ".join(n.name for n, _ in nics),
    )


def _forwards(c: Ctx) -> Optional[str]:
    """Why this host forwards packets, or None."""
    if c.role in FORWARDING_ROLES:
        return f"role {c.role} forwards (IPVS DR)"
    if sysctl_int(c.host, "net.ipv4.ip_forward") == 1:
        return "net.ipv4.ip_forward = 1"
    return None


def check_offloads(c: Ctx) -> CheckResult:
    name = "nic-offloads"
    nics = [(n, s) for n, s in _data_nics(c) if s.features is not None]
    if not nics:
        return _named(name, _skip(c, "features (ethtool -k)"))
    forwards = _forwards(c)
    lro_on = [n.name for n, s in nics for f in [lro_feature(s)] if f is not None and f.active]
    if forwards and lro_on:
        return result(
            name,
            Level.FAIL,
            f"LRO ({LRO}) on {', '.join(lro_on)} while {forwards}: forwarded LRO packets are "
            "dropped (ip_forward) or sent on oversized (IPVS)",
            f"{_profile(c, 'features.lro')}, or "
            + "; ".join(f"ethtool -K {dev} lro off" for dev in lro_on),
        )
    gro_off = [
        n.name
        for n, s in nics
        for f in [s.features.get("rx-gro") if s.features else None]
        if f is not None and not f.active and not f.fixed
    ]
    if c.role in TERMINATING_ROLES and gro_off:
        return result(
            name,
            Level.WARN,
            f"GRO off on {', '.join(gro_off)}: every segment of a connection ending here "
            "takes its own trip up the stack",
            f"{_profile(c, 'features.gro')}, or "
            + "; ".join(f"ethtool -K {dev} gro on" for dev in gro_off),
        )
    return result(
        name,
        Level.PASS,
        ("LRO off where the host forwards" if forwards else "host does not forward")
        + f" ({', '.join(n.name for n, _ in nics)})",
    )


def check_coalescing(c: Ctx) -> CheckResult:
    name = "nic-coalescing"
    nics = [(n, s) for n, s in _data_nics(c) if s.coalesce is not None]
    if not nics:
        return _named(name, _skip(c, "interrupt coalescing (ethtool -c)"))
    high, shown = [], []
    for n, s in nics:
        assert s.coalesce is not None
        usecs = s.coalesce.get("rx-usecs")
        adaptive = s.coalesce.get("adaptive-rx") == 1
        mode = " (dynamic throttling)" if dynamic_itr(n.driver, usecs) else ""
        shown.append(f"{n.name} rx-usecs {usecs}{mode}" + (" adaptive" if adaptive else ""))
        if usecs is not None and usecs > HIGH_RX_USECS and not adaptive:
            high.append((n.name, usecs))
    if high:
        return result(
            name,
            Level.WARN,
            "interrupts held back "
            + ", ".join(f"{dev} rx-usecs {u}" for dev, u in high)
            + f" (> {HIGH_RX_USECS} us, not adaptive): every request waits that long on the "
            "way in, and the run measures it as latency",
            f"{_profile(c, 'coalesce.adaptive-rx')}, or "
            + "; ".join(f"ethtool -C {dev} adaptive-rx on (or rx-usecs 50)" for dev, _ in high),
        )
    return result(name, Level.PASS, "; ".join(shown))


def check_pause(c: Ctx) -> CheckResult:
    name = "nic-pause"
    nics = _data_nics(c)
    known = [(n, s) for n, s in nics if s.pause is not None]
    counted: list[str] = []
    for n, _ in nics:
        stats = c.host.ethtool.stats(n.name) or {}
        for direction in (TX_PAUSE, RX_PAUSE):
            total = sum(
                stats.get(pc.name, 0)
                for pc in pause_counters(n.driver)
                if pc.direction == direction
            )
            if total:
                verb = "sent" if direction == TX_PAUSE else "received"
                counted.append(f"{n.name} {verb} {total} pause frames since boot")
    on = [
        f"{n.name} rx {'on' if s.pause.rx else 'off'} tx {'on' if s.pause.tx else 'off'}"
        for n, s in known
        if s.pause is not None and (s.pause.rx or s.pause.tx)
    ]
    if counted and on:
        return result(
            name,
            Level.WARN,
            f"flow control on ({'; '.join(on)}) and in use: {'; '.join(counted)} (drops "
            "hide in the switch while this host's counters look clean)",
            f"{_profile(c, 'pause.rx')}, {_profile(c, 'pause.tx')}, or "
            + "; ".join(f"ethtool -A {n.name} rx off tx off" for n, _ in known),
        )
    if not known:
        return _named(name, _skip(c, "pause settings (ethtool -a)"))
    state = "; ".join(on) if on else "off"
    return result(name, Level.PASS, f"flow control {state}; no pause frames counted")
