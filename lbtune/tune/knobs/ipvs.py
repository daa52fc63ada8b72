"""IPVS services, real servers, drains, timeouts and addresses as knobs of the tuning engine.

So an IPVS change is planned, journaled, verified and rolled back like a sysctl, under the
same lock and with the same exit codes. Every knob is built from its object string alone
(the journal rebuilds knobs from (kind, obj)); values are text, `absent` meaning "not
there". Object and value formats:

- `ipvs_service` `tcp:10.0.0.1:80` | `udp:[2001:db8::1]:53` | `fwmark:7` | `fwmark:7:inet6`:
  `sched=wrr [flags=persistent,sh-port] [timeout=300] netmask=32 [pe=sip]`, or `absent`.
- `ipvs_dest` `SERVICE/REAL:PORT` (`tcp:10.0.0.1:80/10.0.0.11:80`):
  `weight=1 fwd=dr [upper=N] [lower=N]`, or `absent`. A removal waits for the real server's
  active connections to end (or the drain timeout) before deleting it, when the plan drained it.
- `ipvs_drain` `SERVICE/REAL:PORT`: the real server's weight alone; the plan writes 0 to a
  server it is about to remove, so no new connection is scheduled to it meanwhile.
- `ipvs_timeout` `tcp` | `tcpfin` | `udp`: seconds.
- `address` `IF:ADDR/PREFIX` (`eth0:10.0.0.100/32`, `lo:2001:db8::1/128`): `present` | `absent`.

Changes go through `lbtune.host.ipvs.table.Ipvs.submit`; inside `Ipvs.batching()` (the
reconcile uses it) they are sent pipelined, and the engine's read-back sends what is left.
"""

from __future__ import annotations

import functools
import time
from typing import Optional, TypeVar

from lbtune.errors import BadInput
from lbtune.host.deadline import wait_until
from lbtune.host.host import Host
from lbtune.host.ipvs.table import (
    FWD_METHODS,
    DestKey,
    DestSettings,
    Op,
    ServiceKey,
    ServiceSettings,
    add_dest_op,
    add_service_op,
    canonical_addr,
    default_netmask,
    delete_dest_op,
    delete_service_op,
    edit_dest_op,
    edit_service_op,
    flag_names,
    ipvs_of,
    parse_flags,
    set_timeouts_op,
)
from lbtune.host.net import addr as addrs
from lbtune.tune.knob import Knob, KnobError

Self = TypeVar("Self", bound="IpvsDestKnob")
ABSENT = "absent"
PRESENT = "present"
MAX_WEIGHT = 65535  # ipvsadm's limit; the kernel takes any non-negative int
MAX_TIMEOUT = 2147483  # INT_MAX / HZ at HZ=1000: the kernel refuses more
_DRAIN_POLL_S = 0.2


