"""The UML backend of the lab: Debian's User-Mode-Linux kernel run as an ordinary process.

``run_in_lab("pkg.mod:func", *args)`` boots ``linux.uml`` as an ordinary, unprivileged process
with the host filesystem as its read-only root (hostfs), calls ``func(*args)`` inside the guest
with the caller's interpreter and ``sys.path``, and returns the JSON result;
``run_pytest_in_lab(nodeid)`` runs pytest inside the guest; ``UmlGuest`` is the backend behind
lbtune.lab.guests.api.Guest; ``run_agent_in_lab`` keeps a guest up until told to stop (the
UML ``lbtune lab up``). One boot is about 2-3 s. All of them run the guest agent
(lbtune.lab.inguest.agent) as the guest program and speak lbtune.lab.protocol to it: a run
for one call writes its request before the boot and the agent (``--once``) answers it and
exits.

What one run does:

* a private work directory (``tempfile.mkdtemp``) holds the generated init script, the UML
  console log, the guest program's output and exit status, and the protocol's requests and
  answers. The guest mounts it through hostfs *at the same path*, so no path translation is
  needed. It is removed afterwards; with ``LBTUNE_LAB_KEEP=1`` it is kept when the run fails.
* UML is started in a new session (``start_new_session``) with ``umid=`` unique and
  ``uml_dir=`` inside the work directory, so nothing is written to ``~/.uml`` and concurrent runs
  do not collide. Whatever happens (success, guest crash, timeout, KeyboardInterrupt or
  SIGTERM while a one-call guest runs), the whole process group is SIGKILLed before the
  leader is reaped: no UML helper survives.
* the init script (PID 1 in the guest) mounts proc, sysfs, tmpfs on /run, /tmp, /dev/shm and
  /lib/modules (linking the UML modules directory there as /lib/modules/<guest uname -r>),
  re-exposes read-only whatever the caller's Python needs that those tmpfs mounts hide
  (e.g. a venv under /tmp), runs the guest program with a clean environment, records its exit
  status, syncs and ``poweroff -f``.

The FPU problem, measured on this machine: Debian 12's UML 6.1 saves guest FPU state with
``PTRACE_SETREGSET(NT_X86_XSTATE)`` into an 832-byte buffer; a host with AVX-512/PKU/AMX needs
the full XSAVE size (11008 bytes here) and the host kernel refuses with EFAULT, so the guest
panics at init ("userspace - ptrace set fp regs failed, errno = 14"). FPU modes:

* ``native`` - plain ``linux.uml``; right for hosts whose XSAVE area is small.
* ``shim``   - an LD_PRELOAD shim (xstate_shim.c, compiled per run with the host's C compiler)
  that gives UML full-size xstate transfers; guest vector state is preserved exactly.
* ``legacy`` - no compiler: a seccomp filter (seccomp_exec.py) hides xstate ptrace from UML, so
  it falls back to FXSAVE (x87/SSE only) and the guest is told not to use AVX (GLIBC_TUNABLES,
  OPENSSL_ia32cap, a modprobe wrapper for kernel module autoloading).

``find_lab_kernel()`` chooses (``LBTUNE_LAB_FPU=native|shim|legacy`` overrides).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

from lbtune.host.deadline import wait_until
from lbtune.host.signals import interruptible
from lbtune.lab.guests.api import (
    WATCH_INTERVAL,
    AgentClient,
    Guest,
    Watch,
    completed,
    guest_pythonpath,
)
from lbtune.lab.inguest.entry import split_target
from lbtune.lab.protocol import (
    ENV_WORKDIR,
    IN_LAB_ENV,
    LabError,
    LabResult,
    LabTimeout,
    LabUnavailable,
    argv_request,
    call_request,
)

ENV_KERNEL = "LBTUNE_LAB_KERNEL"
ENV_MODULES = "LBTUNE_LAB_MODULES"
ENV_FPU = "LBTUNE_LAB_FPU"
ENV_KEEP = "LBTUNE_LAB_KEEP"
AGENT = "lbtune.lab.inguest.agent"
ONE_CALL = "000001"  # the id of the one request of a run_in_lab boot
T = TypeVar("T")

DEFAULT_KERNEL = "/usr/bin/linux.uml"
DEFAULT_MODULES_ROOT = "/usr/lib/uml/modules"
DEFAULT_MEM = "1G"

FPU_NATIVE = "native"
FPU_SHIM = "shim"
FPU_LEGACY = "legacy"
FPU_MODES = (FPU_NATIVE, FPU_SHIM, FPU_LEGACY)

# /proc/cpuinfo flags of xstate components beyond AVX: any of them makes the host's XSAVE area
# larger than the 832 bytes UML 6.1 transfers (MPX, AVX-512, PKRU, AMX, APX).
_LARGE_XSTATE_FLAGS = frozenset({"mpx", "avx512f", "pku", "ospke", "amx_tile", "apx"})

# Legacy FPU mode: keep guest programs on SSE, whose state FXSAVE covers.
_LEGACY_GUEST_ENV = {
    "GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX,-AVX2,-AVX512F,-AVX512VL,-AVX512BW,-AVX512DQ,"
    "-AVX512CD,-AVX_Fast_Unaligned_Load",
    # CPUID(1).ECX AVX : CPUID(7).EBX AVX2/AVX-512 F DQ IFMA CD BW VL, .ECX VBMI VBMI2 VAES VPCLMUL
    "OPENSSL_ia32cap": "~0x1000000000000000:~0x00000642D0230020",
}

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Guest mount points that hide the host's content (tmpfs or kernel filesystems).
_HIDDEN_TOPS = ("/tmp", "/run", "/dev/shm")  # noqa: S108 - guest mount points, not temp files
_UNREACHABLE_TOPS = ("/proc", "/sys", "/dev", "/lib/modules", "/usr/lib/modules")


@dataclass(frozen=True)
class LabKernel:
    """A usable lab kernel: the UML binary, its modules and how to run it on this CPU."""

    binary: str
    version: str
    modules_dir: str
    fpu_mode: str
    fpu_reason: str
    compiler: Optional[str] = None
    mem: str = DEFAULT_MEM

    def describe(self) -> dict[str, Any]:
        return {
            "binary": self.binary,
            "version": self.version,
            "modules_dir": self.modules_dir,
            "fpu_mode": self.fpu_mode,
            "fpu_reason": self.fpu_reason,
            "compiler": self.compiler,
            "mem": self.mem,
        }


# --------------------------------------------------------------------------- kernel discovery


def host_needs_xstate_workaround(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """True when this CPU's XSAVE area is larger than what UML 6.1 transfers (see module doc)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return bool(_LARGE_XSTATE_FLAGS.intersection(value.split()))
    except OSError:
        pass
    return False


