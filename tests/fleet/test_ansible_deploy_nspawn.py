"""The collection's role lbtune.fleet.deploy against a throwaway system that boots systemd as
PID 1 (issue 32): the real `ansible-playbook` deploys `make deb`'s package into a
`systemd-nspawn --boot` container over a volatile overlay of this host's root
(tests/fleet/nspawn.py: private network, nothing of the host changed, nothing left behind),
at native speed. Four runs, each asserted against the container's own systemd:

1. `--check --diff` on the fresh system: what would change is reported, nothing changes
   (no package, no options file, no unit);
2. the deploy: the package installed, the exporter and (`lbtune_agent: true`) the agent
   enabled and active, the exporter scraped, the agent's /healthz answering;
3. again: `changed=0`;
4. the exporter's options changed: their diff, the exporter restarted (a new main PID), the
   agent not.

Ansible runs inside the container (connection local, entered with nsenter): its modules
then run exactly where a managed host runs them, against that host's systemd, dpkg and
apt; the package comes from the controller (`lbtune_deb`, the role's default copy). The
units' own behaviour (restart, stop, bad options, privileges) is proven in the VM guest
(tests/vm/test_vm_units.py). With LBTUNE_NSPAWN_TRANSCRIPT=FILE the commands and their
output are written there (docs/install.md quotes such a transcript).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.ansible_run import recap, settings
from tests.fleet.nspawn import Container, NspawnUnavailable, unavailable

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
EXCHANGE = "/lbtune-test"  # the test's directory, bound into the container
ANSIBLE_TMP = "/root/lbtune-ansible"  # in the container's overlay
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  roles:
    - lbtune.fleet.deploy
"""
INVENTORY = "nspawn ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"
EXPORTER, AGENT = "lbtune-exporter.service", "lbtune-agent.service"
# the container has only lo: the agent reports on port 80 at 127.0.0.1, where nothing
# listens (its /healthz then says "down", 503)
AGENT_OPTIONS = "--listen 127.0.0.1 --port 80"
LISTEN = "--listen 127.0.0.1:9178"  # the exporter's default, written out; run 4 drops it

log: list[str] = []


@dataclass
class System:
    """The booted container, the test's directory bound at EXCHANGE, the package there."""

    c: Container
    exchange: Path
    deb: str


def _log(what: str, text: str = "") -> None:
    log.append(what + ("\n" + text.rstrip() if text.strip() else ""))


@pytest.fixture(scope="module")
def package(deb_build: Path) -> Path:
    debs = sorted(deb_build.glob("lbtune_*_all.deb"))
    assert len(debs) == 1, debs
    return debs[0]


@pytest.fixture(scope="module")
def system(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:  # fmt: skip
    why = unavailable()  # before the package is built
    if why:
        pytest.skip(f"systemd-nspawn cannot boot a container here: {why}")
    package: Path = request.getfixturevalue("package")
    exchange = tmp_path_factory.mktemp("exchange")
    shutil.copy(package, exchange / package.name)
    # /tmp and /run are the container's own tmpfs: the checkout and the venv are bound at
    # their paths (read-only) in case they live there
    binds = [(str(exchange), EXCHANGE, False), (str(REPO), str(REPO), True)]
    if not Path(sys.prefix).is_relative_to(REPO):
        binds.append((sys.prefix, sys.prefix, True))
    before = host_state()
    if before["dpkg"][1].startswith("install ok"):  # the container starts as a copy of this host
        pytest.skip("this host has the lbtune package installed: the container would too")
    t0 = time.monotonic()
    try:
        c = Container.boot(tmp_path_factory.mktemp("nspawn"), binds)
    except NspawnUnavailable as exc:
        pytest.skip(f"systemd-nspawn cannot boot a container here: {exc}")
    _log(f"harness: booted in {time.monotonic() - t0:.1f} s")
    with c:
        yield System(c, exchange, f"{EXCHANGE}/{package.name}")
    _log(f"harness: powered off (wrapper exit {c.proc.returncode})")
    path = os.environ.get("LBTUNE_NSPAWN_TRANSCRIPT")
    if path:
        Path(path).write_text("\n".join(log) + "\n", encoding="utf-8")
    assert c.proc.returncode == 0, c.boot_log()[-3000:]  # powered off cleanly
    assert c.cgroups() == [], c.boot_log()[-3000:]
    assert host_state() == before  # the deploy reached none of this host's own


def host_state() -> dict[str, Any]:
    """What the deploy changes, as this host has it: the package, its files, the units."""
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", "lbtune"], capture_output=True,
                       text=True, check=False)  # fmt: skip
    paths = ["/etc/default/lbtune-exporter", "/etc/default/lbtune-agent", "/var/cache/lbtune/deb",
             "/etc/systemd/system/multi-user.target.wants/lbtune-exporter.service",
             "/etc/systemd/system/multi-user.target.wants/lbtune-agent.service",
             "/run/systemd/nspawn"]  # fmt: skip
    return {"dpkg": (r.returncode, r.stdout), **{p: os.path.lexists(p) for p in paths}}


def sh(c: Container, script: str) -> Any:
    r = c.run(["sh", "-c", script])
    _log(f"nspawn# {script}", r.stdout + r.stderr + f"(exit {r.returncode})")
    return r