def _fields(text: str, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for word in text.split():
        k, sep, v = word.partition("=")
        if not sep or not k or k in out:
            raise BadInput(f"{what}: {text!r} is not KEY=VALUE words")
        out[k] = v
    return out


def _num(fields: dict[str, str], key: str, default: int, what: str, hi: int) -> int:
    raw = fields.pop(key, None)
    if raw is None:
        return default
    if not raw.isdigit() or not raw.isascii() or int(raw) > hi:
        raise BadInput(f"{what}: {key}={raw!r} is not a number from 0 to {hi}")
    return int(raw)


def service_text(family: int, s: ServiceSettings) -> str:
    words = [f"sched={s.scheduler}"]
    names = flag_names(s.flags, s.scheduler)
    if names:
        words.append("flags=" + ",".join(names))
    if s.timeout:
        words.append(f"timeout={s.timeout}")
    words.append(f"netmask={s.netmask}")
    if s.pe:
        words.append(f"pe={s.pe}")
    return " ".join(words)


def parse_service_text(family: int, text: str, what: str) -> ServiceSettings:
    f = _fields(text, what)
    sched = f.pop("sched", "")
    if not sched.isalnum() or len(sched) > 15:
        raise BadInput(f"{what}: sched={sched!r} is not a scheduler name")
    flags = parse_flags([w for w in f.pop("flags", "").split(",") if w], sched)
    timeout = _num(f, "timeout", 0, what, MAX_TIMEOUT)
    netmask = _num(f, "netmask", default_netmask(family), what, default_netmask(family))
    pe = f.pop("pe", "")
    if pe and not pe.isalnum():
        raise BadInput(f"{what}: pe={pe!r} is not a persistence engine name")
    if f:
        raise BadInput(f"{what}: unknown field(s) {', '.join(sorted(f))}")
    return ServiceSettings(sched, flags, timeout, netmask, pe)


# A 10,000-server plan formats and parses the same few values over and over: cached.
@functools.lru_cache(maxsize=4096)
def dest_text(d: DestSettings) -> str:
    words = [f"weight={d.weight}", f"fwd={d.fwd}"]
    if d.u_threshold:
        words.append(f"upper={d.u_threshold}")
    if d.l_threshold:
        words.append(f"lower={d.l_threshold}")
    return " ".join(words)


def parse_dest_text(text: str, what: str) -> DestSettings:
    try:
        return _dest_settings(text)
    except BadInput as e:
        raise BadInput(f"{what}: {e}") from None


@functools.lru_cache(maxsize=4096)
def _dest_settings(text: str) -> DestSettings:
    what = "real server"
    f = _fields(text, what)
    fwd = f.pop("fwd", "dr")
    if fwd not in FWD_METHODS:
        raise BadInput(f"{what}: fwd={fwd!r}: expected one of {', '.join(FWD_METHODS)}")
    weight = _num(f, "weight", 1, what, MAX_WEIGHT)
    upper = _num(f, "upper", 0, what, 2**31 - 1)
    lower = _num(f, "lower", 0, what, 2**31 - 1)
    if f:
        raise BadInput(f"{what}: unknown field(s) {', '.join(sorted(f))}")
    return DestSettings(weight, fwd, upper, lower)


class Drain:
    """One drain shared by the real servers a plan removes: they all got weight 0 at the
    start of the apply, so each removal waits against the same deadline, not its own.

    A real server is deleted once it has no active (established) connection, but never
    sooner than `settle` seconds after its weight went to 0: a connection scheduled just
    before is still in its handshake then, which IPVS counts as inactive, and deleting
    its real server would drop the rest of it.
    """

    def __init__(self, timeout: float, settle: float = 1.0) -> None:
        self.timeout = timeout
        self.settle = min(settle, timeout)
        self.started: Optional[float] = None
        # real server ident -> active connections it still had when it was deleted
        self.cut: dict[str, int] = {}

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def wait(self, host: Host, svc: ServiceKey, dest: DestKey) -> int:
        """Wait until the real server has no active connection (or the deadline passes);
        return how many it still has."""
        session = ipvs_of(host)
        session.flush()  # the weight-0 edits go out now, if they were queued
        self.start()
        assert self.started is not None
        settled = self.started + self.settle
        active = 0

        def drained() -> bool:
            nonlocal active
            dests = session.destinations(svc) or ()
            active = sum(d.active for d in dests if d.key == dest)
            return active == 0 and time.monotonic() >= settled

        # the last look comes at or just after the deadline: what it sees is what was cut
        left = self.started + self.timeout - time.monotonic()
        wait_until(drained, max(0.0, left), _DRAIN_POLL_S)
        if active:
            self.cut[f"{svc}/{dest}"] = active
        return active


class _IpvsKnob(Knob):
    per_netns = True  # IPVS tables belong to a network namespace

    def same(self, a: Optional[str], b: Optional[str]) -> bool:
        # plans compare 10,000 of these: equal text, or one side absent, needs no parsing
        if a == b:
            return True
        if a is None or b is None:
            return False
        if a.strip() == ABSENT or b.strip() == ABSENT:
            return a.strip() == b.strip()
        return super().same(a, b)

    def _submit(self, host: Host, op: Op) -> None:
        try:
            ipvs_of(host).submit(op)
        except OSError as e:
            raise KnobError(str(e)) from None

    def _failed(self, host: Host) -> bool:
        return False

    def restore(self, host: Host, original: Optional[str]) -> None:
        """Put back `original` unless the change never happened (its request failed) or the
        kernel holds the original already; both make rollback safe to repeat."""
        if original is None or self._failed(host):
            return
        if self.same(self.read(host), original):
            return
        self.write(host, original)


class IpvsServiceKnob(_IpvsKnob):
    kind = "ipvs_service"

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.key = ServiceKey.parse(obj)

    @classmethod
    def of(cls, key: ServiceKey) -> IpvsServiceKnob:
        """The knob of `key` without parsing its text again (plans build thousands)."""
        knob = cls.__new__(cls)
        Knob.__init__(knob, key.ident)
        knob.key = key
        return knob

    def _parse(self, value: str) -> Optional[ServiceSettings]:
        if value.strip() == ABSENT:
            return None
        return parse_service_text(self.key.family, value, self.ident)

    def normalize(self, value: str) -> str:
        try:
            s = self._parse(value)
        except BadInput:
            return super().normalize(value)
        return ABSENT if s is None else service_text(self.key.family, s)

    def check(self, host: Host, value: str) -> None:
        self._parse(value)

    def read(self, host: Host) -> Optional[str]:
        svc = ipvs_of(host).service(self.key)
        return ABSENT if svc is None else service_text(self.key.family, svc.settings)

    def write(self, host: Host, value: str) -> None:
        wanted = self._parse(value)
        session = ipvs_of(host)
        now = session.planned_service(self.key)
        if wanted is None:
            if now is not None:
                self._submit(host, delete_service_op(self.key))
        elif now is None:
            self._submit(host, add_service_op(self.key, wanted))
        else:  # in place, complete (an edit replaces every field)
            self._submit(host, edit_service_op(self.key, wanted))

    def _failed(self, host: Host) -> bool:
        return (self.key, None) in ipvs_of(host).failed


def dest_obj(svc: ServiceKey, dest: DestKey) -> str:
    return f"{svc.ident}/{dest.ident}"


def split_dest_obj(obj: str) -> tuple[ServiceKey, DestKey]:
    svc, sep, dest = obj.rpartition("/")
    if not sep:
        raise BadInput(f"IPVS real server {obj!r}: expected SERVICE/ADDRESS:PORT")
    return ServiceKey.parse(svc), DestKey.parse(dest)


class IpvsDestKnob(_IpvsKnob):
    kind = "ipvs_dest"

    def __init__(self, obj: str, drain: Optional[Drain] = None) -> None:
        super().__init__(obj)
        self.svc, self.dest = split_dest_obj(obj)
        self.drain = drain  # set by the reconcile for removals; journal-rebuilt knobs: None

    @classmethod
    def of(cls: type[Self], svc: ServiceKey, dest: DestKey, drain: Optional[Drain] = None
           ) -> Self:
        """The knob of `dest` in `svc` without parsing their text again."""
        knob = cls.__new__(cls)
        Knob.__init__(knob, dest_obj(svc, dest))
        knob.svc, knob.dest, knob.drain = svc, dest, drain
        return knob

    def _parse(self, value: str) -> Optional[DestSettings]:
        if value.strip() == ABSENT:
            return None
        return parse_dest_text(value, self.ident)

    def normalize(self, value: str) -> str:
        try:
            d = self._parse(value)
        except BadInput:
            return super().normalize(value)
        return ABSENT if d is None else dest_text(d)

    def check(self, host: Host, value: str) -> None:
        self._parse(value)

    def read(self, host: Host) -> Optional[str]:
        svc = ipvs_of(host).service(self.svc)
        d = None if svc is None else svc.dest(self.dest)
        return ABSENT if d is None else dest_text(d.settings)

    def write(self, host: Host, value: str) -> None:
        wanted = self._parse(value)
        session = ipvs_of(host)
        now = session.planned_dest(self.svc, self.dest)
        if wanted is None:
            if now is None:
                return
            if self.drain is not None:
                self.drain.wait(host, self.svc, self.dest)
            self._submit(host, delete_dest_op(self.svc, self.dest))
        elif now is None:
            if session.planned_service(self.svc) is None:
                raise KnobError(f"{self.ident}: service {self.svc} does not exist")
            self._submit(host, add_dest_op(self.svc, self.dest, wanted))
        else:  # in place, complete: thresholds reset otherwise
            self._submit(host, edit_dest_op(self.svc, self.dest, wanted))

    def _failed(self, host: Host) -> bool:
        return (self.svc, self.dest) in ipvs_of(host).failed


class IpvsDrainKnob(IpvsDestKnob):
    """Shares the object format of `ipvs_dest`; its value is the weight alone."""

    kind = "ipvs_drain"
    note = "drain: no new connections"

    def normalize(self, value: str) -> str:
        return " ".join(value.split())

    def check(self, host: Host, value: str) -> None:
        v = value.strip()
        if not v.isdigit() or not v.isascii() or int(v) > MAX_WEIGHT:
            raise BadInput(f"{self.ident}: weight {value!r} is not a number from 0 to 65535")

    def read(self, host: Host) -> Optional[str]:
        svc = ipvs_of(host).service(self.svc)
        d = None if svc is None else svc.dest(self.dest)
        return None if d is None else str(d.settings.weight)

    def same(self, a: Optional[str], b: Optional[str]) -> bool:
        # a drained server the same plan then deleted has no weight left: drained is done
        if (a is None and b == "0") or (b is None and a == "0"):
            return True
        return super().same(a, b)

    def write(self, host: Host, value: str) -> None:
        now = ipvs_of(host).planned_dest(self.svc, self.dest)
        if now is None:
            return  # nothing to drain: gone already
        weight = int(value)
        self._submit(host, edit_dest_op(self.svc, self.dest,
                                        DestSettings(weight, now.fwd, now.u_threshold,
                                                     now.l_threshold)))  # fmt: skip
        if weight == 0 and self.drain is not None:
            self.drain.start()


TIMEOUT_NAMES = ("tcp", "tcpfin", "udp")


class IpvsTimeoutKnob(_IpvsKnob):
    kind = "ipvs_timeout"

    def __init__(self, obj: str) -> None:
        if obj not in TIMEOUT_NAMES:
            raise BadInput(f"IPVS timeout {obj!r}: expected tcp, tcpfin or udp")
        super().__init__(obj)

    def check(self, host: Host, value: str) -> None:
        v = value.strip()
        if not v.isdigit() or not 1 <= int(v) <= MAX_TIMEOUT:
            raise BadInput(f"{self.ident}: {value!r} is not a number of seconds (1-{MAX_TIMEOUT})")

    def read(self, host: Host) -> Optional[str]:
        t = ipvs_of(host).timeouts()
        return None if t is None else str(getattr(t, self.obj))

    def write(self, host: Host, value: str) -> None:
        self._submit(host, set_timeouts_op(**{self.obj: int(value)}))


class AddressKnob(Knob):
    """An IP address on an interface (a VIP): `present` or `absent`."""

    kind = "address"
    per_netns = True

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        ifname, sep, cidr = obj.partition(":")
        addr, slash, plen = cidr.partition("/")
        bad = BadInput(f"address {obj!r}: expected INTERFACE:ADDRESS/PREFIX")
        if not sep or not ifname or not slash or not plen.isdigit() or not plen.isascii():
            raise bad
        family, self.addr = canonical_addr(addr, f"address {obj!r}")
        if not 0 <= int(plen) <= default_netmask(family):
            raise bad
        self.ifname = ifname
        self.prefixlen = int(plen)

    @property
    def interface(self) -> Optional[str]:
        return self.ifname

    def check(self, host: Host, value: str) -> None:
        if value.strip() not in (PRESENT, ABSENT):
            raise BadInput(f"{self.ident}: expected present or absent, got {value!r}")

    def read(self, host: Host) -> Optional[str]:
        if addrs.link_index(host, self.ifname) is None:
            return None
        for a in addrs.addresses(host):
            if (a.ifname, a.addr, a.prefixlen) == (self.ifname, self.addr, self.prefixlen):
                return PRESENT
        return ABSENT

    def write(self, host: Host, value: str) -> None:
        try:
            if value.strip() == PRESENT:
                addrs.add_address(host, self.ifname, self.addr, self.prefixlen)
            else:
                addrs.delete_address(host, self.ifname, self.addr, self.prefixlen)
        except (OSError, BadInput) as e:
            raise KnobError(f"{self.ident}: {e}") from None


def address_obj(ifname: str, addr: str, prefixlen: int) -> str:
    return f"{ifname}:{canonical_addr(addr, 'address')[1]}/{prefixlen}"
