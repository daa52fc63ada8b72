"""Per-NIC counters: /sys/class/net/DEV/statistics plus `ethtool -S` mapped per queue.

The driver map (`lbtune.observe.nicmaps`) turns driver-specific names into `QueueCounters`
(direction, queue, packets, bytes, drops, extras) and picks out the device-level drop
counters. Names are classified once and remembered: a sampling tick on a 48-queue mlx5 port
sees ~2000 names and must not run every pattern over every one each second.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.net.ethtool import EthtoolSource
from lbtune.host.net.ifname import check_ifname
from lbtune.host.net.nic import nic_names
from lbtune.observe.model import NicCounters, QueueCounters
from lbtune.observe.nicmaps import DriverMap, driver_map

CLASS_NET = "/sys/class/net"
_MAIN_FIELDS = frozenset({"packets", "bytes", "drops"})

# Per driver: counter name -> (direction, queue, field), or None when not a per-queue counter.
_Class = Optional[tuple[str, int, str]]
_CACHE: dict[str, dict[str, _Class]] = {}
_CACHE_LIMIT = 100_000  # names per driver; a driver has a few thousand at most


def _classify(dm: DriverMap, name: str, cache: dict[str, _Class]) -> _Class:
    result: _Class = None
    for naming in dm.queues:
        m = naming.pattern.fullmatch(name)
        if m is None:
            continue
        groups = m.groupdict()
        direction = naming.direction or groups.get("dir")
        if direction is None:
            continue
        counter = groups["name"]
        result = (direction, int(groups["q"]), naming.fields.get(counter, counter))
        break
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[name] = result
    return result


# Per driver and set of names (in their order): which queue and field each name feeds. The
# names of a port are the same every tick, so a tick only looks its values up. A field's
# source is one name, or the names whose values it sums.
_Source = Union[str, tuple[str, ...]]
_QueuePlan = tuple[str, int, Optional[_Source], Optional[_Source], Optional[_Source],
                   tuple[tuple[str, _Source], ...]]  # fmt: skip
_Plan = tuple[_QueuePlan, ...]
_PLANS: dict[tuple[str, tuple[str, ...]], _Plan] = {}
_PLANS_LIMIT = 256  # name sets remembered (a port's set changes when its channels do)


def _plan(dm: DriverMap, names: tuple[str, ...]) -> _Plan:
    cache = _CACHE.setdefault(dm.driver, {})
    queues: dict[tuple[str, int], dict[str, list[str]]] = {}
    for name in names:
        try:
            c = cache[name]
        except KeyError:
            c = _classify(dm, name, cache)
        if c is not None:
            queues.setdefault((c[0], c[1]), {}).setdefault(c[2], []).append(name)
    out = []
    for (direction, queue), fields in sorted(queues.items()):
        src = {f: ns[0] if len(ns) == 1 else tuple(ns) for f, ns in fields.items()}
        extra = tuple((f, v) for f, v in src.items() if f not in _MAIN_FIELDS)
        out.append((direction, queue, src.get("packets"), src.get("bytes"), src.get("drops"),
                    extra))  # fmt: skip
    return tuple(out)


class _Extra(Mapping[str, int]):
    """A queue's `QueueCounters.extra`, summed from the port's counters when first read:
    no sampler consumer reads them (the tests, a recording do), and building a dict for each
    of a 48-channel port's 96 queues was a third of mapping its counters every tick."""

    __slots__ = ("_get", "_plan", "_values")

    def __init__(self, get: Callable[[str], int], plan: tuple[tuple[str, _Source], ...]) -> None:
        self._get = get
        self._plan = plan
        self._values: Optional[dict[str, int]] = None

    def _dict(self) -> dict[str, int]:
        if self._values is None:
            get = self._get
            self._values = {f: get(n) if isinstance(n, str) else sum(map(get, n))
                            for f, n in self._plan}  # fmt: skip
        return self._values

    def __getitem__(self, key: str) -> int:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._plan)

    def __repr__(self) -> str:
        return repr(self._dict())