def show(c: Container, unit: str, *props: str) -> dict[str, str]:
    r = c.run(["systemctl", "show", unit, *(f"--property={p}" for p in props)])
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def deploy(sys_: System, name: str, exporter_options: str, *flags: str) -> dict[str, Any]:
    """Run lbtune.fleet.deploy in the container against itself: the package from the
    controller's EXCHANGE, the exporter with `exporter_options`, the agent on."""
    variables = {"lbtune_deb": sys_.deb,
                 "lbtune_exporter_options": exporter_options,
                 "lbtune_agent": True, "lbtune_agent_options": AGENT_OPTIONS}  # fmt: skip
    exchange = sys_.exchange
    (exchange / "play.yml").write_text(PLAYBOOK, encoding="utf-8")
    (exchange / "inventory.ini").write_text(INVENTORY, encoding="utf-8")
    (exchange / f"{name}.json").write_text(json.dumps(variables), encoding="utf-8")
    env = {**settings(Path(ANSIBLE_TMP)), "ANSIBLE_PIPELINING": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": f"{ANSIBLE_TMP}/tmp"}  # fmt: skip
    argv = [str(ANSIBLE_PLAYBOOK), "-i", f"{EXCHANGE}/inventory.ini", f"{EXCHANGE}/play.yml",
            "-e", f"@{EXCHANGE}/{name}.json", *flags]  # fmt: skip
    t0 = time.monotonic()
    r = sys_.c.run(argv, timeout=600, env=env)
    took = time.monotonic() - t0
    _log(f"nspawn# ansible-playbook -i inventory.ini play.yml -e @{name}.json {' '.join(flags)}"
         f"  # {took:.1f} s", r.stdout + r.stderr)  # fmt: skip
    return {"rc": r.returncode, "out": r.stdout + r.stderr,
            "recap": recap(r.stdout).get("nspawn", {})}


def test_the_role_deploys_the_package_into_a_system_booted_with_systemd(
        system: System) -> None:  # fmt: skip
    c = system.c
    r = sh(c, "cat /proc/1/comm; systemctl is-system-running; systemctl --failed --no-legend")
    # degraded: a unit of this host's basic.target failed in the container (listed above)
    assert r.stdout.split()[:2] in (["systemd", "running"], ["systemd", "degraded"]), r.stdout
    sh(c, f"mkdir -p {ANSIBLE_TMP}/tmp")
    deb = system.deb

    # 1. --check --diff: changes reported, nothing changed
    run = deploy(system, "check", LISTEN, "--check", "--diff")
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    # the copy, the package, the options files, the units: each reported as it would change
    assert run["recap"]["changed"] == 4, run["recap"]
    assert f"check mode: would install {deb} (installed: none)" in run["out"], run["out"]
    assert f'+EXPORTER_OPTS="{LISTEN}"' in run["out"], run["out"][-4000:]
    assert f'+AGENT_OPTS="{AGENT_OPTIONS}"' in run["out"], run["out"][-4000:]
    assert f"with it {AGENT} would be enabled and started" in run["out"], run["out"]
    r = sh(c, "dpkg-query -W -f '${Status}\\n' lbtune; for f in /etc/default/lbtune-exporter "
              "/etc/default/lbtune-agent /var/cache/lbtune/deb; do test -e $f && echo $f "
              "exists; done; systemctl is-enabled lbtune-exporter lbtune-agent")  # fmt: skip
    assert "no packages found matching lbtune" in r.stderr, r.stdout + r.stderr
    assert "exists" not in r.stdout and "enabled" not in r.stdout.split(), r.stdout

    # 2. the deploy: installed, both units enabled, active and answering
    run = deploy(system, "deploy", LISTEN)
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    assert run["recap"]["changed"] == 4, run["recap"]  # copy, package, options, units
    r = sh(c, "dpkg-query -W -f '${Status} ${Version}\\n' lbtune")
    assert r.stdout.startswith("install ok installed "), r.stdout + r.stderr
    for unit in (EXPORTER, AGENT):
        r = sh(c, f"systemctl is-enabled {unit}; systemctl is-active {unit}")
        assert r.stdout.split() == ["enabled", "active"], r.stdout + r.stderr
    scrape(c)
    r = sh(c, "curl -s -w '%{http_code}\\n' http://127.0.0.1:9177/healthz")
    # the agent answers, and says port 80 (nothing listens there) is down: 503
    assert r.returncode == 0 and r.stdout.split() == ["down", "503"], r.stdout + r.stderr
    exporter_pid = show(c, EXPORTER, "MainPID")["MainPID"]
    agent_pid = show(c, AGENT, "MainPID")["MainPID"]

    # 3. again: nothing to change
    run = deploy(system, "again", LISTEN)
    assert run["rc"] == 0 and run["recap"]["changed"] == 0, run["out"][-4000:]
    assert show(c, EXPORTER, "MainPID")["MainPID"] == exporter_pid

    # 4. an option changed: its diff, and that unit (only) restarted
    run = deploy(system, "option", "", "--diff")
    assert run["rc"] == 0 and run["recap"]["failed"] == 0, run["out"][-4000:]
    assert run["recap"]["changed"] == 2, run["recap"]  # the file, the restart
    assert f'-EXPORTER_OPTS="{LISTEN}"' in run["out"] and '+EXPORTER_OPTS=""' in run["out"]
    s = show(c, EXPORTER, "ActiveState", "MainPID")
    assert s["ActiveState"] == "active" and s["MainPID"] not in ("0", exporter_pid), s
    assert show(c, AGENT, "MainPID")["MainPID"] == agent_pid
    r = sh(c, "cat /etc/default/lbtune-exporter | tail -n 1")
    assert r.stdout.strip() == 'EXPORTER_OPTS=""', r.stdout
    scrape(c)


def scrape(c: Container) -> None:
    r = sh(c, "curl -sf http://127.0.0.1:9178/metrics | grep -E '^lbtune_up '")
    assert r.returncode == 0 and r.stdout.split() == ["lbtune_up", "1.0"], r.stdout + r.stderr
