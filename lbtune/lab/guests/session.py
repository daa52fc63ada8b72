"""A lab that stays up: `lbtune lab up`, requests to it from any process, `lbtune lab down`.

`up()` starts a detached supervisor process (``python -m lbtune.lab.guests.session supervise``,
its own session, so closing the terminal does not stop it). The supervisor boots the guest and
holds it; the guest agent (lbtune.lab.inguest.agent) serves requests in the guest's work
directory (lbtune.lab.protocol: ``req/<id>.json`` in, ``res/<id>.json`` out, the call's
progress in ``calls/<id>/``), the same protocol whichever backend runs it. `attach()` gives
the lab that is up as a lbtune.lab.guests.api.Guest (`SessionGuest`) that any process may
call; lbtune.lab.launch.run uses it when a lab is up. A stop request ends the agent, and the
guest powers off.

The state file (``/run/lbtune/lab-up.json`` for root, ``$LBTUNE_LAB_RUN_DIR`` overrides)
names the supervisor, the work directory and the session's token, and says ``ready`` once the
guest takes requests. `down()` sends the stop request, and if the guest does not stop,
terminates the supervisor, whose runner kills the guest's whole process group and removes
the work directory; as a last resort every process whose command line names the work
directory is killed. An interrupted run in an up lab takes the lab down: the guest's
half-run scenario cannot be stopped from outside any other way.

The lock (``lab-up.lock`` beside the state file, ``flock``): `up()` takes it before it looks
for a lab that is up and hands it to the supervisor, which holds it for as long as it lives
(the guest does not inherit it). So two racing `lab up`s cannot both boot, and a free lock
with a state file left behind means the supervisor died (kill -9 gives it no chance to take
its guest down). `reap_dead()` then kills every process of that session - the guest runs
in its own process group with the supervisor's environment, which carries the session's
token (``LBTUNE_LAB_SESSION``) - and removes the work directory; `lab up`, `lab status` and
`lab down` call it first and say in one line what they reaped.

Two backends (lbtune.lab.guests.api): ``up()`` boots the UML guest
(lbtune.lab.guests.uml.run_agent_in_lab, which loads IPVS before it says ready), ``up("vm")``
the VM guest (lbtune.lab.guests.vm: Debian's kernel under qemu). The VM supervisor
(``supervise --vm``) boots a VmGuest and holds it until its agent stops; the state file then
also says ``backend``, ``accelerator`` and why, ``kernel``, ``boot_seconds`` and ``phase``
(what the boot is doing, shown by `lab up` on stderr). The same lock serves both backends, so
a racing `up` of either kind cannot boot a second guest. A VM supervisor that died leaves a
qemu, a host network namespace and files: `reap_dead()` kills the qemu (it carries the token
too) and removes the rest. `lab run` and `lab failover` run in the UML guest only
(lbtune.lab.launch).
"""

from __future__ import annotations

import contextlib
import fcntl
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
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from lbtune.errors import BadInput, ExitCode, LbtuneError
from lbtune.host.atomic import write_json_atomic
from lbtune.host.deadline import wait_until
from lbtune.host.runner import pid_alive
from lbtune.lab.guests import vm
from lbtune.lab.guests.api import BACKENDS, AgentClient, Guest, Watch, completed
from lbtune.lab.guests.uml import find_lab_kernel, run_agent_in_lab
from lbtune.lab.protocol import (
    READY,
    REBOOT,
    LabError,
    LabUnavailable,
    argv_request,
    call_request,
    read_json,
    stop_request,
)

