"""Checks of how the host is set up: profile in sync, irqbalance vs pinned IRQs, isolcpus,
NIC rings, CPU governor, clock synchronisation."""

from __future__ import annotations

from lbtune.diagnose.checklist.model import CheckResult, Ctx, is_up, result
from lbtune.host.kernel.cmdline import KernelCmdline
from lbtune.host.kernel.cpulist import format_cpulist, parse_cpulist
from lbtune.host.kernel.cputopology import CPU_SYS
from lbtune.host.net.nic import Nic
from lbtune.tune.engine import KnobStatus, verify_targets
from lbtune.vocab import Level


def check_profile(c: Ctx) -> CheckResult:
    name = "profile-in-sync"
    if c.targets is None:
        if c.resolve_failed:
            return result(name, Level.FAIL, c.targets_error)
        return result(name, Level.SKIP, c.targets_error, "pass --iface IF")
    verdicts = verify_targets(c.host, c.targets)
    drift = [v for v in verdicts if v.status is KnobStatus.DRIFT]
    ok = sum(1 for v in verdicts if v.status is KnobStatus.OK)
    missing = sum(1 for v in verdicts if v.status is KnobStatus.MISSING)
    skipped = sum(1 for v in verdicts if v.status is KnobStatus.SKIPPED)
    notes = []
    if missing:
        notes.append(f"{missing} not on this host")
    if skipped:
        notes.append(f"{skipped} host-global not checked from a namespace")
    extra = f" ({', '.join(notes)})" if notes else ""
    if drift:
        first = ", ".join(
            f"{v.kind} {v.object} = {' '.join((v.current or '').split())} (want {v.desired})"
            for v in drift[:3]
        )
        more = f", and {len(drift) - 3} more" if len(drift) > 3 else ""
        return result(
            name,
            Level.FAIL,
            f"profile {c.profile_name}: {len(drift)} of {len(verdicts)} knobs drifted: "
            f"{first}{more}{extra}",
            c.apply_cmd,
        )
    return result(name, Level.PASS, f"profile {c.profile_name}: {ok} knobs in effect{extra}")


def _pinned(c: Ctx) -> dict[int, frozenset[int]]:
    """IRQ -> CPUs the role's profile pins it to."""
    out: dict[int, frozenset[int]] = {}
    for t in c.targets or ():
        if t.knob.kind == "irq_affinity":
            out[int(t.knob.obj)] = parse_cpulist(t.value)
    return out


def check_irqbalance(c: Ctx) -> CheckResult:
    name = "irqbalance"
    ib = c.inv.irqbalance
    if c.targets is None:
        return result(name, Level.SKIP, f"profile not resolved: {c.targets_error}")
    pinned = _pinned(c)
    state = next((t.value for t in c.targets if t.knob.kind == "irqbalance"), None)
    running = f"irqbalance is running (pid {ib.pid})"
    if state == "stopped" and ib.running:
        return result(
            name,
            Level.FAIL,
            f"{running}; profile {c.profile_name} wants it stopped",
            f'irqbalance.state = "stopped" ({c.apply_cmd})',
        )
    if not pinned:
        what = running if ib.running else "irqbalance is not running"
        return result(name, Level.PASS, f"{what}; profile {c.profile_name} pins no IRQs")
    cpus = frozenset().union(*pinned.values())
    if not ib.running:
        if ib.enabled:
            return result(
                name,
                Level.WARN,
                f"irqbalance is not running but enabled at boot: after a reboot it moves "
                f"the {len(pinned)} IRQs the profile pins to CPUs {format_cpulist(cpus)}",
                "systemctl disable irqbalance, or irqbalance.ban in the profile",
            )
        return result(
            name,
            Level.PASS,
            f"irqbalance is not running; the {len(pinned)} IRQs the profile pins stay put",
        )
    loose = sorted(
        irq for irq, on in pinned.items() if irq not in ib.banned_irqs and not on <= ib.banned_cpus
    )
    if not loose:
        return result(
            name,
            Level.PASS,
            f"{running} but bans CPUs {format_cpulist(ib.banned_cpus)}: it leaves the "
            f"{len(pinned)} pinned IRQs alone",
        )
    free = cpus - ib.banned_cpus
    return result(
        name,
        Level.FAIL,
        f"{running} and does not ban CPUs {format_cpulist(free)}, where profile "
        f"{c.profile_name} pins {len(loose)} of {len(pinned)} NIC IRQs (e.g. IRQ "
        f"{', '.join(map(str, loose[:3]))}): it moves them away within seconds",
        f"irqbalance.ban ({c.apply_cmd}), then restart irqbalance; or stop irqbalance",
    )


