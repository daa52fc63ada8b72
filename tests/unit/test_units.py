"""The shipped systemd units (packaging/systemd/): `systemd-analyze verify` finds nothing in
them, their exposure is the one bench/results/units.json records (and docs/install.md
renders), each keeps only the privilege docs/install.md names, every option file they read
is shipped, and the daemons they start say READY=1 over $NOTIFY_SOCKET (Type=notify).

systemd-analyze reads unit files offline: no systemd as PID 1, nothing of the host's
systemd or /etc is touched (the units are copied to a temporary directory). Debian's systemd
package, which every Debian 12 system has, brings systemd-analyze.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lbtune.host.sdnotify import ready

REPO_ROOT = Path(__file__).resolve().parents[2]
UNITS = REPO_ROOT / "packaging" / "systemd"
DEFAULTS = REPO_ROOT / "packaging" / "default"
SHIPPED = sorted(p.name for p in UNITS.glob("*.service"))
RESULT = REPO_ROOT / "bench" / "results" / "units.json"

# bench/ only while bench/units.py (the staging and the scoring) is imported: left on sys.path
# it reaches the lab guests' PYTHONPATH (they get the caller's), where bench/ansible.py
# shadows the ansible package that ansible-playbook imports.
sys.path.insert(0, str(REPO_ROOT / "bench"))
try:
    import units as bench_units
finally:
    sys.path.remove(str(REPO_ROOT / "bench"))


def test_the_four_daemons_have_units() -> None:
    assert SHIPPED == ["lbtune-adapt@.service", "lbtune-agent.service",
                       "lbtune-exporter.service", "lbtune-ipvs-serve.service"]


@pytest.mark.parametrize("name", SHIPPED)
def test_systemd_analyze_verify_is_clean(name: str, tmp_path: Path) -> None:
    staged = {p.name: p for p in bench_units.staged(tmp_path, "/bin/true")}
    unit = staged[bench_units.instance_name(UNITS / name)]
    assert "ExecStart=/bin/true " in unit.read_text()
    assert bench_units.verify(unit) == ""


def test_verify_reports_a_misspelt_key_and_a_bad_value(tmp_path: Path) -> None:
    """The check above can fail: systemd-analyze exits 0 on these, and says them."""
    unit = bench_units.staged(tmp_path, "/bin/true")[1]
    text = unit.read_text().replace("Type=notify", "Type=notifyy")
    unit.write_text(text.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"))
    messages = bench_units.verify(unit)
    assert "notifyy" in messages and "NoNewPrivilege" in messages


def test_exposure_is_the_committed_result(tmp_path: Path) -> None:
    """docs/install.md's table is rendered from bench/results/units.json: it must be what
    systemd-analyze says of the units as they are now (re-run bench/units.py after a change)."""
    recorded = {r["unit"]: r for r in json.loads(RESULT.read_text())["results"]}
    staged = bench_units.staged(tmp_path, "/bin/true")
    assert set(recorded) == {u.name for u in staged}
    for unit in staged:
        now = bench_units.measure(unit, UNITS / unit.name.replace("@web.", "@."))
        assert now.exposure == recorded[unit.name]["exposure"], unit.name
        assert now.capabilities == recorded[unit.name]["capabilities"], unit.name


def test_least_privilege_per_unit() -> None:
    s = {name: bench_units.settings((UNITS / name).read_text()) for name in SHIPPED}
    for name in ("lbtune-exporter.service", "lbtune-agent.service"):  # read-only daemons
        assert s[name]["DynamicUser"] == "yes", name
        assert s[name]["CapabilityBoundingSet"] == "", name
    for name in ("lbtune-adapt@.service", "lbtune-ipvs-serve.service"):  # they change IPVS
        assert s[name]["CapabilityBoundingSet"] == "CAP_NET_ADMIN", name
        assert s[name]["StateDirectory"] == "lbtune", name
    for name, kv in s.items():
        assert kv["NoNewPrivileges"] == "yes" and kv["ProtectSystem"] == "strict", name
        assert kv["Restart"] == "on-failure" and kv["Type"] == "notify", name
        assert "StandardOutput" not in kv, name  # the journal, systemd's default
        assert kv["RestartPreventExitStatus"] == "2", name  # a bad option: no restart loop
    assert "/etc/lbtune/ipvs/%i.toml" in s["lbtune-adapt@.service"]["ExecStart"]


def test_every_option_file_is_shipped_and_defines_what_the_unit_expands() -> None:
    for name in SHIPPED:
        text = (UNITS / name).read_text()
        files = [ln.split("=", 1)[1].lstrip("-") for ln in text.splitlines()
                 if ln.startswith("EnvironmentFile=") and "%i" not in ln]  # fmt: skip
        assert len(files) == 1, name
        default = DEFAULTS / Path(files[0]).name
        variable = [w[1:] for w in bench_units.settings(text)["ExecStart"].split()
                    if w.startswith("$")]  # fmt: skip
        assert len(variable) == 1, name
        assert f'\n{variable[0]}=""\n' in "\n" + default.read_text(), (name, default)
        # an LBTUNE_* variable in the server's environment makes `ipvs serve` decline every
        # client (their LBTUNE_* differ): the VM test found it with LBTUNE_IPVS_SERVE_OPTS
        assert not variable[0].startswith("LBTUNE_"), name
        assert not re.search(r"^\s*LBTUNE_", default.read_text(), re.M), default


# ------------------------------------------------------------------ readiness (Type=notify)


def _notify_socket(tmp_path: Path) -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(60)
    return sock, path


def test_ready_sends_one_datagram_and_nothing_without_the_variable(tmp_path: Path) -> None:
    sock, path = _notify_socket(tmp_path)
    with sock:
        assert ready("serving x\ny", {"NOTIFY_SOCKET": path})
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving x y"
    assert not ready("x", {})
    assert not ready("x", {"NOTIFY_SOCKET": str(tmp_path / "gone")})  # no listener: no error


def test_ready_reaches_an_abstract_socket() -> None:
    name = f"lbtune-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(10)
        assert ready("", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"READY=1"


@pytest.mark.parametrize("argv, listening", [
    (["exporter", "--listen", "127.0.0.1:0", "--duration", "60"], "serving http://127.0.0.1:"),
    (["ipvs", "agent", "--listen", "127.0.0.1", "--agent-port", "0", "--duration", "60"],
     "serving http://127.0.0.1:"),
])  # fmt: skip
def test_the_daemons_say_ready_once_they_listen(argv: list[str], listening: str,
                                                tmp_path: Path) -> None:  # fmt: skip
    sock, path = _notify_socket(tmp_path)
    env = {**os.environ, "NOTIFY_SOCKET": path, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "lbtune", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with sock:
            message = sock.recv(4096).decode()
        assert proc.poll() is None, proc.communicate()
        assert message.startswith("READY=1\nSTATUS=" + listening), message
        port = int(message.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # it listens when it says so
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err  # SIGTERM: a clean stop



@pytest.mark.parametrize("argv, said", [
    (["exporter", "--no-such-flag"], "lbtune exporter: No such option '--no-such-flag' "
                                     "(see lbtune exporter --help)"),
    (["ipvs", "agent", "--port", "x"], "lbtune ipvs agent: Invalid value for '--port': 'x' is "
                                       "not a valid integer (see lbtune ipvs agent --help)"),
])  # fmt: skip
def test_a_bad_option_is_one_line_in_the_journal(argv: list[str], said: str,
                                                 tmp_path: Path) -> None:  # fmt: skip
    """Under systemd (JOURNAL_STREAM names the file on stderr: the journal's stream) click's
    usage block becomes one line; exit 2, which the units' RestartPreventExitStatus= does
    not restart. A process whose stderr is elsewhere keeps click's block."""

    def run(journal: str) -> tuple[int, str, str]:
        with open(tmp_path / "stderr", "w+") as err:
            st = os.fstat(err.fileno())
            stream = f"{st.st_dev}:{st.st_ino}" if journal == "this" else journal
            env = {**os.environ, "JOURNAL_STREAM": stream, "PYTHONPATH": str(REPO_ROOT)}
            r = subprocess.run([sys.executable, "-m", "lbtune", *argv], stdout=subprocess.PIPE,
                               stderr=err, text=True, env=env, check=False)  # fmt: skip
            err.seek(0)
            return r.returncode, err.read(), r.stdout

    assert run("this") == (2, said + "\n", "")
    code, err, _ = run("8:9")  # inherited: stderr is not that stream
    assert code == 2 and err.startswith("Usage: ")


def test_no_test_module_leaves_bench_on_sys_path() -> None:
    """Every test module has been imported by now (collection comes first): none may leave
    bench/ on sys.path, where its ansible.py would shadow the ansible package in the lab
    guests (which get the caller's sys.path as PYTHONPATH)."""
    assert str(REPO_ROOT / "bench") not in sys.path
