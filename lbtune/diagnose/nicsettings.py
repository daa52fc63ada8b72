"""The NIC settings the NIC rules judge by: coalescing, features, pause, RSS hash fields,
indirection table and flow rules of each NIC, read through the host's ethtool source (the
running kernel, or the recorded `ethtool -c/-k/-a/-x/-n` output of a host tree).

Like the NICs themselves (`Context.nics`) they are read once when the report is made, not
on every tick: they are settings an operator changes by hand, and a rule judges the
window's counters against them. A family the driver does not support is None, and so is one
whose recording cannot be read (named in the report's missing sources): the rules that need
it stay quiet rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Optional, TypeVar

from lbtune.errors import MalformedHostFile
from lbtune.host.net.ethtool import EthtoolSource
from lbtune.host.net.nicparams import Coalesce, Features, Pause
from lbtune.host.net.rss import NtupleRule, Rxfh

# The flow types a load balancer's VIP traffic is: the ones whose hash must take the ports.
L4_FLOW_TYPES = ("tcp4", "udp4", "tcp6", "udp6")
PORT_LETTERS = "fn"  # RXH_L4_B_0_1 (source port), RXH_L4_B_2_3 (destination port)

T = TypeVar("T")


@dataclass(frozen=True)
class NicSettings:
    """One NIC's ethtool settings; None for a family the driver does not support."""

    dev: str
    coalesce: Optional[Coalesce] = None
    features: Optional[Features] = None
    pause: Optional[Pause] = None
    # (flow type, hash letters as ethtool writes them: "sd", "sdfn"), for the L4 flow types
    # the driver reports
    flow_hash: tuple[tuple[str, str], ...] = ()
    rxfh: Optional[Rxfh] = None
    ntuple: Optional[tuple[NtupleRule, ...]] = None

    def hash_fields(self, flow_type: str) -> Optional[str]:
        """The hash letters of `flow_type`, None when the driver does not report them."""
        return dict(self.flow_hash).get(flow_type)

    @property
    def rss_off(self) -> bool:
        """The driver says it spreads nothing by RSS: an indirection table of size 0
        (virtio-net without VIRTIO_NET_F_RSS: the hash fields it reports, none, mean nothing)."""
        return self.rxfh is not None and not self.rxfh.indir

    def l3_only(self) -> tuple[str, ...]:
        """The L4 flow types whose hash leaves out a port (no `f` or no `n`); none when the
        NIC does no RSS. A type with no hash fields at all counts where RSS is on (its flows
        all hash alike), and is left out where the table is not known."""
        if self.rss_off:
            return ()
        return tuple(
            ft
            for ft, letters in self.flow_hash
            if (letters or self.rxfh is not None)
            and not all(c in letters for c in PORT_LETTERS)
        )

    def control_queues(self) -> frozenset[int]:
        """Queues that flow rules reserve for control-plane traffic (VRRP, BGP, BFD, ssh:
        `CONTROL_PLANE`); a queue other rules steer to (VXLAN to one queue) is a data queue."""
        return frozenset(
            r.action for r in self.ntuple or () if r.action >= 0 and control_plane(r)
        )


# What a control-plane flow rule matches: VRRP (IP protocol 112), BGP (TCP 179 either way),
# BFD (UDP 3784/4784), ssh (TCP 22). The lb-dr data/control split steers these to a queue
# whose IRQ runs on a housekeeping CPU.
CONTROL_PLANE: tuple[tuple[str, str], ...] = (
    ("l4proto", "112"),
    ("dst-port", "179"),
    ("src-port", "179"),
    ("dst-port", "3784"),
    ("dst-port", "4784"),
    ("dst-port", "22"),
)


def control_plane(rule: NtupleRule) -> bool:
    """The rule steers control-plane traffic (it matches one of `CONTROL_PLANE`)."""
    return any(m in CONTROL_PLANE for m in rule.match)


def read_nic_settings(
    ethtool: EthtoolSource, devs: Iterable[str]
) -> tuple[dict[str, NicSettings], dict[str, str]]:
    """Every family of every NIC in `devs`, and what could not be read (source -> why)."""
    out: dict[str, NicSettings] = {}
    missing: dict[str, str] = {}

    def get(what: str, read: Callable[..., Optional[T]], *args: str) -> Optional[T]:
        try:
            return read(*args)
        except (MalformedHostFile, OSError) as e:
            missing[f"ethtool {what} {args[0]}"] = str(e)
            return None

    for dev in devs:
        hashes: list[tuple[str, str]] = []
        for ft in L4_FLOW_TYPES:
            letters = get(f"rx-flow-hash {ft}", ethtool.rx_flow_hash, dev, ft)
            if letters is not None:
                hashes.append((ft, letters))
        out[dev] = NicSettings(
            dev=dev,
            coalesce=get("-c", ethtool.coalesce, dev),
            features=get("-k", ethtool.features, dev),
            pause=get("-a", ethtool.pause, dev),
            flow_hash=tuple(hashes),
            rxfh=get("-x", ethtool.rxfh, dev),
            ntuple=get("-n", ethtool.ntuple_rules, dev),
        )
    return out, missing
