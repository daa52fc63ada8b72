"""The lab's servers: Debian's nginx on every real server, Debian's HAProxy for proxy mode.

Each instance gets its own run directory (config, pid file, logs, temp paths), so nothing is
written outside it and several instances run side by side in their namespaces. nginx answers
every request with the server's name, in the body and in an `X-Lab-Server` header, and logs
one short line per request (buffered: a log write per request would cost a syscall each in
the single-CPU guest); `served()` counts those lines after a graceful stop, which is the
per-server distribution of requests, as the servers saw it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from typing import Optional, Sequence

from lbtune.host.deadline import wait_until
from lbtune.host.runner import pid_alive
from lbtune.lab.inguest.shell import LabStepFailed, Shell

SERVER_HEADER = "X-Lab-Server"
HTTP_PORT = 80
# HAProxy balance algorithm for each IPVS scheduler the proxy mode can stand in for.
HAPROXY_BALANCE = {
    "rr": "roundrobin",
    "wrr": "roundrobin",
    "lc": "leastconn",
    "wlc": "leastconn",
    "sh": "source",
}


@dataclass(frozen=True)
class Served:
    """What one web server logged: requests answered, and how many were not 200."""

    server: str
    requests: int
    non_200: int


def nginx_conf(title: str, run_dir: str, http: str, server: str, port: int = HTTP_PORT) -> str:
    """An nginx.conf for a lab node: one worker as root, every path below run_dir, one
    access-log line (the status) per request; `http` and `server` are the directives that
    differ between uses (already indented)."""
    return f"""# {title}: generated, lives in {run_dir}
