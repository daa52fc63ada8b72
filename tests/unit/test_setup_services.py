"""Set-up leaves the host's services alone (scripts/setup.sh + scripts/setup-services.sh).

The service logic runs against a fake systemctl (a script in tmp that keeps each unit's
boot and run state in files and records every call): the real host's units are never
asked, let alone changed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SETUP = REPO / "scripts" / "setup.sh"
SERVICES = REPO / "scripts" / "setup-services.sh"

FAKE = r"""#!/bin/sh
# fake systemctl: state in $FAKE_STATE/<unit>.{enabled,active}, calls appended to calls.log
d=$FAKE_STATE
echo "$*" >> "$d/calls.log"
verb=$1; shift
[ "$1" = --quiet ] && shift
unit=${1%.service}
case $verb in
  is-enabled)
    [ -f "$d/$unit.enabled" ] || { echo not-found; exit 4; }
    s=$(cat "$d/$unit.enabled"); echo "$s"; [ "$s" = enabled ] ;;
  is-active)
    [ -f "$d/$unit.active" ] && [ "$(cat "$d/$unit.active")" = active ] ;;
  disable) [ -f "$d/$unit.enabled" ] && echo disabled > "$d/$unit.enabled" ;;
  enable) echo enabled > "$d/$unit.enabled" ;;
  stop) echo inactive > "$d/$unit.active" ;;
  start) echo active > "$d/$unit.active" ;;
  mask) echo masked > "$d/$unit.enabled" ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir()
    exe = tmp_path / "systemctl"
    exe.write_text(FAKE)
    exe.chmod(0o755)
    return state


