"""A throwaway system that boots this host's systemd as PID 1: Debian's `systemd-nspawn --boot`
over a volatile overlay of the host's own root, at native speed (tests/fleet/
test_ansible_deploy_nspawn.py runs the collection's role lbtune.fleet.deploy against it).

Nothing of the host changes, and nothing stays:

- the root is an overlay: the host's `/` read-only below, a tmpfs above, mounted in a private
  mount namespace (`unshare --mount --propagation private`) that dies with the container;
  nspawn refuses `--volatile=overlay` on `/` itself ("Spawning container on root directory is
  not supported"), so the wrapper mounts the same overlay by hand;
- nspawn's own host-side state (`/run/systemd/nspawn/`: its locks and mount propagation
  directory; `/run` is on the disk where systemd is not PID 1) goes to a tmpfs over `/run`
  in that namespace;
- `--private-network` (only `lo`), `--register=no` and `--keep-unit`: no machined, no host
  systemd asked for a scope (this host's PID 1 may not be systemd at all);
- the cgroups nspawn creates for the container (`payload/`, `supervisor/`) go below one
  cgroup of its own, `lbtune-nspawn.PID`, in the `name=systemd` and unified hierarchies,
  removed when the container has exited (those of a wrapper killed with SIGKILL by the next
  boot);
- the container boots `basic.target` (not the host's default target: none of the host's
  enabled services, e.g. a database, start in it) with `timers.target` masked (apt's daily
  timers would take dpkg's lock under the test);
- the wrapper gets SIGTERM when the process that booted it dies (PR_SET_PDEATHSIG), and then
  powers the container off (nspawn's SIGTERM: systemd's clean shutdown) and removes the
  cgroups; `Container.close()` does the same and waits.

Commands run in the container with `nsenter --target PID1 --all` (its mount, UTS, IPC,
network, PID and cgroup namespaces and its root), which needs no service in the container
and no network: ansible-core has no nspawn connection, and an sshd would be one more
package and one more daemon to set up for the same result (the modules run in the container
either way).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

CGROUP = Path("/sys/fs/cgroup")
HIERARCHIES = ("systemd", "unified")  # the two nspawn creates the container's cgroups in
PREFIX = "lbtune-nspawn."
NSPAWN = "/usr/bin/systemd-nspawn"
PR_SET_PDEATHSIG = 1

# $1: an empty directory (the mount points), then nspawn's command line.
WRAPPER = r"""
set -u
d=$1 cg=lbtune-nspawn.$$; shift
for h in systemd unified; do mkdir "/sys/fs/cgroup/$h/$cg" || exit 1; done
set -e
mount -t tmpfs -o mode=0755 lbtune-nspawn "$d"
mkdir "$d/upper" "$d/work" "$d/root"
mount -t overlay -o "lowerdir=/,upperdir=$d/upper,workdir=$d/work" lbtune-nspawn "$d/root"
mount -t tmpfs -o mode=0755 lbtune-nspawn-run /run
set +e
(
  for h in systemd unified; do echo "$BASHPID" > "/sys/fs/cgroup/$h/$cg/cgroup.procs"; done
  exec "$@"
) &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT HUP
while kill -0 "$pid" 2>/dev/null; do wait "$pid"; rc=$?; done
for h in systemd unified; do
  find "/sys/fs/cgroup/$h/$cg" -depth -type d -exec rmdir {} + 2>/dev/null
done
for h in systemd unified; do
  [ ! -e "/sys/fs/cgroup/$h/$cg" ] || echo "nspawn wrapper: cgroup $h/$cg left behind" >&2
done
exit "$rc"
"""


class NspawnUnavailable(RuntimeError):
    """The container cannot be booted here (the reason is the message)."""


def _pdeathsig() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def remove_stale_cgroups() -> list[str]:
    """Remove the empty `lbtune-nspawn.PID` cgroups of wrappers that are gone (a SIGKILL);
    returns what was removed."""
    removed = []
    for h in HIERARCHIES:
        base = CGROUP / h
        if not base.is_dir():
            continue
        for top in base.glob(PREFIX + "*"):
            pid = top.name[len(PREFIX):]
            if pid.isdigit() and Path(f"/proc/{pid}").exists():
                continue
            _rmtree_cgroup(top)
            if not top.exists():
                removed.append(str(top))
    return removed


def _rmtree_cgroup(top: Path) -> None:
    """rmdir a cgroup and its children, deepest first (a cgroup's files cannot be removed)."""
    dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
    for d in [*dirs, top]:
        with contextlib.suppress(OSError):
            d.rmdir()


def unavailable() -> Optional[str]:
    """Why a container cannot boot here, or None."""
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn, mounts, cgroups)"
    if not Path(NSPAWN).is_file():
        return f"{NSPAWN} not found (Debian's systemd-container, which `make setup` installs)"
    if not Path("/lib/systemd/systemd").is_file():
        return "/lib/systemd/systemd not found (the init the container boots)"
    try:
        filesystems = Path("/proc/filesystems").read_text()
    except OSError:
        filesystems = ""
    if "\toverlay\n" not in filesystems:  # mounting one would load the module: not here
        return "no overlay filesystem in this kernel (/proc/filesystems)"
    for h in HIERARCHIES:
        if not (CGROUP / h / "cgroup.procs").is_file():
            return f"no cgroup hierarchy at {CGROUP / h} (nspawn's layout on this host)"
    return None