def find_compiler() -> Optional[str]:
    """A C compiler for the xstate shim: $CC when it is a plain program, else cc, gcc, clang."""
    cc = os.environ.get("CC", "").strip()
    candidates = ([cc] if cc and " " not in cc else []) + ["cc", "gcc", "clang"]
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    return None


# What the lab needs of its kernel: feature -> module name (IPVS for the director, veth and
# bridge for the namespaces the lab wires together).
LAB_FEATURES = (("IPVS", "ip_vs"), ("veth", "veth"), ("bridge", "bridge"))
_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.gz", ".ko.zst")


def kernel_features(modules_dir: str) -> dict[str, str]:
    """For each of LAB_FEATURES: "module" (listed in the kernel's modules.dep), "built-in"
    (in modules.builtin), "missing" (in neither), or "unknown" when modules.dep cannot be
    read. Read from the files, never assumed."""

    def names(path: str) -> Optional[set[str]]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(16 << 20)  # a real modules.dep is well under 1 MB
        except OSError:
            return None
        found: set[str] = set()
        for line in text.splitlines():
            base = line.partition(":")[0].strip().rsplit("/", 1)[-1]
            for suffix in _MODULE_SUFFIXES:
                if base.endswith(suffix):
                    found.add(base[: -len(suffix)].replace("-", "_"))
        return found

    dep = names(os.path.join(modules_dir, "modules.dep"))
    builtin = names(os.path.join(modules_dir, "modules.builtin")) or set()
    out: dict[str, str] = {}
    for feature, module in LAB_FEATURES:
        if dep is None:
            out[feature] = "unknown"
        elif module in builtin:
            out[feature] = "built-in"
        else:
            out[feature] = "module" if module in dep else "missing"
    return out


