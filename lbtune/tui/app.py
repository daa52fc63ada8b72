"""The monitor app: panels over a feed, keys, and the worker threads that keep the UI free.

A worker thread iterates the `Feed` (sampling, probe reads) and builds each `Frame`
(`FrameBuilder`: rules included); it reaches the widgets only through typed messages
(`FrameReady`, `FeedEnded`), as harlequin does with its data sources. Writing a report is
another worker (`ReportWritten`). The UI thread only lays frames out, so it never waits for
the kernel, bcc or the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import threading
import time
from functools import lru_cache
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.color import Color
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver
from textual.geometry import Region, Size
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Footer, Static

from lbtune.host.threadname import name_this_thread
from lbtune.tui.compositor import BandCompositor, band_compositor_fits
from lbtune.tui.driver import QuietLinuxDriver
from lbtune.tui.feed import Feed
from lbtune.tui.frame import Frame, FrameBuilder
from lbtune.tui.lines import Line, line
from lbtune.tui.panels import conntrack, cpus, drops, findings, listen, queues
from lbtune.tui.screens import HelpScreen, InterfaceScreen, ReportRequest, ReportScreen

INTERVALS = (0.5, 1.0, 2.0, 5.0, 10.0)
# Allocations (less frees) before the collector goes through its youngest generation. A
# 48-CPU host's tick allocates thousands of containers and the monitor keeps 10 minutes of
# samples: at Python's default (700), over 195 frames of the 48-CPU replay (measured by
# hand with gc.callbacks), it ran five times a tick, went through the kept samples in full
# eight times, and took 2 ms a tick; with GC_YOUNG and the start-up frozen, 0.2 ms.
GC_YOUNG = 10_000


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """The collector tuned for a long-running monitor, as it was again after: the objects
    alive at the start (modules, classes) are left out of its passes (`gc.freeze`), and the
    youngest generation is collected after GC_YOUNG allocations. Nothing the monitor keeps
    needs the collector: samples and frames hold no reference cycles and are freed by
    reference counting when dropped."""
    was = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *was[1:])
    try:
        yield
    finally:
        gc.set_threshold(*was)
        gc.unfreeze()


@lru_cache(maxsize=64)
def _style(name: str) -> Style:
    return Style.parse(name)


class FrameReady(Message):
    """A new frame from the feed's worker."""

    def __init__(self, frame: Frame) -> None:
        super().__init__()
        self.frame = frame


class FeedEnded(Message):
    """The feed has no more ticks (a replay's end, a recorded tree) or failed."""

    def __init__(self, error: Optional[str]) -> None:
        super().__init__()
        self.error = error


class ReportWritten(Message):
    def __init__(self, path: Optional[str], findings: int, error: Optional[str]) -> None:
        super().__init__()
        self.path = path
        self.findings = findings
        self.error = error


Draw = Callable[["Frame", "MonitorApp", int], list[Line]]
Key = Callable[["Frame", "MonitorApp"], tuple[object, ...]]


class WholeStrip(Strip):
    """A panel line's strip as the compositor is handed it. Textual's `Strip.divide` at the
    strip's own end (a panel's line lies between two cuts: the panel's edges) answers
    `[self]` and keeps that list in the strip's own cache: a reference cycle, so each line
    a new frame replaced stayed in memory, with its seven caches, until the garbage
    collector found it, and counted towards setting the collector off. This one answers the
    same list without keeping it; every other division is Textual's."""

    __slots__ = ()

    def divide(self, cuts: Iterable[int]) -> Sequence[Strip]:
        length = self.cell_length
        kept = [cut for cut in cuts if cut <= length]
        if kept == [length]:
            return [self]
        return super().divide(kept)


def line_strip(spans: Line, base: Style, width: int) -> Strip:
    """A line's spans as a strip of exactly `width` cells on `base`: what
    `Strip(segments).extend_cell_length(width, base).crop(0, width)` makes, in one strip
    where the text fits (each strip makes five caches; most lines fit)."""
    segments = [Segment(t, base + _style(s) if s else base) for t, s in spans]
    used = sum([cell_len(t) for t, _ in spans])
    if used > width:
        return WholeStrip(list(Strip(segments, used).crop(0, width)), width)
    if used < width:
        segments.append(Segment(" " * (width - used), base))
    return WholeStrip(segments, width)


