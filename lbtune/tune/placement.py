"""Where a NIC's queue interrupts (and the matching XPS/RPS sets) should go: pure functions.

Nothing here reads the machine; everything comes from a `Inventory`, so the same code
plans for a live host, a fixture tree or a capture.

Strategies for the candidate CPU set:

- `local`: the CPUs of the NIC's NUMA node (all CPUs when the platform gives no node, i.e.
  numa_node -1), minus isolated CPUs: isolation means "keep kernel work away", and queue
  interrupts are kernel work.
- `list`: exactly the CPUs given.
- `isolated`: the isolated CPUs (for setups that dedicate isolated cores to packet work).

Offline CPUs are always removed; `skip_smt` keeps only the first thread of every core.
"""

from __future__ import annotations

from typing import AbstractSet, Optional, Union

from lbtune.errors import BadInput
from lbtune.host.inventory import Inventory
from lbtune.host.kernel.cpulist import format_cpulist
from lbtune.host.net.nic import Nic

STRATEGIES = ("local", "list", "isolated")


def _nic(inv: Inventory, nic: Union[Nic, str]) -> Nic:
    if isinstance(nic, Nic):
        return nic
    try:
        return inv.nic(nic)
    except KeyError:
        raise BadInput(f"no interface {nic!r} on this host") from None


def candidate_cpus(
    inv: Inventory,
    nic: Union[Nic, str],
    strategy: str,
    cpus: Optional[AbstractSet[int]] = None,
    skip_smt: bool = False,
) -> frozenset[int]:
    """The CPUs a strategy allows for this NIC; BadInput when none is left."""
    n = _nic(inv, nic)
    topo = inv.cpus
    online = topo.online
    if strategy == "local":
        if n.numa_node is None or n.numa_node < 0:
            base = online
        else:
            base = topo.node_cpus(n.numa_node) or n.local_cpus or online
        chosen = frozenset(base) - topo.isolated
    elif strategy == "list":
        if not cpus:
            raise BadInput(f"{n.name}: strategy 'list' needs a CPU list")
        unknown = frozenset(cpus) - frozenset(c.id for c in topo.cpus)
        if unknown:
            raise BadInput(f"{n.name}: CPU(s) {format_cpulist(unknown)} do not exist")
        chosen = frozenset(cpus)
    elif strategy == "isolated":
        chosen = topo.isolated
    else:
        raise BadInput(f"unknown IRQ placement strategy {strategy!r} ({', '.join(STRATEGIES)})")
    chosen &= online
    if skip_smt:
        chosen = frozenset(c for c in chosen if topo.cpu(c).is_primary_thread)
    if not chosen:
        raise BadInput(
            f"{n.name}: strategy {strategy!r}"
            + (" (skipping SMT siblings)" if skip_smt else "")
            + " leaves no online CPU"
        )
    return chosen


def irq_cpus(
    inv: Inventory,
    nic: Union[Nic, str],
    strategy: str,
    cpus: Optional[AbstractSet[int]] = None,
    skip_smt: bool = False,
    use_hint: bool = False,
) -> dict[int, int]:
    """IRQ -> the one CPU it should run on, for every queue interrupt of the NIC.

    Queues are taken in index order and dealt round-robin over the sorted candidate CPUs;
    the rx-N and tx-N vectors of split families share queue N's CPU. With `use_hint`, a
    queue whose driver hint (affinity_hint) names a candidate CPU goes to the lowest such CPU
    instead; the other queues keep their round-robin slot.
    """
    n = _nic(inv, nic)
    order = sorted(candidate_cpus(inv, n, strategy, cpus, skip_smt))
    queues = sorted({q.queue for q in n.irqs})
    slot = {q: order[i % len(order)] for i, q in enumerate(queues)}
    if use_hint:
        allowed = frozenset(order)
        for queue in queues:  # irqs are combined, rx, tx in order: rx-N's hint wins the pair
            hints = [q.hint for q in n.irqs if q.queue == queue and q.hint]
            usable = [h & allowed for h in hints if h & allowed]
            if usable:
                slot[queue] = min(usable[0])
    return {q.irq: slot[q.queue] for q in n.irqs}


def xps_for(irq_map: dict[int, int], nic: Nic) -> dict[int, frozenset[int]]:
    """tx queue -> CPUs whose queue interrupt serves it under `irq_map` (XPS follows IRQs).

    Only queues that exist as `queues/tx-N` are returned (a NIC may have more vectors than
    queues, as mlx5 does).
    """
    existing = {t.index for t in nic.tx_queues}
    out: dict[int, set[int]] = {}
    for q in nic.irqs:
        if q.direction in ("combined", "tx") and q.irq in irq_map and q.queue in existing:
            out.setdefault(q.queue, set()).add(irq_map[q.irq])
    return {k: frozenset(v) for k, v in sorted(out.items())}


def rps_for(
    inv: Inventory,
    nic: Union[Nic, str],
    strategy: str = "local",
    cpus: Optional[AbstractSet[int]] = None,
    skip_smt: bool = False,
) -> dict[int, frozenset[int]]:
    """rx queue -> the RPS CPU set (every candidate CPU of the strategy, for every rx queue)."""
    n = _nic(inv, nic)
    chosen = candidate_cpus(inv, n, strategy, cpus, skip_smt)
    return {r.index: chosen for r in n.rx_queues}
