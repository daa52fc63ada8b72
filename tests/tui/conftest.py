"""The monitor's test harness: a scripted feed of ticks built from fixture host trees.

`ScriptedFeed` is a `Feed` whose ticks the test pushes one by one; `Script` makes them: it
starts from a fixture tree's real sample and moves counters the way a fault would (listen
overflows, backlog drops, one hot NIC queue, conntrack filling), one second per tick. The
autouse fixture removes what varies between runs (the report clock, cursor blink).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Any, Iterator, Mapping, Optional

import pytest

from lbtune.diagnose.rules import sample_spec
from lbtune.host.host import Host
from lbtune.observe.model import (
    ConntrackStats,
    NicCounters,
    QueueCounters,
    SnmpCounters,
    Softirqs,
    SoftnetCpu,
)
from lbtune.observe.probes import ProbeSample
from lbtune.observe.sampler import Sampler
from lbtune.observe.window import Window
from lbtune.tui.feed import MonitorHost, Tick, describe_host, monitor_rules
from tests.conftest import HOSTS

FIXED_TIME = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC: report names and stamps


@pytest.fixture(autouse=True)
def _no_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Input

    monkeypatch.setattr(Input, "cursor_blink", False)
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "none")


class ScriptedFeed:
    """A feed whose ticks come from the test (`push`); records what the app asked of it."""

    def __init__(self, host: MonitorHost, interval: float = 1.0) -> None:
        self.host = host
        self.interval = interval
        self.want_probes = True
        self.intervals: list[float] = []
        self.closed = False
        self.woken = 0
        self._q: queue.Queue[Tick] = queue.Queue()

    def push(self, tick: Tick) -> None:
        self._q.put(tick)

    def ticks(self, stop: threading.Event) -> Iterator[Tick]:
        while not stop.is_set():
            try:
                tick = self._q.get(timeout=0.02)
            except queue.Empty:
                continue
            yield tick
            if tick.final:
                return

    def set_interval(self, seconds: float) -> None:
        self.interval = seconds
        self.intervals.append(seconds)

    def wake(self) -> None:
        self.woken += 1

    def close(self) -> None:
        self.closed = True


def _add(values: Mapping[Any, int], more: Mapping[Any, int]) -> dict[Any, int]:
    out = dict(values)
    for k, v in more.items():
        out[k] = out.get(k, 0) + v
    return out


class Script:
    """Samples of a fixture tree moving forward one `step()` at a time."""

    def __init__(self, name: str) -> None:
        host = Host.open(str(HOSTS / name))
        self.host = describe_host(host, None, f"fixture {name}")
        self.sample = dataclasses.replace(
            Sampler(host, None, sample_spec(monitor_rules())).take(), monotonic=1000.0
        )

    def step(
        self,
        snmp: Mapping[str, int] = {},
        softnet: Mapping[int, tuple[int, int, int]] = {},  # cpu -> (processed, dropped, squeeze)
        net_rx: Mapping[int, int] = {},
        queues: Mapping[tuple[str, str, int], int] = {},  # (dev, dir, queue) -> packets
        listen: Mapping[int, tuple[int, int]] = {},  # port -> (queue now, more drops)
        conntrack: Optional[int] = None,  # entries now
        seconds: float = 1.0,
    ) -> Window:
        s = self.sample
        rows = []
        for c in s.softnet:
            p, d, q = softnet.get(c.cpu, (0, 0, 0))
            rows.append(dataclasses.replace(c, processed=c.processed + p, dropped=c.dropped + d,
                                            time_squeeze=c.time_squeeze + q))  # fmt: skip
        softirqs = s.softirqs
        if softirqs is not None:
            counts = dict(softirqs.counts)
            counts["NET_RX"] = _add(counts.get("NET_RX", {}), net_rx)
            softirqs = Softirqs(softirqs.cpus, counts)
        nics = {}
        for name, nic in s.nics.items():
            qs = tuple(
                dataclasses.replace(q, packets=(q.packets or 0)
                                    + queues.get((name, q.direction, q.queue), 0))
                if q.packets is not None else q
                for q in nic.queues
            )  # fmt: skip
            nics[name] = dataclasses.replace(nic, queues=qs)
        sockets = tuple(
            dataclasses.replace(ls, queue=listen[ls.port][0],
                                drops=(ls.drops or 0) + listen[ls.port][1])
            if ls.port in listen else ls
            for ls in s.listen
        )  # fmt: skip
        ct = s.conntrack
        if ct is not None and conntrack is not None:
            ct = dataclasses.replace(ct, count=conntrack,
                                     totals=_add(ct.totals, {"drop": 0}))  # fmt: skip
        after = dataclasses.replace(
            s, monotonic=s.monotonic + seconds, snmp=SnmpCounters(_add(s.snmp.values, snmp)),
            softnet=tuple(rows), softirqs=softirqs, nics=nics, listen=sockets, conntrack=ct,
        )  # fmt: skip
        self.sample = after
        return Window(s, after)


def tick(win: Window, probes: Optional[ProbeSample] = None, state: str = "off",
         final: bool = False) -> Tick:  # fmt: skip
    return Tick(win, probes, state, "" if state != "off" else "press b to load the probes",
                1.0, final)  # fmt: skip


__all__ = [
    "FIXED_TIME",
    "ConntrackStats",
    "NicCounters",
    "QueueCounters",
    "Script",
    "ScriptedFeed",
    "SoftnetCpu",
    "tick",
]  # fmt: skip


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    """Run `async def` tests on a fresh event loop (what App.run_test needs), without an
    async plugin."""
    import asyncio
    import inspect

    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True
