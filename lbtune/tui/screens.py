"""The monitor's dialogs: help, choose an interface, write a report of the last N seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static

FORMATS = {".md": "md", ".html": "html", ".htm": "html", ".json": "json"}

HELP = """\
[b]lbtune monitor[/b]: live packet-drop view (docs/monitor.md)

[b]keys[/b]
  p        pause / resume the display (sampling goes on)
  i        choose the interface of the NIC queues panel
  b        probes on / off (drops + napi; root and bcc)
  + -      refresh faster / slower (0.5, 1, 2, 5, 10 s)
  w        write a diagnose report of the last N seconds
           (md, html with charts, json)
  c        condense: hide idle CPUs, queues, listeners, causes
  tab      move between panels; arrows / PgUp / PgDn scroll
  ? h F1   this help;  q or Ctrl-C quits

[b]panels[/b]
  drops by cause   rate, history and total of each way packets
                   die; kernel drop reasons when the probes run
  listen queues    accept queue fill of each listener against its
                   effective backlog = min(listen() backlog,
                   somaxconn), overflows/s
  findings         the diagnose rules over the last 10 s, with
                   their fix; kept until quiet for 10 s
  conntrack        table fill, drop / early_drop / insert_failed/s
  NIC queues       rx/tx packets and drops per queue; yellow = far
                   above the mean (RSS or IRQ imbalance);
                   napi out/s = polls out of budget
  CPUs             softnet processed / dropped / squeeze per
                   second, share of NET_RX softirqs and NIC queue
                   IRQs; iso = isolated CPU; busiest first when
                   there are many

below 120 columns the panels stack in one column (scroll it)
escape closes this help"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,h,f1", "close", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 72; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $primary; padding: 0 1; background: $panel; }
    HelpScreen Static { width: auto; }
    """

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP, id="help")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)


class InterfaceScreen(ModalScreen[Optional[str]]):
    """Pick the NIC the queues panel shows."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    InterfaceScreen { align: center middle; }
    InterfaceScreen > Vertical { width: 40; max-width: 100%; height: auto; max-height: 80%;
                                 border: round $primary; background: $panel; }
    InterfaceScreen OptionList { height: auto; max-height: 20; }
    """

    def __init__(self, names: list[str], current: Optional[str]) -> None:
        super().__init__()
        self.names = names
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("interface (enter picks, escape cancels)")
            yield OptionList(*self.names, id="ifaces")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self.current in self.names:
            options.highlighted = self.names.index(self.current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.names[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)


@dataclass(frozen=True)
class ReportRequest:
    seconds: float
    path: str
    fmt: str
    force: bool = False


def parse_request(seconds: str, path: str) -> ReportRequest:
    """The dialog's fields as a request; ValueError with the reason otherwise."""
    try:
        secs = float(seconds)
    except ValueError:
        raise ValueError(f"seconds: {seconds!r} is not a number") from None
    if not 0 < secs <= 3600:
        raise ValueError("seconds: more than 0 and at most 3600")
    path = path.strip()
    if not path:
        raise ValueError("file: a name is needed")
    ext = path[path.rfind(".") :].lower() if "." in path else ""
    if ext not in FORMATS:
        raise ValueError("file: end it in .md, .html or .json (the format)")
    return ReportRequest(secs, path, FORMATS[ext])


class ReportScreen(ModalScreen[Optional[ReportRequest]]):
    """Ask for N seconds and a file; enter in the file field writes."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    ReportScreen { align: center middle; }
    ReportScreen > Vertical { width: 80; max-width: 100%; height: auto; padding: 0 1;
                              border: round $primary; background: $panel; }
    #error { color: $error; height: auto; }
    """

    def __init__(self, default_path: str, default_seconds: float = 60.0) -> None:
        super().__init__()
        self.default_path = default_path
        self.default_seconds = default_seconds

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("diagnose report of the last N seconds (escape cancels)")
            yield Label("seconds")
            yield Input(f"{self.default_seconds:g}", id="seconds")
            yield Label("file (.md, .html or .json; enter writes)")
            # The cursor at the end, nothing selected: backspace edits the extension (a
            # selected name would be replaced whole by the first key).
            yield Input(self.default_path, id="path", select_on_focus=False)
            yield Static("", id="error")

    def on_mount(self) -> None:
        self.query_one("#path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "seconds":
            self.query_one("#path", Input).focus()
            return
        try:
            request = parse_request(
                self.query_one("#seconds", Input).value, self.query_one("#path", Input).value
            )
        except ValueError as e:
            self.query_one("#error", Static).update(str(e))
            return
        self.dismiss(request)

    def action_cancel(self) -> None:
        self.dismiss(None)