ENV_RUN_DIR = "LBTUNE_LAB_RUN_DIR"
DEFAULT_RUN_DIR = "/run/lbtune"
STATE_FILE = "lab-up.json"
LOCK_FILE = "lab-up.lock"
ENV_SESSION = "LBTUNE_LAB_SESSION"  # the session token, in the supervisor's (and guest's) env
LOCK_WAIT = 0.5  # `up` retries this long: a `status` may hold the lock for a moment
UP_TIMEOUT = 12 * 3600.0  # a lab left up is taken down after this long
READY_TIMEOUT = 120.0
ENV_VM_BOOT_TIMEOUT = "LBTUNE_VM_BOOT_TIMEOUT"  # seconds a `lab up --vm` boot may take
PROGRESS_EVERY = 30.0  # seconds between "still booting" lines of `lab up --vm`
POLL = 0.2
SETUP = "setup"  # the id of the supervisor's own request that readies a UML guest
SETUP_TARGET = "lbtune.lab.inguest.balancer:load_ipvs_modules"


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
    backend: str = "uml"
    accelerator: str = ""  # "uml", "kvm" or "tcg" ("" while the VM's is being chosen)
    accelerator_reason: str = ""
    kernel: str = ""
    boot_seconds: Optional[float] = None  # VM: host-measured, qemu start to a ready agent
    phase: str = ""  # VM: what the boot is doing

    def to_json(self) -> dict[str, Any]:
        return {
            "supervisor": self.supervisor, "workdir": self.workdir, "ready": self.ready,
            "backend": self.backend, "accelerator": self.accelerator,
            "accelerator_reason": self.accelerator_reason, "kernel": self.kernel,
            "boot_seconds": self.boot_seconds, "phase": self.phase,
        }  # fmt: skip


@dataclass(frozen=True)
class Reaped:
    """What `reap_dead()` cleaned up after a supervisor that died."""

    supervisor: int
    pids: tuple[int, ...]  # processes of the guest that were killed
    workdir: str  # the work directory removed ("" when it had none yet)

    def describe(self) -> str:
        """One line for the user."""
        who = f"the lab supervisor (pid {self.supervisor})" if self.supervisor else (
            "a lab supervisor that was starting")  # fmt: skip
        killed = f"killed its {len(self.pids)} orphaned guest process(es)" if self.pids else (
            "its guest had already stopped")  # fmt: skip
        removed = ", removed its work directory" if self.workdir else ""
        return f"{who} had died: {killed}{removed}"

    def to_json(self) -> dict[str, Any]:
        return {"supervisor": self.supervisor, "pids": list(self.pids), "workdir": self.workdir}


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
    """True when `workdir` is a lab work directory of this user (uml.py and vm.py make them
    with mkdtemp, prefix lbtune-lab- and lbtune-vm.): the only kind `down` may kill for and
    remove."""
    name = os.path.basename(workdir)
    if not os.path.isabs(workdir) or not name.startswith(("lbtune-lab-", "lbtune-vm.")):
        return False
    try:
        st = os.lstat(workdir)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    write_json_atomic(path, dict(data), 0o600)


def _read_json(path: Path) -> Optional[dict[str, Any]]:
    return read_json(path)


