"""The guest agent: the one loop that serves the host's requests inside a lab guest.

``python -m lbtune.lab.inguest.agent WORKDIR [--once]`` runs in the guest of either backend,
with WORKDIR the work directory the host shares with it at the same path (hostfs for UML,
virtio-9p for the VM); the request protocol and the directory's layout are
lbtune.lab.protocol's. The VM's boot script (lbtune.lab.guests.vm) and the UML init script of
a lab kept up (lbtune.lab.guests.uml.run_agent_in_lab) start it as a loop that serves until
a stop request, so one boot serves many requests; a UML guest booted for one call
(lbtune.lab.guests.uml.run_in_lab) starts it with ``--once``: it serves the requests the host
wrote before the boot, one after the other, and exits. Each request runs in its own thread.

Requests (JSON objects, lbtune.lab.protocol's `*_request`):

* ``{"kind": "argv", "argv": [...], "netns": null|"NAME", "timeout": S}`` ->
  ``{"returncode": N, "stdout": "...", "stderr": "..."}`` (returncode -9 on timeout)
* ``{"kind": "call", "target": "pkg.mod:func", "args": [...], "timeout": S}`` -> the payload
  of lbtune.lab.inguest.entry (``{"ok": true, "value": ...}`` or the error and guest traceback)
  with the process's ``output``; the target runs in its own process, with
  ``LBTUNE_LAB_WORKDIR`` set to ``WORKDIR/calls/<id>`` (its progress file, lbtune.lab.progress,
  is read there by the host). The process is ``python -m lbtune.lab.inguest.entry`` (run in
  the namespace with ``"netns"``: lbtune.host.net.netns.netns_argv, which also gives it the
  namespace's ``/sys``). While ``WORKDIR/fork-calls`` exists (the host's
  ``VmGuest.fork_calls(True)``), it is instead forked from a fork server that has the
  interpreter and lbtune.lab.inguest.entry loaded already (multiprocessing's ``forkserver``: a
  new single-threaded interpreter, started at the first such call, so a fork never copies a
  lock another thread held, as forking the threaded agent could). Under TCG a fresh Python
  spends seconds starting (bench/vm.py: 1.7 s for a call made fresh, 0.5 s forked). Calls
  with ``"netns"`` or ``"fresh": true`` are never forked, nor any call once the fork server
  failed to start or fork. It is off by default: in its one full suite run the vm tier was
  about a minute faster (of 30), and a plain ``run`` right after a reboot went unanswered
  for 150 s, a failure not yet explained or reproduced.
* ``{"kind": "stop", "reboot": bool}`` -> the agent exits; the boot script syncs, then powers the
  guest off or (the VM) reboots it.

At start the agent writes ``WORKDIR/ready.json``: what the guest sees (kernel, CPUs, NUMA nodes,
NICs with their drivers and channel counts).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from lbtune.host.net.netns import netns_argv
from lbtune.lab.protocol import (
    ANSWERS,
    ENV_WORKDIR,
    FORK_CALLS,
    READY,
    REBOOT,
    REQUESTS,
    Workdir,
    write_json,
)

POLL = 0.1  # seconds between scans of the request directory (9p has no inotify)
# What the fork server imports once, for every call it forks: the call's runner and the
# standard modules the guest targets use (each target imports its own module itself).
PRELOAD = ("lbtune.lab.inguest.entry", "lbtune.lab.progress", "json", "re", "socket", "subprocess",
           "pathlib", "typing", "errno", "traceback")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _nodes() -> dict[str, str]:
    base = "/sys/devices/system/node"
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith("node") and n[4:].isdigit())
    except OSError:
        return {}
    return {name[4:]: _read(f"{base}/{name}/cpulist") for name in names}


def _nics() -> dict[str, dict[str, Any]]:
    base = "/sys/class/net"
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(os.listdir(base)):
        driver_link = f"{base}/{name}/device/driver"
        if not os.path.islink(driver_link):
            continue
        queues = os.listdir(f"{base}/{name}/queues")
        out[name] = {
            "driver": os.path.basename(os.readlink(driver_link)),
            "rx_queues": sum(1 for q in queues if q.startswith("rx-")),
            "tx_queues": sum(1 for q in queues if q.startswith("tx-")),
        }
    return out


def guest_facts() -> dict[str, Any]:
    """What this guest is: kernel release, online CPUs, NUMA nodes and NICs (from sysfs)."""
    return {
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "nodes": _nodes(),
        "nics": _nics(),
        "cmdline": _read("/proc/cmdline"),
    }


def run_argv(req: dict[str, Any], env: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """Run ``req["argv"]`` (in network namespace ``req["netns"]`` when set) with a timeout:
    ``{"returncode", "stdout", "stderr"}``; never raises for the command's failure."""
    netns = req.get("netns")
    argv = netns_argv(str(netns) if netns else None, [str(a) for a in req["argv"]])
    timeout = float(req.get("timeout") or 120)
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
        )
    except subprocess.TimeoutExpired as exc:

        def text(v: Any) -> str:
            return v.decode(errors="replace") if isinstance(v, bytes) else (v or "")

        return {
            "returncode": -9,
            "stdout": text(exc.stdout),
            "stderr": text(exc.stderr) + f"\nlbtune-vm: timed out after {timeout:g} s",
        }
    except OSError as exc:
        return {"returncode": 127, "stdout": "", "stderr": f"lbtune-vm: {argv[0]}: {exc}"}
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


