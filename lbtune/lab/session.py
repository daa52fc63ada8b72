"""A lab that stays up: `lbtune lab up`, runs in it, `lbtune lab down`.

`up()` starts a detached supervisor process (``python -m lbtune.lab.session supervise``, its
own session, so closing the terminal does not stop it). The supervisor boots the lab kernel
with lbtune.lab.uml and runs `serve()` inside it; `serve` loads IPVS, says it is ready and
then waits for requests in the run's work directory (the hostfs directory both sides see):

* ``request-ID.json`` with a scenario config: the guest runs it, writing progress to
  ``progress-ID.jsonl`` and the result to ``result-ID.json``;
* ``request-ID.json`` with ``{"stop": true}``: the guest powers off.

The state file (``/run/lbtune/lab-up.json`` for root, ``$LBTUNE_LAB_RUN_DIR`` overrides)
names the supervisor and the work directory. `down()` asks the guest to stop, and if it does
not, terminates the supervisor, whose UML runner kills the guest's whole process group and
removes the work directory; as a last resort every process whose command line names the
work directory is killed. An interrupted run in an up lab takes the lab down: the guest's
half-run scenario cannot be stopped from outside any other way.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from lbtune.errors import ExitCode, LbtuneError
from lbtune.lab.progress import ProgressCallback, ProgressReader, ProgressWriter
from lbtune.lab.uml import ENV_WORKDIR, LabError, LabUnavailable, find_lab_kernel, run_in_lab

ENV_RUN_DIR = "LBTUNE_LAB_RUN_DIR"
DEFAULT_RUN_DIR = "/run/lbtune"
STATE_FILE = "lab-up.json"
UP_TIMEOUT = 12 * 3600.0  # a lab left up is taken down after this long
READY_TIMEOUT = 120.0
POLL = 0.2


class LabBusy(LbtuneError):
    """A lab is already up (or a run is using it)."""

    exit_code = ExitCode.BUSY


class LabRunDirUnusable(LabError):
    """The run directory ($LBTUNE_LAB_RUN_DIR or the default) cannot be used: the user's
    setting to fix (exit 2), not a lab failure."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class LabSession:
    """A lab that is up: its supervisor process and the guest's work directory."""

    supervisor: int
    workdir: str
    started: float
    ready: bool


def run_dir() -> Path:
    """Where the state file lives: $LBTUNE_LAB_RUN_DIR, /run/lbtune for root, else the
    user's runtime directory (the lab itself needs no root)."""
    if os.environ.get(ENV_RUN_DIR):
        return Path(os.environ[ENV_RUN_DIR])
    if os.geteuid() == 0:
        return Path(DEFAULT_RUN_DIR)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "lbtune" if runtime else Path(f"/tmp/lbtune-{os.getuid()}")  # noqa: S108


def private_run_dir() -> Path:
    """run_dir(), created 0700 if missing, and refused (LabError) unless it is a real
    directory of this user that nobody else may write: its state file names a work
    directory that `lab down` kills processes for and removes, so a planted one (the /tmp
    fallback is a predictable name) must not be believed."""
    path = run_dir()
    try:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700, parents=True)
        st = os.lstat(path)
    except OSError as e:  # a path through a file, no permission: the user's to fix
        raise LabRunDirUnusable(f"{path}: cannot use as the lab run directory ({e.strerror or e}); "
                       f"set {ENV_RUN_DIR}") from None  # fmt: skip
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise LabRunDirUnusable(
            f"{path}: not a directory of this user that only it can write; remove it or set "
            f"{ENV_RUN_DIR}"
        )
    return path


def _state_path() -> Path:
    return private_run_dir() / STATE_FILE


def _own_workdir(workdir: str) -> bool:
    """True when `workdir` is a lab work directory of this user (uml.py makes them with
    mkdtemp, prefix lbtune-lab-): the only kind `down` may kill for and remove."""
    if not os.path.isabs(workdir) or not os.path.basename(workdir).startswith("lbtune-lab-"):
        return False
    try:
        st = os.lstat(workdir)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_supervisor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"lbtune.lab.session" in argv and b"supervise" in argv


def current() -> Optional[LabSession]:
    """The lab that is up, or None (a stale state file is removed)."""
    data = _read_json(_state_path())
    if data is None:
        return None
    try:
        pid, workdir = int(data["supervisor"]), str(data["workdir"])
    except (KeyError, TypeError, ValueError):
        pid, workdir = 0, ""
    if pid <= 0 or not _is_supervisor(pid) or not _own_workdir(workdir):
        with contextlib.suppress(OSError):
            _state_path().unlink()
        return None
    ready = os.path.exists(os.path.join(workdir, "ready"))
    return LabSession(pid, workdir, float(data.get("started", 0.0)), ready)


# --------------------------------------------------------------------------- host side


def up() -> LabSession:
    """Boot a lab guest that stays up; returns once it is ready. LabBusy if one is up."""
    if current() is not None:
        raise LabBusy("a lab is already up (lbtune lab down stops it)")
    find_lab_kernel()  # LabUnavailable here, not in the detached supervisor
    log = private_run_dir() / "lab-up.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lbtune.lab.session", "supervise"],
            stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        session = current()
        if session is not None and session.ready:
            return session
        if proc.poll() is not None:
            detail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            raise LabError(f"the lab guest did not come up: {(detail or ['no output'])[-1]}")
        time.sleep(POLL)
    _terminate(proc.pid, None)
    raise LabError(f"the lab guest was not ready after {READY_TIMEOUT:g} s; stopped it")