def _kernel_version(binary: str) -> str:
    try:
        proc = subprocess.run(
            [binary, "--version"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabUnavailable(f"lab kernel {binary} does not run: {exc}") from exc
    version = proc.stdout.strip().splitlines()[0].strip() if proc.stdout.strip() else ""
    if proc.returncode != 0 or not version or " " in version:
        raise LabUnavailable(f"lab kernel {binary} did not report its version (--version)")
    return version


def _choose_fpu_mode(requested: str, compiler: Optional[str]) -> tuple[str, str]:
    if requested not in ("auto", *FPU_MODES):
        raise LabUnavailable(f"{ENV_FPU}={requested!r}: expected auto, native, shim or legacy")
    if requested == FPU_SHIM and compiler is None:
        raise LabUnavailable("FPU mode 'shim' needs a C compiler (cc, gcc or clang)")
    if requested != "auto":
        return requested, f"requested ({ENV_FPU} or argument)"
    if platform.machine() != "x86_64":
        return FPU_NATIVE, f"{platform.machine()} host: xstate workaround is x86_64 only"
    if not host_needs_xstate_workaround():
        return FPU_NATIVE, "host XSAVE area fits UML's FPU buffer"
    if compiler is not None:
        return FPU_SHIM, "host XSAVE area exceeds UML's buffer; C compiler found for the shim"
    return FPU_LEGACY, "host XSAVE area exceeds UML's buffer; no C compiler: SSE-only guest"


def find_lab_kernel(
    binary: Optional[str] = None,
    modules_root: Optional[str] = None,
    fpu_mode: Optional[str] = None,
) -> LabKernel:
    """Locate linux.uml and its modules and decide how to run it; LabUnavailable if impossible.

    Defaults come from LBTUNE_LAB_KERNEL, LBTUNE_LAB_MODULES (directory holding
    ``<version>/``) and LBTUNE_LAB_FPU, then Debian's user-mode-linux package paths.
    """
    if sys.platform != "linux":
        raise LabUnavailable("the lab kernel (User-Mode Linux) runs on Linux hosts only")
    path = binary or os.environ.get(ENV_KERNEL) or shutil.which("linux.uml") or DEFAULT_KERNEL
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise LabUnavailable(
            f"no lab kernel: {path} not found (install Debian's user-mode-linux package "
            f"or set {ENV_KERNEL})"
        )
    version = _kernel_version(path)
    root = modules_root or os.environ.get(ENV_MODULES) or DEFAULT_MODULES_ROOT
    modules_dir = os.path.join(root, version)
    if not os.path.isfile(os.path.join(modules_dir, "modules.dep")):
        raise LabUnavailable(
            f"lab kernel {version}: modules directory {modules_dir} missing (set {ENV_MODULES})"
        )
    if not os.path.isdir("/lib/modules"):
        raise LabUnavailable("the lab guest needs /lib/modules on the host as a mount point")
    compiler = find_compiler()
    requested = (fpu_mode or os.environ.get(ENV_FPU) or "auto").strip().lower()
    mode, reason = _choose_fpu_mode(requested, compiler)
    return LabKernel(
        binary=os.path.abspath(path),
        version=version,
        modules_dir=os.path.abspath(modules_dir),
        fpu_mode=mode,
        fpu_reason=reason,
        compiler=compiler,
    )


# --------------------------------------------------------------------------- process groups


def process_group_members(pgid: int) -> list[int]:
    """PIDs of live (not zombie) processes in process group pgid."""
    members: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return members
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def _wait_exit_nowait(pid: int, timeout: float) -> bool:
    """Wait for child pid to exit without reaping it (its pgid stays ours); False on timeout."""
    deadline = time.monotonic() + max(0.0, timeout)
    pidfd = -1
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    try:
        while True:
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if info is not None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if pidfd >= 0:
                select.select([pidfd], [], [], remaining)
            else:
                time.sleep(min(0.05, remaining))
    finally:
        if pidfd >= 0:
            os.close(pidfd)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _reap_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> list[int]:
    """SIGKILL the group, reap the leader, wait for the rest to die; return survivors (none)."""
    _kill_group(proc.pid)
    proc.wait()
    survivors: list[int] = []

    def gone() -> bool:
        survivors[:] = process_group_members(proc.pid)
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return not survivors

    wait_until(gone, grace)
    return survivors


# --------------------------------------------------------------------------- guest set-up


def _top_dir(path: str, top: str) -> Optional[str]:
    """The directory right below top on the way to path (``/tmp/a/b`` -> ``/tmp/a``)."""
    if path == top or not path.startswith(top + "/"):
        return None
    first = path[len(top) + 1 :].split("/", 1)[0]
    return f"{top}/{first}" if first else None


def hidden_paths_to_expose(paths: Sequence[str]) -> list[str]:
    """Host directories the guest's tmpfs mounts would hide but the guest program needs.

    For every path under /tmp, /run or /dev/shm the directory right below that mount point is
    returned once (``/tmp/venv/lib/...`` -> ``/tmp/venv``); paths under /proc, /sys, /dev or
    /lib/modules cannot be exposed and are skipped.
    """
    out: list[str] = []
    for raw in paths:
        if not raw:
            continue
        real = os.path.realpath(raw)
        for top in _HIDDEN_TOPS:
            exposed = _top_dir(real, top)
            if exposed is not None:
                if exposed not in out:
                    out.append(exposed)
                break
    return out


def _unusable_as_workdir(path: str) -> bool:
    """The init script must be visible at boot: not under /proc, /sys or /dev (devtmpfs)."""
    real = os.path.realpath(path)
    return any(real == top or real.startswith(top + "/") for top in _UNREACHABLE_TOPS)


def _check_mount_path(path: str) -> None:
    # mount(8) splits -o on commas; the hostfs option is the host path itself.
    if "," in path or "\n" in path:
        raise LabUnavailable(f"cannot expose {path!r} to the lab guest (comma or newline in path)")


def _q(value: str) -> str:
    return shlex.quote(value)


def render_init_script(
    *,
    workdir: str,
    modules_dir: str,
    expose_ro: Sequence[str],
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    init_env: Optional[Mapping[str, str]] = None,
    modprobe_wrapper: Optional[str] = None,
) -> str:
    """The guest's /sbin/init: a POSIX sh script (quoted with shlex; no host shell involved)."""
    lines = [
        "#!/bin/sh",
        "# lbtune lab init (lbtune.lab.guests.uml): runs as PID 1 inside User-Mode Linux.",
        f"PATH={_q(GUEST_PATH)}",
        "export PATH",
    ]
    for key, value in sorted((init_env or {}).items()):
        lines.append(f"export {key}={_q(value)}")
    lines += [
        'die() { echo "lbtune-lab: $*" >&2; sync; poweroff -f; halt -f; '
        "echo o > /proc/sysrq-trigger; exit 1; }",
        "mount -t proc proc /proc || die 'cannot mount /proc'",
        "mount -t sysfs sysfs /sys || die 'cannot mount /sys'",
        "mount -t tmpfs -o mode=0755 tmpfs /run || die 'cannot mount /run'",
        "mount -t tmpfs -o mode=1777 tmpfs /tmp || die 'cannot mount /tmp'",
        "mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm"
        " || die 'cannot mount /dev/shm'",
        "mount -t tmpfs -o mode=0755 tmpfs /lib/modules || die 'cannot mount /lib/modules'",
        f"ln -s {_q(modules_dir)} \"/lib/modules/$(uname -r)\" || die 'cannot link modules'",
    ]
    for path in expose_ro:
        lines.append(
            f"mkdir -p {_q(path)} && mount -t hostfs -o {_q('ro,' + path)} none {_q(path)}"
            f" || die {_q('cannot expose ' + path)}"
        )
    lines.append(
        f"mkdir -p {_q(workdir)} && mount -t hostfs -o {_q(workdir)} none {_q(workdir)}"
        f" || die {_q('cannot mount work directory ' + workdir)}"
    )
    if modprobe_wrapper is not None:
        lines.append(f"echo {_q(modprobe_wrapper)} > /proc/sys/kernel/modprobe")
    lines += [
        "hostname lbtune-lab 2>/dev/null",
        "ip link set lo up 2>/dev/null",
        f"cd {_q(cwd)} || die {_q('cannot cd to ' + cwd)}",
        f"echo {_q('lbtune-lab: running ' + shlex.join(argv))}",
    ]
    env_words = " ".join(_q(f"{key}={value}") for key, value in sorted(env.items()))
    out = _q(os.path.join(workdir, "output"))
    status = _q(os.path.join(workdir, "status"))
    lines += [
        f"env -i {env_words} {shlex.join(argv)} </dev/null >{out} 2>&1",
        f"echo $? >{status}",
        "sync",
        "poweroff -f",
        "halt -f",
        "echo o > /proc/sysrq-trigger",
        "",
    ]
    return "\n".join(lines)


def _render_modprobe_wrapper(env: Mapping[str, str]) -> str:
    exports = "\n".join(f"export {key}={_q(value)}" for key, value in sorted(env.items()))
    return (
        f"#!/bin/sh\n# kernel module autoloading in a legacy-FPU lab guest\n{exports}\n"
        'exec /sbin/modprobe "$@"\n'
    )


def _build_shim(compiler: str, workdir: Path) -> str:
    source = Path(__file__).with_name("xstate_shim.c")
    if not source.is_file():
        raise LabUnavailable(f"xstate shim source {source} is missing from the installation")
    target = workdir / "xstate_shim.so"
    argv = [compiler, "-O2", "-shared", "-fPIC", "-o", str(target), str(source), "-ldl"]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LabUnavailable(f"cannot build the xstate shim with {compiler}: {exc}") from exc
    if proc.returncode != 0 or not target.is_file():
        first = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise LabUnavailable(
            f"cannot build the xstate shim with {compiler}: {first} "
            f"(set {ENV_FPU}=legacy to run without it)"
        )
    return str(target)


def _host_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        # UML puts its memory file in $TMPDIR when set (on disk: slow); the shim is ours alone
        if key not in ("TMPDIR", "TMP", "TEMP", "LD_PRELOAD")
    }
    env.update(extra)
    return env


def _console_hint(console: str) -> str:
    """The console line that best explains a failed boot."""
    lines = [line.strip() for line in console.splitlines() if line.strip()]
    for needle in ("lbtune-lab:", "Kernel panic", "panic", "failed"):
        for line in lines:
            if needle in line and not line.startswith("lbtune-lab: running"):
                return line
    return lines[-1] if lines else "no console output"


# --------------------------------------------------------------------------- running


@dataclass
class _Boot:
    workdir: Path
    kernel: LabKernel
    exit_status: int
    output: str
    console: str
    duration: float
    uml_returncode: Optional[int]
    pgid: int = 0  # linux.uml's pid: the guest's process group


class _Workdir:
    """The run's private directory; removed on exit unless the run failed and LBTUNE_LAB_KEEP=1."""

    def __init__(self) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="lbtune-lab-"))

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        keep = exc is not None and os.environ.get(ENV_KEEP, "") not in ("", "0")
        if keep and isinstance(exc, LabError):
            exc.workdir = str(self.path)
        if not keep:
            shutil.rmtree(self.path, ignore_errors=True)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _boot(
    kernel: LabKernel,
    workdir: Path,
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    label: str,
    watch: Optional[Watch] = None,
) -> _Boot:
    """Boot the lab kernel running `argv` as the guest program, wait for it to power off
    (LabTimeout after `timeout`), and say how it went (LabError when it did not finish)."""
    wd = str(workdir)
    _check_mount_path(wd)
    if _unusable_as_workdir(wd):
        raise LabUnavailable(f"lab work directory {wd} is not visible to the guest; set TMPDIR")
    guest_cwd = os.path.abspath(cwd or os.getcwd())
    pythonpath = guest_pythonpath()
    needed = [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, guest_cwd]
    expose = [p for p in hidden_paths_to_expose(needed + pythonpath) if p != wd]
    for path in expose:
        _check_mount_path(path)
    guest_env, host_extra, modprobe_wrapper = _guest_env(kernel, workdir, pythonpath, env)
    init = workdir / "init"
    init.write_text(
        render_init_script(
            workdir=wd,
            modules_dir=kernel.modules_dir,
            expose_ro=expose,
            argv=argv,
            env=guest_env,
            cwd=guest_cwd,
            init_env=_LEGACY_GUEST_ENV if kernel.fpu_mode == FPU_LEGACY else None,
            modprobe_wrapper=modprobe_wrapper,
        ),
        encoding="utf-8",
    )
    init.chmod(0o755)
    boot, finished, survivors = _run_kernel(
        kernel, workdir, _kernel_cmdline(kernel, init, wd), host_extra, timeout, watch
    )
    _check_finished(boot, label, timeout, finished, survivors)
    return boot


