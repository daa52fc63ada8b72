"""`lbtune ipvs serve` and its client against hostile peers, on this machine.

The server runs as a real process (`python -m lbtune ipvs serve`) with its state directory
in a temp directory. Nothing here reaches IPVS or the host: every request that the server
runs is for a config that does not read (exit 2 before the host is looked at); applies
against real IPVS are tests/lab/test_ipvs_serve_lab.py. Hostile clients are raw sockets
speaking (or not) the protocol of lbtune.host.endpoints.serve; hostile servers are sockets this
test listens on where the client looks.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterator, Optional

import pytest

from lbtune.host.endpoints import serve as proto
from tests.conftest import needs_root

pytestmark = needs_root

ROOT = pathlib.Path(__file__).resolve().parents[2]
BAD = '[[service]]\naddress = "10.0.0.1"\nport = 80\nbogus = 1\n'


def env_for(state: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LBTUNE_")}
    env.update(LBTUNE_STATE_DIR=str(state), PYTHONPATH=str(ROOT), **extra)
    return env


class Server:
    def __init__(self, tmp: pathlib.Path, pythonpath: Optional[pathlib.Path] = None,
                 log: str = "serve.log") -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.log = tmp / log
        self.env = env_for(self.state)
        if pythonpath is not None:
            self.env["PYTHONPATH"] = str(pythonpath)
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "lbtune", "ipvs", "serve"],
                                         stderr=err, stdout=subprocess.DEVNULL, env=self.env,
                                         cwd=tmp)  # fmt: skip
        deadline = time.monotonic() + 60
        while "listening on" not in self.text():
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.05)
        self.path = self.text().split("listening on ")[1].split(" (pid")[0]

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_log(self, needle: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            assert time.monotonic() < deadline, self.text()
            time.sleep(0.05)
        return self.text()

    def connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(20)
        s.connect(self.path)
        return s

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


def lbtune(tmp: pathlib.Path, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lbtune", *argv], capture_output=True,
                          text=True, env=env, cwd=tmp, timeout=120)  # fmt: skip


def request(cwd: str = "/", command: bytes = b"apply", source: bytes = b"bad.toml",
            env: Optional[list[bytes]] = None, as_json: bytes = b"0") -> bytes:
    return proto.encode_request([command, source, as_json, cwd.encode(), *(env or [])])


def own_env(server: Server) -> list[bytes]:
    return [f"{k}={v}".encode() for k, v in server.env.items()]


def answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """(the first byte, the reason of a D)."""
    first = proto.recv_exact(sock, 1)
    if first == b"D":
        (n,) = proto.U32.unpack(proto.recv_exact(sock, 4))
        return first, proto.recv_exact(sock, n)
    return first, b""


def served(server: Server) -> int:
    """The applies the server logged (it logs one before its answer goes out)."""
    return server.text().count("lbtune ipvs serve: apply ")


# ------------------------------------------------------------------------------ answers


@pytest.mark.parametrize("form", [(), ("--json",)])
def test_a_served_error_is_the_one_shot_runs_error(server, tmp_path, form):
    (tmp_path / "bad.toml").write_text(BAD)
    got = lbtune(tmp_path, "ipvs", "apply", "bad.toml", *form, env=server.env)
    assert served(server) == 1
    # the one-shot run: LBTUNE_DEBUG=0 (no traceback either way) makes the server decline
    alone = lbtune(tmp_path, "ipvs", "apply", "bad.toml", *form,
                   env=dict(server.env, LBTUNE_DEBUG="0"))
    assert "declined: the client's LBTUNE_* variables" in server.wait_log("declined")
    assert served(server) == 1
    assert (got.returncode, got.stdout, got.stderr) == (alone.returncode, alone.stdout,
                                                        alone.stderr)
    assert got.returncode == 2 and "unknown key 'bogus'" in got.stderr


def test_a_missing_config_and_a_relative_name_are_read_from_the_clients_directory(server,
                                                                                   tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "bad.toml").write_text(BAD.replace("bogus", "other"))
    got = subprocess.run([sys.executable, "-m", "lbtune", "ipvs", "apply", "bad.toml"],
                         capture_output=True, text=True, env=server.env, cwd=sub, timeout=60)
    assert got.returncode == 2 and "unknown key 'other'" in got.stderr
    missing = lbtune(tmp_path, "ipvs", "apply", "none.toml", env=server.env)
    assert missing.returncode == 2 and "cannot read config" in missing.stderr
    assert served(server) == 2


# ------------------------------------------------------------------------------ hostile clients


@pytest.mark.parametrize("payload, reason", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"x" * 64, b"not an lbtune ipvs serve request"),
    (proto.MAGIC + proto.U32.pack(0), b"0 fields"),
    (proto.MAGIC + proto.U32.pack(10**9), b"1000000000 fields"),
    (proto.MAGIC + proto.U32.pack(5) + proto.U32.pack(2**31), b"larger than the protocol"),
    (request(command=b"teardown"), b"command 'teardown'"),
    (request(source=b"-v"), b"config name"),
    (request(source=b"[bold]x.toml"), b"config name"),
    (request(source=b"a\0b"), b"NUL"),
    (request(cwd="relative"), b"not absolute"),
    (request(as_json=b"yes"), b"--json"),
    (request(env=[b"NOEQUALS"]), b"NAME=VALUE"),
    (request(env=[b"A=1", b"A=2"]), b"NAME=VALUE"),
    (request(cwd="/no/such/dir"), b"the client's LBTUNE_*"),  # its env lacks the server's
])  # fmt: skip
def test_a_bad_request_is_declined_and_the_server_goes_on(server, tmp_path, payload, reason):
    with server.connect() as s:
        s.sendall(payload)
        first, why = answer(s)
    assert first == b"D" and reason in why, why
    (tmp_path / "bad.toml").write_text(BAD)
    after = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
    assert after.returncode == 2 and served(server) == 1  # still serving


def test_a_working_directory_that_is_gone_is_declined(server):
    with server.connect() as s:
        s.sendall(request(cwd="/no/such/dir", env=own_env(server)))
        first, why = answer(s)
    assert first == b"D" and b"working directory" in why


def test_a_client_that_never_says_go_is_not_run(server, tmp_path):
    (tmp_path / "bad.toml").write_text(BAD)
    with server.connect() as s:
        s.sendall(request(cwd=str(tmp_path), env=own_env(server)))
        assert answer(s)[0] == b"A"
    server.wait_log("the client gave up before go")
    assert served(server) == 0


def test_a_silent_client_is_dropped_at_the_deadline_and_others_are_served_after(server,
                                                                               tmp_path):
    (tmp_path / "bad.toml").write_text(BAD)
    silent = server.connect()
    silent.sendall(proto.MAGIC[:5])
    t0 = time.monotonic()
    # meanwhile a client: it waits CLAIM_TIMEOUT for a claim, then runs the apply itself
    meanwhile = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
    assert meanwhile.returncode == 2 and "unknown key 'bogus'" in meanwhile.stderr
    server.wait_log("dropped a client")
    assert time.monotonic() - t0 < 30
    silent.close()
    after = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
    assert after.returncode == 2 and served(server) == 1


def test_a_client_that_goes_away_mid_request_or_at_once_changes_nothing(server, tmp_path):
    for payload in (b"", proto.MAGIC, request(env=own_env(server))[:-3]):
        s = server.connect()
        s.sendall(payload)
        s.close()
    (tmp_path / "bad.toml").write_text(BAD)
    after = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
    assert after.returncode == 2 and served(server) == 1


def test_a_client_that_is_not_root_is_refused():
    # the socket is 0600 in root's 0700 directory; opened up here so that the server's own
    # check (the peer's uid) is what is tested
    top = pathlib.Path(tempfile.mkdtemp(prefix="lbtune-serve-"))
    server = Server(top)
    try:
        _refused(server, top)
    finally:
        server.stop()
        shutil.rmtree(top)


def _refused(server: Server, top: pathlib.Path) -> None:
    for p in [pathlib.Path(server.path), *pathlib.Path(server.path).parents]:
        if str(p).startswith(str(top)):
            p.chmod(0o777 if p.is_dir() else 0o666)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(20)
            s.connect(server.path)
            try:
                s.sendall(request())
                code = 0 if s.recv(1) == b"" else 3  # closed on without a word
            except (BrokenPipeError, ConnectionResetError):  # ... before or after the request
                code = 0
        except BaseException as e:
            os.write(2, f"client of uid 65534: {e!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "refused a client of uid 65534" in server.wait_log("refused")


# ------------------------------------------------------------------------------ life


def test_one_server_per_state_directory(server, tmp_path):
    second = lbtune(tmp_path, "ipvs", "serve", env=server.env)
    assert second.returncode == 6 and "another lbtune ipvs serve listens" in second.stderr


def test_sigterm_stops_it_and_removes_the_socket(server):
    assert server.stop() == 0
    assert not os.path.exists(server.path)
    assert "stopped after 0 request(s)" in server.text()


def test_a_killed_servers_socket_is_passed_by_and_replaced(server, tmp_path):
    server.proc.kill()
    server.proc.wait()
    assert os.path.exists(server.path)  # left behind
    (tmp_path / "bad.toml").write_text(BAD)
    alone = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
    assert alone.returncode == 2 and "unknown key" in alone.stderr  # run by the client
    again = Server(tmp_path, log="again.log")
    try:
        lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=server.env)
        assert served(again) == 1
    finally:
        assert again.stop() == 0


def test_a_change_of_its_code_on_disk_stops_it(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "lbtune", copy / "lbtune",
                    ignore=shutil.ignore_patterns("__pycache__"))
    s = Server(tmp_path, pythonpath=copy)
    try:
        (tmp_path / "bad.toml").write_text(BAD)
        engine = copy / "lbtune" / "tune" / "engine.py"
        engine.write_text(engine.read_text() + "\n# upgraded\n")
        got = lbtune(tmp_path, "ipvs", "apply", "bad.toml", env=s.env)
        assert got.returncode == 2 and "unknown key" in got.stderr  # run by the client
        assert "lbtune's code changed since the server started" in s.text()
        assert s.proc.wait(timeout=30) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


# ------------------------------------------------------------------------------ hostile servers


class FakeServer:
    """Listens where the client looks, and answers as `behave` says."""

    def __init__(self, tmp: pathlib.Path, behave: str) -> None:
        state = tmp / "state"
        self.env = env_for(state)
        probe = subprocess.run([sys.executable, "-c", "from lbtune.host.endpoints.serve import "
                                "socket_path; print(socket_path())"],
                               capture_output=True, text=True, env=self.env, check=True)
        self.path = probe.stdout.strip()
        os.makedirs(os.path.dirname(self.path), mode=0o700)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(4)
        self.behave = behave
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(20)
            proto.recv_exact(conn, len(proto.MAGIC))
            (count,) = proto.U32.unpack(proto.recv_exact(conn, 4))
            for _ in range(count):
                (n,) = proto.U32.unpack(proto.recv_exact(conn, 4))
                proto.recv_exact(conn, n)
            if self.behave == "silent":
                time.sleep(proto.CLAIM_TIMEOUT + 2)
                return
            if self.behave == "garbage":
                conn.sendall(b"Z" * 100)
                return
            conn.sendall(b"A")
            if self.behave == "dies":
                conn.recv(1)  # the go
                return
            if self.behave == "truncated":
                conn.recv(1)
                conn.sendall(b"R" + proto.I32.pack(0) + proto.U32.pack(1000) + b"half")
                return

    def close(self) -> None:
        self.thread.join(timeout=30)
        self.sock.close()


def client(tmp: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The client alone: exit 99 when it would run the apply itself."""
    return subprocess.run([sys.executable, "-m", "lbtune.cli.ipvs.fast", "ipvs", "apply",
                           "x.toml"], capture_output=True, text=True, env=env, cwd=tmp,
                          timeout=60)  # fmt: skip