user root;
worker_processes 1;
pid {run_dir}/nginx.pid;
error_log {run_dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format lab '$status';
    access_log {run_dir}/access.log lab buffer=64k flush=1s;
    client_body_temp_path {run_dir}/body;
    proxy_temp_path {run_dir}/proxy;
    fastcgi_temp_path {run_dir}/fastcgi;
    uwsgi_temp_path {run_dir}/uwsgi;
    scgi_temp_path {run_dir}/scgi;
{http}
    server {{
        listen {port} backlog=4096;
{server}
    }}
}}
"""


def render_nginx_conf(name: str, run_dir: str, port: int = HTTP_PORT) -> str:
    """nginx.conf of one real server: answers its own name to every request."""
    http = "    keepalive_requests 1000000;\n    keepalive_timeout 60s;"
    server = (f"        default_type text/plain;\n"
              f"        location / {{\n"
              f"            add_header {SERVER_HEADER} {name} always;\n"
              f'            return 200 "{name}\\n";\n'
              f"        }}")  # fmt: skip
    return nginx_conf(f"lbtune lab real server {name}", run_dir, http, server, port)


def render_haproxy_cfg(
    run_dir: str,
    vip: str,
    servers: Sequence[tuple[str, str, int]],
    scheduler: str,
    port: int = HTTP_PORT,
) -> str:
    """haproxy.cfg putting HAProxy on vip:port in front of (name, address, weight) servers."""
    balance = HAPROXY_BALANCE.get(scheduler)
    if balance is None:
        raise LabStepFailed(
            f"--mode proxy: no HAProxy equivalent of scheduler {scheduler!r} "
            f"(one of {', '.join(sorted(HAPROXY_BALANCE))})"
        )
    lines = [
        f"# lbtune lab proxy: generated, lives in {run_dir}",
        "global",
        "    maxconn 20000",
        f"    pidfile {run_dir}/haproxy.pid",
        "    nbthread 1",
        "defaults",
        "    mode http",
        "    option http-keep-alive",
        "    timeout connect 2s",
        "    timeout client 30s",
        "    timeout server 30s",
        "frontend vip",
        f"    bind {vip}:{port}",
        "    default_backend realservers",
        "backend realservers",
        f"    balance {balance}",
        "    http-reuse always",
    ]
    lines += [f"    server {name} {addr}:{port} weight {w}" for name, addr, w in servers]
    return "\n".join(lines) + "\n"


def _read_pid(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stop_pid(pid: Optional[int], sig: int, timeout: float) -> None:
    """Send sig, wait up to timeout for the process to go, then SIGKILL it."""
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    wait_until(lambda: not pid_alive(pid), timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _wait_for_pidfile(path: str, what: str, error_log: str, timeout: float = 10.0) -> int:
    found: list[int] = []

    def started() -> bool:
        pid = _read_pid(path)
        found[:] = [pid] if pid is not None and pid_alive(pid) else []
        return bool(found)

    if wait_until(started, timeout):
        return found[0]
    raise LabStepFailed(f"{what} did not start: {_last_line(error_log)}")


def _last_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = [line.strip() for line in fh if line.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "empty log"


class WebServer:
    """nginx for one real server, in its namespace, with everything under run_dir."""

    def __init__(self, name: str, netns: str, run_dir: str, shell: Optional[Shell] = None):
        self.name, self.netns, self.run_dir = name, netns, run_dir
        self.shell = shell or Shell()
        self.conf = os.path.join(run_dir, "nginx.conf")
        self.pid_file = os.path.join(run_dir, "nginx.pid")
        self.access_log = os.path.join(run_dir, "access.log")
        self.error_log = os.path.join(run_dir, "error.log")
        self.pid: Optional[int] = None

    def start(self) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        with open(self.conf, "w", encoding="utf-8") as fh:
            fh.write(render_nginx_conf(self.name, self.run_dir))
        # -e: the error log before the config is read (the default one is on a read-only /)
        argv = ["nginx", "-p", self.run_dir, "-c", self.conf, "-e", self.error_log]
        self.shell.check(argv, self.netns)  # daemonizes; returns once the master runs
        self.pid = _wait_for_pidfile(self.pid_file, f"nginx on {self.name}", self.error_log)

    def stop(self) -> None:
        """Graceful stop (SIGQUIT flushes the buffered access log), SIGKILL after 5 s."""
        _stop_pid(self.pid or _read_pid(self.pid_file), signal.SIGQUIT, 5.0)
        self.pid = None

    def rotate(self, timeout: float = 5.0) -> None:
        """Move the access log aside and make nginx open a new one (SIGUSR1 flushes first)."""
        if self.pid is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.access_log, self.access_log + ".before")
        os.kill(self.pid, signal.SIGUSR1)
        if not wait_until(lambda: os.path.exists(self.access_log), timeout, 0.02):
            raise LabStepFailed(f"nginx on {self.name} did not reopen its access log")

    def served(self) -> Served:
        """Requests this server logged (call after stop(): the log is buffered)."""
        requests = non_200 = 0
        try:
            with open(self.access_log, encoding="ascii", errors="replace") as fh:
                for line in fh:
                    status = line.strip()
                    if status:
                        requests += 1
                        non_200 += status != "200"
        except FileNotFoundError:
            pass
        return Served(self.name, requests, non_200)


class Proxy:
    """HAProxy in the director's namespace, listening on the VIP."""

    def __init__(self, netns: str, run_dir: str, shell: Optional[Shell] = None) -> None:
        self.netns, self.run_dir = netns, run_dir
        self.shell = shell or Shell()
        self.cfg = os.path.join(run_dir, "haproxy.cfg")
        self.pid_file = os.path.join(run_dir, "haproxy.pid")
        self.pid: Optional[int] = None

    def start(
        self, vip: str, servers: Sequence[tuple[str, str, int]], scheduler: str
    ) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        text = render_haproxy_cfg(self.run_dir, vip, servers, scheduler)
        with open(self.cfg, "w", encoding="utf-8") as fh:
            fh.write(text)
        self.shell.check(["haproxy", "-c", "-q", "-f", self.cfg], self.netns)
        self.shell.check(["haproxy", "-D", "-f", self.cfg, "-p", self.pid_file], self.netns)
        self.pid = _wait_for_pidfile(self.pid_file, "haproxy", self.cfg)

    def stop(self) -> None:
        _stop_pid(self.pid or _read_pid(self.pid_file), signal.SIGTERM, 5.0)
        self.pid = None