class Forker:
    """The fork server calls are forked from (see the module doc); `None` from `run` when it
    cannot fork, and the caller runs a fresh process instead."""

    def __init__(self, preload: Sequence[str] = PRELOAD) -> None:
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(preload))
        self.failed: Optional[str] = None

    def run(self, argv: Sequence[str], calldir: Path, timeout: float) -> Optional[dict[str, Any]]:
        """``lbtune.lab.inguest.entry`` with `argv` (target, JSON args, result file) in a forked
        child: ``{"returncode", "stdout", "stderr"}`` as run_argv gives them."""
        if self.failed:
            return None
        out, err = calldir / ".call-stdout", calldir / ".call-stderr"
        from lbtune.lab.inguest.entry import forked_call

        try:
            child = self._ctx.Process(
                target=forked_call, args=(*argv, str(calldir), str(out), str(err)),
                name=f"lbtune-call-{calldir.name}", daemon=False)  # fmt: skip
            child.start()
        except Exception as exc:  # this call and the next run fresh
            self.failed = f"{type(exc).__name__}: {exc}"
            sys.stderr.write(f"lbtune-vm: fork server failed ({self.failed}): fresh processes\n")
            return None
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join()
        code = -9 if timed_out else int(child.exitcode or 0)
        texts = []
        for path in (out, err):
            try:
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
                path.unlink()
            except OSError:
                texts.append("")
        if timed_out:
            texts[1] += f"\nlbtune-vm: timed out after {timeout:g} s"
        return {"returncode": code, "stdout": texts[0], "stderr": texts[1]}


def run_call(req: dict[str, Any], workdir: Path, rid: str,
             forker: Optional[Forker] = None) -> dict[str, Any]:
    """A call request in its own process (forked when `forker` is given and may): the
    entry's payload with the tail of the process's ``output``."""
    calldir = Workdir(workdir).calldir(rid)
    calldir.mkdir(parents=True, exist_ok=True)
    result = calldir / "result.json"
    args = [str(req["target"]), json.dumps(req.get("args", [])), str(result)]
    proc = None
    if forker is not None and not req.get("netns") and not req.get("fresh"):
        proc = forker.run(args, calldir, float(req.get("timeout") or 120))
    if proc is None:
        proc = run_argv(
            {"argv": [sys.executable, "-m", "lbtune.lab.inguest.entry", *args],
             "netns": req.get("netns"), "timeout": req.get("timeout")},
            env={ENV_WORKDIR: str(calldir)},
        )  # fmt: skip
    try:
        with open(result, encoding="utf-8") as fh:
            payload: dict[str, Any] = json.load(fh)
        result.unlink()
    except (OSError, ValueError):
        payload = {
            "ok": False,
            "exc_type": "",
            "error": f"the guest Python process exited {proc['returncode']} without a result",
            "traceback": proc["stderr"][-8000:],
        }
    payload["output"] = (proc["stdout"] + proc["stderr"])[-20000:]
    return payload


_forker: Optional[Forker] = None
_forker_lock = threading.Lock()


def _call_forker(workdir: Path) -> Optional[Forker]:
    """The fork server while the host asks for forked calls (made at the first one)."""
    global _forker
    if not (workdir / FORK_CALLS).exists():
        return None
    with _forker_lock:
        if _forker is None:
            _forker = Forker()
        return _forker


def _serve(workdir: Path, rid: str, req: dict[str, Any]) -> None:
    try:
        if req.get("kind") == "argv":
            out = run_argv(req)
        elif req.get("kind") == "call":
            out = run_call(req, workdir, rid, _call_forker(workdir))
        else:
            out = {"error": f"unknown request kind {req.get('kind')!r}"}
    except Exception as exc:  # the host must get an answer, whatever happened
        out = {"error": f"{type(exc).__name__}: {exc}"}
    write_json(Workdir(workdir).answer(rid), out)


def serve(workdir: Path, once: bool = False) -> bool:
    """Serve requests until a stop request (True when it asked for a reboot), or with `once`
    until every request written so far is answered."""
    req_dir = workdir / REQUESTS
    (workdir / ANSWERS).mkdir(exist_ok=True)
    while True:
        names = sorted(os.listdir(req_dir))
        if once and not any(not n.startswith(".") and n.endswith(".json") for n in names):
            return False
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            path = req_dir / name
            try:
                with open(path, encoding="utf-8") as fh:
                    req = json.load(fh)
                path.unlink()
            except (OSError, ValueError):
                continue
            if req.get("kind") == "stop":
                return bool(req.get("reboot"))
            rid = name[: -len(".json")]
            if once:
                _serve(workdir, rid, req)
            else:
                threading.Thread(target=_serve, args=(workdir, rid, req), daemon=True).start()
        if not once:
            time.sleep(POLL)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    once = args[1:] == ["--once"]
    if len(args) != 1 and not once:
        sys.stderr.write("usage: python -m lbtune.lab.inguest.agent WORKDIR [--once]\n")
        return 2
    workdir = Path(args[0])
    Workdir(workdir).make()
    facts = guest_facts()
    facts["agent_started"] = time.time()
    write_json(workdir / READY, facts)
    reboot = serve(workdir, once)
    (workdir / REBOOT).write_text("1" if reboot else "0", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
