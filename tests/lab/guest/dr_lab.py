"""A DR test bed inside the lab guest: client, director and real servers on one bridge.

Namespaces `cl` (client), `dir` (director) and `rs1..rsN` (real servers), each with `eth0`
on bridge `br0` of the guest's init namespace: 10.0.0.0/24 and fd00::/64, the VIP
10.0.0.100 / fd00::100. Each real server runs tests/banner_server.py, an HTTP/1.0
responder on port 80 that names its own address, so the client can tell who answered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Optional

VIP, VIP6 = "10.0.0.100", "fd00::100"
BANNER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "banner_server.py")
CLIENT, DIRECTOR = "10.0.0.1", "10.0.0.2"


def sh(*argv: str, check: bool = True) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip()}")
    return res.stdout


def rs_addr(i: int) -> str:
    return f"10.0.0.{10 + i}"


def rs_addr6(i: int) -> str:
    return f"fd00::{10 + i}"


class Bed:
    """The namespaces, links and servers; `close()` stops the servers."""

    def __init__(self, n_real: int = 3) -> None:
        self.n = n_real
        self.servers: list[subprocess.Popen[bytes]] = []
        os.environ.setdefault("LBTUNE_STATE_DIR", "/tmp/lbtune-state")
        sh("ip", "link", "add", "br0", "type", "bridge")
        sh("ip", "link", "set", "br0", "up")
        self._ns("cl", CLIENT, "fd00::1")
        self._ns("dir", DIRECTOR, "fd00::2")
        for i in range(1, n_real + 1):
            self._ns(f"rs{i}", rs_addr(i), rs_addr6(i))
            self.serve(i)
        sh("modprobe", "ip_vs")

    def _ns(self, name: str, addr: str, addr6: str) -> None:
        sh("ip", "netns", "add", name)
        peer = f"v-{name}"
        sh("ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", name)
        sh("ip", "link", "set", peer, "master", "br0", "up")
        for cmd in (["addr", "add", f"{addr}/24", "dev", "eth0"],
                    ["addr", "add", f"{addr6}/64", "dev", "eth0", "nodad"],
                    ["link", "set", "eth0", "up"], ["link", "set", "lo", "up"]):
            sh("ip", "-n", name, *cmd)

    def serve(self, i: int) -> None:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", f"rs{i}", sys.executable, BANNER, rs_addr(i), "80"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.servers.append(proc)
        for _ in range(100):  # wait until it listens
            out = sh("ip", "netns", "exec", f"rs{i}", "ss", "-Htln", "sport = :80")
            if out.strip():
                return
            time.sleep(0.05)
        raise RuntimeError(f"banner server on rs{i} did not start")

    def close(self) -> None:
        close_workers()
        for p in self.servers:
            p.kill()
            p.wait()


class _Worker:
    """A forked child that runs `lbtune --netns NS ...` calls one after another.

    --netns moves a process into the namespace for good, so each such call needs a child of
    its own; a fresh fork per call costs seconds in the one-CPU UML guest (every page the
    CLI touches is copied on write again), one child per namespace pays that once. Requests
    and results go over pipes, pickled.
    """

    def __init__(self) -> None:
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child: serve until the parent closes the request pipe
            os.close(req_w)
            os.close(res_r)
            try:
                self._serve(req_r, res_w)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(res_w)
        self.req, self.res = os.fdopen(req_w, "wb"), os.fdopen(res_r, "rb")

    @staticmethod
    def _serve(req_r: int, res_w: int) -> None:
        import pickle
        import traceback

        from tests.conftest import _run_here

        with os.fdopen(req_r, "rb") as req, os.fdopen(res_w, "wb") as res:
            while True:
                try:
                    argv = pickle.load(req)  # noqa: S301 (our own parent wrote it)
                except EOFError:
                    return
                try:
                    out: Any = ("ok", _run_here(argv))
                except BaseException:
                    out = ("error", traceback.format_exc())
                pickle.dump(out, res)
                res.flush()

    def call(self, argv: list[str]) -> Any:
        import pickle

        pickle.dump(argv, self.req)
        self.req.flush()
        status, value = pickle.load(self.res)  # noqa: S301 (our own forked child wrote it)
        if status != "ok":
            raise AssertionError(f"child failed:\n{value}")
        return value

    def close(self) -> None:
        self.req.close()
        self.res.close()
        os.waitpid(self.pid, 0)


_WORKERS: dict[str, _Worker] = {}


def close_workers() -> None:
    while _WORKERS:
        _WORKERS.popitem()[1].close()


def cli(*args: str, netns: Optional[str] = None) -> dict[str, Any]:
    """`lbtune ARGS` in-process (with --netns in that namespace's worker, see _Worker): exit
    code, stdout, stderr, JSON."""
    from tests.conftest import run_cli

    if netns:
        if netns not in _WORKERS:
            _WORKERS[netns] = _Worker()
        r = _WORKERS[netns].call(["--netns", netns, *args])
    else:
        r = run_cli(*args)
    out: dict[str, Any] = {"code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr}
    try:
        out["json"] = r.json
    except ValueError:
        out["json"] = None
    return out


def write(path: str, text: str) -> str:
    with open(path, "w") as f:
        f.write(text)
    return path


def config(sched: str = "rr", weights: Optional[dict[int, int]] = None, v6: bool = False,
           extra: str = "", drain_timeout: int = 10) -> str:
    """A director config for the bed: one tcp:80 service on the VIP (and one on VIP6)."""
    weights = weights or {1: 1, 2: 1, 3: 1}
    lines = [f"[director]\ndrain_timeout = {drain_timeout}\n",
             f'[[vip]]\naddress = "{VIP}"\ndev = "eth0"\n',
             f'[[service]]\nprotocol = "tcp"\naddress = "{VIP}"\nport = 80\n'
             f'scheduler = "{sched}"\n']
    for i, w in sorted(weights.items()):
        lines.append(f'[[service.real_server]]\naddress = "{rs_addr(i)}"\nweight = {w}\n')
    if v6:
        lines.append(f'[[vip]]\naddress = "{VIP6}"\ndev = "eth0"\n')
        lines.append(f'[[service]]\nprotocol = "tcp"\naddress = "{VIP6}"\nport = 80\n'
                     f'scheduler = "{sched}"\n')
        for i, w in sorted(weights.items()):
            lines.append(f'[[service.real_server]]\naddress = "{rs_addr6(i)}"\nweight = {w}\n')
    return "\n".join(lines) + extra