def _run(state: Path, step: str, statefile: Path,
         units: str = "") -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {
        "PATH": "/usr/bin:/bin",
        "SYSTEMCTL": str(state.parent / "systemctl"),
        "FAKE_STATE": str(state),
    }
    if units:
        env["LBTUNE_LAB_UNITS"] = units
    return subprocess.run(
        ["bash", str(SERVICES), step, str(statefile)],
        env=env, capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def _unit(state: Path, unit: str, enabled: str | None, active: str | None) -> None:
    if enabled is not None:
        (state / f"{unit}.enabled").write_text(enabled + "\n")
    if active is not None:
        (state / f"{unit}.active").write_text(active + "\n")


def _read(state: Path, unit: str, what: str) -> str:
    p = state / f"{unit}.{what}"
    return p.read_text().strip() if p.exists() else "absent"


def _calls(state: Path) -> list[str]:
    log = state / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_setup_sh_never_stops_disables_or_masks_a_unit() -> None:
    text = SETUP.read_text()
    assert not re.search(r"systemctl\s+(stop|disable|mask)", text)
    # the boot states are recorded before the install and given back right after it
    before = text.index("setup-services.sh before")
    install = text.index("apt-get install")
    after = text.index("setup-services.sh after")
    assert before < install < after


def test_an_enabled_active_unit_stays_enabled_and_active(fake: Path, tmp_path: Path) -> None:
    _unit(fake, "nginx", "enabled", "active")  # the host's own web server, serving
    statefile = tmp_path / "units"
    assert _run(fake, "before", statefile).returncode == 0
    # the install (nginx-light already installed: nothing changes for nginx)
    r = _run(fake, "after", statefile)
    assert r.returncode == 0, r.stderr
    assert _read(fake, "nginx", "enabled") == "enabled"
    assert _read(fake, "nginx", "active") == "active"
    changing = [c for c in _calls(fake) if c.split()[0] in ("stop", "disable", "mask")]
    assert changing == []
    assert "nginx" not in r.stdout


def test_a_running_unit_the_install_re_enabled_is_left_alone(fake: Path, tmp_path: Path) -> None:
    """A haproxy that was enabled and active before: the package's postinst enabling it
    again changes nothing; set-up neither stops nor disables it."""
    _unit(fake, "haproxy", "enabled", "active")
    statefile = tmp_path / "units"
    _run(fake, "before", statefile)
    _unit(fake, "haproxy", "enabled", None)  # postinst: deb-systemd-helper enable
    assert _run(fake, "after", statefile).returncode == 0
    assert (_read(fake, "haproxy", "enabled"), _read(fake, "haproxy", "active")) == (
        "enabled",
        "active",
    )
    assert not [c for c in _calls(fake) if c.split()[0] in ("stop", "disable", "mask")]


def test_a_unit_the_install_created_is_not_enabled_at_boot(fake: Path, tmp_path: Path) -> None:
    """keepalived absent before: the install creates and enables it (policy-rc.d kept it
    from starting); set-up gives it back its previous state, not enabled, and stops nothing."""
    statefile = tmp_path / "units"
    _run(fake, "before", statefile)
    assert "keepalived not-found" in statefile.read_text()
    _unit(fake, "keepalived", "enabled", "inactive")
    r = _run(fake, "after", statefile)
    assert r.returncode == 0, r.stderr
    assert _read(fake, "keepalived", "enabled") == "disabled"
    assert _read(fake, "keepalived", "active") == "inactive"
    assert "disable --quiet keepalived.service" in _calls(fake)
    assert not [c for c in _calls(fake) if c.split()[0] in ("stop", "mask")]
    assert "keepalived: installed for the lab, not started, not enabled at boot" in r.stdout


def test_a_disabled_unit_the_install_enabled_is_disabled_again(fake: Path, tmp_path: Path) -> None:
    _unit(fake, "nginx", "disabled", "inactive")
    statefile = tmp_path / "units"
    _run(fake, "before", statefile)
    _unit(fake, "nginx", "enabled", None)
    _run(fake, "after", statefile)
    assert _read(fake, "nginx", "enabled") == "disabled"


def test_bad_use_is_exit_2(fake: Path, tmp_path: Path) -> None:
    r = _run(fake, "sideways", tmp_path / "units")
    assert r.returncode == 2
    assert "usage" in r.stderr


def test_irqbalance_is_installed_for_the_vm_lab_and_handled_like_the_other_lab_units() -> None:
    """irqbalance runs only inside the VM lab guest: its unit, enabled by the package's
    postinst, must get back the boot state it had before set-up (not enabled)."""
    text = SETUP.read_text()
    pkgs = re.search(r"^LAB_PKGS=\(([^)]*)\)", text, re.MULTILINE)
    units = re.search(r'^export LBTUNE_LAB_UNITS="([^"]*)"', text, re.MULTILINE)
    assert pkgs and units
    assert "irqbalance" in pkgs.group(1).split()
    assert "irqbalance" in units.group(1).split()


def test_bird_is_installed_for_the_cluster_tests_and_handled_like_the_other_lab_units() -> None:
    """bird2 (the director cluster's BGP/BFD speaker: `bird -p` checks the exported config,
    the gate's namespace test runs its own bird) ships bird.service, enabled by the
    package's postinst: it must get back the boot state it had before set-up."""
    text = SETUP.read_text()
    pkgs = re.search(r"^LAB_PKGS=\(([^)]*)\)", text, re.MULTILINE)
    units = re.search(r'^export LBTUNE_LAB_UNITS="([^"]*)"', text, re.MULTILINE)
    assert pkgs and units
    assert "bird2" in pkgs.group(1).split()
    assert "bird" in units.group(1).split()


def test_systemd_container_is_installed_for_the_deploy_test_and_machines_target_handled() -> None:
    """systemd-container (systemd-nspawn boots the system tests/fleet/
    test_ansible_deploy_nspawn.py deploys into) enables machines.target in its postinst: the
    target must get back the boot state it had before set-up, like the lab's services."""
    text = SETUP.read_text()
    pkgs = re.search(r"^FLEET_PKGS=\(([^)]*)\)", text, re.MULTILINE)
    units = re.search(r'^export LBTUNE_LAB_UNITS="([^"]*)"', text, re.MULTILINE)
    assert pkgs and units
    assert "systemd-container" in pkgs.group(1).split()
    assert "machines.target" in units.group(1).split()


def test_a_target_the_install_enabled_is_disabled_again_by_its_own_name(
        fake: Path, tmp_path: Path) -> None:  # fmt: skip
    statefile = tmp_path / "units"
    env_units = "nginx machines.target"
    r = _run(fake, "before", statefile, units=env_units)
    assert r.returncode == 0, r.stderr
    assert "is-enabled machines.target" in _calls(fake)
    _unit(fake, "machines.target", "enabled", None)  # postinst: deb-systemd-helper enable
    r = _run(fake, "after", statefile, units=env_units)
    assert r.returncode == 0, r.stderr
    assert _read(fake, "machines.target", "enabled") == "disabled"
    assert "disable --quiet machines.target" in _calls(fake)
    assert not [c for c in _calls(fake) if c.split()[0] in ("stop", "mask")]