def map_queue_counters(
    driver: Optional[str], stats: Mapping[str, int]
) -> tuple[QueueCounters, ...]:
    """Per-queue counters of a driver's `ethtool -S` output, in (direction, queue) order.

    An unknown driver, or a driver without per-queue counters, gives an empty tuple.
    """
    dm = driver_map(driver)
    if dm is None or not dm.queues:
        return ()
    names = tuple(stats)
    plan = _PLANS.get((dm.driver, names))
    if plan is None:
        if len(_PLANS) >= _PLANS_LIMIT:
            _PLANS.clear()
        plan = _PLANS[(dm.driver, names)] = _plan(dm, names)
    get = stats.__getitem__
    # (each field's value inline: a function call per field was a third of the mapping)
    return tuple([
        QueueCounters(
            direction, queue,
            None if p is None else get(p) if p.__class__ is str else sum(map(get, p)),
            None if b is None else get(b) if b.__class__ is str else sum(map(get, b)),
            None if d is None else get(d) if d.__class__ is str else sum(map(get, d)),
            _Extra(get, extra),
        )
        for direction, queue, p, b, d, extra in plan
    ])  # fmt: skip


def nic_drop_counters(driver: Optional[str], stats: Mapping[str, int]) -> dict[str, int]:
    """The driver's device-level drop counters present in `stats` (raw values, by name)."""
    dm = driver_map(driver)
    if dm is None:
        return {}
    return {d.name: stats[d.name] for d in dm.drops if d.name in stats}


def _driver(fs: HostFS, ethtool: EthtoolSource, dev: str) -> Optional[str]:
    name = fs.readlink_name(f"{CLASS_NET}/{dev}/device/driver")
    if name:
        return name
    info = ethtool.driver_info(dev)  # virtual devices (veth, bond, vlan) have no device link
    return info.driver if info is not None and info.driver else None


def read_nic_counters(
    fs: HostFS, ethtool: EthtoolSource, dev: str, stats: Optional[Mapping[str, int]] = None
) -> NicCounters:
    """Counters of one interface; BadInput when it does not exist.

    The driver is the name of the `device/driver` link, else what `ethtool -i` says; ethtool
    statistics may be unavailable (lo, bond, vlan), then `ethtool` is empty and so are
    `queues` and `nic_drops`. `stats` are the interface's counters when the caller has them
    already (one netlink dump for every link, `Host.link_stats`); else they are read from
    its statistics directory.
    """
    if stats is None and (
        not dev or "/" in dev or dev in (".", "..") or not fs.isdir(f"{CLASS_NET}/{dev}")
    ):
        raise BadInput(f"no such interface: {dev}")
    if stats is None:
        stats = fs.read_int_dir(f"{CLASS_NET}/{dev}/statistics")
    driver = _driver(fs, ethtool, dev)
    raw = ethtool.stats(dev) or {}
    return NicCounters(
        dev=dev,
        driver=driver,
        stats=dict(stats),
        queues=map_queue_counters(driver, raw),
        nic_drops=nic_drop_counters(driver, raw),
        ethtool=raw,
    )


def check_interfaces(
    fs: HostFS, names: Sequence[str], known: Optional[Iterable[str]] = None
) -> list[str]:
    """`names` without duplicates; BadInput("no such interface: X") for one that is not there
    (among `known`, default: the interfaces below /sys/class/net)."""
    known = set(nic_names(fs) if known is None else known)
    for name in names:
        check_ifname(name, "--iface")
        if name not in known:
            raise BadInput(f"no such interface: {name}")
    return list(dict.fromkeys(names))


def read_all_nics(
    fs: HostFS,
    ethtool: EthtoolSource,
    only: Optional[Sequence[str]] = None,
    links: Optional[Mapping[str, Mapping[str, int]]] = None,
) -> dict[str, NicCounters]:
    """Counters of every interface except `lo`, or of the ones in `only` (any, lo included).

    `links` is every interface's counters from one netlink dump (`Host.link_stats`), which
    then also says which interfaces there are; without it both come from /sys/class/net.
    A name in `only` that is not an interface raises BadInput("no such interface: X").
    """
    if links is None:
        names = check_interfaces(fs, only) if only else [n for n in nic_names(fs) if n != "lo"]
        return {name: read_nic_counters(fs, ethtool, name) for name in names}
    names = check_interfaces(fs, only, links) if only else sorted(n for n in links if n != "lo")
    return {name: read_nic_counters(fs, ethtool, name, links[name]) for name in names}