def _guest_env(
    kernel: LabKernel, workdir: Path, pythonpath: Sequence[str], env: Optional[Mapping[str, str]]
) -> tuple[dict[str, str], dict[str, str], Optional[str]]:
    """The guest program's environment, the host additions for linux.uml (the FPU shim) and
    the modprobe wrapper of the legacy FPU mode (or None)."""
    guest_env = {
        "PATH": GUEST_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        IN_LAB_ENV: "1",
        ENV_WORKDIR: str(workdir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(pythonpath),
    }
    host_extra: dict[str, str] = {}
    modprobe_wrapper: Optional[str] = None
    if kernel.fpu_mode == FPU_SHIM:
        if kernel.compiler is None:
            raise LabUnavailable("FPU mode 'shim' needs a C compiler")
        host_extra["LD_PRELOAD"] = _build_shim(kernel.compiler, workdir)
    elif kernel.fpu_mode == FPU_LEGACY:
        guest_env.update(_LEGACY_GUEST_ENV)
        wrapper = workdir / "modprobe"
        wrapper.write_text(_render_modprobe_wrapper(_LEGACY_GUEST_ENV), encoding="utf-8")
        wrapper.chmod(0o755)
        modprobe_wrapper = str(wrapper)
    if env:
        guest_env.update(env)
    return guest_env, host_extra, modprobe_wrapper


def _kernel_cmdline(kernel: LabKernel, init: Path, wd: str) -> list[str]:
    """linux.uml's command line (behind the seccomp launcher in the legacy FPU mode)."""
    umid = f"lbtune-{secrets.token_hex(6)}"
    cmdline = [
        kernel.binary,
        f"mem={kernel.mem}",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        f"init={init}",
        "con=null",
        "con0=fd:0,fd:1",
        f"umid={umid}",
        f"uml_dir={wd}",
    ]
    if kernel.fpu_mode == FPU_LEGACY:
        launcher = Path(__file__).with_name("seccomp_exec.py")
        cmdline = [sys.executable, "-I", "-S", str(launcher), *cmdline]
    return cmdline


def _run_kernel(
    kernel: LabKernel,
    workdir: Path,
    cmdline: Sequence[str],
    host_extra: Mapping[str, str],
    timeout: float,
    watch: Optional[Watch],
) -> tuple[_Boot, bool, list[int]]:
    """Run linux.uml until it exits or `timeout`, then kill its whole process group: what it
    left, whether it finished, and the processes that survived SIGKILL (none)."""
    wd = str(workdir)
    console_path = workdir / "console.log"
    start = time.monotonic()
    with open(console_path, "wb") as console_fh:
        proc = _spawn(cmdline, console_fh, _host_env(host_extra), wd)
        finished = False
        try:
            finished = _wait_for_guest(proc.pid, timeout, workdir, watch)
        finally:
            survivors = _reap_group(proc)
    duration = time.monotonic() - start
    status_text = _read_text(workdir / "status").strip()
    exit_status = int(status_text) if status_text.lstrip("-").isdigit() else -1
    boot = _Boot(workdir, kernel, exit_status, _read_text(workdir / "output"),
                 _read_text(console_path), duration, proc.returncode, proc.pid)  # fmt: skip
    return boot, finished, survivors


def _check_finished(
    boot: _Boot, label: str, timeout: float, finished: bool, survivors: list[int]
) -> None:
    """LabError (LabTimeout) unless the guest program ran to its end and nothing survived."""
    pgid = boot.pgid
    if survivors:
        raise LabError(
            f"lab run {label}: processes {survivors} of group {pgid} survived SIGKILL",
            result=_result_of(boot, label, None),
        )
    if not finished:
        raise LabTimeout(
            f"lab run {label} timed out after {timeout:g} s; UML process group {pgid} killed",
            pgid=pgid,
            result=_result_of(boot, label, None),
        )
    if boot.exit_status < 0:
        raise LabError(
            f"lab guest did not finish {label} (linux.uml exit status {boot.uml_returncode}): "
            f"{_console_hint(boot.console)}",
            result=_result_of(boot, label, None),
        )


def _wait_for_guest(pid: int, timeout: float, workdir: Path, watch: Optional[Watch]) -> bool:
    """Wait for UML to exit (False on timeout), calling watch every WATCH_INTERVAL."""
    if watch is None:
        return _wait_exit_nowait(pid, timeout)

    def exited() -> bool:
        finished = _wait_exit_nowait(pid, WATCH_INTERVAL)  # the interval is the wait itself
        watch(workdir)
        return finished

    return wait_until(exited, timeout, 0)


def _spawn(
    cmdline: Sequence[str], console_fh: IO[bytes], env: Mapping[str, str], cwd: str
) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            list(cmdline),
            stdin=subprocess.DEVNULL,
            stdout=console_fh,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise LabUnavailable(f"cannot start the lab kernel {cmdline[0]}: {exc}") from exc


def _result_of(boot: _Boot, label: str, value: Any) -> LabResult:
    return LabResult(
        target=label,
        value=value,
        exit_status=boot.exit_status,
        output=boot.output,
        console=boot.console,
        duration=boot.duration,
        fpu_mode=boot.kernel.fpu_mode,
        uml_returncode=boot.uml_returncode,
    )


def _agent_argv(workdir: Path, once: bool) -> list[str]:
    return [sys.executable, "-m", AGENT, str(workdir), *(["--once"] if once else [])]


def _one_request(
    lab: LabKernel,
    req: Mapping[str, Any],
    label: str,
    *,
    timeout: float,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    watch: Optional[Watch] = None,
    read: Callable[[_Boot, Optional[dict[str, Any]]], T],
) -> T:
    """Boot a guest whose agent answers `req` (written before the boot) and powers off;
    `read(boot, answer)` (answer None when the agent wrote none) says what came of it, while
    the work directory is still there (kept with LBTUNE_LAB_KEEP=1 when `read` raises).
    SIGTERM raises KeyboardInterrupt here as Ctrl-C does (host.signals.interruptible), so a
    caller stopped by `timeout` or `kill` (a bench script, a test run) tears the guest down
    instead of dying with it still running."""
    with interruptible(), _Workdir() as workdir:
        agent = AgentClient(workdir)
        agent.send(req, ONE_CALL)
        calldir = agent.dir.calldir(ONE_CALL)
        boot = _boot(
            lab, workdir, _agent_argv(workdir, once=True), timeout=timeout, cwd=cwd, env=env,
            label=label, watch=None if watch is None else lambda _: watch(calldir),
        )  # fmt: skip
        return read(boot, agent.wait(ONE_CALL, 0, watch))


def run_in_lab(
    target: str,
    *args: Any,
    timeout: float = 120.0,
    kernel: Optional[LabKernel] = None,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    watch: Optional[Watch] = None,
) -> LabResult:
    """Call ``target(*args)`` inside a freshly booted lab kernel and return its result.

    target is ``"package.module:function"``, importable with the caller's ``sys.path``; args
    and the return value must be JSON-serialisable. An exception inside the guest raises
    LabError carrying the guest traceback; a run longer than timeout seconds raises LabTimeout
    after killing the UML process group; LabUnavailable when there is no usable lab kernel.
    ``watch(directory)`` is called every WATCH_INTERVAL seconds while the guest runs with the
    call's directory (the guest finds it in ``$LBTUNE_LAB_WORKDIR``: progress files it
    writes there).
    """
    split_target(target)  # ValueError before booting anything
    lab = kernel or find_lab_kernel()
    req = call_request(target, args, timeout)
    return _one_request(lab, req, target, timeout=timeout, cwd=cwd, env=env, watch=watch,
                        read=lambda boot, payload: _call_result(target, boot, payload))


def _call_result(target: str, boot: _Boot, payload: Optional[dict[str, Any]]) -> LabResult:
    if payload is None or "ok" not in payload:
        raise LabError(
            f"lab guest wrote no result for {target} (exit status {boot.exit_status}): "
            f"{_console_hint(boot.output or boot.console)}",
            result=_result_of(boot, target, None),
        )
    call = _call_boot(boot, payload)
    if not payload.get("ok"):
        raise LabError(
            f"{target} failed in the lab guest: {payload.get('error', 'unknown error')}",
            guest_traceback=str(payload.get("traceback", "")),
            exc_type=str(payload.get("exc_type", "")),
            result=_result_of(call, target, None),
        )
    return _result_of(call, target, payload.get("value"))


def _call_boot(boot: _Boot, answer: Mapping[str, Any], output: str = "") -> _Boot:
    """The boot as its one request saw it: the request's exit status (an argv's own; a call's
    as lbtune.lab.inguest.entry exits: 0 when it returned, 1 when it raised) and output."""
    code = answer.get("returncode")
    if not isinstance(code, int):
        code = 0 if answer.get("ok") else 1
    return dataclasses.replace(boot, exit_status=code,
                               output=output or str(answer.get("output", "")))  # fmt: skip


def run_pytest_in_lab(
    nodeid: str,
    *pytest_args: str,
    timeout: float = 300.0,
    kernel: Optional[LabKernel] = None,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> LabResult:
    """Run ``python -m pytest -p no:cacheprovider [pytest_args] nodeid`` inside the lab guest.

    Returns the result with pytest's exit status and output (a failing test is not an error
    here: check ``result.exit_status``); raises LabError/LabTimeout when the guest itself fails.
    """
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args, nodeid]
    lab = kernel or find_lab_kernel()
    label = f"pytest {nodeid}"
    # the request may run past the boot's timeout: the boot's LabTimeout says what happened
    req = argv_request(argv, None, timeout + 60)

    def read(boot: _Boot, answer: Optional[dict[str, Any]]) -> LabResult:
        answer = _argv_answer(label, boot, answer)
        output = str(answer.get("stdout", "")) + str(answer.get("stderr", ""))
        return _result_of(_call_boot(boot, answer, output), label, None)

    return _one_request(lab, req, label, timeout=timeout, cwd=cwd, env=env, read=read)


def _argv_answer(label: str, boot: _Boot, answer: Optional[dict[str, Any]]) -> dict[str, Any]:
    """The agent's answer to an argv request; LabError when it wrote none."""
    if answer is None or "returncode" not in answer:
        raise LabError(
            f"lab guest wrote no result for {label} (exit status {boot.exit_status}): "
            f"{_console_hint(boot.output or boot.console)}",
            result=_result_of(boot, label, None),
        )
    return answer


def run_agent_in_lab(
    *,
    timeout: float,
    kernel: Optional[LabKernel] = None,
    watch: Optional[Watch] = None,
) -> LabResult:
    """Boot a lab guest whose agent serves requests (lbtune.lab.protocol) until a stop
    request, or until `timeout` (LabTimeout): the UML guest of ``lbtune lab up``.
    ``watch(workdir)`` is called with the work directory every WATCH_INTERVAL seconds (the
    agent is up once ``ready.json`` is there)."""
    lab = kernel or find_lab_kernel()
    with _Workdir() as workdir:
        boot = _boot(lab, workdir, _agent_argv(workdir, once=False), timeout=timeout, cwd=None,
                     env=None, label=AGENT, watch=watch)  # fmt: skip
        return _result_of(boot, AGENT, None)


class UmlGuest(Guest):
    """The UML backend: each call or run boots the lab kernel afresh (see the module doc)."""

    backend = "uml"

    def __init__(self, kernel: Optional[LabKernel] = None) -> None:
        self.kernel = kernel or find_lab_kernel()

    def call(
        self,
        target: str,
        args: Sequence[Any] = (),
        timeout: float = 300,
        netns: Optional[str] = None,
        watch: Optional[Watch] = None,
    ) -> Any:
        _no_netns(netns)
        return run_in_lab(target, *args, timeout=timeout, kernel=self.kernel, watch=watch).value

    def run(
        self, argv: Sequence[str], netns: Optional[str] = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        _no_netns(netns)
        label = shlex.join(argv)
        return _one_request(
            self.kernel, argv_request(argv, None, timeout), label, timeout=timeout + 60,
            cwd=None, env=None,
            read=lambda boot, answer: completed(argv, _argv_answer(label, boot, answer)),
        )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "kernel": self.kernel.version,
            "accelerator": "uml",
            "cpus": 1,
            "fpu_mode": self.kernel.fpu_mode,
            "binary": self.kernel.binary,
        }


def _no_netns(netns: Optional[str]) -> None:
    if netns is not None:
        raise ValueError(
            "a UML guest lives for one call, so no namespace survives from one call to the next: "
            "create and use it inside the target"
        )


def iter_lab_workdirs(directory: Optional[str] = None) -> Iterator[Path]:
    """Lab work directories present in directory (default: the temp dir); for leak checks."""
    base = Path(directory or tempfile.gettempdir())
    try:
        yield from sorted(base.glob("lbtune-lab-*"))
    except OSError:
        return