@pytest.mark.parametrize("behave, code, words", [
    ("silent", 99, ""),  # never claims it: the client runs it itself, after CLAIM_TIMEOUT
    ("garbage", 99, ""),  # not the protocol: the same
    ("dies", 5, "took this apply and stopped before answering"),
    ("truncated", 5, "took this apply and stopped before answering"),
])  # fmt: skip
def test_the_client_against_a_server_that_misbehaves(tmp_path, behave, code, words):
    fake = FakeServer(tmp_path, behave)
    try:
        t0 = time.monotonic()
        got = client(tmp_path, fake.env)
        assert got.returncode == code, got.stderr
        assert words in got.stderr and "Traceback" not in got.stderr
        assert got.stdout == ""
        if behave == "silent":
            assert time.monotonic() - t0 >= proto.CLAIM_TIMEOUT
    finally:
        fake.close()


def test_the_client_never_talks_to_a_server_that_is_not_roots(tmp_path):
    """A socket at the server's path whose listener is uid 65534 (the peer credentials of
    a listening socket are taken at listen()): the client closes without sending."""
    probe = subprocess.run([sys.executable, "-c", "from lbtune.host.endpoints.serve import "
                            "socket_path; print(socket_path())"],
                           capture_output=True, text=True, env=env_for(tmp_path / "state"),
                           check=True)
    path = probe.stdout.strip()
    os.makedirs(os.path.dirname(path), mode=0o700)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: bind as root, listen as nobody
        code = 1
        try:
            os.close(r)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            os.setgid(65534)
            os.setuid(65534)
            s.listen(1)
            os.write(w, b"1")
            conn, _ = s.accept()
            conn.settimeout(10)
            code = 0 if conn.recv(1) == b"" else 3  # closed on, nothing sent
        finally:
            os._exit(code)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.close(r)
    got = client(tmp_path, env_for(tmp_path / "state"))
    assert got.returncode == 99 and got.stdout == "" and got.stderr == ""
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_client_passes_by_what_it_must_not_hand_over(tmp_path, server):
    base = server.env
    for argv, env in ((["ipvs", "plan", "x.toml"], base),
                      (["ipvs", "apply", "x.toml", "-v"], base),
                      (["ipvs", "apply", "[x].toml"], base),
                      (["ipvs", "apply", "x.toml"], dict(base, LBTUNE_ROOT="/tmp")),
                      (["ipvs", "apply", "x.toml"], dict(base, LBTUNE_DEBUG="maybe"))):
        got = subprocess.run([sys.executable, "-m", "lbtune.cli.ipvs.fast", *argv],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
        assert got.returncode == 99, (argv, got.stderr)
    assert "apply" not in server.text().split("listening on", 1)[1]


def test_the_server_needs_root_and_the_hosts_own_namespace(tmp_path: Any):
    got = lbtune(tmp_path, "ipvs", "serve", "--netns", "nope", env=env_for(tmp_path / "s"))
    assert got.returncode == 2 and "no --netns" in got.stderr
