"""What the lab commands share: progress of a run on stderr, the run itself, and the
comma-separated number lists their options take."""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

from lbtune.errors import BadInput

_STATE_STYLE = {"start": "cyan", "done": "green", "fail": "bold red", "info": "dim"}
T = TypeVar("T")


def int_list(text: Optional[str], option: str, example: str) -> tuple[int, ...]:
    """`--weights 1,3` / `--rates 60,60,15` as integers; () when not given."""
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise BadInput(
            f"{option} {text!r}: comma-separated whole numbers, e.g. {example}"
        ) from None


def run_with_progress(run: Callable[[Any, Any], T], config: Any) -> T:
    """`run(config, on_step)` with the steps shown on stderr while it runs."""
    progress = LabProgress(quiet=False)
    try:
        return run(config, progress)
    finally:
        progress.close()


class LabProgress:
    """The run's steps on stderr: a live bar for the load on a terminal, plain lines else."""

    def __init__(self, quiet: bool) -> None:
        from rich.console import Console

        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False)
        self.bar: Any = None
        self.task: Any = None

    def __call__(self, step: Any) -> None:
        if self.quiet:
            return
        if step.state == "tick":
            self._tick(step)
            return
        if self.bar is not None and step.name in ("load", "scheme"):
            self.bar.stop()
            self.bar = None
        style = _STATE_STYLE.get(step.state, "")
        detail = f" {step.detail}" if step.detail else ""
        self.err.print(
            f"[dim]{step.elapsed:6.1f}s[/dim] [{style}]{step.state:>5}[/{style}] "
            f"{step.name}{detail}",
            markup=True, soft_wrap=True,
        )  # fmt: skip

    def _tick(self, step: Any) -> None:
        if not self.err.is_terminal:
            return
        if self.bar is None:
            from rich.progress import BarColumn, Progress, TimeRemainingColumn

            self.bar = Progress(
                "[cyan]  load", BarColumn(), "{task.completed:.0f}/{task.total:.0f} s",
                TimeRemainingColumn(), console=self.err, transient=True,
            )  # fmt: skip
            self.task = self.bar.add_task("load", total=step.total)
            self.bar.start()
        self.bar.update(self.task, completed=step.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
