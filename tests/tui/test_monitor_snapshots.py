"""Snapshots of the monitor's main screen (pytest-textual-snapshot; `--snapshot-update`
rewrites them after a deliberate change, then copy the Dell one to docs/img/monitor.svg).

The 48-CPU, two-NIC Dell fixture and the 4-vCPU KVM fixture, each after two scripted ticks
with a listen overflow, backlog drops on one CPU, one hot NIC queue and kernel drop reasons;
the Dell one at 80x24 (one column), 120x40 and 160x48 (two columns), and the help at 80x24.
"""

from __future__ import annotations

from typing import Any

from lbtune.tui.app import MonitorApp, PanelView
from tests.conftest import DELL, KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick
from tests.tui.test_monitor_pilot import _probes


def _loaded(name: str, hot: tuple[str, int], cpu: int, accept_queue: int) -> MonitorApp:
    script = Script(name)
    feed = ScriptedFeed(script.host)
    app = MonitorApp(feed, clock=lambda: FIXED_TIME)
    dev, queue = hot
    feed.push(tick(script.step(), _probes(), "on"))
    feed.push(tick(script.step(
        snmp={"TcpExt.ListenOverflows": 50, "TcpExt.ListenDrops": 50},
        softnet={cpu: (90000, 120, 40)}, net_rx={cpu: 3000},
        queues={(dev, "rx", queue): 90000}, listen={80: (accept_queue, 50)},
    ), _probes(), "on"))  # fmt: skip
    return app


async def _settle(pilot: Any) -> None:
    """Both ticks' frames in, and every panel laid out for the second one's lines: on a
    loaded machine the screen could be taken after the second frame but before the layout
    it asked for (panel boxes still as tall as the first frame's lines)."""
    app = pilot.app

    def laid_out() -> bool:
        return all(p.size.height == p.content.plain.count("\n") + 1 for p in app.query(PanelView))

    for _ in range(300):
        if app.frames >= 2 and laid_out():
            break
        await pilot.pause(0.02)
    await pilot.pause()


def test_main_screen_48_cpus(snap_compare: Any) -> None:
    app = _loaded(DELL, ("ens1f0np0", 5), 41, 129)
    assert snap_compare(app, terminal_size=(160, 48), run_before=_settle)


def test_main_screen_48_cpus_120x40(snap_compare: Any) -> None:
    app = _loaded(DELL, ("ens1f0np0", 5), 41, 129)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settle)


def test_main_screen_48_cpus_80x24(snap_compare: Any) -> None:
    app = _loaded(DELL, ("ens1f0np0", 5), 41, 129)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settle)


def test_help_80x24(snap_compare: Any) -> None:
    # No tick: the screen under the help is the same every run (a screen under a modal one
    # is not laid out again, so one laid out from half the ticks could show through).
    script = Script(KVM)
    app = MonitorApp(ScriptedFeed(script.host), clock=lambda: FIXED_TIME)
    assert snap_compare(app, press=["question_mark"], terminal_size=(80, 24))
