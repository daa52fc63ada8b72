"""The rules read the listeners' SYN queues only when a counter they name in `syn_queues_on`
moved (issue 33): the exporter and the monitor have the SYN queues read (a walk of the whole
connection table) only after one of the sampler's `SYN_OVERFLOWS` moved, so a rule that
reads them in any other case would judge by "not read".

On every fixture host with listeners, a since-boot window in which every counter moved but
the named ones (held at 0): the findings with every SYN queue full are the findings with no
SYN queue read. A rule that read `syn_recv` without naming the counter that leads it there
fails this (the full queues would be its evidence)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lbtune.diagnose.rules import RULES
from lbtune.exporter.collect import Exporter
from lbtune.host.runtime import Runtime
from lbtune.observe.model import SnmpCounters
from lbtune.observe.sampler import SYN_OVERFLOWS
from lbtune.observe.window import Window
from tests.conftest import HOSTS

GATE = tuple(dict.fromkeys(c for r in RULES for c in r.syn_queues_on))
SS = "sos_commands/networking/ss_-peaonmi"
WITH_LISTENERS = [h.name for h in sorted(HOSTS.iterdir())
                  if (h / SS).is_file() and "LISTEN" in (h / SS).read_text()]  # fmt: skip


def test_the_sampler_reads_the_syn_queues_after_every_counter_a_rule_names() -> None:
    assert {r.id for r in RULES if r.syn_queues_on} == {"syn-queue-full", "syn-cookies"}
    assert set(GATE) == set(SYN_OVERFLOWS)


@pytest.mark.parametrize("host", WITH_LISTENERS)
def test_no_rule_reads_the_syn_queues_unless_its_counters_moved(host: str) -> None:
    exp = Exporter(Runtime(root=str(HOSTS / host)), min_interval=0)
    sample = exp.sampler.take()
    assert sample.listen
    quiet = {k: (0 if k in GATE else v) for k, v in sample.snmp.values.items()}
    after = replace(sample, snmp=SnmpCounters(quiet))
    full = replace(after, listen=tuple(replace(s, syn_recv=max(1, s.backlog) + 1)
                                       for s in after.listen))  # fmt: skip
    unread = replace(after, listen=tuple(replace(s, syn_recv=None) for s in after.listen))

    def judged(s: object) -> list[tuple[str, str, str, str]]:
        found = exp._findings(Window(None, s), None)  # type: ignore[arg-type]
        return [(f.rule, f.level.value, f.object, f.cause) for f in found]

    assert judged(full) == judged(unread)
    # and the counters do lead there: with them moved, the full queues are the evidence
    moved = {k: (5 if k in GATE else v) for k, v in sample.snmp.values.items()}
    loud = replace(full, snmp=SnmpCounters(moved))
    assert any(f[0] in ("syn-queue-full", "syn-cookies") and "half-open now" in f[3]
               for f in judged(loud))  # fmt: skip