class PanelView(Widget):
    """One panel: the lines a draw function makes of the latest frame for the panel's width.

    A new frame redraws only the lines that changed (the strips of the others are kept), and
    the layout is refreshed only when the number of lines changes: most of a refresh is the
    same text as a second ago, and measuring and rendering it all again every second was
    where the monitor spent most of its CPU.
    """

    DEFAULT_CSS = "PanelView { height: auto; }"

    def __init__(self, title: str, draw: Draw, key: Optional[Key] = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.title = title
        self.draw = draw
        # What `draw` reads of a frame and the app: the lines are not made again while it
        # stays the same (a listener's queue, the conntrack table: most panels hold still).
        self.key = key
        self._key: Optional[tuple[object, ...]] = None  # the key the lines were made for
        self._source: Optional[tuple[Frame, MonitorApp]] = None
        self._lines: list[Line] = [line(("waiting for the first refresh...", ""))]
        self._width = 0  # the width self._lines were made for (0: not laid out yet)
        self._strips: dict[int, Strip] = {}
        # y -> (the line's strip, the line filters and background, the strip they made)
        self._shown: dict[int, tuple[Strip, tuple[object, ...], Strip]] = {}
        # _plain_background() and the styles' keys it was worked out for
        self._style_key: tuple[tuple[int, int], ...] = ()
        self._background: Optional[Color] = None

    def show(self, frame: Frame, app: MonitorApp) -> Optional[Screen[Any]]:
        """Lay the frame out; the screen it marked for a redraw of its changed lines (to be
        drawn by the caller, `MonitorApp._show`), or None: nothing changed, or Textual
        redraws it in its own time (a layout, another version, not mounted)."""
        self._source = (frame, app)
        width = self.size.width
        if width <= 0:
            self._width = 0
            self.refresh(layout=True)
            return None
        key = self.key(frame, app) if self.key is not None else None
        if key is not None and key == self._key and width == self._width:
            return None  # the same lines
        old = self._lines
        new = self.draw(frame, app, width)
        self._lines, self._width, self._key = new, width, key
        if len(new) != len(old):
            self._strips.clear()
            self._shown.clear()
            self.refresh(layout=True)
            return None
        changed = [y for y, (a, b) in enumerate(zip(old, new)) if a != b]
        for y in changed:
            self._strips.pop(y, None)
            self._shown.pop(y, None)
        if changed:
            return self._repaint([Region(0, y, width, 1) for y in changed])
        return None

    def _repaint(self, regions: list[Region]) -> Optional[Screen[Any]]:
        """`refresh(*regions)`, handed to the screen at once: Textual's refresh prompts the
        widget's own message loop, whose idle handler then posts an update to the screen's,
        two hops of the event loop per panel and refresh for what the screen's update does
        (adds the widget to those it redraws). Returns that screen, which the caller then
        draws (`MonitorApp._show`). Textual's own way (returning None) on a version this was
        not read against (8.2.8: `Widget.refresh`, `Widget._check_refresh`,
        `Screen._on_update`) or before the widget is mounted."""
        screen = self.screen if self._is_mounted and self.display else None
        if not band_compositor_fits() or screen is None or self._layout_required:
            self.refresh(*regions)
            return None
        self._layout_cache.clear()  # what refresh() does for a repaint of regions
        self._set_dirty(*regions)
        self.clear_cached_dimensions()
        self._rich_style_cache.clear()
        if screen not in screen._compositor:  # what Screen._on_update does with the update
            return None
        screen._dirty_widgets.add(self)
        return screen

    def _layout_for(self, width: int) -> None:
        if width != self._width and width > 0:
            if self._source is not None:
                self._lines = self.draw(self._source[0], self._source[1], width)
            self._width = width
            self._strips.clear()
            self._shown.clear()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        self._layout_for(width)
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        self._layout_for(width)
        strip = self._strips.get(y)
        if strip is None:
            base = self.visual_style.rich_style
            spans = self._lines[y] if y < len(self._lines) else ()
            strip = line_strip(spans, base, width)
            self._strips[y] = strip
        return strip

    def _is_plain(self) -> bool:
        """Whether the styles draw nothing but the content: no border, outline, padding,
        tint, hatch or opacity here (the panel's box draws the border), as the monitor's
        CSS has it."""
        st = self.styles
        return (
            all(not kind for kind, _ in st.border)
            and all(not kind for kind, _ in st.outline)
            and tuple(st.padding) == (0, 0, 0, 0)
            and not st.tint.a
            and st.text_opacity == 1.0
            and not (st.has_rule("hatch") and st.hatch != "none")
            and self.opacity == 1.0
        )

    def _plain_background(self) -> Optional[Color]:
        """The background the line filters take when the widget is plain (`_is_plain`),
        else None; worked out again only when a style of the widget or of one of its
        ancestors changed (their styles' cache keys, which Textual's own caches go by)."""
        key = tuple((id(n), n.styles._cache_key) for n in self.ancestors_with_self)
        if key != self._style_key:
            self._style_key = key
            self._background = self.background_colors[1] if self._is_plain() else None
        return self._background

    def render_lines(self, crop: Region) -> list[Strip]:
        """The strips Textual's styles cache makes of a plain widget's lines (the content
        line, the app's line filters applied), without its per-call style resolution:
        that was most of the cost of drawing the few lines a refresh changes. Anything
        else (a style with a border, padding, tint, or an opacity below 1 here or above)
        is drawn by Textual (`tests/tui/test_panel_render.py` compares the two)."""
        background = self._plain_background()
        titled = self._border_title is not None or self._border_subtitle is not None
        if background is None or titled:
            return super().render_lines(crop)
        filters = self.get_line_filters()
        key = (tuple(filters), background)
        shown = self._shown
        strips = []
        for y in crop.line_range:
            line = self.render_line(y)
            kept = shown.get(y)
            if kept is not None and kept[0] is line and kept[1] == key:
                strips.append(kept[2])
                continue
            strip = line
            if filters:  # what `Strip.apply_filter` does, the result a WholeStrip
                segments = list(line)
                for f in filters:
                    segments = f.apply(segments, background)
                strip = WholeStrip(segments, line.cell_length)
            shown[y] = (line, key, strip)
            strips.append(strip)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, self.size.width):
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    @property
    def content(self) -> Text:
        """The panel as rich text (what is on screen, for tests and reports)."""
        out = Text()
        for i, spans in enumerate(self._lines):
            if i:
                out.append("\n")
            for t, s in spans:
                out.append(t, style=s)
        return out


