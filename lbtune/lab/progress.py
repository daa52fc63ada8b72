"""Progress of a lab scenario, passed from the guest to the host as JSON lines in a file.

The guest appends one `Step` per line to `progress.jsonl` in the call's directory
(``$LBTUNE_LAB_WORKDIR``: ``calls/<id>/`` of the work directory the host shares with the guest,
lbtune.lab.protocol); the host reads the new lines while the guest runs
(`ProgressReader.poll`, a Guest call's ``watch``) and hands them to the front end's display. A
file rather than a pipe because the guest's only channel to the host is that directory.

`Steps` is the one step context of every in-guest run (scenario, failover, adaptive): a
``with steps.step(name, detail)`` block writes START, then DONE or FAIL with the error, and
keeps each step's time (`StepTime`) for the run's result.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator, Optional, Union

from lbtune.lab.protocol import ENV_WORKDIR

PROGRESS_FILE = "progress.jsonl"
WORKDIR_ENV = ENV_WORKDIR  # set for each call by the guest agent (lbtune.lab.protocol)

START, DONE, FAIL, TICK, INFO = "start", "done", "fail", "tick", "info"


@dataclass(frozen=True)
class Step:
    """One progress event: step `name` started, finished, failed, or ticked (load seconds)."""

    name: str  # "topology", "profiles", "load", ...
    state: str  # START, DONE, FAIL, TICK or INFO
    detail: str = ""
    elapsed: float = 0.0  # seconds since the scenario started
    done: float = 0.0  # TICK: progress so far (load seconds run)
    total: float = 0.0  # TICK: the whole (load duration)


ProgressCallback = Callable[[Step], None]


class ProgressWriter:
    """Guest side: append steps to the work directory's progress file (or to nothing)."""

    def __init__(self, directory: Optional[str] = None, filename: str = PROGRESS_FILE) -> None:
        d = directory if directory is not None else os.environ.get(WORKDIR_ENV)
        self.path = os.path.join(d, filename) if d else None
        self.start = time.monotonic()

    def __call__(self, name: str, state: str, detail: str = "", **kw: float) -> None:
        step = Step(name, state, detail, round(time.monotonic() - self.start, 2), **kw)
        if self.path is None:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(step)) + "\n")
            fh.flush()


@dataclass(frozen=True)
class StepTime:
    """How one step of a run went: its seconds, and its detail or error."""

    name: str
    seconds: float
    ok: bool
    detail: str = ""


class Steps:
    """The steps of one in-guest run: progress for the host and each step's time."""

    def __init__(self, progress: ProgressWriter) -> None:
        self.progress = progress
        self.times: list[StepTime] = []

    @contextlib.contextmanager
    def step(self, name: str, detail: str = "") -> Iterator[None]:
        """START now; DONE with detail when the block ends, FAIL with the error if it raises."""
        self.progress(name, START, detail)
        t0 = time.monotonic()
        try:
            yield
        except BaseException as e:
            self.times.append(StepTime(name, round(time.monotonic() - t0, 2), False, str(e)))
            self.progress(name, FAIL, str(e))
            raise
        self.times.append(StepTime(name, round(time.monotonic() - t0, 2), True, detail))
        self.progress(name, DONE, detail)


def _step_of(raw: dict[str, Any]) -> Optional[Step]:
    try:
        return Step(
            name=str(raw["name"]),
            state=str(raw["state"]),
            detail=str(raw.get("detail", "")),
            elapsed=float(raw.get("elapsed", 0.0)),
            done=float(raw.get("done", 0.0)),
            total=float(raw.get("total", 0.0)),
        )
    except (KeyError, TypeError, ValueError):
        return None


class ProgressReader:
    """Host side: read the steps appended since the last poll and pass each to callback."""

    def __init__(self, callback: ProgressCallback, filename: str = PROGRESS_FILE) -> None:
        self.callback = callback
        self.filename = filename
        self.offset = 0
        self._partial = ""

    def poll(self, directory: Union[str, os.PathLike[str]]) -> None:
        path = os.path.join(directory, self.filename)
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
                self.offset = fh.tell()
        except OSError:
            return
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next poll
        for line in lines:
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            step = _step_of(raw) if isinstance(raw, dict) else None
            if step is not None:
                self.callback(step)
