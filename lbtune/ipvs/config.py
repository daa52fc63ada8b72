"""The director's declarative IPVS DR configuration: TOML schema, parsing and validation.

A config says what the director's IPVS table should hold: services (tcp/udp/sctp on an
address and port, or a firewall mark; IPv4 or IPv6) with their scheduler, flags and
persistence, each with its real servers (weight, connection thresholds); the IPVS
timeouts; `net.ipv4.vs.*` sysctls; where the VIPs live on the director; and how the
reconcile treats what is not listed. The format is documented in docs/ipvs.md.

Validation happens in two steps, both before anything changes: `parse_config` checks the
document on its own (types, ranges, duplicates, address families, the DR port rule,
scheduler names and flags), `check_host` against the facts of the director it will run on
(schedulers the kernel offers, addresses that are local, interfaces that exist). Every
problem is one line naming the config file and the offending entry.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Optional

from lbtune.errors import BadInput
from lbtune.host.identity import sha256
from lbtune.host.ipvs.table import (
    FWD_METHODS,
    KNOWN_SCHEDULERS,
    PROTOCOLS,
    DestKey,
    DestSettings,
    ServiceKey,
    ServiceSettings,
    default_netmask,
    flag_names,
    parse_flags,
)
from lbtune.host.net.ifname import is_ifname
from lbtune.host.textfile import read_user_text
from lbtune.ipvs import plaintoml
from lbtune.ipvs.cluster import ClusterConfig, parse_cluster
from lbtune.ipvs.tomldoc import Doc as _Doc

_TOML = "tomllib" if sys.version_info >= (3, 11) else "tomli"  # imported when a config needs it

MAX_BYTES = 4 << 20  # 1,000 services x 10 real servers is ~0.5 MB of TOML
MAX_WEIGHT = 65535
MAX_THRESHOLD = 2**31 - 1
MAX_TIMEOUT = 2147483  # seconds; INT_MAX / HZ
PRUNE = ("all", "vips", "none")
TIMEOUTS = ("tcp", "tcpfin", "udp")
SYSCTL_PREFIX = "net.ipv4.vs."
_SYSCTL_NAME = re.compile(r"[a-z0-9_]{1,64}")
_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")

TOP_KEYS = ("director", "timeouts", "sysctl", "vip", "service", "cluster")
DIRECTOR_KEYS = ("prune", "drain_timeout", "agent_port")
VIP_KEYS = ("address", "dev", "prefix")
SERVICE_KEYS = ("protocol", "address", "port", "fwmark", "family", "scheduler", "flags",
                "persistence", "persistence_netmask", "forward", "real_server")  # fmt: skip
REAL_KEYS = ("address", "port", "weight", "upper", "lower", "forward", "agent")
DEFAULT_AGENT_PORT = 9177  # `lbtune ipvs agent`'s default port (lbtune.ipvs.nodeagent)


@dataclass(frozen=True)
class RealServer:
    address: str  # compressed
    port: int
    weight: int = 1
    upper: int = 0  # connection thresholds; 0 = none
    lower: int = 0
    forward: str = "dr"
    agent: str = ""  # the node agent's URL for `lbtune ipvs adapt`; "" = none

    @cached_property  # a 10,000-server config asks often: parse the address once
    def key(self) -> DestKey:
        return DestKey.of(self.address, self.port)

    @cached_property
    def settings(self) -> DestSettings:
        return DestSettings(self.weight, self.forward, self.upper, self.lower)


@dataclass(frozen=True)
class VirtualService:
    key: ServiceKey
    scheduler: str = "wlc"
    flags: tuple[str, ...] = ()
    persistence: int = 0  # seconds; 0 = not persistent
    netmask: int = 32  # persistence granularity (prefix length)
    servers: tuple[RealServer, ...] = ()

    @cached_property
    def settings(self) -> ServiceSettings:
        flags = parse_flags(self.flags, self.scheduler)
        if self.persistence:
            flags |= 0x1  # IP_VS_SVC_F_PERSISTENT
        return ServiceSettings(self.scheduler, flags, self.persistence, self.netmask)


@dataclass(frozen=True)
class Vip:
    """A VIP lbtune places on the director: ADDRESS/PREFIX on interface DEV."""

    address: str
    dev: str
    prefix: int


@dataclass(frozen=True)
class DirectorConfig:
    source: str
    services: tuple[VirtualService, ...] = ()
    vips: tuple[Vip, ...] = ()
    timeouts: tuple[tuple[str, int], ...] = ()  # (name, seconds) in TIMEOUTS order
    sysctls: tuple[tuple[str, str], ...] = ()  # (full key, value)
    prune: str = "all"  # which kernel services not listed here are removed
    drain_timeout: float = 30.0
    agent_port: int = DEFAULT_AGENT_PORT  # real servers without `agent`: http://ADDR:PORT/
    cluster: Optional[ClusterConfig] = None  # [cluster]: one of N active directors (ECMP)
    text_sha256: str = field(default="", compare=False)  # of the file read (`load_config`)

    def service_addresses(self) -> set[str]:
        return {s.key.addr for s in self.services if s.key.protocol != "fwmark"}


# ------------------------------------------------------------------------------ reading


def load_config(path: str) -> DirectorConfig:
    """Read and validate a config file (the document alone; see `check_host`)."""
    text = read_user_text(path, MAX_BYTES, "config")
    cfg = parse_config_text(text, path)
    return replace(cfg, text_sha256=str(sha256(text.encode()).hexdigest()))


def parse_config_text(text: str, source: str = "<config>") -> DirectorConfig:
    if resident is not None:  # `lbtune ipvs serve`: sections it read before are not read again
        cfg = resident.parse(text, source)
        if cfg is not None:
            return cfg
    data = plaintoml.loads(text)  # the plain subset, faster; None: anything else
    if data is not None:
        return parse_config(data, source)
    toml: Any = importlib.import_module(_TOML)
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as e:
        first = (str(e).splitlines() or ["invalid TOML"])[0]
        m = _TOML_LINE.search(first)
        where = f"{source}:{m.group(1)}" if m else source
        what = first[: m.start()].strip() if m else first
        raise BadInput(f"{where}: invalid TOML: {what}") from None
    except RecursionError:  # thousands of nested arrays or tables
        raise BadInput(f"{source}: invalid TOML: nested too deeply") from None
    return parse_config(data, source)


_SECTION = "\n[[service]]\n"  # the line that opens a [[service]] section, as written


class SectionCache:
    """The config read section by section, each `[[service]]` section's validated service
    kept by its text: `lbtune ipvs serve` reads an edited 1,000-service config by reading
    only the sections that changed (docs/ipvs.md, "The resident reconciler").

    `parse` returns exactly what `parse_config_text` returns for the same text, or None
    when it cannot tell (the caller then reads the whole document). The text is cut at each
    line that is exactly `[[service]]`; what precedes the first is the rest of the document.
    Each section is read with `plaintoml` and must read as one `[[service]]` table and
    nothing else (a `[director]` or `[[vip]]` after it, a header written another way, a
    construct outside the plain subset, make it None); the rest is read with `plaintoml`
    or, outside its subset, tomllib, and must have no `service` key; no service may be
    listed twice; any error is None too, for the whole read to word. (A cut inside a
    multi-line string or array can only come after the rest opened one, which then does
    not read: None.) Only the sections of the last text read are kept."""

    def __init__(self) -> None:
        self._services: dict[str, VirtualService] = {}
        self.read = 0  # [[service]] sections validated by the last parse
        self.kept = 0  # ... and taken from the cache

    def parse(self, text: str, source: str) -> Optional[DirectorConfig]:
        try:
            return self._parse(text, source)
        except Exception:  # the whole read decides, and words the error
            return None

    def _parse(self, text: str, source: str) -> Optional[DirectorConfig]:
        pieces = ("\n" + text).split(_SECTION)
        known, fresh = self._services, {}
        services: list[VirtualService] = []
        read = 0
        for piece in pieces[1:]:
            svc = known.get(piece)
            if svc is None:
                data = plaintoml.loads("[[service]]\n" + piece)
                if data is None or data.keys() != {"service"} or len(data["service"]) != 1:
                    return None
                svc = _service(data["service"][0], source, len(services))
                read += 1
            fresh[piece] = svc
            services.append(svc)
        data = plaintoml.loads(pieces[0])
        if data is None:  # the rest in full TOML (a quoted key...): tomllib reads it
            data = importlib.import_module(_TOML).loads(pieces[0])
        if "service" in data:
            return None
        if len({s.key for s in services}) != len(services):
            return None
        cfg = parse_config(data, source)
        self._services, self.read, self.kept = fresh, read, len(services) - read
        return replace(cfg, services=tuple(services))


# Set by `lbtune ipvs serve` (lbtune.cli.ipvs.serve): configs are read through it.
resident: Optional[SectionCache] = None


# ------------------------------------------------------------------------------ checking


def parse_config(data: Any, source: str = "<config>") -> DirectorConfig:
    """Validate a parsed TOML document; BadInput names the first problem."""
    top = _Doc(data, source, "top level", TOP_KEYS)
    d = _Doc(top.data.get("director", {}), source, "[director]", DIRECTOR_KEYS)
    prune = d.text("prune", "all", PRUNE)
    drain = d.integer("drain_timeout", 30, 0, 3600)
    agent_port = d.integer("agent_port", DEFAULT_AGENT_PORT, 1, 65535)

    t = _Doc(top.data.get("timeouts", {}), source, "[timeouts]", TIMEOUTS)
    timeouts = tuple((k, t.integer(k, None, 1, MAX_TIMEOUT)) for k in TIMEOUTS if k in t.data)

    sysctls = _sysctls(top.data.get("sysctl", {}), source)

    vips: list[Vip] = []
    for i, raw in enumerate(top.tables("vip")):
        v = _Doc(raw, source, f"[[vip]] #{i + 1}", VIP_KEYS)
        family, addr = v.addr("address")
        dev = v.text("dev", None)
        if not is_ifname(dev):
            raise v.fail(f"dev = {dev!r} is not an interface name")
        full = default_netmask(family)
        prefix = v.integer("prefix", full, 1, full)
        if any(x.address == addr for x in vips):
            raise v.fail(f"VIP {addr} is listed twice")
        vips.append(Vip(addr, dev, prefix))

    services: list[VirtualService] = []
    seen: dict[ServiceKey, str] = {}
    for i, raw in enumerate(top.tables("service")):
        svc = _service(raw, source, i)
        if svc.key in seen:
            raise BadInput(f"{source}: service {svc.key} is listed twice "
                           f"({seen[svc.key]} and [[service]] #{i + 1})")  # fmt: skip
        seen[svc.key] = f"[[service]] #{i + 1}"
        services.append(svc)
    cluster = parse_cluster(top.data["cluster"], source) if "cluster" in top.data else None
    if cluster is not None:
        need = cluster.gate.min_real_servers
        for svc in (s for s in services if s.key.protocol == "tcp"):  # what the gate checks
            usable = sum(1 for rs in svc.servers if rs.weight > 0)
            if usable < need:
                raise BadInput(f"{source}: service {svc.key}: {usable} real server(s) with a "
                               f"weight, [cluster.gate] min_real_servers = {need}: its VIP "
                               "would never be announced")  # fmt: skip
    return DirectorConfig(source, tuple(services), tuple(vips), timeouts, sysctls, prune,
                          float(drain), agent_port, cluster)  # fmt: skip


def _sysctls(raw: Any, source: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(raw, dict):
        raise BadInput(f"{source}: [sysctl]: expected a table")
    out: dict[str, str] = {}
    for key, value in raw.items():
        name = key[len(SYSCTL_PREFIX) :] if key.startswith(SYSCTL_PREFIX) else key
        if not _SYSCTL_NAME.fullmatch(name):
            raise BadInput(f"{source}: [sysctl] {key!r}: expected an IPVS sysctl name "
                           "(net.ipv4.vs.NAME, e.g. conn_reuse_mode)")  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
            raise BadInput(f"{source}: [sysctl] {key} = {value!r}: expected a whole number")
        full = SYSCTL_PREFIX + name
        if full in out:
            raise BadInput(f"{source}: [sysctl] {full} is set twice")
        out[full] = str(value)
    return tuple(out.items())


def _service(raw: Any, source: str, i: int) -> VirtualService:
    s = _Doc(raw, source, f"[[service]] #{i + 1}", SERVICE_KEYS)
    proto = s.text("protocol", "tcp", (*PROTOCOLS, "fwmark"))
    if proto == "fwmark":
        for k in ("address", "port"):
            if k in s.data:
                raise s.fail(f"{k}: a fwmark service is selected by its mark alone")
        family = {"inet": 4, "inet6": 6}[s.text("family", "inet", ("inet", "inet6"))]
        key = ServiceKey.mark(s.integer("fwmark", None, 1, 2**32 - 1), family)
    else:
        if "fwmark" in s.data or "family" in s.data:
            raise s.fail("fwmark/family are for protocol = \"fwmark\" services")
        family, addr = s.addr("address")
        key = ServiceKey(family, proto, addr, s.integer("port", None, 1, 65535))
    s.where = f"service {key}"
    sched = s.text("scheduler", "wlc")
    if sched not in KNOWN_SCHEDULERS:
        raise s.fail(f"scheduler = {sched!r} is not an IPVS scheduler "
                     f"(one of {', '.join(KNOWN_SCHEDULERS)})")  # fmt: skip
    flags_raw = s.data.get("flags", [])
    if not isinstance(flags_raw, list) or not all(isinstance(f, str) for f in flags_raw):
        raise s.fail("flags: expected a list of names, e.g. [\"sh-port\"]")
    if "persistent" in flags_raw:
        raise s.fail("flags: set persistence = SECONDS instead of the persistent flag")
    try:
        flags = tuple(flag_names(parse_flags(flags_raw, sched), sched))  # canonical order
    except BadInput as e:
        raise s.fail(str(e)) from None
    if "ops" in flags_raw and proto not in ("udp", "fwmark"):
        raise s.fail("flags: one-packet scheduling (ops) is for UDP services")
    persistence = s.integer("persistence", 0, 0, MAX_TIMEOUT)
    hi = default_netmask(key.family)
    netmask = s.integer("persistence_netmask", hi, 1, hi)
    if "persistence_netmask" in s.data and not persistence:
        raise s.fail("persistence_netmask needs persistence = SECONDS")
    forward = s.text("forward", "dr", tuple(FWD_METHODS))

    servers: list[RealServer] = []
    seen: set[DestKey] = set()
    for j, rraw in enumerate(s.tables("real_server")):
        rs = _real(rraw, s, j, key, forward)
        if rs.key in seen:
            raise s.fail(f"real server {rs.key} is listed twice")
        seen.add(rs.key)
        servers.append(rs)
    return VirtualService(key, sched, flags, persistence, netmask, tuple(servers))


_REAL_KEYSET = frozenset(REAL_KEYS)
_INET4 = re.compile(r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
                    r"(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}")


def _plain_real(raw: Any, key: ServiceKey, forward: str) -> Optional[RealServer]:
    """The common real server (an IPv4 DR server of an address:port service, with a weight
    and nothing else unusual) checked without the general machinery: a config of 10,000
    spends most of its validation here. None: anything else, which `_real` checks (and
    words the error of)."""
    if (type(raw) is not dict or not raw.keys() <= _REAL_KEYSET or key.family != 4
            or key.protocol == "fwmark"):
        return None
    if "forward" in raw or forward != "dr" or "upper" in raw or "lower" in raw:
        return None
    addr, port, weight = raw.get("address"), raw.get("port", key.port), raw.get("weight", 1)
    agent = raw.get("agent", "")
    if (type(addr) is not str or type(port) is not int or type(weight) is not int
            or type(agent) is not str or agent or port != key.port
            or not 0 <= weight <= MAX_WEIGHT or not _INET4.fullmatch(addr)):
        return None
    rs = RealServer(addr, port, weight)
    # the cached properties, set here (the address is canonical already; and 3.11's
    # cached_property takes a lock on every first access), as attributes: writing to
    # rs.__dict__ would turn the object's compact attribute values into a full dict
    # (~370 more bytes per real server, and every new page costs a fault in the UML lab)
    _set(rs, "key", DestKey(4, addr, port))
    settings = _PLAIN_SETTINGS.get(weight)
    if settings is None:
        settings = _PLAIN_SETTINGS[weight] = DestSettings(weight)  # at most 65,536 weights
    _set(rs, "settings", settings)  # shared: frozen, and weights repeat
    return rs


_set = object.__setattr__


_PLAIN_SETTINGS: dict[int, DestSettings] = {}


def _real(raw: Any, svc: _Doc, j: int, key: ServiceKey, forward: str) -> RealServer:
    plain = _plain_real(raw, key, forward)
    if plain is not None:
        return plain
    r = _Doc(raw, svc.source, f"{svc.where}: real_server #{j + 1}", REAL_KEYS)
    family, addr = r.addr("address")
    r.where = f"{svc.where}: real server {addr}"
    fwd = r.text("forward", forward, tuple(FWD_METHODS))
    fwmark = key.protocol == "fwmark"
    port = r.integer("port", 0 if fwmark else key.port, 0, 65535)
    if family != key.family and fwd != "tunnel":
        raise r.fail(f"IPv{family} real server for an IPv{key.family} service "
                     "(only tunneling may mix address families)")  # fmt: skip
    if fwd == "dr" and fwmark and port != 0:
        raise r.fail(f"port = {port}: DR cannot change the port; a fwmark service keeps "
                     "the client's port, leave port out")  # fmt: skip
    if fwd == "dr" and not fwmark and port != key.port:
        raise r.fail(f"port = {port}: DR cannot change the port (the real server receives "
                     f"the packet as sent to {key.port}); use port {key.port}")  # fmt: skip
    if not fwmark and port == 0:
        raise r.fail("port = 0: a real server of an address:port service needs its port")
    weight = r.integer("weight", 1, 0, MAX_WEIGHT)
    upper = r.integer("upper", 0, 0, MAX_THRESHOLD)
    lower = r.integer("lower", 0, 0, MAX_THRESHOLD)
    if lower > upper:
        raise r.fail(f"lower = {lower} is above upper = {upper} (the kernel refuses it; "
                     "upper = 0 means no limit and then lower must be 0 too)")  # fmt: skip
    agent = r.text("agent", "")
    if agent and agent != "none" and not agent.startswith("http://"):
        raise r.fail(f"agent = {agent!r}: an http:// URL of `lbtune ipvs agent`, or \"none\"")
    return RealServer(addr, port, weight, upper, lower, fwd, agent)


# ------------------------------------------------------------------------------ the host


@dataclass(frozen=True)
class HostFacts:
    """What validation needs to know about the director (gathered by the reconcile)."""

    schedulers: Optional[frozenset[str]]  # None: cannot tell (the kernel decides)
    local_addresses: frozenset[str]
    interfaces: frozenset[str]


def check_host(cfg: DirectorConfig, facts: HostFacts) -> None:
    """The config against the director: schedulers it offers, VIPs that are local (or that
    the config places), interfaces that exist. BadInput names the first problem."""
    for vip in cfg.vips:
        if vip.dev not in facts.interfaces:
            raise BadInput(f"{cfg.source}: [[vip]] {vip.address}: interface {vip.dev} does "
                           "not exist on this host")  # fmt: skip
    placed = {v.address for v in cfg.vips}
    for svc in cfg.services:
        if facts.schedulers is not None and svc.scheduler not in facts.schedulers:
            offered = ", ".join(sorted(facts.schedulers)) or "none"
            raise BadInput(f"{cfg.source}: service {svc.key}: scheduler {svc.scheduler} is "
                           f"not available in this kernel (offered: {offered})")  # fmt: skip
        if svc.key.protocol == "fwmark":
            continue
        if svc.key.addr not in facts.local_addresses and svc.key.addr not in placed:
            raise BadInput(
                f"{cfg.source}: service {svc.key}: VIP {svc.key.addr} is not an address of "
                "this host, so the director would never receive its packets: add a [[vip]] "
                "with its interface (dev) or configure the address first"
            )