def _is_supervisor(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"lbtune.lab.guests.session" in argv and b"supervise" in argv


def _state_fields(data: Mapping[str, Any]) -> tuple[int, str, str]:
    """(supervisor pid, work directory, token) of a state file; 0/"" where unusable."""
    try:
        pid = int(data.get("supervisor") or 0)
    except (TypeError, ValueError):
        pid = 0
    workdir = data.get("workdir")
    token = data.get("token")
    if not (isinstance(token, str) and len(token) == 16 and set(token) <= set("0123456789abcdef")):
        token = ""
    return pid, workdir if isinstance(workdir, str) else "", token


def current() -> Optional[LabSession]:
    """The lab that is up (``ready`` False while it boots), or None. A state file naming a
    directory that is not a lab work directory of this user is removed; one of a supervisor
    that died is left for `reap_dead()`."""
    data = _read_json(_state_path())
    if data is None:
        return None
    pid, workdir, _ = _state_fields(data)
    if workdir and not _own_workdir(workdir):
        with contextlib.suppress(OSError):
            _state_path().unlink()
        return None
    if pid <= 0 or not _is_supervisor(pid):
        return None
    backend = data.get("backend") if data.get("backend") in BACKENDS else "uml"
    ready = bool(workdir) and data.get("ready") is True
    boot = data.get("boot_seconds")
    return LabSession(
        pid, workdir, float(data.get("started", 0.0)), ready, str(backend),
        _text(data.get("accelerator")), _text(data.get("accelerator_reason")),
        _text(data.get("kernel")), float(boot) if isinstance(boot, (int, float)) else None,
        _text(data.get("phase")),
    )  # fmt: skip


def _text(value: Any) -> str:
    """A state file's string field, one short line ("" when it is not a string)."""
    return value.splitlines()[0][:300] if isinstance(value, str) and value.strip() else ""


@contextlib.contextmanager
def _lock(wait: float = 0.0) -> Iterator[Optional[int]]:
    """The `lab up` lock: yields its file descriptor, or None when another process holds
    it (after retrying for `wait` seconds). Released when the last holder closes it."""
    path = private_run_dir() / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise LabRunDirUnusable(f"{path}: cannot open the lab lock ({e.strerror or e})") from None
    def locked() -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    try:
        yield fd if wait_until(locked, wait) else None
    finally:
        os.close(fd)


def reap_dead() -> Optional[Reaped]:
    """Clean up after a lab supervisor that died (kill -9, OOM): kill its orphaned guest,
    remove its work directory and state file. None when there was nothing to clean up, or
    when a supervisor (or a `lab up`) is alive and holds the lock."""
    with _lock() as fd:
        if fd is None:
            return None
        return _reap_locked()


def _reap_locked() -> Optional[Reaped]:
    """reap_dead() with the lock held: no live supervisor of this run directory exists."""
    state = _state_path()
    data = _read_json(state)
    if data is None:
        return None
    pid, workdir, token = _state_fields(data)
    own = bool(workdir) and _own_workdir(workdir)
    found = set(processes_with_env(f"{ENV_SESSION}={token}")) if token else set()
    if own:
        found.update(processes_naming(workdir))
    found = {p for p in found if not _is_supervisor(p) or p == pid}
    killed = _kill_groups(sorted(found))
    if data.get("backend") == "vm":
        # its qemu is dead now; the netns, files and state disk of its guest go too
        reaped_dirs = _reap_vm_files(pid, workdir if own else "", data.get("tmpdir"))
        if not own and reaped_dirs:
            workdir, own = reaped_dirs[0], True
    if own:
        shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.suppress(OSError):
        state.unlink()
    if not killed and not own:
        return None  # only a stale state file: nothing worth a word
    return Reaped(pid, tuple(killed), workdir if own else "")


def _reap_vm_files(supervisor: int, workdir: str, tmpdir: Any) -> list[str]:
    """The VM guest(s) of a supervisor that died: kill its qemu, delete its host netns, remove
    its work directory and state disk. `workdir` from the state file, else (it died while
    booting) the lbtune-vm.* directories in its `tmpdir` whose owner.json names it. Not
    vm.reap_stale: the supervisor may still be an unreaped zombie, which that takes for alive."""
    dirs = [Path(workdir)] if workdir else []
    if isinstance(tmpdir, str) and os.path.isabs(tmpdir) and supervisor > 0:
        for owner in sorted(Path(tmpdir).glob(f"lbtune-vm.*/{vm.OWNER}")):
            ours = (_read_json(owner) or {}).get("supervisor") == supervisor
            if ours and owner.parent not in dirs and _own_workdir(str(owner.parent)):
                dirs.append(owner.parent)
    for wd in dirs:
        owner_data = _read_json(wd / vm.OWNER) or {}
        qemu = owner_data.get("qemu")
        if isinstance(qemu, int) and qemu > 0 and qemu in processes_naming(str(wd)):
            _kill_groups([qemu])
        netns = owner_data.get("netns")
        if isinstance(netns, str) and netns.startswith("lbtune-vm-") and "/" not in netns:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
        shutil.rmtree(wd, ignore_errors=True)
        with contextlib.suppress(OSError):
            wd.with_name(wd.name + ".state.img").unlink()
    return [str(wd) for wd in dirs]


def _kill_groups(pids: list[int], timeout: float = 10.0) -> list[int]:
    """SIGKILL the process group of each pid (never this process's own) and wait until
    none of the pids is alive; the pids that were alive."""
    own_group = os.getpgrp()
    alive = [p for p in pids if pid_alive(p)]
    for p in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(p)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(p, signal.SIGKILL)
    wait_until(lambda: not any(pid_alive(p) for p in alive), timeout)
    return alive


# --------------------------------------------------------------------------- host side


def vm_boot_timeout() -> float:
    """Seconds a `lab up --vm` boot may take ($LBTUNE_VM_BOOT_TIMEOUT, else vm.BOOT_TIMEOUT)."""
    raw = os.environ.get(ENV_VM_BOOT_TIMEOUT, "").strip()
    if not raw:
        return vm.BOOT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= UP_TIMEOUT:
        raise BadInput(f"{ENV_VM_BOOT_TIMEOUT}={raw!r}: expected seconds (> 0)")
    return value


def _check_backend(backend: str) -> float:
    """LabUnavailable here, not in the detached supervisor; how long `up` waits for ready."""
    if backend == "uml":
        find_lab_kernel()
        return READY_TIMEOUT
    if backend == "vm":
        timeout = vm_boot_timeout()
        vm.check_host()
        vm.find_vm_image()
        vm.find_qemu()
        return timeout + vm.KVM_TRIAL_TIMEOUT + 60.0  # the KVM trial boot, set-up and mkfs
    raise ValueError(f"lab backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def up(backend: str = "uml", on_progress: Optional[Callable[[str], None]] = None) -> LabSession:
    """Boot a lab guest ("uml" or "vm") that stays up; returns once it is ready. LabBusy if
    one is up or another `lab up` is booting one; the guest of a supervisor that died is
    reaped first. ``on_progress`` gets one line per boot phase (and a "still booting" line
    every PROGRESS_EVERY seconds) of a VM boot."""
    with _lock(wait=LOCK_WAIT) as lock:
        if lock is None or current() is not None:
            raise LabBusy("a lab is already up or coming up (lbtune lab down stops it)")
        _reap_locked()
        ready_timeout = _check_backend(backend)
        token = secrets.token_hex(8)
        _write_json(_state_path(), {"token": token, "started": time.time(), "backend": backend})
        log = private_run_dir() / "lab-up.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        argv = [sys.executable, "-m", "lbtune.lab.guests.session", "supervise"]
        with open(fd, "wb") as fh:
            proc = subprocess.Popen(
                argv + (["--vm"] if backend == "vm" else []),
                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, pass_fds=(lock,),
                env={**os.environ, ENV_SESSION: token},
            )  # fmt: skip
    # the supervisor holds the lock from here on
    say = on_progress or (lambda line: None)
    start = time.monotonic()
    say(f"    0 s  the {backend} lab supervisor (pid {proc.pid}) boots the guest; Ctrl-C stops it")
    phase, last_said = "", start
    up_now: list[LabSession] = []

    def ready() -> bool:
        nonlocal phase, last_said
        session = current()
        if session is not None and session.ready:
            up_now.append(session)
            return True
        if proc.poll() is not None:
            detail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            detail = [ln for ln in detail if ln.startswith("lbtune lab:")] or detail
            raise LabError(f"the lab guest did not come up: {(detail or ['no output'])[-1]}")
        now = time.monotonic()
        if session is not None and session.phase and session.phase != phase:
            phase, last_said = session.phase, now
            say(f"{now - start:5.0f} s  {phase}")
        elif backend == "vm" and now - last_said >= PROGRESS_EVERY:
            last_said = now
            seen = _vm_console_stage(proc.pid)
            say(f"{now - start:5.0f} s  still booting" + (f" ({seen})" if seen else ""))
        return False

    try:
        if wait_until(ready, start + ready_timeout - time.monotonic(), POLL):
            return up_now[0]
    except BaseException:
        _terminate(proc.pid, None, grace=0)  # Ctrl-C of `lab up`: no guest stays behind
        reap_dead()
        raise
    _terminate(proc.pid, None, grace=0)
    reap_dead()
    raise LabError(f"the lab guest was not ready after {ready_timeout:g} s; stopped it")


def _vm_console_stage(supervisor: int) -> str:
    """How far the VM guest of `supervisor` has got, from its serial console log."""
    import tempfile

    data = _read_json(_state_path()) or {}
    tmpdir = data.get("tmpdir") if isinstance(data.get("tmpdir"), str) else tempfile.gettempdir()
    for owner in Path(str(tmpdir)).glob(f"lbtune-vm.*/{vm.OWNER}"):
        if (_read_json(owner) or {}).get("supervisor") != supervisor:
            continue
        try:
            text = (owner.parent / "console.1.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "qemu started"
        for marker, said in (("lbtune-vm: stage2", "root mounted, starting the guest agent"),
                             ("lbtune-vm: stage1", "initramfs: mounting the root"),
                             ("Linux version", "kernel started")):  # fmt: skip
            if marker in text:
                return said
        return "qemu started"
    return ""


class SessionGuest(Guest):
    """The guest of the lab that is up, as a Guest: requests go into its work directory and
    its agent answers (lbtune.lab.protocol), from whichever process asks. `close` leaves the
    lab up (`down` takes it down)."""

    def __init__(self, session: LabSession) -> None:
        self.session = session
        self.backend = session.backend
        self.agent = AgentClient(Path(session.workdir))

    def _check(self) -> None:
        if not _is_supervisor(self.session.supervisor):
            raise LabError("the lab went down during the run")

    def _ask(self, req: Mapping[str, Any], timeout: float,
             watch: Optional[Watch] = None) -> dict[str, Any]:  # fmt: skip
        rid = self.agent.send(req)
        out = self.agent.wait(rid, timeout, watch, self._check)
        if out is None:
            raise LabError(f"the run did not finish in {timeout:g} s")
        if "error" in out and "ok" not in out:
            raise LabError(f"lab run failed in the guest: {out['error']}")
        return out

    def call(
        self,
        target: str,
        args: Sequence[Any] = (),
        timeout: float = 300,
        netns: Optional[str] = None,
        watch: Optional[Watch] = None,
    ) -> Any:
        # the guest ends the call a little after the host gives up, so the host's word stands
        out = self._ask(call_request(target, args, timeout + 30, netns), timeout, watch)
        if not out.get("ok"):
            raise LabError(
                f"lab run failed in the guest: {out.get('error', 'unknown error')}",
                guest_traceback=str(out.get("traceback", "")),
                exc_type=str(out.get("exc_type", "")),
            )
        return out.get("value")

    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return completed(argv, self._ask(argv_request(argv, netns, timeout), timeout + 30))

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "kernel": self.session.kernel,
            "accelerator": self.session.accelerator,
            "workdir": self.session.workdir,
        }


def attach() -> Optional[SessionGuest]:
    """The lab that is up as a Guest, or None when no lab is up; LabError while it boots."""
    session = current()
    if session is None:
        return None
    if not session.ready:
        raise LabError("no lab is up")
    return SessionGuest(session)


def down(timeout: float = 30.0) -> bool:
    """Stop the lab that is up; False when none was. Leaves no process and no directory."""
    session = current()
    if session is None:
        return False
    if session.ready:
        with contextlib.suppress(OSError):
            AgentClient(Path(session.workdir)).send(stop_request())
    # a VM guest powers off through its agent (sync, poweroff: slow under TCG); one still
    # booting has no agent to ask, so its supervisor is told (SIGTERM) at once
    grace = (2 * timeout if session.backend == "vm" else timeout) if session.ready else 0.0
    _terminate(session.supervisor, session.workdir or None, grace=grace)
    reap_dead()  # a supervisor stopped while booting leaves its state and maybe a guest
    with contextlib.suppress(OSError):
        _state_path().unlink()
    return True


def _terminate(pid: int, workdir: Optional[str], grace: float = 10.0) -> None:
    """Wait for the supervisor to finish, SIGTERM it, and kill whatever names workdir."""
    if not wait_until(lambda: not _is_supervisor(pid), grace, POLL):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not _is_supervisor(pid), 10.0, POLL)
    if workdir:
        for other in processes_naming(workdir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(other), signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)


def processes_with_env(entry: str) -> list[int]:
    """PIDs (other than this process) with `entry` ("NAME=value") in their environment (the
    session token is random per `lab up`: only that session's processes carry it)."""
    needle = entry.encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(name))
        except OSError:
            continue
    return out


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
    """The detached supervisor of a UML guest: boots it, readies it (IPVS loaded), and keeps
    it booted until its agent stops or the supervisor is told to."""
    from lbtune.host.signals import interruptible

    state = _state_path()
    started = time.time()
    token = os.environ.get(ENV_SESSION, "")
    kernel = ""
    with contextlib.suppress(LabUnavailable):  # run_agent_in_lab below says why in one line
        kernel = find_lab_kernel().version
    _write_json(state, {"supervisor": os.getpid(), "token": token, "started": started,
                        "backend": "uml", "accelerator": "uml", "kernel": kernel,
                        "accelerator_reason": "User-Mode Linux: host processes"})  # fmt: skip
    try:
        with interruptible():
            run_agent_in_lab(timeout=UP_TIMEOUT, watch=_UmlReadying(state).watch)
    except (LabError, LabUnavailable, KeyboardInterrupt) as e:
        print(f"lbtune lab: {e}", file=sys.stderr)
        return 1
    finally:
        data = _read_json(state)
        if data is not None and data.get("supervisor") == os.getpid():
            with contextlib.suppress(OSError):
                state.unlink()
    return 0