def request_run(
    payload: Mapping[str, Any], on_step: Optional[ProgressCallback], timeout: float,
    kind: str = "run",
) -> Any:
    """Run one scenario (kind "run") or failover experiment (kind "failover") in the lab that
    is up; its JSON result. Ctrl-C takes the lab down."""
    session = current()
    if session is None or not session.ready:
        raise LabError("no lab is up")
    rid = secrets.token_hex(4)
    wd = Path(session.workdir)
    reader = ProgressReader(on_step or (lambda step: None), f"progress-{rid}.jsonl")
    result = wd / f"result-{rid}.json"
    _write_json(wd / f"request-{rid}.json", {kind: dict(payload)})
    deadline = time.monotonic() + timeout
    try:
        while not result.exists():
            reader.poll(wd)
            if not _is_supervisor(session.supervisor):
                raise LabError("the lab went down during the run")
            if time.monotonic() > deadline:
                raise LabError(f"the run did not finish in {timeout:g} s")
            time.sleep(POLL)
        reader.poll(wd)
    except BaseException:
        down()
        raise
    data = _read_json(result) or {}
    for name in (f"result-{rid}.json", f"progress-{rid}.jsonl"):
        with contextlib.suppress(OSError):
            (wd / name).unlink()
    if "error" in data:
        raise LabError(f"lab run failed in the guest: {data['error']}")
    return data.get("value")


def down(timeout: float = 30.0) -> bool:
    """Stop the lab that is up; False when none was. Leaves no process and no directory."""
    session = current()
    if session is None:
        return False
    if session.ready:
        with contextlib.suppress(OSError):
            _write_json(Path(session.workdir) / "request-stop.json", {"stop": True})
    _terminate(session.supervisor, session.workdir, grace=timeout)
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return True


def _terminate(pid: int, workdir: Optional[str], grace: float = 10.0) -> None:
    """Wait for the supervisor to finish, SIGTERM it, and kill whatever names workdir."""
    deadline = time.monotonic() + grace
    while _is_supervisor(pid) and time.monotonic() < deadline:
        time.sleep(POLL)
    if _is_supervisor(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10.0
        while _is_supervisor(pid) and time.monotonic() < deadline:
            time.sleep(POLL)
    if workdir:
        for other in processes_naming(workdir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(other), signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


def processes_naming(text: str) -> list[int]:
    """PIDs (other than this process) whose command line contains text: leftover checks."""
    needle = text.encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if needle in fh.read():
                    out.append(int(entry))
        except OSError:
            continue
    return out


def supervise() -> int:
    """The detached supervisor: keeps the guest booted until it stops or is told to."""
    from lbtune.host.signals import interruptible

    state = _state_path()
    started = time.time()

    def record(workdir: Path) -> None:
        if _read_json(state) is None:
            _write_json(state, {"supervisor": os.getpid(), "workdir": str(workdir),
                                "started": started})  # fmt: skip

    try:
        with interruptible():
            run_in_lab("lbtune.lab.session:serve", timeout=UP_TIMEOUT, watch=record)
    except (LabError, LabUnavailable, KeyboardInterrupt) as e:
        print(f"lbtune lab: {e}", file=sys.stderr)
        return 1
    finally:
        data = _read_json(state)
        if data is not None and data.get("supervisor") == os.getpid():
            with contextlib.suppress(OSError):
                state.unlink()
    return 0


# --------------------------------------------------------------------------- guest side


def serve() -> dict[str, Any]:
    """Inside the guest: run scenario requests from the work directory until told to stop."""
    from lbtune.lab.balancer import load_ipvs_modules
    from lbtune.lab.failover import guest_run as failover_run
    from lbtune.lab.scenario import guest_run

    wd = Path(os.environ[ENV_WORKDIR])
    load_ipvs_modules("rr")
    (wd / "ready").write_text("ready\n", encoding="ascii")
    runs = 0
    while True:
        for req in sorted(wd.glob("request-*.json")):
            data = _read_json(req) or {}
            req.unlink()
            if data.get("stop"):
                return {"runs": runs}
            rid = req.stem.split("-", 1)[1]
            writer = ProgressWriter(str(wd), f"progress-{rid}.jsonl")
            try:
                if "failover" in data:
                    value = failover_run(data["failover"], writer)
                else:
                    value = guest_run(data["run"], writer)
                out: dict[str, Any] = {"value": value}
            except Exception as e:  # reported to the host, which raises it there
                out = {"error": f"{type(e).__name__}: {e}"}
            _write_json(wd / f"result-{rid}.json", out)
            runs += 1
        time.sleep(POLL)


if __name__ == "__main__":
    if sys.argv[1:] == ["supervise"]:
        sys.exit(supervise())
    sys.stderr.write("usage: python -m lbtune.lab.session supervise\n")
    sys.exit(2)