class Container:
    """One booted container; `run()` a command in it, `close()` powers it off."""

    def __init__(self, proc: subprocess.Popen[bytes], leader: int, log: Path) -> None:
        self.proc = proc
        self.leader = leader
        self.log = log

    @classmethod
    def boot(cls, workdir: Path, binds: Sequence[tuple[str, str, bool]] = (),
             timeout: float = 120) -> Container:  # fmt: skip
        """Boot a container; `workdir` (empty or absent) holds its mount points and boot
        log; `binds` are (host path, container path, read-only)."""
        why = unavailable()
        if why:
            raise NspawnUnavailable(why)
        remove_stale_cgroups()
        workdir.mkdir(parents=True, exist_ok=True)
        mnt = workdir / "mnt"
        mnt.mkdir()
        log = workdir / "boot.log"
        argv = [NSPAWN, "--quiet", "--boot", "--register=no", "--keep-unit",
                "--private-network", "--link-journal=no", "--console=read-only",
                f"--machine=lbtune-test-{os.getpid()}", f"--directory={mnt}/root"]  # fmt: skip
        for host, dest, ro in binds:
            argv.append(f"--bind{'-ro' if ro else ''}={host}:{dest}")
        # the init's arguments (nspawn passes what follows --boot's options to it)
        init = ["systemd.unit=basic.target", "systemd.mask=timers.target"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "bash", "-c", WRAPPER,
                 "lbtune-nspawn", str(mnt), *argv, *init],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=_pdeathsig, start_new_session=True)  # fmt: skip
        container = cls(proc, 0, log)
        try:
            container.leader = container._wait_leader(timeout)
            container._wait_running(timeout)
        except BaseException:
            container.close()
            raise
        return container

    def _wait_leader(self, timeout: float) -> int:
        """The container's PID 1 as this host sees it: nspawn's child running systemd."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise NspawnUnavailable(f"systemd-nspawn exited {self.proc.returncode}: "
                                        + self.boot_log()[-2000:])  # fmt: skip
            for nspawn in _descendants(self.proc.pid):
                if _comm(nspawn) != "systemd-nspawn":
                    continue
                for child in _children(nspawn):
                    if _comm(child) == "systemd":
                        return child
            time.sleep(0.1)
        raise NspawnUnavailable("the container's systemd did not start: " + self.boot_log()[-2000:])

    def _wait_running(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while True:
            r = self.run(["systemctl", "is-system-running", "--wait"], timeout=timeout)
            state = r.stdout.strip()
            if state in ("running", "degraded"):
                return
            if time.monotonic() > end or self.proc.poll() is not None:
                raise NspawnUnavailable(f"the container's systemd is {state or r.stderr!r}: "
                                        + self.boot_log()[-2000:])  # fmt: skip
            time.sleep(0.2)

    def run(self, argv: Sequence[str], timeout: float = 120,
            env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run `argv` in the container (its namespaces and root), with a root shell's
        environment plus `env`."""
        base = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        base.update(env or {})
        cmd = ["nsenter", f"--target={self.leader}", "--all", "--root", "--wd",
               "env", "-i", *(f"{k}={v}" for k, v in base.items()), *argv]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              check=False, stdin=subprocess.DEVNULL)  # fmt: skip

    def cgroups(self) -> list[Path]:
        """The container's cgroups on this host (none once it is closed)."""
        name = f"{PREFIX}{self.proc.pid}"
        return [CGROUP / h / name for h in HIERARCHIES if (CGROUP / h / name).exists()]

    def boot_log(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def close(self, timeout: float = 60) -> int:
        """Power the container off (SIGTERM to the wrapper: nspawn's clean shutdown) and wait
        for the wrapper to have removed its cgroups; SIGKILL after `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
                remove_stale_cgroups()
        return self.proc.returncode

    def __enter__(self) -> Container:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = _children(p)
        out.extend(kids)
        todo.extend(kids)
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