def check_isolcpus(c: Ctx) -> CheckResult:
    name = "isolcpus"
    topo = c.inv.cpus
    running = topo.cmdline.cpus("isolcpus") or frozenset()
    iso = format_cpulist(topo.isolated) or "none"
    if c.targets is None:
        return result(name, Level.SKIP, f"profile not resolved: {c.targets_error}")
    wanted = next(
        (t for t in c.targets if t.knob.kind == "cmdline" and t.knob.obj == "isolcpus"), None
    )
    if wanted is not None:
        want = KernelCmdline.parse(f"isolcpus={wanted.value}").cpus("isolcpus") or frozenset()
        if want == running:
            return result(
                name,
                Level.PASS,
                f"isolcpus={format_cpulist(running)} as profile {c.profile_name} expects",
            )
        return result(
            name,
            Level.FAIL,
            f"profile {c.profile_name} expects isolcpus={format_cpulist(want)}; the "
            f"kernel booted with {format_cpulist(running) or 'none'}",
            f"{c.apply_cmd} --persist, then reboot",
        )
    on_isolated = {irq for irq, cpus in _pinned(c).items() if cpus & topo.isolated}
    if on_isolated:
        return result(
            name,
            Level.FAIL,
            f"profile {c.profile_name} pins {len(on_isolated)} IRQs onto isolated CPUs "
            f"({iso}): isolated cores are meant to run only the application",
            "choose the data CPUs without isolated ones ([cpu] in the profile)",
        )
    return result(
        name,
        Level.PASS,
        f"profile {c.profile_name} expects no isolation change; isolated CPUs: {iso}",
    )


def ring_nics(c: Ctx) -> list[Nic]:
    """The data interface and the devices below it (a bond's or VLAN's), or every physical
    interface that is up when there is no data interface."""
    if c.iface is not None:
        names = {c.iface}
        grew = True
        while grew:  # a bond or VLAN: the rings are on the devices below it
            before = len(names)
            for n in c.inv.nics:
                if n.name in names:
                    names.update(n.lower)
            grew = len(names) > before
        return [n for n in c.inv.nics if n.name in names]
    return [n for n in c.inv.nics if is_up(n) and n.kind == "physical"]


def check_rings(c: Ctx) -> CheckResult:
    name = "nic-rings"
    nics = [n for n in ring_nics(c) if n.rings is not None and n.rings.rx_max]
    if not nics:
        what = (
            f"{c.iface} (and the devices below it) reports no"
            if c.iface
            else "no physical interface that is up reports"
        )
        return result(name, Level.SKIP, f"{what} ring sizes (veth, bond, VLAN and lo have none)")
    short, ok = [], []
    cmds = []
    for n in nics:
        r = n.rings
        assert r is not None
        parts = []
        for d in ("rx", "tx"):
            cur, mx = getattr(r, d), getattr(r, f"{d}_max")
            if cur is not None and mx and cur < mx:
                parts.append(f"{d} {cur}/{mx}")
        if parts:
            short.append(f"{n.name} {' '.join(parts)}")
            cmds.append(
                f"ethtool -G {n.name} rx {r.rx_max}" + (f" tx {r.tx_max}" if r.tx_max else "")
            )
        else:
            ok.append(n.name)
    if short:
        return result(
            name,
            Level.WARN,
            f"rings below the hardware maximum: {'; '.join(short)} (smaller rings drop "
            "bursts the CPU does not drain at once)",
            f'nic.data.rings = "max" (profile), or {"; ".join(cmds)} (resets the link)',
        )
    return result(name, Level.PASS, f"rings at maximum on {', '.join(ok)}")


def check_clock(c: Ctx) -> CheckResult:
    name = "clock-sync"
    if c.readings is None:
        return result(name, Level.SKIP, "clock state is only readable on the live host")
    if c.readings.clock is None:
        return result(name, Level.SKIP, c.readings.clock_error or "clock state unavailable")
    if c.readings.clock.synced:
        return result(name, Level.PASS, f"kernel clock {c.readings.clock.detail}")
    return result(
        name,
        Level.WARN,
        f"{c.readings.clock.detail}: latency timestamps and logs of client and server disagree",
        "enable NTP: timedatectl set-ntp true (or start chronyd)",
    )


def check_governor(c: Ctx) -> CheckResult:
    name = "cpu-governor"
    online = sorted(c.inv.cpus.online)
    governors = {}
    for cpu in online:
        g = c.host.fs.read(f"{CPU_SYS}/cpu{cpu}/cpufreq/scaling_governor")
        if g is not None:
            governors[cpu] = g.strip()
    if not governors:
        return result(name, Level.SKIP, "no cpufreq (VM, or no cpufreq driver)")
    other = {cpu: g for cpu, g in governors.items() if g != "performance"}
    if other:
        kinds = sorted(set(other.values()))
        return result(
            name,
            Level.WARN,
            f"{'/'.join(kinds)} on {len(other)} of {len(online)} CPUs "
            f"({format_cpulist(other)}): clock ramp-up adds latency and noise between runs",
            'governor.all = "performance" (profile), or cpupower frequency-set -g performance',
        )
    return result(name, Level.PASS, f"performance on all {len(governors)} CPUs with cpufreq")