class _Body(Horizontal):
    """The two columns' row: no border, no content of its own, so drawn as its background
    alone (Textual's BLANK): the compositor re-renders every widget a changed line's region
    crosses, and a blank one costs no style resolution."""

    BLANK = True


class _Column(Vertical):
    BLANK = True


class _Screen(Screen[None]):
    """The default screen, drawn as its background alone (see _Body), whose updates render
    only the rows they change (lbtune.tui.compositor)."""

    BLANK = True

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        if band_compositor_fits():
            self._compositor = BandCompositor()


class MonitorApp(App[int]):
    """`lbtune monitor`: see docs/monitor.md for every panel and key."""

    TITLE = "lbtune monitor"
    ENABLE_COMMAND_PALETTE = False  # every action has its key (footer, ? help)
    CSS = """
    Screen { layout: vertical; }
    #header { height: 1; background: $panel; color: $text; padding: 0 1; }
    #status { height: 1; padding: 0 1; color: $text-muted; }
    #body { height: 1fr; layout: horizontal; }
    #left { width: 1fr; }
    #right { width: 1fr; }
    .panel { border: round $primary-darken-2; padding: 0 1; height: auto; }
    #drops-box { max-height: 45%; }
    #listen-box { max-height: 25%; }
    #findings-box { height: 1fr; min-height: 5; }
    #queues-box { max-height: 40%; }
    #cpus-box { height: 1fr; min-height: 6; }
    #body.narrow { layout: vertical; overflow-y: auto; }
    #body.narrow > Vertical { width: 100%; height: auto; }
    #body.narrow .panel { height: auto; min-height: 0; max-height: 100vh; }
    """
    NARROW = 120  # below this many columns: one column of panels, the body scrolls
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
        Binding("p", "pause", "Pause"),
        Binding("i", "choose_iface", "Interface"),
        Binding("b", "toggle_probes", "Probes"),
        Binding("plus,equals_sign", "interval(-1)", "Faster", key_display="+"),
        Binding("minus", "interval(1)", "Slower", key_display="-"),
        Binding("w", "write_report", "Report"),
        Binding("c", "condense", "Condense"),
        Binding("question_mark,h,f1", "help", "Help", key_display="?"),
    ]

    def __init__(
        self,
        feed: Feed,
        iface: Optional[str] = None,
        report_dir: Optional[str] = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.feed = feed
        self.iface = iface
        self.paused = False
        self.condensed = len(feed.host.topology.cpus) > 16 if feed.host.topology else False
        self.frame: Optional[Frame] = None
        self.frames = 0  # frames received (shown or not)
        self.ended: Optional[str] = None
        self.report_dir = report_dir or os.getcwd()
        self.last_report: Optional[str] = None
        self._clock = clock
        self._stop = threading.Event()
        self._builder = FrameBuilder(feed.host)
        self._builder_lock = threading.Lock()
        self._shown_header: Optional[Text] = None
        self._header_key: Optional[tuple[object, ...]] = None
        self._laid_out = False
        self._user_condensed = False
        self._panels: Optional[tuple[PanelView, ...]] = None

    def run(self, *args: Any, **kwargs: Any) -> Optional[int]:
        """Textual's `App.run` with fewer collections (`few_collections`)."""
        with few_collections():
            return super().run(*args, **kwargs)

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield Static(self._header_text(), id="header")
        # Wide: two columns. Narrow (< NARROW columns): the same panels in one column, in
        # the order left then right, each as tall as its lines, the body scrolling.
        with _Body(id="body"):
            # Each panel with what its render function reads of the frame and the app.
            with _Column(id="left"):
                yield self._box("drops", "drops by cause",
                                lambda f, a, w: drops.render(f, a.condensed, w),
                                lambda f, a: (f.drops, f.reasons, f.probe_state,
                                              a.condensed))  # fmt: skip
                yield self._box("listen", "listen queues",
                                lambda f, a, w: listen.render(f, a.condensed, w),
                                lambda f, a: (f.listen, a.condensed))  # fmt: skip
                yield self._box("findings", findings.TITLE,
                                lambda f, a, w: findings.render(f, a.condensed, w),
                                lambda f, a: (f.findings, f.quiet, f.judged, f.seconds,
                                              f.cumulative, a.condensed))  # fmt: skip
            with _Column(id="right"):
                yield self._box("conntrack", "conntrack",
                                lambda f, a, w: conntrack.render(f, a.condensed, w),
                                lambda f, a: (f.conntrack, a.condensed))  # fmt: skip
                yield self._box("queues", "NIC queues",
                                lambda f, a, w: queues.render(f, a.iface, a.condensed, w),
                                lambda f, a: (f.nics, a.iface, a.condensed))  # fmt: skip
                yield self._box("cpus", cpus.title(self.feed.host.topology),
                                lambda f, a, w: cpus.render(f, a.condensed, w),
                                lambda f, a: (f.cpus, a.condensed))  # fmt: skip
        yield Static("", id="status")
        yield Footer()

    def get_driver_class(self) -> type[Driver]:
        # The input thread that sleeps until there is input (lbtune.tui.driver), where it
        # was checked; Textual's own elsewhere and when TEXTUAL_DRIVER names one.
        own = super().get_driver_class()
        if own is LinuxDriver and band_compositor_fits():
            return QuietLinuxDriver
        return own

    def get_default_screen(self) -> Screen[None]:
        return _Screen(id="_default")

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out(event.size.width)

    def _lay_out(self, width: int) -> None:
        narrow = width < self.NARROW
        body = self.query_one("#body")
        if body.has_class("narrow") != narrow or not self._laid_out:
            body.set_class(narrow, "narrow")
            if not self._laid_out and narrow and not self._user_condensed:
                self.condensed = True  # a small terminal: only what moves, from the start
            self._laid_out = True
            self._show()

    def _box(self, name: str, title: str, draw: Draw, key: Key) -> VerticalScroll:
        box = VerticalScroll(PanelView(title, draw, key, id=name), id=f"{name}-box",
                             classes="panel")  # fmt: skip
        box.border_title = title
        box.can_focus = True
        return box

    def on_mount(self) -> None:
        self._lay_out(self.size.width)
        try:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGTERM, self.stop)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (tests): nothing to catch
        self._run_feed()

    # ------------------------------------------------------------------ workers

    @work(thread=True, exclusive=True, group="feed", exit_on_error=False)
    def _run_feed(self) -> None:
        # a pool's thread (asyncio's executor): named while it samples (top -H shows it)
        was = name_this_thread("lbtune-feed")
        error: Optional[str] = None
        try:
            for tick in self.feed.ticks(self._stop):
                with self._builder_lock:
                    frame = self._builder.frame(tick)
                self.post_message(FrameReady(frame))
                if self._stop.is_set():
                    break
        except Exception as e:  # shown in the status line; the last frame stays up
            error = f"{type(e).__name__}: {e}".splitlines()[0]
        finally:
            if was:
                name_this_thread(was)
        self.post_message(FeedEnded(error))

    @work(thread=True, group="report", exit_on_error=False)
    def _write_report(self, request: ReportRequest) -> None:
        # Imported on the first report (key w), not while the monitor starts.
        from lbtune.diagnose.render import render_html, render_json, render_markdown
        from lbtune.diagnose.view import report_view
        from lbtune.host.outfile import write_output

        renderers = {"md": render_markdown, "html": render_html, "json": render_json}
        state = self.frame.probe_state if self.frame else "off"
        try:
            with self._builder_lock:
                report = self._builder.report(request.seconds, state, self._clock())
            fmt = request.fmt
            text = renderers[fmt](report_view(report))
            path = write_output(request.path, text.encode("utf-8"), request.force)
        except Exception as e:  # BadInput (a path we must not write), no window yet
            self.post_message(ReportWritten(None, 0, str(e)))
            return
        self.post_message(ReportWritten(path, len(report.findings), None))

    # ------------------------------------------------------------------ messages

    def on_frame_ready(self, message: FrameReady) -> None:
        self.frames += 1
        self.frame = message.frame
        if not self.paused:
            self._show()

    def on_feed_ended(self, message: FeedEnded) -> None:
        self.ended = message.error or "end"
        if message.error:
            self._status(f"sampling stopped: {message.error}", "red")
        elif self.frame is not None and self.frame.cumulative:
            self._status("a recorded tree: counters since boot (one window)")
        else:
            self._status("replay finished: q quits")
        self._header()

    def on_report_written(self, message: ReportWritten) -> None:
        if message.error:
            self._status(f"report not written: {message.error}", "red")
            return
        self.last_report = message.path
        n = message.findings
        self._status(f"wrote {message.path} ({n} finding{'' if n == 1 else 's'})", "green")

    def _show(self) -> None:
        if self.frame is None:
            return
        if not self._panels:  # the same six widgets for the app's life: queried once
            self._panels = tuple(self.query(PanelView))
        marked: set[Screen[Any]] = set()
        for panel in self._panels:
            screen = panel.show(self.frame, self)
            if screen is not None:
                marked.add(screen)
        for screen in marked:
            self._redraw(screen)
        self._header()

    def _redraw(self, screen: Screen[Any]) -> None:
        """Draw the lines the panels marked on `screen` now, as the screen's update timer
        would once it has been prompted and woken (`Screen._on_idle`, `_on_timer_update`:
        two more hops of the event loop); Textual's own way when the screen has anything
        else to do (a layout, a scroll) or is not the one shown."""
        if (screen.is_current and not self._batch_count and not screen._layout_required
                and not screen._scroll_required and not screen._recompose_required):  # fmt: skip
            with screen._context():
                screen._on_timer_update()
        else:
            screen.check_idle()

    def _header(self) -> None:
        f = self.frame
        # what the line is made of (the host's fields do not change): the same every second
        key = (self.paused, self.feed.interval, f.probe_state if f else None,
               f.probe_note if f else None)  # fmt: skip
        if key == self._header_key:
            return
        self._header_key = key
        text = self._header_text()
        if text != self._shown_header:  # not redrawn when only the key's form changed
            self._shown_header = text
            self.query_one("#header", Static).update(text)

    def _status(self, text: str, style: str = "") -> None:
        self.query_one("#status", Static).update(Text(text, style=style))

    def _header_text(self) -> Text:
        h = self.feed.host
        t = Text()
        if self.paused:  # first: a long source path must not push it off the line
            t.append("PAUSED", style="bold reverse")
            t.append("  ")
        t.append_text(Text.assemble(("lbtune monitor", "bold"), f"  {h.hostname or '?'}",
                          f"  kernel {h.kernel or '?'}", f"  {h.source}"))  # fmt: skip
        if h.netns:
            t.append(f"  netns {h.netns}")
        t.append(f"  every {self.feed.interval:g} s")
        f = self.frame
        if f is not None:
            state = f.probe_state
            t.append("  probes ")
            t.append(state, style="green" if state in ("on", "recorded") else "yellow")
            if f.probe_note and state not in ("on", "recorded"):
                t.append(f" ({f.probe_note})", style="dim")
        return t

    # ------------------------------------------------------------------ actions

    async def action_quit(self) -> None:
        self.stop()

    def stop(self, code: int = 0) -> None:
        """Stop sampling and leave (q, Ctrl-C, SIGTERM): the terminal is restored by Textual,
        the probes are detached by the caller's `feed.close()`."""
        self._stop.set()
        self.feed.wake()
        self.exit(code)

    def action_pause(self) -> None:
        self.paused = not self.paused
        if not self.paused:
            self._show()
        self._header()

    def action_toggle_probes(self) -> None:
        self.feed.want_probes = not self.feed.want_probes
        self._status("probes " + ("requested: they load in the background"
                                  if self.feed.want_probes else "switched off"))  # fmt: skip

    def action_interval(self, step: int) -> None:
        now = self.feed.interval
        options = sorted(set(INTERVALS) | {now})
        i = options.index(now) + step
        new = options[max(0, min(len(options) - 1, i))]
        if new != now:
            self.feed.set_interval(new)
        self._status(f"refresh every {new:g} s")
        self._header()

    def action_condense(self) -> None:
        self.condensed = not self.condensed
        self._user_condensed = True
        self._show()

    def action_choose_iface(self) -> None:
        names = [n.dev for n in self.frame.nics] if self.frame else sorted(self.feed.host.nics)
        if not names:
            self._status("no NIC to choose")
            return

        def chosen(name: Optional[str]) -> None:
            if name:
                self.iface = name
                self._show()

        current = queues.chosen(self.frame, self.iface) if self.frame else None
        self.push_screen(InterfaceScreen(names, current.dev if current else None), chosen)

    def action_write_report(self) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self._clock()))
        default = os.path.join(self.report_dir, f"lbtune-monitor-{stamp}.md")

        def submitted(request: Optional[ReportRequest]) -> None:
            if request is not None:
                self._status(f"writing a report of the last {request.seconds:g} s...")
                self._write_report(request)

        self.push_screen(ReportScreen(default), submitted)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def on_unmount(self) -> None:
        self._stop.set()
        self.feed.wake()
