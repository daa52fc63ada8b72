"""Resolving a profile against one host's topology: the knob targets it wants there, with the
values computed from topology (CPU sets, "max" ring sizes, one channel per data CPU)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.inventory import Inventory
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.net.ifname import is_ifname
from lbtune.tune import knobs as k
from lbtune.tune.knobs.sysctl import SysctlKnob
from lbtune.tune.plan import Mode, Target
from lbtune.tune.profile.cpuexpr import NODE_NAME, eval_cpu_expr, parse_cpu_expr
from lbtune.tune.profile.limits import FORWARDING

if TYPE_CHECKING:
    from lbtune.host.host import Host
    from lbtune.host.kernel.cputopology import CpuTopology
    from lbtune.host.net.nic import Nic
from lbtune.tune.profile.model import DATA, LB_ROLES, NIC_ROLES, Profile, Setting, show_value


class _Resolver:
    def __init__(
        self, profile: Profile, inv: Inventory, iface: Optional[str], in_netns: bool = False
    ) -> None:
        self.p = profile
        self.inv = inv
        self.in_netns = in_netns
        self.data: Optional[Nic] = None
        if iface is not None:
            self.data = self._nic(iface, "--iface")
        elif profile.needs_iface:
            raise BadInput(
                f'profile {profile.name} has settings for the data interface ([nic."data"] or '
                "{data}): pass --iface IF"
            )
        self.targets: list[Target] = []

    # CPUs are read on first use: a sysctl-only profile never needs the topology.
    @property
    def topo(self) -> CpuTopology:
        return self.inv.cpus

    @property
    def online(self) -> frozenset[int]:
        return self.inv.cpus.online

    # -- helpers
    def _nic(self, name: str, what: str) -> Nic:
        if not is_ifname(name):
            raise BadInput(f"{what} {show_value(name)}: not an interface name")
        try:
            return self.inv.nic(name)
        except KeyError:
            have = ", ".join(n.name for n in self.inv.nics) or "none"
            raise BadInput(
                f"{what} {name}: no such interface on this host (have: {have})"
            ) from None

    def _nic_local(self, nic: Optional[Nic]) -> frozenset[int]:
        if nic is None:
            raise BadInput(
                f"profile {self.p.name}: nic-local needs the data interface: pass --iface IF"
            )
        if nic.local_cpus:
            local = nic.local_cpus & self.online
        elif nic.numa_node is not None and nic.numa_node >= 0:
            local = self.topo.node_cpus(nic.numa_node) & self.online
        else:
            local = self.online
        return local or self.online

    def cpus(
        self, text: str, key: str, nic: Optional[Nic], allow_empty: bool = False
    ) -> frozenset[int]:
        """Evaluate a CPU expression for `key`; refuse empty sets and offline CPUs."""
        active: list[str] = []

        def lookup(name: str) -> frozenset[int]:
            if name in self.p.cpu and name not in active:
                active.append(name)
                try:
                    return eval_cpu_expr(parse_cpu_expr(self.p.cpu[name].value), lookup)
                finally:
                    active.pop()
            if name in ("online", "all"):
                return self.online
            if name == "isolated":
                return self.topo.isolated
            if name == "housekeeping":
                return self.topo.housekeeping
            if name == "nic-local":
                return self._nic_local(nic)
            m = NODE_NAME.match(name)
            if m:
                return self.topo.node_cpus(int(m.group(1)))
            raise BadInput(f"{self.p.name}: {key}: unknown CPU set {name!r}")

        cpus = eval_cpu_expr(parse_cpu_expr(text), lookup)
        if not cpus and not allow_empty:
            raise BadInput(f"{self.p.name}: {key} = {text!r} selects no CPU on this host")
        offline = cpus - self.online
        if offline:
            raise BadInput(
                f"{self.p.name}: {key} = {text!r} selects offline or absent CPUs "
                f"{format_cpulist(offline)}"
            )
        return cpus

    def add(self, knob: Any, value: str, s: Setting, key: str, mode: Optional[Mode] = None) -> None:
        self.targets.append(Target(knob, value, s.reason, key, s.mode if mode is None else mode))

    # -- sections
    def sysctl(self) -> None:
        for key, s in self.p.sysctl.items():
            real = key
            if DATA in key:
                assert self.data is not None
                real = key.replace(DATA, self.data.name.replace(".", "/"))
            forwarding = key in FORWARDING or key.endswith(".forwarding")
            if self.p.role in LB_ROLES and forwarding and s.value.split() == ["0"]:
                raise BadInput(
                    f"{self.p.name}: sysctl.{key} = 0: a {self.p.role} host must keep forwarding"
                )
            self.add(SysctlKnob(real), s.value, s, f"sysctl.{key}")

    def governor(self) -> None:
        if not self.p.governor:
            return
        wanted: dict[int, tuple[str, Setting]] = {}
        for expr, s in self.p.governor.items():
            for cpu in self.cpus(expr, f"governor.{expr}", self.data):
                wanted[cpu] = (expr, s)
        for cpu in sorted(wanted):
            expr, s = wanted[cpu]
            self.add(k.GovernorKnob(f"cpu{cpu}"), s.value, s, f"governor.{expr}")

    def irqbalance(self) -> None:
        if not self.p.irqbalance:
            return
        if "state" in self.p.irqbalance:
            s = self.p.irqbalance["state"]
            self.add(k.IrqbalanceKnob("service"), s.value, s, "irqbalance.state")
        # irqbalance is host-global: from a namespace it is never changed (the plan lists
        # state as skipped), so the ban's CPU set is not evaluated against the namespace's
        # view, where it may select nothing (lb-dr on a 2-CPU host).
        if "ban" in self.p.irqbalance and not self.in_netns:
            s = self.p.irqbalance["ban"]
            banned = self.cpus(s.value, "irqbalance.ban", self.data)
            if banned >= self.online:
                raise BadInput(
                    f'{self.p.name}: irqbalance.ban bans every CPU; set state = "stopped" instead'
                )
            self.add(
                k.IrqbalanceBanKnob("banned_cpus"), format_cpulist(banned), s, "irqbalance.ban"
            )

    def placement_cpus(self, spec: Mapping[str, Any], key: str, nic: Nic) -> frozenset[int]:
        """CPUs a NIC's queue IRQs go to under `irq_affinity` (= the `channels = "cpus"` count).

        The strategy's candidates (lbtune.tune.placement), narrowed to `cpus` when given.
        """
        # Imported here: placement reads NICs, which a sysctl-only profile never loads.
        from lbtune.tune.placement import candidate_cpus

        strategy = spec["strategy"]
        given = self.cpus(spec["cpus"], f"{key}.cpus", nic) if "cpus" in spec else None
        try:
            cpus = candidate_cpus(self.inv, nic, strategy, given, bool(spec.get("skip_smt")))
        except BadInput as e:
            raise BadInput(f"{self.p.name}: {key}: {e}") from None
        if given is not None:
            cpus &= given
        if not cpus:
            raise BadInput(f"{self.p.name}: {key} selects no CPU on this host")
        return cpus

    def nics(self) -> None:
        defaults = self.p.nic.get("", {})
        seen: dict[str, str] = {}
        for sel, section in self.p.nic.items():
            if sel == "":
                continue
            if sel in NIC_ROLES:
                if self.data is None:  # iface = "optional" and no --iface: left out
                    continue
                nic = self.data
            else:
                nic = self._nic(sel, f"nic.{sel}:")
            if nic.name in seen:
                raise BadInput(
                    f"{self.p.name}: nic.{seen[nic.name]} and nic.{sel} both name {nic.name}"
                )
            seen[nic.name] = sel
            # A value the profile names for this very interface is explicit: one its driver
            # cannot take is refused. Role sections and [nic] defaults are portable: such a
            # value is planned as unsettable ("missing") and the rest goes on.
            own = frozenset(section) if sel not in NIC_ROLES else frozenset()
            self.nic(sel, nic, {**defaults, **section}, own)

    def nic(
        self, sel: str, nic: Nic, sec: Mapping[str, Setting], own: frozenset[str] = frozenset()
    ) -> None:
        """The targets of one `[nic.SEL]` section, in apply order. Channels decide how many
        rx queues RPS covers and which tx queues XPS keeps; the IRQ placement decides the
        channel count (`channels = "cpus"`), RPS "same" and XPS "match-irqs"."""
        prefix = f"nic.{sel}"
        if "txqueuelen" in sec:
            s = sec["txqueuelen"]
            self.add(k.TxqueuelenKnob(nic.name), str(s.value), s, f"{prefix}.txqueuelen")
        placed: Optional[frozenset[int]] = None
        if "irq_affinity" in sec:
            placed = self.placement_cpus(sec["irq_affinity"].value, f"{prefix}.irq_affinity", nic)
        queues = len(nic.rx_queues)
        tx_after: Optional[int] = None  # tx queues left by a planned channel count
        # flow_rules' "control" queue: one channel beyond the data cores, its IRQ on a
        # housekeeping CPU, kept out of the RSS table (see control_cpu)
        control: Optional[int] = None
        hk = self.control_cpu(sec, nic, placed)
        if "channels" in sec:
            count = self.nic_channels(prefix, nic, sec["channels"], placed, int(hk is not None))
            if sec["channels"].mode is Mode.SET:
                queues = tx_after = count
            if hk is not None and placed is not None and count > len(placed):
                control = count - 1
        if "rings" in sec:
            self.nic_rings(prefix, nic, sec["rings"])
        self.nic_params(prefix, nic, sec, own)
        irq_map: Optional[dict[int, int]] = None
        if "irq_affinity" in sec:
            assert placed is not None
            cq = None if control is None else (control, hk)
            irq_map = self.nic_irq_affinity(prefix, nic, sec["irq_affinity"], placed, cq)
        self.nic_rss(prefix, nic, sec, queues, control)
        if "rps" in sec:
            self.nic_rps(prefix, nic, sec["rps"], queues, irq_map)
        if "xps" in sec:
            self.nic_xps(prefix, nic, sec["xps"], tx_after, irq_map)

    def nic_channels(
        self,
        prefix: str,
        nic: Nic,
        s: Setting,
        placed: Optional[frozenset[int]],
        extra: int = 0,
    ) -> int:
        """Plan the channel count; returns it. "cpus" is one per placement CPU (or nic-local
        CPU), plus `extra` (the control queue), capped by what the driver supports; a number
        above that is refused."""
        name = nic.name
        ch = nic.channels
        kind = "combined" if ch is None or ch.combined_max else "rx/tx"
        limit = (
            (ch.combined_max if kind == "combined" else min(ch.rx_max or 0, ch.tx_max or 0))
            if ch
            else None
        )
        if s.value == "cpus":
            count = len(placed if placed is not None else self._nic_local(nic)) + extra
            if limit:
                count = min(count, limit)
        else:
            count = s.value
            if limit is not None and count > limit:
                raise BadInput(
                    f"{self.p.name}: {prefix}.channels = {count}: "
                    f"{name} supports at most {limit}"
                )
        kinds = ("combined",) if kind == "combined" else ("rx", "tx")
        for kd in kinds:
            self.add(k.ChannelsKnob(f"{name}:{kd}"), str(count), s, f"{prefix}.channels")
        return int(count)

    def nic_rings(self, prefix: str, nic: Nic, s: Setting) -> None:
        """Plan rx and tx ring sizes: "max" or a number, checked against the driver's maximum."""
        name = nic.name
        rings = nic.rings
        for d in ("rx", "tx"):
            if nic.rings_fixed is not None:
                # the driver cannot change them: "max" and a number are planned alike,
                # as "unsettable" rows (RingKnob.unsettable), never an error
                self.add(k.RingKnob(f"{name}:{d}"), str(s.value), s, f"{prefix}.rings")
                continue
            cur = getattr(rings, d) if rings else None
            limit = getattr(rings, f"{d}_max") if rings else None
            if s.value == "max":
                if limit is None:
                    if d == "rx":
                        raise BadInput(
                            f'{self.p.name}: {prefix}.rings = "max": '
                            f"{name} reports no ring sizes"
                        )
                    continue
                value = limit
            else:
                value = s.value
                if limit is not None and value > limit:
                    raise BadInput(
                        f"{self.p.name}: {prefix}.rings = {value}: "
                        f"{name} {d} ring max is {limit}"
                    )
                if rings is not None and cur is None and limit is None:
                    continue
            self.add(k.RingKnob(f"{name}:{d}"), str(value), s, f"{prefix}.rings")

    def nic_params(
        self, prefix: str, nic: Nic, sec: Mapping[str, Setting], own: frozenset[str]
    ) -> None:
        """Features, coalescing and pause (`features.lro`, `coalesce.rx-usecs`,
        `pause.autoneg` keys), in the order they are applied: features, then coalescing with
        adaptive-rx/-tx first (a fixed rx-usecs matters only with adaptive off), then pause
        with autoneg first (some drivers keep rx/tx on while it is on)."""
        from lbtune.host.net.nicparams import COALESCE_ORDER, canonical_feature, feature_members
        from lbtune.tune.knobs.coalesce import CoalesceKnob, coalesce_unsupported
        from lbtune.tune.knobs.features import FeatureKnob
        from lbtune.tune.knobs.pause import PauseKnob

        host: Optional[Host] = getattr(self.inv, "host", None)  # LazyInventory's host
        name = nic.name

        def refuse(key: str, why: str) -> None:
            raise BadInput(f"{self.p.name}: {prefix}.{key}: {why}")

        feats = host.ethtool.features(name) if host is not None else None
        available = [f.name for f in feats.entries] if feats is not None else []
        for key in [x for x in sec if x.startswith("features.")]:
            s, feature = sec[key], key.split(".", 1)[1]
            members = feature_members(feature, available)
            if not members:
                if key in own and host is not None:
                    refuse(key, f"{name} ({nic.driver or 'no driver'}) has no feature {feature}")
                # portable: planned as unsettable (the knob names what the device lacks)
                members = (canonical_feature(feature),)
            if len(members) > 1 and feats is not None:
                # a group alias (tso, tx, sg): as ethtool does, only the members the driver
                # can change; all fixed: the first, whose check refuses a change
                fixed = {f.name for f in feats.entries if f.fixed}
                changeable = tuple(m for m in members if m not in fixed)
                members = changeable or members[:1]
            for m in members:
                f = feats.get(m) if feats is not None else None
                fk = FeatureKnob(f"{name}:{m}")
                if f is not None and f.fixed and f.active != (s.value == "on"):
                    state = "on" if f.active else "off"
                    fixed_why = f"{m} is fixed {state} on {name} ({nic.driver or 'no driver'})"
                    if key in own:  # asked for this very interface: refused
                        refuse(key, f"{fixed_why}: the driver cannot change it")
                    fk.skip = fixed_why  # a role section is portable: planned as unsettable
                self.add(fk, str(s.value), s, f"{prefix}.{key}")
        params = [x for x in sec if x.startswith("coalesce.")]
        params.sort(key=lambda k: COALESCE_ORDER.index(k.split(".", 1)[1]))
        for key in params:
            s, param = sec[key], key.split(".", 1)[1]
            if key in own and host is not None:
                why = coalesce_unsupported(host, name, param)
                if why is not None:
                    refuse(key, why)
            self.add(CoalesceKnob(f"{name}:{param}"), str(s.value), s, f"{prefix}.{key}")
        for field in ("autoneg", "rx", "tx"):
            key = f"pause.{field}"
            if key not in sec:
                continue
            if key in own and host is not None and host.ethtool.pause(name) is None:
                refuse(key, f"{name} ({nic.driver or 'no driver'}) has no pause frame settings")
            s = sec[key]
            self.add(PauseKnob(f"{name}:{field}"), str(s.value), s, f"{prefix}.{key}")

    def nic_irq_affinity(
        self,
        prefix: str,
        nic: Nic,
        s: Setting,
        placed: frozenset[int],
        control: Optional[tuple[int, Optional[int]]] = None,
    ) -> dict[int, int]:
        """Pin each queue IRQ to one of the `placed` CPUs; returns IRQ -> CPU. `control`
        (queue, CPU): that queue's IRQs go to the housekeeping CPU instead."""
        from lbtune.tune.placement import irq_cpus  # see placement_cpus

        spec = s.value
        irq_map = irq_cpus(self.inv, nic, "list", cpus=placed, use_hint=spec["use_hint"])
        if control is not None and control[1] is not None:
            for q in nic.irqs:
                if q.queue == control[0] and q.irq in irq_map:
                    irq_map[q.irq] = control[1]
        for irq, cpu in sorted(irq_map.items()):
            if cpu not in self.online:
                raise BadInput(
                    f"{self.p.name}: {prefix}.irq_affinity puts IRQ {irq} on offline CPU {cpu}"
                )
            self.add(
                k.IrqAffinityKnob(str(irq)), format_cpulist({cpu}), s, f"{prefix}.irq_affinity"
            )
        return irq_map

    def _eth(self) -> Any:
        """The ethtool source planning reads RSS and rules from (an inventory without one:
        a source where no NIC has them)."""
        eth = getattr(self.inv, "ethtool", None)
        return _NoRss() if eth is None else eth

    def control_cpu(
        self, sec: Mapping[str, Setting], nic: Nic, placed: Optional[frozenset[int]]
    ) -> Optional[int]:
        """The housekeeping CPU a control queue's IRQ goes to, when the section wants one:
        `flow_rules.queue = "control"` with `channels = "cpus"` and `irq_affinity`, on a NIC
        whose driver has a rule table. The lowest online CPU outside the data placement
        (nic-local ones first); None when any of that is missing."""
        fr = sec.get("flow_rules")
        ch = sec.get("channels")
        if fr is None or fr.value["queue"] != "control" or placed is None:
            return None
        if ch is None or ch.value != "cpus" or self._eth().ntuple_rules(nic.name) is None:
            return None
        rest = self.online - placed
        if not rest:
            return None
        local = rest & self._nic_local(nic)
        return min(local or rest)

    def nic_rss(
        self,
        prefix: str,
        nic: Nic,
        sec: Mapping[str, Setting],
        queues: int,
        control: Optional[int],
    ) -> None:
        """RSS hash fields, the indirection table ("data-queues": every queue the plan leaves
        but the control queue), the key, and the flow rules (to the control queue or a given
        one), in lbtune.tune.knobs.rss / ntuple's words."""
        from lbtune.host.net import rss as r
        from lbtune.tune.knobs.ntuple import NtupleKnob, rule_value
        from lbtune.tune.knobs.rss import RssHashKnob, RssIndirKnob, RssKeyKnob

        name = nic.name
        eth = self._eth()
        if "rss_hash" in sec:
            s = sec["rss_hash"]
            for flow, letters in s.value.items():
                self.add(RssHashKnob(f"{name}:{flow}"), letters, s, f"{prefix}.rss_hash")
        if "rss_indir" in sec:
            s = sec["rss_indir"]
            value = s.value
            if value == "data-queues":
                n = max(queues, 1)
                value = f"equal {n}"
                if control is not None and control < n:
                    value = "weight " + " ".join("0" if q == control else "1" for q in range(n))
            cur = eth.rxfh(name)
            if cur is not None and cur.indir:  # as the knob reads it back (shortest form)
                try:
                    value = r.table_text(r.table_of(value, len(cur.indir)))
                except ValueError as e:
                    raise BadInput(f"{self.p.name}: {prefix}.rss_indir: {e}") from None
            self.add(RssIndirKnob(name), value, s, f"{prefix}.rss_indir")
        if "rss_key" in sec:
            s = sec["rss_key"]
            self.add(RssKeyKnob(name), s.value, s, f"{prefix}.rss_key")
        if "flow_rules" in sec:
            s = sec["flow_rules"]
            from lbtune.host.net.nicparams import canonical_feature

            ntuple_on = any(  # the profile turns ntuple filters on before its rules
                canonical_feature(x.split(".", 1)[1]) == "rx-ntuple-filter"
                and sec[x].value == "on"
                for x in sec
                if x.startswith("features.")
            )
            self.nic_flow_rules(prefix, nic, s, control, NtupleKnob, rule_value, ntuple_on)

    def nic_flow_rules(
        self,
        prefix: str,
        nic: Nic,
        s: Setting,
        control: Optional[int],
        knob: Any,
        rule_value: Any,
        ntuple_on: bool = False,
    ) -> None:
        """One `ntuple` target per rule, at the location it has (the same rule already
        there) or gets (the last free slot, as ethtool picks): the journal then holds the
        locations lbtune adds, and rollback deletes those only. A rule of someone else with
        the same match but another queue is refused, never replaced."""
        from lbtune.host.net import rss as r

        name = nic.name
        eth = self._eth()
        key = f"{prefix}.flow_rules"
        queue = control if s.value["queue"] == "control" else s.value["queue"]
        existing = eth.ntuple_rules(name)
        skip: Optional[str] = None
        if existing is None:
            skip = None  # the knob says "no ntuple flow rules" (unsettable)
        elif queue is None:
            skip = (
                f'{name}: no control queue (flow_rules.queue = "control" needs channels = '
                f'"cpus", irq_affinity and a free channel and CPU for it)'
            )
        else:
            feats = eth.features(name)
            f = None if feats is None else feats.get("rx-ntuple-filter")
            if f is not None and not f.active and not ntuple_on:
                skip = (
                    f"{name}: ntuple filters are off (features.ntuple = \"on\" in the "
                    f"profile, or ethtool -K {name} ntuple on)"
                )
        size = eth.ntuple_table_size(name) or 0
        used = {x.location for x in existing or ()}
        kept = list(existing or ())  # the rules on the port after this plan, in order
        for i, text in enumerate(s.value["rules"]):
            flow, match, _ = r.parse_rule_text(f"{text} action 0")
            if existing is None or skip is not None or queue is None:
                k = knob(f"{name}:{i}")
                k.skip = skip
                self.add(k, f"{text} action {queue if queue is not None else 0}", s, key)
                continue
            value = r.rule_text(flow, match, queue)
            same = [x for x in existing if x.flow_type == flow and x.match == match]
            refusal = None if same else r.rule_refusal(nic.driver, kept, flow, match)
            if refusal is not None:  # the driver would refuse it: planned as unsettable
                k = knob(f"{name}:{i}")
                k.skip = f"{name}: {refusal}"
                self.add(k, value, s, key)
                continue
            if same and rule_value(same[0]) == value:
                loc = same[0].location
            elif same:
                raise BadInput(
                    f"{self.p.name}: {key}: {name} rule {same[0].location} already steers "
                    f"{text} elsewhere ({rule_value(same[0])}); lbtune leaves rules it did not "
                    f"add alone: delete it (ethtool -N {name} delete {same[0].location}) or "
                    "drop the rule from the profile"
                )
            else:
                free = r.free_location(size, sorted(used))
                if free is None:
                    raise BadInput(
                        f"{self.p.name}: {key}: {name}'s rule table ({size} rules) is full"
                    )
                loc = free
                kept.append(r.NtupleRule(loc, flow, match, queue))
            used.add(loc)
            self.add(knob(f"{name}:{loc}"), value, s, key)

    def nic_rps(
        self,
        prefix: str,
        nic: Nic,
        s: Setting,
        queues: int,
        irq_map: Optional[dict[int, int]],
    ) -> None:
        """Plan RPS CPUs and flow counts for the first `queues` rx queues."""
        name = nic.name
        rps = s.value
        if "cpus" in rps:
            how = rps["cpus"]
            if how == "same":
                if irq_map is None:
                    raise BadInput(
                        f'{self.p.name}: {prefix}.rps.cpus = "same" needs irq_affinity'
                    )
                cpus = frozenset(irq_map.values())
            elif how == "local":
                cpus = self._nic_local(nic)
            elif how == "none":
                cpus = frozenset()
            else:
                cpus = self.cpus(how, f"{prefix}.rps.cpus", nic)
            for q in range(queues):
                self.add(
                    k.RpsCpusKnob(f"{name}:rx-{q}"), format_cpulist(cpus), s, f"{prefix}.rps"
                )
        if "flow_cnt" in rps:
            for q in range(queues):
                self.add(
                    k.RpsFlowCntKnob(f"{name}:rx-{q}"), str(rps["flow_cnt"]), s, f"{prefix}.rps"
                )

    def nic_xps(
        self,
        prefix: str,
        nic: Nic,
        s: Setting,
        tx_after: Optional[int],
        irq_map: Optional[dict[int, int]],
    ) -> None:
        """Plan XPS: cleared ("none") or matching the IRQ placement, skipping the tx queues
        a planned channel count removes (index >= `tx_after`)."""
        from lbtune.tune.placement import xps_for  # see placement_cpus

        name = nic.name
        if s.value == "none":
            for tq in nic.tx_queues:
                if tx_after is not None and tq.index >= tx_after:
                    continue  # a tx queue the planned channel count removes
                self.add(k.XpsCpusKnob(f"{name}:tx-{tq.index}"), "", s, f"{prefix}.xps")
            return
        if irq_map is None:
            raise BadInput(f'{self.p.name}: {prefix}.xps = "match-irqs" needs irq_affinity')
        for txq, cpus in xps_for(irq_map, nic).items():
            if tx_after is not None and txq >= tx_after:
                continue  # a tx queue the planned channel count removes
            xps = format_cpulist(cpus)
            self.add(k.XpsCpusKnob(f"{name}:tx-{txq}"), xps, s, f"{prefix}.xps")

    def cmdline(self) -> None:
        if not self.p.cmdline:
            return
        isolating: set[int] = set()
        for param, s in self.p.cmdline.items():
            cpus = self.cpus(s.value["cpus"], f"cmdline.{param}", self.data)
            if param in ("isolcpus", "nohz_full"):
                isolating |= cpus
            text = format_cpulist(cpus)
            if param == "isolcpus" and s.value.get("flags"):
                text = ",".join((*s.value["flags"], text))
            self.add(k.CmdlineKnob(param), text, s, f"cmdline.{param}")
        if isolating >= self.online:
            raise BadInput(
                f"{self.p.name}: cmdline isolates every CPU ({format_cpulist(isolating)}); "
                "leave at least one housekeeping CPU"
            )

    def ban_pinned_irqs(self) -> None:
        """With `irqbalance.ban`, irqbalance must also leave alone the IRQs this profile pins:
        a CPU ban only keeps it from placing IRQs there, it still moves the pinned ones off
        (irqbalance 1.9.2, tests/vm/test_vm_irqbalance.py). So every `irq_affinity` IRQ is
        banned too (`--banirq`, knob `irqbalance_banirq`), next to the CPU ban."""
        bans = [t for t in self.targets if t.knob.kind == "irqbalance_ban"]
        pinned = sorted({int(t.knob.obj) for t in self.targets if t.knob.kind == "irq_affinity"})
        if not bans or not pinned:
            return
        s = self.p.irqbalance["ban"]
        value = ",".join(str(n) for n in pinned)
        self.add(k.IrqbalanceBanIrqKnob("banned_irqs"), value, s, "irqbalance.ban")

    def run(self) -> list[Target]:
        self.sysctl()
        self.governor()
        self.irqbalance()
        self.nics()
        self.ban_pinned_irqs()
        self.cmdline()
        return self.targets


class _NoRss:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def resolve(
    profile: Profile, inv: Inventory, iface: Optional[str] = None, in_netns: bool = False
) -> list[Target]:
    """The knob targets `profile` wants on the host described by `inv`, in apply order.

    `iface` names the data interface (`[nic."data"]`, `{data}`, `nic-local`). Raises BadInput
    for unknown interfaces, CPU sets that are empty or offline, values the hardware cannot take.
    `in_netns`: planning from a network namespace, where the host-global irqbalance ban is
    not resolved (it would not be applied).
    """
    return _Resolver(profile, inv, iface, in_netns).run()


def cpu_values(
    profile: Profile, inv: Inventory, expr: str, iface: Optional[str] = None
) -> frozenset[int]:
    """Evaluate a CPU expression with the profile's `[cpu]` names on this host (BadInput if
    it selects no CPU, offline CPUs, or needs the data interface that `iface` does not give)."""
    r = _Resolver(replace(profile, nic={}, sysctl={}), inv, iface)
    return r.cpus(expr, "cpu expression", r.data)