class _UmlReadying:
    """The UML supervisor's watch of its booting guest: record the work directory at once
    (so `down` and `reap_dead` find it), ask the agent to load IPVS when it is up, and say
    ready in the state file when that is done."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.agent: Optional[AgentClient] = None
        self.ready = False

    def _update(self, **fields: Any) -> None:
        data = _read_json(self.state)
        if data is not None and data.get("supervisor") == os.getpid():
            _write_json(self.state, {**data, **fields})

    def watch(self, workdir: Path) -> None:
        if self.ready:
            return
        if self.agent is None:
            self.agent = AgentClient(workdir)
            self._update(workdir=str(workdir))
            self.agent.send(call_request(SETUP_TARGET, ["rr"], READY_TIMEOUT), SETUP)
            return
        if not (workdir / READY).exists():
            return
        out = self.agent.wait(SETUP, 0)
        if out is None:
            return
        if not out.get("ok"):
            raise LabError(f"the lab guest could not load IPVS: {out.get('error')}")
        self.ready = True
        self._update(ready=True)


def supervise_vm() -> int:
    """The detached supervisor of a VM guest: boots it, records what it is, and holds it until
    its agent ends (`down`'s stop request; LabError when the guest died otherwise), SIGTERM or
    UP_TIMEOUT. Any process's requests reach the guest's agent meanwhile (`attach`)."""
    import tempfile

    from lbtune.host.signals import interruptible

    state = _state_path()
    me = os.getpid()
    token = os.environ.get(ENV_SESSION, "")
    _write_json(state, {"supervisor": me, "token": token, "started": time.time(),
                        "backend": "vm", "tmpdir": tempfile.gettempdir(),
                        "phase": "checking the host and the VM image"})  # fmt: skip

    def update(**fields: Any) -> None:
        data = _read_json(state)
        if data is not None and data.get("supervisor") == me:
            _write_json(state, {**data, **fields})

    try:
        with interruptible():
            timeout = vm_boot_timeout()
            vm.check_host()
            image = vm.find_vm_image()
            vm.find_qemu()
            vm.reap_stale()
            update(kernel=image.version, phase="choosing the accelerator (KVM only when a "
                   "probe boot works; cached)")  # fmt: skip
            accel, reason = vm.choose_accel(image)
            update(accelerator=accel, accelerator_reason=reason,
                   phase=f"booting kernel {image.version} under {accel} ({reason})")  # fmt: skip
            with vm.VmGuest.start(image, accel, (), timeout, accel_reason=reason) as g:
                facts = g.describe()
                update(workdir=str(g.workdir), ready=True, phase="ready", **{
                    k: facts.get(k) for k in
                    ("kernel", "boot_seconds", "cpus", "nodes", "nics", "cmdline")})  # fmt: skip
                # until `down`'s stop request ends the agent (the guest then powers off)
                wait_until(lambda: not g.running(), UP_TIMEOUT, POLL)
                if not g.running() and not (g.workdir / REBOOT).exists():
                    raise LabError("the VM lab guest is not running")
    except (LabError, LabUnavailable, KeyboardInterrupt) as e:
        print(f"lbtune lab: {str(e).splitlines()[0] if str(e) else type(e).__name__}",
              file=sys.stderr)  # fmt: skip
        return 1
    finally:
        data = _read_json(state)
        if data is not None and data.get("supervisor") == me:
            with contextlib.suppress(OSError):
                state.unlink()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["supervise"]:
        sys.exit(supervise())
    if sys.argv[1:] == ["supervise", "--vm"]:
        sys.exit(supervise_vm())
    sys.stderr.write("usage: python -m lbtune.lab.guests.session supervise [--vm]\n")
    sys.exit(2)
