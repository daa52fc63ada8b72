"""Flow-steering (ntuple) rules: one knob per rule location lbtune uses.

Object `eth0:1022` (the device and the rule's location in its table); value the rule in
`ethtool -N`'s words, `flow-type tcp4 dst-port 179 action 1` (action -1 drops), or `absent`.
The location is chosen when the profile is resolved (the rule already there with the same
match and action, else the last free slot, as ethtool picks one), so the journal records
exactly the locations lbtune added rules at: rollback writes `absent` there and deletes
those rules only; a rule lbtune did not add is never changed or deleted (a write finds its
location taken and fails instead). SIOCETHTOOL ETHTOOL_SRXCLSRLINS/SRXCLSRLDEL.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Mapping, Optional

from lbtune.errors import BadInput
from lbtune.host.host import Host
from lbtune.host.net import rss
from lbtune.host.net.rss import NtupleRule
from lbtune.tune.knob import KnobError
from lbtune.tune.knobs.common import split_dev
from lbtune.tune.knobs.rss import _RssKnob

ABSENT = "absent"


def rule_value(rule: NtupleRule) -> str:
    return rss.rule_text(rule.flow_type, rule.match, rule.action)


class NtupleKnob(_RssKnob):
    """`ethtool -N DEV flow-type ... action Q loc L` / `ethtool -N DEV delete L`."""

    kind = "ntuple"
    # why a profile's rule cannot be planned on this host (no control queue, ntuple filters
    # off): set by the profile resolver, planned as missing with this reason
    skip: Optional[str] = None

    def __init__(self, obj: str) -> None:
        super().__init__(obj)
        self.dev, loc = split_dev(obj, self.kind)
        if not loc.isdigit() or not loc.isascii() or int(loc) > 0x7FFFFFFF:
            raise BadInput(f"{self.kind} {obj!r}: expected DEVICE:LOCATION (a rule index)")
        self.location = int(loc)

    def _rule(self, host: Host) -> tuple[bool, Optional[NtupleRule]]:
        """(the driver has a rule table, the rule at this location)."""
        rules = host.ethtool.ntuple_rules(self.dev)
        if rules is None:
            return False, None
        return True, next((r for r in rules if r.location == self.location), None)

    def read(self, host: Host) -> Optional[str]:
        table, rule = self._rule(host)
        if not table:
            return None
        return ABSENT if rule is None else rule_value(rule)

    def normalize(self, value: str) -> str:
        text = " ".join(value.split())
        if text == ABSENT:
            return text
        try:
            return rss.rule_text(*rss.parse_rule_text(text))
        except ValueError:
            return text

    def unsettable(self, host: Host) -> Optional[str]:
        if self.skip is not None:
            return self.skip
        if host.ethtool.ntuple_rules(self.dev) is None:
            return f"{self.dev} has no ntuple flow rules (ethtool -n: not supported)"
        return None

    def check(self, host: Host, value: str) -> None:
        self.check_planned(host, value, {})

    def check_planned(self, host: Host, value: str, planned: Mapping[tuple[str, str], int]) -> None:
        text = " ".join(value.split())
        if text == ABSENT:
            return
        try:
            _, _, action = rss.parse_rule_text(text)
        except ValueError as e:
            raise BadInput(f"{self.ident}: {e}") from None
        if host.ethtool.ntuple_rules(self.dev) is None:
            return  # planned as unsettable, never written
        size = host.ethtool.ntuple_table_size(self.dev)
        if size is not None and self.location >= size:
            raise BadInput(
                f"{self.ident}: location {self.location} is beyond {self.dev}'s rule table "
                f"({size} rules: 0-{size - 1})"
            )
        rings = self.rings(host, planned)
        if action >= rings:
            raise BadInput(
                f"{self.ident}: action {action}: {self.dev} has {rings} receive ring(s) "
                f"(queues 0-{rings - 1}, or -1 to drop)"
            )

    def write(self, host: Host, value: str) -> None:
        text = " ".join(value.split())
        table, rule = self._rule(host)
        if not table:
            raise KnobError(f"{self.ident}: {self.dev} has no ntuple flow rules")
        try:
            if text == ABSENT:
                if rule is not None:
                    host.ethtool.delete_ntuple_rule(self.dev, self.location)
                return
            try:
                flow, match, action = rss.parse_rule_text(text)
            except ValueError as e:
                raise KnobError(f"{self.ident}: {e}") from None
            if rule is not None:
                if rule_value(rule) == rss.rule_text(flow, match, action):
                    return
                # never replace a rule lbtune did not add (mlx5 and ixgbe would overwrite it)
                raise KnobError(
                    f"{self.ident}: location {self.location} holds another rule now "
                    f"({rule_value(rule)}); nothing written"
                )
            got = host.ethtool.add_ntuple_rule(
                self.dev, NtupleRule(self.location, flow, match, action)
            )
        except OSError as e:
            why = e.strerror or str(e)
            if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                why += " (is the ntuple feature on? `ethtool -K DEV ntuple on`)"
            raise KnobError(f"{self.ident}={text[:60]}: {why}") from None
        if got != self.location:
            with contextlib.suppress(OSError):  # not where the journal says: take it out
                host.ethtool.delete_ntuple_rule(self.dev, got)
            raise KnobError(f"{self.ident}: the driver put the rule at {got}; removed")
