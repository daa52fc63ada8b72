"""The Debian package under a real systemd (issue 32): `make deb` built on the host, installed
by the Ansible collection's role lbtune.fleet.deploy (the real `ansible-playbook`, connection
local, run inside the VM guest booted with the host's systemd as PID 1: VmGuest.boot(init=
"systemd"), the guest agent a service there, lbtune.lab.guests.vm.render_systemd_units). The
role runs four times: --check --diff (changes reported, nothing installed), the deploy (the
package installed, the exporter and the agent enabled, active and answering), again
(changed=0), and with a changed option (its diff, and the unit restarted: a new MainPID).

For each unit: it starts (Type=notify: `systemctl start` returns once the daemon is ready),
answers (the exporter scraped, the agent's /healthz, `lbtune ipvs apply` handed to `ipvs
serve`, `ipvs adapt` setting a weight from the agent's report), runs with the privilege
docs/install.md names (its uid and effective capabilities read from /proc), comes back after
a `kill -9` (Restart=on-failure), stops with SIGTERM as a success (exit 0, Result=success),
and refuses to start on a bad option in its /etc/default file with one journal line and no
restart. Nothing here touches the host's systemd or /etc: the guest writes to its own
overlay (its state disk), and the host's / is read-only to it.

One guest for the module; the tests run in order (the package first, adapt after the agent
and serve). With LBTUNE_VM_TRANSCRIPT=FILE the commands and their output are written there
(docs/install.md quotes such a transcript).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lbtune.lab.guests.uml import LabUnavailable
from lbtune.lab.guests.vm import VmGuest
from tests.fleet.ansible_run import recap, settings

pytestmark = pytest.mark.vm

REPO = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT = float(os.environ.get("LBTUNE_VM_BOOT_TIMEOUT", "600"))
TIMEOUT = 600  # one command in the guest: dpkg -i byte-compiles the bundled tree under TCG
CONFIG = "/etc/lbtune/ipvs/web.toml"
WEB = """\
[sysctl]
expire_nodest_conn = 1

[[vip]]
address = "10.99.0.1"
dev = "eth0"

[[service]]
address = "10.99.0.1"
port = 80
scheduler = "wrr"
forward = "masq"
  [[service.real_server]]
  address = "10.99.0.11"
  port = 80
  weight = 5
  agent = "http://127.0.0.1:9177/"
"""
# unit: (its options file, the variable, the options it runs with here)
UNITS = {
    "lbtune-exporter.service": ("/etc/default/lbtune-exporter", "EXPORTER_OPTS", ""),
    # the guest has no default route: the agent listens on loopback, about port 80 (nothing
    # listens there, so its health is "down" and adapt sets the weight to 0)
    "lbtune-agent.service": ("/etc/default/lbtune-agent", "AGENT_OPTS",
                             "--listen 127.0.0.1 --port 80"),
    "lbtune-ipvs-serve.service": ("/etc/default/lbtune-ipvs-serve", "IPVS_SERVE_OPTS", ""),
    "lbtune-adapt@web.service": ("/etc/default/lbtune-adapt@web", "ADAPT_OPTS",
                                 "--interval 1"),
}  # fmt: skip
OPERATOR = "PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"  # a root shell's
CAP_NET_ADMIN = 1 << 12
PRIVILEGE = {  # unit: (runs as root, effective capabilities)
    "lbtune-exporter.service": (False, 0),
    "lbtune-agent.service": (False, 0),
    "lbtune-ipvs-serve.service": (True, CAP_NET_ADMIN),
    "lbtune-adapt@web.service": (True, CAP_NET_ADMIN),
}

# the units the collection's deploy enables and starts here (a real server's: the exporter
# everywhere, the agent with lbtune_agent); the director's two are started by the tests below
DEPLOYED = ("lbtune-exporter.service", "lbtune-agent.service")
# the venv's ansible-playbook: the guest sees the host's / (read-only) and this checkout
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  roles:
    - lbtune.fleet.deploy
"""
ANSIBLE_TMP = "/root/lbtune-ansible"  # in the guest (its overlay)
INVENTORY = "guest ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"

state: dict[str, Any] = {"log": [], "play_seconds": {}}


