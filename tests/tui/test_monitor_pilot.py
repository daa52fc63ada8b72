"""The monitor app driven by `App.run_test()`: every panel updates from scripted ticks, every
key does what the help says, and the worker reaches the UI only through typed messages."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from lbtune.observe.probes import DropCount, NapiCount, ProbeSample
from lbtune.tui.app import FeedEnded, FrameReady, MonitorApp, PanelView, ReportWritten
from lbtune.tui.screens import HelpScreen, InterfaceScreen, ReportScreen
from tests.conftest import DELL, KVM
from tests.tui.conftest import FIXED_TIME, Script, ScriptedFeed, tick

SIZE = (140, 48)


def text_of(app: MonitorApp, panel: str) -> str:
    widget = app.query_one(f"#{panel}", PanelView)
    console = Console(file=io.StringIO(), width=120, record=True, color_system=None)
    console.print(widget.content)
    return console.export_text()


async def until(pilot: Any, cond: Any, tries: int = 200) -> None:
    for _ in range(tries):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError("condition not reached")


def _app(name: str = KVM, **kw: Any) -> tuple[MonitorApp, ScriptedFeed, Script]:
    script = Script(name)
    feed = ScriptedFeed(script.host)
    return MonitorApp(feed, clock=lambda: FIXED_TIME, **kw), feed, script


def _probes(seconds: float = 1.0) -> ProbeSample:
    drop = DropCount("TCP_LISTEN_OVERFLOW", 40, "tcp_v4_rcv+0x91", "tcp_v4_rcv", "IPv4", 30)
    napi = NapiCount("ens3", 0, "0xff", 2, 1, 500, 30000, 40, 0, 64)
    return ProbeSample(("drops", "napi"), seconds, (drop,), 0, "host", (), (napi,), 0, ())


async def test_every_panel_updates_from_a_scripted_tick_via_typed_messages():
    messages: list[Any] = []
    app, feed, script = _app()
    async with app.run_test(size=SIZE, message_hook=messages.append) as pilot:
        feed.push(tick(script.step()))
        await until(pilot, lambda: app.frames == 1)
        assert "No packet loss" in text_of(app, "findings")
        assert "probes off" in text_of(app, "drops")
        feed.push(tick(script.step(
            snmp={"TcpExt.ListenOverflows": 50, "TcpExt.ListenDrops": 50},
            softnet={1: (90000, 120, 40)}, net_rx={1: 3000},
            queues={("ens3", "rx", 2): 90000, ("ens3", "rx", 0): 1000},
            listen={80: (511, 50)}, conntrack=60000,
        ), _probes(), "on"))  # fmt: skip
        await until(pilot, lambda: app.frames == 2)
        drops = text_of(app, "drops")
        assert "accept queue" in drops and "50" in drops and "CPU backlog" in drops
        assert "TCP_LISTEN_OVERFLOW" in drops and "tcp_v4_rcv+0x91" in drops  # kernel reasons
        listen = text_of(app, "listen")
        assert "0.0.0.0:80" in listen.splitlines()[1] and "100%" in listen and "50" in listen
        queues = text_of(app, "queues")
        assert "ens3" in queues and "busiest/mean" in queues
        q2 = next(ln for ln in queues.splitlines() if ln.strip().startswith("2 "))
        assert "90.0k" in q2 and "40" in q2  # rx pps, napi polls out of budget per second
        cpus = text_of(app, "cpus")
        cpu1 = next(ln for ln in cpus.splitlines() if ln.strip().startswith("1 "))
        assert "90.0k" in cpu1 and "120" in cpu1 and "40" in cpu1
        assert "60,000 / 65,536" in text_of(app, "conntrack")
        found = text_of(app, "findings")
        assert "Accept queue overflow on tcp port 80" in found and "fix:" in found
        assert "kernel: TCP_LISTEN_OVERFLOW tcp_v4_rcv+0x91 (IPv4) = 30" in found
        assert "probes on" in str(app.query_one("#header").content)
    assert sum(isinstance(m, FrameReady) for m in messages) == 2
    assert feed.woken >= 1  # quitting woke the feed's wait


async def test_p_pauses_the_display_while_sampling_goes_on():
    app, feed, script = _app()
    async with app.run_test(size=SIZE) as pilot:
        feed.push(tick(script.step()))
        await until(pilot, lambda: app.frames == 1)
        await pilot.press("p")
        assert app.paused and "PAUSED" in str(app.query_one("#header").content)
        feed.push(tick(script.step(snmp={"TcpExt.ListenOverflows": 7})))
        await until(pilot, lambda: app.frames == 2)
        assert "Accept queue" not in text_of(app, "findings")  # frozen
        await pilot.press("p")
        assert not app.paused and "Accept queue" in text_of(app, "findings")


async def test_i_chooses_the_interface_of_the_queues_panel():
    app, feed, script = _app(DELL)
    async with app.run_test(size=SIZE) as pilot:
        feed.push(tick(script.step()))
        await until(pilot, lambda: app.frames == 1)
        first = text_of(app, "queues").split()[0]
        await pilot.press("i")
        assert isinstance(app.screen, InterfaceScreen)
        await pilot.press("down", "enter")
        assert not isinstance(app.screen, InterfaceScreen)
        assert app.iface is not None and app.iface != first
        assert text_of(app, "queues").split()[0] == app.iface
        await pilot.press("i", "escape")  # cancel keeps the choice
        assert text_of(app, "queues").split()[0] == app.iface


async def test_b_toggles_the_probes_and_plus_minus_change_the_interval():
    app, feed, _script = _app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("b")
        assert feed.want_probes is False
        await pilot.press("b")
        assert feed.want_probes is True
        await pilot.press("minus", "minus", "plus")
        assert feed.intervals == [2.0, 5.0, 2.0]
        assert "every 2 s" in str(app.query_one("#header").content)
        for _ in range(6):
            await pilot.press("plus")
        assert feed.interval == 0.5  # the shortest step


async def test_c_condenses_idle_rows_on_the_48_cpu_host():
    app, feed, script = _app(DELL)
    async with app.run_test(size=SIZE) as pilot:
        assert app.condensed  # more than 16 CPUs: condensed from the start
        feed.push(tick(script.step(softnet={5: (1000, 0, 0)})))
        await until(pilot, lambda: app.frames == 1)
        assert "idle CPUs hidden" in text_of(app, "cpus")
        await pilot.press("c")
        full = text_of(app, "cpus")
        assert "idle CPUs hidden" not in full
        assert sum(1 for ln in full.splitlines() if ln.strip()[:1].isdigit()) == 48


async def test_w_writes_a_report_of_the_last_seconds(tmp_path):
    written: list[ReportWritten] = []
    app, feed, script = _app()

    def hook(m: Any) -> None:
        if isinstance(m, ReportWritten):
            written.append(m)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        for n in (0, 20, 30):
            feed.push(tick(script.step(snmp={"TcpExt.ListenOverflows": n})))
        await until(pilot, lambda: app.frames == 3)
        await pilot.press("w")
        assert isinstance(app.screen, ReportScreen)
        path = app.screen.query_one("#path")
        path.value = str(tmp_path / "last.json")
        app.screen.query_one("#seconds").value = "2"
        await pilot.press("enter")
        await until(pilot, lambda: bool(written))
        assert written[0].error is None, written[0].error
        doc = json.loads((tmp_path / "last.json").read_text())
        (f,) = [f for f in doc["findings"] if f["rule"] == "accept-queue-overflow"]
        assert f["count"] == 50 and doc["window_seconds"] == 2.0  # the last 2 s: 20 + 30
        assert doc["probes"]["status"] == "off"
        assert "wrote" in str(app.query_one("#status").content)
        # The same file again is refused (no --force in the TUI), in the status line.
        await pilot.press("w")
        app.screen.query_one("#path").value = str(tmp_path / "last.json")
        await pilot.press("enter")
        await until(pilot, lambda: len(written) == 2)
        assert "exists" in (written[1].error or "")
        # A name without a known format stays in the dialog with the reason.
        await pilot.press("w")
        app.screen.query_one("#path").value = str(tmp_path / "last.txt")
        await pilot.press("enter")
        assert isinstance(app.screen, ReportScreen)
        assert ".md, .html or .json" in str(app.screen.query_one("#error").content)
        await pilot.press("escape")
        assert not isinstance(app.screen, ReportScreen)


async def test_help_opens_and_closes():
    app, _feed, _script = _app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "write a diagnose report" in str(app.screen.query_one("#help").content)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_q_and_ctrl_c_quit_with_status_0():
    for key in ("q", "ctrl+c"):
        app, feed, _script = _app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(key)
            await pilot.pause()
        assert app.return_code == 0 and feed.woken >= 1


async def test_the_end_of_a_replay_is_said_and_the_last_frame_stays():
    ended: list[FeedEnded] = []
    app, feed, script = _app()
    async with app.run_test(size=SIZE, message_hook=lambda m: isinstance(m, FeedEnded)
                            and ended.append(m)) as pilot:  # fmt: skip
        feed.push(tick(script.step(snmp={"Udp.RcvbufErrors": 5}), final=True))
        await until(pilot, lambda: bool(ended))
        assert ended[0].error is None
        assert "replay finished" in str(app.query_one("#status").content)
        assert "UDP rcvbuf" in text_of(app, "drops")


async def test_the_layout_follows_the_terminal_width():
    app, feed, script = _app(DELL)
    async with app.run_test(size=(80, 24)) as pilot:
        feed.push(tick(script.step(softnet={41: (1000, 7, 0)}), _probes(), "on"))
        await until(pilot, lambda: app.frames == 1)
        body = app.query_one("#body")
        assert body.has_class("narrow")  # one column
        left, right = app.query_one("#left"), app.query_one("#right")
        assert left.region.x == right.region.x and right.region.y > left.region.y
        # The CPU that drops comes first on the 48-CPU host, even with every CPU shown.
        await pilot.press("c")
        cpus = text_of(app, "cpus").splitlines()
        assert cpus[1].split()[0] == "41", cpus[:3]
        await pilot.resize_terminal(160, 48)
        await until(pilot, lambda: not body.has_class("narrow"))
        await pilot.pause()
        assert right.region.x > left.region.x  # two columns side by side


def test_a_narrow_grid_leaves_out_optional_columns_and_never_cuts_the_key():
    from lbtune.tui.lines import Grid, plain

    g = Grid(("listener", "queue", "note", "extra"), right=frozenset({"queue"}),
             optional=("extra",))  # fmt: skip
    g.add(("[2001:db8::1]:8443", ""), ("129", ""), ("a long remark here", ""), ("x" * 12, ""))
    rows = [plain(ln) for ln in g.lines(36)]
    assert all("extra" not in r for r in rows)  # left out whole, not cut
    assert rows[1].startswith("[2001:db8::1]:8443") and "129" in rows[1]
    assert rows[1].rstrip().endswith("…") and all(len(r) <= 36 for r in rows)  # note cut
async def test_udp_no_port_row_names_the_port_the_probe_saw():
    """The "UDP no port" row used to count datagrams without ever naming the port."""
    from lbtune.observe.probes import PortCount

    app, feed, script = _app()
    probes = ProbeSample(("drops", "napi"), 1.0, (), 0, "host", (), (), 0, (),
                         ports=(PortCount("udp", 4, "10.0.0.5", 53, 100),
                                PortCount("tcp", 4, "10.0.0.5", 80, 7)))  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        feed.push(tick(script.step()))
        await until(pilot, lambda: app.frames == 1)
        feed.push(tick(script.step(snmp={"Udp.NoPorts": 100}), probes, "on"))
        await until(pilot, lambda: app.frames == 2)
        row = next(ln for ln in text_of(app, "drops").splitlines() if "UDP no port" in ln)
        assert "10.0.0.5:53" in row and "100" in row, row
