"""A tuning profile sets tuning sysctls only (issue 31, defect 6).

A profile that set `kernel.hostname` renamed the host it tuned (and so changed the identity
its own journals are checked against); others could switch off address-space randomisation,
open kernel pointers or dmesg to every user, or relax ptrace. Such a key is refused when the
profile is read - one line, exit 2 (bad input), nothing read or changed - so `plan`, `apply`,
`verify`, `profile lint`, `compare --against` and `exporter --profile` all refuse it alike.
"""

from __future__ import annotations

import hashlib
import pathlib

import pytest

from lbtune.errors import ExitCode
from tests.conftest import KVM, copy_host, run_cli

# (key, a value of the right type): identity, security switches, programs the kernel runs,
# and keys outside the tuning namespaces
NOT_TUNING = [
    ("kernel.hostname", '"renamed"'),
    ("kernel.domainname", '"example"'),
    ("kernel.randomize_va_space", "0"),
    ("kernel.kptr_restrict", "0"),
    ("kernel.dmesg_restrict", "0"),
    ("kernel.perf_event_paranoid", "-1"),
    ("kernel.yama.ptrace_scope", "0"),
    ("kernel.modules_disabled", "1"),
    ("kernel.kexec_load_disabled", "1"),
    ("kernel.core_pattern", '"core"'),
    ("kernel.unprivileged_bpf_disabled", "0"),
    ("kernel.sysrq", "1"),
    ("kernel.panic_on_oops", "1"),
    ("net.core.bpf_jit_harden", "0"),
    ("fs.protected_symlinks", "0"),
    ("fs.suid_dumpable", "2"),
    ("vm.mmap_min_addr", "0"),
    ("vm.unprivileged_userfaultfd", "1"),
    ("user.max_user_namespaces", "0"),
    ("dev.tty.ldisc_autoload", "1"),
]
COMMANDS = [
    ("plan",),
    ("apply", "--yes"),
    ("verify",),
    ("profile", "lint"),
    ("compare", "--against"),
    ("exporter", "--once", "--interval", "1s", "--profile"),
]


def _tree_digest(root: pathlib.Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def _argv(command: tuple[str, ...], root: pathlib.Path, prof: pathlib.Path) -> list[str]:
    if command[0] == "compare":
        return ["compare", "--against", str(prof), str(root)]
    return ["--root", str(root), *command, str(prof)]


@pytest.mark.parametrize(("key", "value"), NOT_TUNING)
def test_a_sysctl_that_is_not_tuning_is_refused_by_every_command(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, key: str, value: str
) -> None:
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "p.toml"
    prof.write_text(
        '[profile]\nname = "p"\n[sysctl]\n'
        '"net.core.somaxconn" = { value = 8192, reason = "accept queue" }\n'
        f'"{key}" = {{ value = {value}, reason = "r" }}\n'
    )
    before = _tree_digest(root)
    for command in COMMANDS:
        r = run_cli(*_argv(command, root, prof))
        assert r.exit_code == ExitCode.USAGE, (command, r.exit_code, r.stderr)
        lines = r.stderr.splitlines()
        assert len(lines) == 1, (command, r.stderr)
        assert f"sysctl.{key}: not a tuning sysctl" in lines[0], (command, lines[0])
        assert str(prof) in lines[0]
        assert "Traceback" not in r.stderr
    assert _tree_digest(root) == before  # nothing changed, the hostname least of all
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").rglob("*.json"))


def test_the_tuning_sysctls_of_the_shipped_profiles_and_tests_still_load(
    tmp_path: pathlib.Path,
) -> None:
    """net.*, vm.* and the kernel.*/fs.* tuning keys lbtune's profiles use stay allowed."""
    prof = tmp_path / "ok.toml"
    prof.write_text(
        '[profile]\nname = "ok"\n[sysctl]\n'
        '"net.core.somaxconn" = { value = 8192, reason = "r" }\n'
        '"vm.swappiness" = { value = 10, reason = "r" }\n'
        '"fs.file-max" = { value = 2097152, reason = "r" }\n'
        '"fs.nr_open" = { value = 1048576, reason = "r" }\n'
        '"kernel.timer_migration" = { value = 0, reason = "r" }\n'
        '"kernel.sched_autogroup_enabled" = { value = 0, reason = "r" }\n'
    )
    r = run_cli("profile", "show", str(prof))
    assert r.exit_code == 0, r.stderr