def _log(what: str, text: str = "") -> None:
    state["log"].append(what + ("\n" + text.rstrip() if text.strip() else ""))


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("build")
    r = subprocess.run(["make", "-C", str(REPO), "deb", f"BUILD={build}",
                        f"PYTHON={sys.executable}"], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    debs = sorted(build.glob("lbtune_*_all.deb"))
    assert len(debs) == 1
    return debs[0]


@pytest.fixture(scope="module")
def guest(package: Path) -> Iterator[VmGuest]:
    try:
        g = VmGuest.boot(timeout=BOOT_TIMEOUT, init="systemd")
    except LabUnavailable as exc:
        pytest.skip(f"VM lab unavailable: {exc}")
    with g:
        shutil.copy(package, g.workdir / package.name)  # the guest sees its work directory
        state["deb"] = str(g.workdir / package.name)
        yield g
    path = os.environ.get("LBTUNE_VM_TRANSCRIPT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(state["log"]) + "\n")


def sh(vm: VmGuest, script: str, timeout: float = TIMEOUT, log: bool = True) -> Any:
    r = vm.run(["sh", "-c", script], timeout=timeout)
    if log:
        _log(f"guest# {script}", r.stdout + r.stderr + f"(exit {r.returncode})")
    return r


def show(vm: VmGuest, unit: str, *props: str) -> dict[str, str]:
    r = vm.run(["systemctl", "show", unit, *(f"--property={p}" for p in props)], timeout=60)
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def wait_for(vm: VmGuest, unit: str, check: Any, timeout: float = 300) -> dict[str, str]:
    end = time.monotonic() + timeout
    while True:
        s = show(vm, unit, "ActiveState", "SubState", "MainPID", "NRestarts", "Result",
                 "ExecMainStatus")  # fmt: skip
        if check(s) or time.monotonic() > end:
            return s
        time.sleep(1)


def set_options(vm: VmGuest, unit: str, options: str) -> None:
    path, var, _ = UNITS[unit]
    text = f'{var}="{options}"\n'
    r = vm.run(["sh", "-c", f"printf %s {shlex.quote(text)} > {path}"], timeout=60)
    assert r.returncode == 0, r.stderr


def answers(vm: VmGuest, unit: str) -> str:
    """The unit's daemon answers as it should; what it said."""
    if unit == "lbtune-exporter.service":
        r = sh(vm, "curl -sf http://127.0.0.1:9178/metrics | grep -E '^lbtune_up '")
        assert r.returncode == 0 and r.stdout.split() == ["lbtune_up", "1.0"], r.stdout + r.stderr
    elif unit == "lbtune-agent.service":
        r = sh(vm, "curl -s -w '%{http_code}\\n' http://127.0.0.1:9177/healthz")
        # the agent answers, and says port 80 (nothing listens there) is down: 503
        assert r.returncode == 0 and r.stdout.split() == ["down", "503"], r.stdout
    elif unit == "lbtune-ipvs-serve.service":
        # the VIP placed on eth0, the service, and a net.ipv4.vs sysctl (ReadWritePaths=)
        # as an operator's shell runs it: not with the harness's LBTUNE_IN_VM (serve hands
        # a request back when the client's LBTUNE_* differ from its own)
        r = sh(vm, f"env -i {OPERATOR} lbtune ipvs apply {CONFIG} --json; ipvsadm -Ln; "
                   "sysctl -n net.ipv4.vs.expire_nodest_conn; ip -4 -o addr show dev eth0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "10.99.0.1:80" in r.stdout and "10.99.0.11:80" in r.stdout, r.stdout
        assert "\n1\n" in r.stdout and "inet 10.99.0.1/32" in r.stdout, r.stdout
        journal = sh(vm, "journalctl --sync; journalctl -u lbtune-ipvs-serve -o cat | tail -n 3")
        assert f"apply {CONFIG}: exit 0" in journal.stdout, journal.stdout  # the server ran it
    else:  # adapt: its only server's agent says down, so all are: configured weights, x100
        r = sh(vm, "journalctl --sync; journalctl -o cat -u 'lbtune-adapt@web' | tail -n 1; "
                   "ipvsadm -Ln | grep 10.99.0.11")  # fmt: skip
        assert "set tcp:10.99.0.1:80 10.99.0.11 weight 5 -> 500: every server down" in r.stdout
        assert r.stdout.splitlines()[-1].split()[3] == "500", r.stdout  # Weight: 4th column
    return str(r.stdout)


def deploy(vm: VmGuest, name: str, exporter_options: str, *flags: str) -> dict[str, Any]:
    """Run the collection's lbtune.fleet.deploy in the guest against the guest itself: the
    package from the work directory (a path on the guest), the exporter with
    `exporter_options`, the agent with its options in UNITS. Timed; returns the exit code,
    output and recap."""
    d = vm.workdir / "deploy"
    d.mkdir(exist_ok=True)
    (d / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    (d / "inventory.ini").write_text(INVENTORY, encoding="utf-8")
    # the package where the guest sees it (the work directory): a path on the host, not
    # copied from the controller (one module run less per play under TCG)
    variables = {"lbtune_deb": state["deb"], "lbtune_deb_remote": True,
                 "lbtune_exporter_options": exporter_options,
                 "lbtune_agent": True, "lbtune_agent_options": UNITS[DEPLOYED[1]][2]}
    (d / f"{name}.json").write_text(json.dumps(variables), encoding="utf-8")
    # pipelining: each module runs from the local connection's stdin, no temporary file.
    # Nothing under /tmp: the first unit with PrivateTmp= the deploy starts mounts the
    # guest's tmp.mount over it, under the running module (its AnsiballZ payload, TMPDIR)
    env = [f"{k}={v}" for k, v in settings(Path(ANSIBLE_TMP)).items()]
    env += ["ANSIBLE_PIPELINING=1", f"TMPDIR={ANSIBLE_TMP}/tmp"]
    argv = ["env", *env, str(ANSIBLE_PLAYBOOK), "-i", str(d / "inventory.ini"),
            str(d / "play.yml"), "-e", f"@{d / name}.json", *flags]
    t0 = time.monotonic()
    r = vm.run(argv, timeout=2 * TIMEOUT)  # the deploy: apt's cache, dpkg, under TCG
    state["play_seconds"][name] = round(time.monotonic() - t0, 1)
    _log(f"guest# ansible-playbook -i inventory.ini play.yml -e @{name}.json {' '.join(flags)}"
         f"  # {state['play_seconds'][name]} s", r.stdout + r.stderr)
    return {"rc": r.returncode, "out": r.stdout + r.stderr,
            "recap": recap(r.stdout).get("guest", {})}


def dpkg_seconds(vm: VmGuest) -> dict[str, float]:
    """dpkg's unpacking and configuring of lbtune, timed from /var/log/dpkg.log (1 s
    resolution): from `startup archives` (dpkg -i: `install`) to `configure lbtune`, then
    to `status installed lbtune`."""
    r = vm.run(["cat", "/var/log/dpkg.log"], timeout=60)
    when: dict[str, float] = {}
    for line in r.stdout.splitlines():
        for key, pat in (("unpack", " startup archives "),
                         ("configure", " configure lbtune:"),
                         ("installed", " status installed lbtune:")):
            if pat in line:
                stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
                when[key] = time.mktime(stamp)  # the last of each: this install's
    assert set(when) == {"unpack", "configure", "installed"}, r.stdout[-2000:]
    return {"dpkg_unpack_seconds": when["configure"] - when["unpack"],
            "dpkg_configure_seconds": when["installed"] - when["configure"]}


def privilege(vm: VmGuest, unit: str) -> tuple[bool, int]:
    pid = show(vm, unit, "MainPID")["MainPID"]
    r = vm.run(["grep", "-E", "^(Uid|CapEff):", f"/proc/{pid}/status"], timeout=60)
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    _log(f"guest# grep -E '^(Uid|CapEff):' /proc/$MAINPID/status  # {unit}", r.stdout)
    return fields["Uid"].split()[1] == "0", int(fields["CapEff"].strip(), 16)


# ------------------------------------------------------------------------------ the package


def test_the_collection_deploys_the_package_under_systemd_as_pid_1(guest: VmGuest) -> None:
    r = sh(guest, "cat /proc/1/comm; systemctl is-system-running", timeout=120)
    assert r.stdout.split()[0] == "systemd", r.stdout
    # The throwaway guest skips man-db's index rebuild (minutes under TCG): `man` finds the
    # pages by their path without it.
    sh(guest, f"rm -f /var/lib/man-db/auto-update; mkdir -p {ANSIBLE_TMP}/tmp")
    listen = "--listen 127.0.0.1:9178"  # the default, written out; the fourth run drops it

    # --check --diff: changes reported, nothing changed
    run = deploy(guest, "check", listen, "--check", "--diff")
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    # the package, the options files, the units: each reported as it would change
    assert run["recap"]["changed"] == 3, run["recap"]
    assert f"check mode: would install {state['deb']} (installed: none)" in run["out"]
    assert f'+EXPORTER_OPTS="{listen}"' in run["out"], run["out"][-4000:]
    assert "with it lbtune-agent.service would be enabled and started" in run["out"]
    r = sh(guest, "dpkg-query -W -f '${Status}\\n' lbtune; for f in /etc/default/lbtune-"
                  "exporter /etc/default/lbtune-agent /var/cache/lbtune/deb; do test -e $f && "
                  "echo $f exists; done; systemctl is-enabled lbtune-exporter lbtune-agent")
    assert "no packages found matching lbtune" in r.stderr, r.stdout + r.stderr
    assert "exists" not in r.stdout and "enabled" not in r.stdout.split(), r.stdout

    # the deploy: installed, both units enabled, active and answering
    run = deploy(guest, "deploy", listen)
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    assert run["recap"]["changed"] == 3, run["recap"]  # the package, options, units
    state.update(dpkg_seconds(guest))
    r = sh(guest, "dpkg-query -W -f '${Status} ${Version}\\n' lbtune")
    assert r.stdout.startswith("install ok installed "), r.stdout
    for unit in DEPLOYED:
        r = sh(guest, f"systemctl is-enabled {unit}; systemctl is-active {unit}")
        assert r.stdout.split() == ["enabled", "active"], r.stdout + r.stderr
        answers(guest, unit)
    pid = show(guest, DEPLOYED[0], "MainPID")["MainPID"]

    # again: nothing to change
    run = deploy(guest, "again", listen)
    assert run["rc"] == 0 and run["recap"]["changed"] == 0, run["out"][-4000:]

    # an option changed: its diff, and that unit (only) restarted
    agent_pid = show(guest, DEPLOYED[1], "MainPID")["MainPID"]
    run = deploy(guest, "option", "", "--diff")
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    assert run["recap"]["changed"] == 2, run["recap"]  # the file, the restart
    assert f'-EXPORTER_OPTS="{listen}"' in run["out"] and '+EXPORTER_OPTS=""' in run["out"]
    s = show(guest, DEPLOYED[0], "ActiveState", "MainPID")
    assert s["ActiveState"] == "active" and s["MainPID"] not in ("0", pid), (s, pid)
    assert show(guest, DEPLOYED[1], "MainPID")["MainPID"] == agent_pid
    answers(guest, DEPLOYED[0])

    r = sh(guest, "lbtune --version; systemctl list-unit-files --no-legend 'lbtune*'; "
                  "man -w lbtune-apply; man lbtune-apply 2>/dev/null | head -n 3")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "lbtune-adapt@.service" in r.stdout and "lbtune-exporter.service" in r.stdout
    assert "/usr/share/man/man8/lbtune-apply.8.gz" in r.stdout
    # Tab completion as bash runs it: the package's script, then `lbtune ipvs a<Tab>`
    script = (". /usr/share/bash-completion/completions/lbtune; COMP_WORDS=(lbtune ipvs a); "
              "COMP_CWORD=2; _lbtune_completion lbtune; echo \"${COMPREPLY[*]}\"")
    r = guest.run(["bash", "-c", script], timeout=TIMEOUT)
    _log(f"guest# bash -c {shlex.quote(script)}", r.stdout + r.stderr)
    assert r.returncode == 0 and set(r.stdout.split()) >= {"adapt", "agent", "apply"}, r.stdout
    r = sh(guest, f"mkdir -p /etc/lbtune/ipvs && printf %s {shlex.quote(WEB)} > {CONFIG} && "
                  "modprobe ip_vs && modprobe ip_vs_wrr")  # fmt: skip
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------ each unit


@pytest.mark.parametrize("unit", list(UNITS))
def test_a_unit_starts_answers_restarts_stops_and_refuses_a_bad_option(
        guest: VmGuest, unit: str) -> None:  # fmt: skip
    if unit in DEPLOYED:  # enabled and started by the collection's deploy, with these options
        r = sh(guest, f"grep -x '{UNITS[unit][1]}=\"{UNITS[unit][2]}\"' {UNITS[unit][0]}; "
                      f"systemctl is-enabled {unit}; "
                      f"systemctl status --no-pager --lines=3 {unit}")  # fmt: skip
        assert r.returncode == 0 and "\nenabled\n" in r.stdout, r.stdout
    else:
        set_options(guest, unit, UNITS[unit][2])
        r = sh(guest, f"systemctl start {unit}; systemctl status --no-pager --lines=3 {unit}")
    s = show(guest, unit, "ActiveState", "MainPID", "StatusText")
    assert s["ActiveState"] == "active", r.stdout + r.stderr
    assert s["StatusText"], s  # READY=1 came with its STATUS= line
    answers(guest, unit)
    assert privilege(guest, unit) == PRIVILEGE[unit]

    # kill -9: Restart=on-failure starts it again (a new main process, active, one restart)
    old, restarts = s["MainPID"], int(show(guest, unit, "NRestarts")["NRestarts"])
    sh(guest, f"kill -9 {old}")
    s = wait_for(guest, unit, lambda s: int(s["NRestarts"]) == restarts + 1
                 and s["ActiveState"] == "active" and s["MainPID"] not in ("0", old))
    _log(f"harness: after kill -9 of {old}", repr(s))
    assert int(s["NRestarts"]) == restarts + 1, s
    assert s["ActiveState"] == "active" and s["MainPID"] not in ("0", old), s

    # systemctl stop: SIGTERM, exit 0, a success
    sh(guest, f"systemctl stop {unit}")
    s = show(guest, unit, "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
    _log(f"harness: {unit} after stop", repr(s))
    assert (s["ActiveState"], s["Result"], s["ExecMainStatus"]) == ("inactive", "success", "0"), s
    if unit == "lbtune-adapt@web.service":  # SIGTERM put the configured weight back
        r = sh(guest, "ipvsadm -Ln | grep 10.99.0.11")
        assert r.stdout.split()[3] == "5", r.stdout

    # a bad option: the start fails, one journal line says why, exit 2 is not restarted
    set_options(guest, unit, f"{UNITS[unit][2]} --no-such-flag".strip())
    r = sh(guest, f"systemctl start {unit}")
    assert r.returncode != 0
    s = wait_for(guest, unit, lambda s: s["ActiveState"] == "failed", timeout=120)
    # the count when it failed: a manual start may have reset it (it did for the units the
    # deploy enabled and started), a restart after this would raise it
    restarts = int(s["NRestarts"])
    assert (s["ActiveState"], s["Result"], s["ExecMainStatus"]) == ("failed", "exit-code", "2"), s
    invocation = show(guest, unit, "InvocationID")["InvocationID"]
    r = sh(guest, f"journalctl --sync; journalctl -o cat _SYSTEMD_INVOCATION_ID={invocation}")
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stdout
    assert re.fullmatch(r"lbtune [a-z ]+: No such option '--no-such-flag' \(see lbtune [a-z ]+ "
                        r"--help\)", lines[0]), lines[0]  # fmt: skip
    time.sleep(3)  # RestartSec=2s: a restart would have begun by now
    s = show(guest, unit, "ActiveState", "NRestarts")
    assert (s["ActiveState"], int(s["NRestarts"])) == ("failed", restarts), s
    set_options(guest, unit, UNITS[unit][2])
    sh(guest, f"systemctl reset-failed {unit}")
    if unit in ("lbtune-agent.service", "lbtune-ipvs-serve.service"):
        # adapt (the next) polls the agent; serve keeps answering `ipvs apply`
        sh(guest, f"systemctl start {unit}")
        assert show(guest, unit, "ActiveState")["ActiveState"] == "active"


def test_nothing_failed_and_the_journal_has_no_traceback(guest: VmGuest) -> None:
    r = sh(guest, "systemctl stop lbtune-exporter lbtune-agent lbtune-ipvs-serve "
                  "'lbtune-adapt@*'; systemctl list-units --failed --no-legend 'lbtune-*'; "
                  "journalctl --sync; journalctl -o cat -u 'lbtune-*' | grep -c Traceback")
    assert r.stdout.split() == ["0"], r.stdout
    _log("harness: dpkg seconds", repr({k: v for k, v in state.items() if k.startswith("dpkg")}))
    _log("harness: ansible-playbook seconds", repr(state["play_seconds"]))
