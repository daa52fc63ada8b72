"""User input that exited 70 (issue 20 item 14): garbage in the environment, a directory as a
config, deeply nested TOML, an unreadable directory in a host tree. Each is one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import KVM, copy_host, run_cli


def one_line_2(r) -> str:  # type: ignore[no-untyped-def]
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("name", "value", "args"),
    [
        ("LBTUNE_DEBUG", "garbage", ["show"]),
        ("LBTUNE_STATE_DIR", "relative\x01dir", ["apply", "web"]),
        ("LBTUNE_LAB_FPU", "zz", ["lab", "status"]),
        ("LBTUNE_LAB_RUN_DIR", "/etc/passwd/x", ["lab", "status"]),
        ("LBTUNE_NO_BCC", "maybe", ["doctor"]),
    ],
)
def test_garbage_in_an_lbtune_variable_is_one_line(tmp_path, monkeypatch, name, value, args):
    root = copy_host(tmp_path, KVM)
    monkeypatch.setenv(name, value)
    msg = one_line_2(run_cli("--root", str(root), *args))
    assert name in msg
    assert not any(p.name.startswith("relative") for p in tmp_path.iterdir())
    assert not os.path.lexists("relative\x01dir")  # not created in the working directory


def test_a_run_directory_that_cannot_exist_is_exit_2(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("LBTUNE_LAB_RUN_DIR", str(blocker / "run"))
    msg = one_line_2(run_cli("lab", "status"))
    assert "cannot use as the lab run directory" in msg


def test_garbage_columns_falls_back_to_a_width(tmp_path):
    # COLUMNS is the terminal's, not lbtune's: a bad one is ignored, not a crash.
    env = {**os.environ, "COLUMNS": "abc"}
    r = subprocess.run([sys.executable, "-m", "lbtune", "--root", str(copy_host(tmp_path, KVM)),
                        "show"], capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "irqbalance" in r.stdout


def test_ipvs_plan_of_a_directory_is_one_line(tmp_path):
    msg = one_line_2(run_cli("ipvs", "plan", str(tmp_path)))
    assert "not a regular file" in msg


def test_deeply_nested_arrays_in_an_ipvs_config_are_one_line(tmp_path):
    conf = tmp_path / "deep.toml"
    conf.write_text("a = " + "[" * 3000 + "]" * 3000 + "\n")
    msg = one_line_2(run_cli("ipvs", "plan", str(conf)))
    assert "nested too deeply" in msg


def test_an_unlistable_sys_class_net_is_one_line_not_no_nics(tmp_path):
    root = copy_host(tmp_path, KVM)
    net = root / "sys/class/net"
    if net.is_symlink() or not net.is_dir():
        net.unlink()
    else:
        import shutil

        shutil.rmtree(net)
    net.symlink_to("net")  # a loop: ELOOP, as an unreadable directory gives EACCES
    msg = one_line_2(run_cli("--root", str(root), "show"))
    assert "sys/class/net: cannot list" in msg
